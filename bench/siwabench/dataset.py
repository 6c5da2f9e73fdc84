"""Bulk-loaded data at scale (accounts, sessions, done events, backlogs of every type), loaded on
several sessions at once; shared by the scale, burst, authlib and console modes."""
import os
import threading
import time

from .harness import AUDIENCE, env_int, log, psql, psql_script


SCALE_FUNCTIONS = """
    -- Apple-shaped subs, e.g. 000739.<32 hex>.2105; the 6-digit head follows `a`, so rows made in
    -- order of `a` arrive in index order (a fast load); `salt` makes subs that were never loaded.
    CREATE OR REPLACE FUNCTION public.bench_sub(a bigint, salt text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
        SELECT CASE WHEN a < 1000000 THEN lpad(a::text, 6, '0') ELSE a::text END
               || '.' || md5(salt || a::text) || '.' || lpad((a % 10000)::text, 4, '0')
    $$;
"""


def scale_accounts_sql(count, step, offset=0, now="now()"):
    """Accounts and one live session each for a = offset, offset + step, ... (count of them).
    `now`: the time the accounts' last events and the sessions are dated from (the burst dates
    them from its bodies' signing, so that the bodies' events are newer whenever they were signed)."""
    return f"""
        INSERT INTO siwa.accounts (apple_sub, email, is_private_email, email_forwarding, status,
                                   last_event_time, email_event_time, created_at, updated_at)
        SELECT public.bench_sub(a, ''), substr(md5('mail' || a), 1, 10) || '@privaterelay.appleid.com', true, true,
               'active', {now} - interval '2 days', {now} - interval '2 days',
               now() - interval '400 days' + a * interval '10 seconds', now() - interval '2 days'
        FROM generate_series(0, {count - 1}) i, LATERAL (SELECT i::bigint * {step} + {offset} AS a) x;
    """, f"""
        INSERT INTO siwa.sessions (apple_sub, created_at, expires_at)
        SELECT public.bench_sub(a, ''), {now} - interval '3 days' + (a % 1000) * interval '1 second',
               now() + interval '27 days'
        FROM generate_series(0, {count - 1}) i, LATERAL (SELECT i::bigint * {step} + {offset} AS a) x;
    """


def scale_events_sql(first, last, accounts, total):
    """Done events g = first..last of `total`: account g % accounts, spread over the last 25 days
    (inside the worker's 30-day retention, so pruning finds nothing to delete), 4 types."""
    return f"""
        INSERT INTO siwa.events (jti, aud, sub, type, event_time, email, is_private_email, received_at, status,
                                 attempts, next_attempt_at, processed_at, outcome, claims)
        SELECT x.jti, '{AUDIENCE}', x.sub, x.type, x.t,
               CASE WHEN x.type LIKE 'email-%' THEN x.mail END, CASE WHEN x.type LIKE 'email-%' THEN true END,
               x.t + interval '1 second', 'done', 1, x.t + interval '1 second', x.t + interval '2 seconds', 'applied',
               jsonb_build_object('iss', 'https://appleid.apple.com', 'aud', '{AUDIENCE}', 'jti', x.jti,
                                  'iat', x.epoch + 1, 'exp', x.epoch + 86401,
                                  'events', json_build_object('type', x.type, 'sub', x.sub, 'event_time', x.epoch * 1000)::text)
        FROM (SELECT 'bench-pre-' || lpad(g::text, 10, '0') AS jti, public.bench_sub(g % {accounts}, '') AS sub,
                     substr(md5('mail' || (g % {accounts})), 1, 10) || '@privaterelay.appleid.com' AS mail,
                     (ARRAY['email-disabled', 'email-enabled', 'consent-revoked', 'email-enabled'])[1 + (g / {accounts}) % 4] AS type,
                     now() - interval '25 days' + g * (interval '24 days' / {total}) AS t,
                     extract(epoch FROM now() - interval '25 days' + g * (interval '24 days' / {total}))::bigint AS epoch
              FROM generate_series({first}, {last}) g) x;
    """


def scale_backlog_sql(backlog, accounts, erasure=True, again=False):
    """`backlog` pending events, 4 types round robin: even i for an existing account (spread over
    all of them: it has a live session), odd i for a new sub. `erasure=False`: consent-revoked in
    place of account-delete (no user's history to erase), other existing accounts (offset by half
    a step), other jtis and new subs. `again`: a second pair of backlogs, for accounts a quarter
    step further (none of them touched by the first pair), with their own jtis and new subs."""
    half = backlog // 2
    step = max(1, accounts // max(1, half))
    offset = (0 if erasure else step // 2) + (step // 4 if again else 0)
    tag = ("" if erasure else "nd-") + ("again-" if again else "")
    third = "account-delete" if erasure else "consent-revoked"
    return f"""
        INSERT INTO siwa.events (jti, aud, sub, type, event_time, email, is_private_email, status, claims)
        SELECT x.jti, '{AUDIENCE}', x.sub, x.type, x.t,
               CASE WHEN x.type LIKE 'email-%' THEN 'b' || x.i || '@privaterelay.appleid.com' END,
               CASE WHEN x.type LIKE 'email-%' THEN true END, 'pending',
               jsonb_build_object('iss', 'https://appleid.apple.com', 'aud', '{AUDIENCE}', 'jti', x.jti,
                                  'iat', extract(epoch FROM now())::bigint,
                                  'events', json_build_object('type', x.type, 'sub', x.sub)::text)
        FROM (SELECT i, 'bench-backlog-{tag}' || i AS jti,
                     CASE WHEN i % 2 = 0 THEN public.bench_sub((i / 2) * {step} + {offset}, '')
                          ELSE public.bench_sub(i, 'new{tag}') END AS sub,
                     (ARRAY['consent-revoked', 'email-disabled', '{third}', 'email-enabled'])[1 + (i / 2) % 4] AS type,
                     now() - interval '1 hour' + i * interval '1 millisecond' AS t
              FROM generate_series(0, {backlog - 1}) i) x;
    """, half, step


def drop_indexes(tables):
    """Drops the unique/primary-key constraints and indexes of `tables` (a bulk import's usual
    first step) and returns the statements that recreate them exactly (pg_get_*def)."""
    names = ", ".join(f"'{t}'::regclass" for t in tables)
    cons = psql(f"SELECT conrelid::regclass || '|' || conname || '|' || pg_get_constraintdef(oid) FROM pg_constraint "
                f"WHERE conrelid IN ({names}) AND contype IN ('p', 'u') ORDER BY 1")
    idx = psql(f"SELECT i.indexrelid::regclass || '|' || pg_get_indexdef(i.indexrelid) FROM pg_index i "
               f"WHERE i.indrelid IN ({names}) AND NOT EXISTS (SELECT FROM pg_constraint c WHERE c.conindid = i.indexrelid) ORDER BY 1")
    drop, create = [], []
    for line in cons.splitlines():
        table, name, definition = line.split("|", 2)
        drop.append(f"ALTER TABLE {table} DROP CONSTRAINT {name};")
        create.append(f"ALTER TABLE {table} ADD CONSTRAINT {name} {definition};")
    for line in idx.splitlines():
        name, definition = line.split("|", 1)
        drop.append(f"DROP INDEX {name};")
        create.append(definition + ";")
    psql_script("\n".join(drop))
    return create


def table_stats():
    rows = psql("SELECT c.relname || '|' || c.reltuples::bigint || '|' || coalesce(s.n_live_tup, 0) || '|' "
                "|| coalesce(s.analyze_count + s.autoanalyze_count, 0) || '|' || coalesce(s.vacuum_count + s.autovacuum_count, 0) "
                "|| '|' || pg_size_pretty(pg_total_relation_size(c.oid)) "
                "FROM pg_class c LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid "
                "WHERE c.relnamespace = 'siwa'::regnamespace AND c.relname IN ('accounts', 'app_accounts', 'sessions', 'events') ORDER BY 1")
    out = {}
    for line in rows.splitlines():
        name, reltuples, live, analyzed, vacuumed, size = line.split("|")
        out[name] = {"reltuples": int(reltuples), "n_live_tup": int(live), "analyzes": int(analyzed),
                     "vacuums": int(vacuumed), "total_size": size}
    return out


def in_parallel(items, streams, each):
    """`each(item)` for every item, the items dealt round robin to `streams` threads (a session
    each); the first error is raised here once all have ended."""
    errors = []

    def run(mine):
        try:
            for item in mine:
                each(item)
        except Exception as error:  # raised below, in the caller's thread
            errors.append(error)

    threads = [threading.Thread(target=run, args=(items[k::streams],)) for k in range(streams)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    if errors:
        raise errors[0]


def bulk_load(accounts, sessions, events, app_accounts=False, label="scale"):
    """`accounts` accounts (their app accounts for the bench's audience too, with `app_accounts`),
    `sessions` live sessions and `events` done events, loaded as a bulk import does: indexes and
    keys dropped, rows loaded (events on SCALE_LOAD_STREAMS sessions in chunks of
    SCALE_LOAD_CHUNK), indexes rebuilt from their own definitions (sorted: seconds, where millions
    of random insertions take many minutes), a CHECKPOINT. CREATE INDEX records the row counts
    (pg_class.reltuples) but no column statistics: no ANALYZE, no VACUUM. Returns the timings."""
    preload = {}
    started = time.perf_counter()
    # BENCH_FILLFACTOR: the fillfactor of the tables the worker updates in place, for this load
    # (space against HOT updates; schema.sql's own otherwise).
    fillfactor = os.environ.get("BENCH_FILLFACTOR")
    if fillfactor:
        for t in ("accounts", "app_accounts", "sessions"):
            psql(f"ALTER TABLE siwa.{t} SET (fillfactor = {int(fillfactor)})")
    account_sql, _ = scale_accounts_sql(accounts, 1)
    tables = ["siwa.accounts", "siwa.sessions", "siwa.events"] + (["siwa.app_accounts"] if app_accounts else [])
    recreate = drop_indexes(tables)
    t = time.perf_counter()
    psql_script(account_sql)
    if app_accounts:
        psql_script(f"""
            INSERT INTO siwa.app_accounts (apple_sub, aud, status, email, is_private_email, email_forwarding,
                                           last_event_time, email_event_time, created_at, updated_at)
            SELECT apple_sub, '{AUDIENCE}', status, email, is_private_email, email_forwarding,
                   last_event_time, email_event_time, created_at, updated_at FROM siwa.accounts;
        """)
    preload["accounts_s"] = round(time.perf_counter() - t, 1)
    t = time.perf_counter()
    psql_script(scale_accounts_sql(sessions, 1)[1])
    preload["sessions_s"] = round(time.perf_counter() - t, 1)
    t = time.perf_counter()
    streams = max(1, env_int("SCALE_LOAD_STREAMS", 2))
    chunk = max(1, env_int("SCALE_LOAD_CHUNK", 500000))
    ranges = [(a, min(a + chunk, events) - 1) for a in range(0, events, chunk)]
    in_parallel(ranges, streams, lambda r: psql_script(scale_events_sql(r[0], r[1], accounts, events)))
    preload["events_s"] = round(time.perf_counter() - t, 1)
    t = time.perf_counter()
    in_parallel(recreate, streams, psql)  # each CREATE INDEX is one statement: one per session
    preload["indexes_s"] = round(time.perf_counter() - t, 1)
    t = time.perf_counter()
    psql("CHECKPOINT")
    preload["checkpoint_s"] = round(time.perf_counter() - t, 1)
    preload["total_s"] = round(time.perf_counter() - started, 1)
    preload["tables"] = table_stats()
    preload["fillfactor"] = {t: psql(f"SELECT coalesce(array_to_string(reloptions, ','), '') FROM pg_class WHERE oid = 'siwa.{t}'::regclass")
                             for t in ("accounts", "app_accounts", "sessions", "events")}
    log(f"{label}: preload {preload['total_s']} s (accounts {preload['accounts_s']} s, sessions "
        f"{preload['sessions_s']} s, events {preload['events_s']} s on {streams} streams, indexes "
        f"{preload['indexes_s']} s, checkpoint {preload['checkpoint_s']} s); tables {preload['tables']}")
    return preload
