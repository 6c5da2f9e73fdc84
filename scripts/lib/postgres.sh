# A private PostgreSQL for the tests, sourced by scripts/test and scripts/flake-hunt: a temporary
# directory, a unix socket only, run as the `postgres` user when we are root (PostgreSQL refuses
# to run as root).
#
#   postgres_start NAME   creates /tmp/NAME-XXXXXX (in PG_TMP), starts the server there and
#                         exports SIWA_TEST_DATABASE_URL and SIWA_TEST_DATABASE_LOG (its log:
#                         each line names its session's user and database, so a test reads the
#                         lines of its own database, e.g. DocumentedDeploymentTests: no ERROR)
#   postgres_stop         stops it and removes the directory (whatever happened: for a trap)
PGBIN=$(dirname "$(ls /usr/lib/postgresql/*/bin/initdb 2>/dev/null | sort -V | tail -1)")
[ -x "$PGBIN/initdb" ] || PGBIN=$(dirname "$(command -v initdb)")
PG_TMP=

as_pg() { if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }

postgres_start() {
  PG_TMP=$(mktemp -d "/tmp/$1-XXXXXX")
  chmod 755 "$PG_TMP"
  if [ "$(id -u)" -eq 0 ]; then chown postgres "$PG_TMP"; fi
  as_pg "$PGBIN/initdb" -D "$PG_TMP/data" -U postgres -A trust -E UTF8 >/dev/null
  as_pg "$PGBIN/pg_ctl" -D "$PG_TMP/data" -l "$PG_TMP/postgres.log" -w \
    -o "-c listen_addresses='' -c unix_socket_directories='$PG_TMP' -c max_connections=300 -c fsync=on -c log_line_prefix='%m [%p] %q%u@%d '" start >/dev/null
  export SIWA_TEST_DATABASE_URL="host=$PG_TMP port=5432 user=postgres dbname=postgres" SIWA_TEST_DATABASE_LOG="$PG_TMP/postgres.log"
}

postgres_stop() {
  [ -n "$PG_TMP" ] || return 0
  as_pg "$PGBIN/pg_ctl" -D "$PG_TMP/data" -m immediate -w stop >/dev/null 2>&1 || true
  rm -rf "$PG_TMP"
}
