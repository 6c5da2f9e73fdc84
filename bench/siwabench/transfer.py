"""Mode transfer: an app transfer (export + import of BENCH_TRANSFER_USERS users) and the
reconciliation of BENCH_RECONCILE_TOKENS stored refresh tokens, against the loopback fake Apple
(`dev-apple`, two teams), each on a database of its own in the same cluster."""
import base64
import os
import subprocess
import threading
import time
from .backlog import wal_stats
from .harness import AUDIENCE, BIN, PGBIN, SOCKDIR, Server, TMP, env_int, free_port, log, psql, server_env


TEAM_B = "BENCHB0000"


def database(name):
    psql(f"DROP DATABASE IF EXISTS {name}")
    psql(f"CREATE DATABASE {name}")
    conninfo = f"host={SOCKDIR} port=5432 user=postgres dbname={name}"
    subprocess.run([BIN, "migrate"], env={**os.environ, "SIWA_DATABASE_URL": conninfo}, check=True,
                   stdout=subprocess.DEVNULL)
    return conninfo


def psql_db(db, sql, stdin=None):
    out = subprocess.run([os.path.join(PGBIN, "psql"), "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1", "-h", SOCKDIR,
                          "-p", "5432", "-U", "postgres", "-d", db, "-c", sql], input=stdin, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"psql failed: {out.stderr.strip()}\nSQL: {sql[:300]}")
    return out.stdout.strip()


def db_counters(db):
    """Commits of `db` and the cluster's WAL bytes so far."""
    commits = int(psql(f"SELECT xact_commit FROM pg_stat_database WHERE datname = '{db}'"))
    return {"commits": commits, "wal_bytes": (wal_stats() or {}).get("bytes", 0)}


class BackendCPU:
    """CPU seconds of the PostgreSQL backends serving `application_name` (sampled every 0.2 s
    until stopped: a backend's /proc entry goes when its client disconnects)."""

    def __init__(self, app_name):
        self.app_name, self.cpu, self.stopped = app_name, {}, False
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while not self.stopped:
            try:
                pids = psql(f"SELECT pid FROM pg_stat_activity WHERE application_name = '{self.app_name}'").split()
            except RuntimeError:
                pids = []
            for pid in pids:
                try:
                    with open(f"/proc/{pid}/stat") as f:
                        fields = f.read().rsplit(")", 1)[1].split()
                    self.cpu[pid] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
                except (OSError, IndexError, ValueError):
                    pass
            time.sleep(0.2)

    def stop(self):
        self.stopped = True
        self.thread.join()
        return round(sum(self.cpu.values()), 2)


def timed_command(args, env, stdin_path=None, stdout_path=None):
    """Runs the binary to its end: (seconds, CPU seconds of the process, exit status)."""
    log_path = os.path.join(TMP, f"cmd-{time.time_ns()}.log")
    with open(stdin_path or os.devnull) as i, open(stdout_path or os.devnull, "w") as o, open(log_path, "w") as e:
        started = time.time()
        proc = subprocess.Popen([BIN] + args, env=env, stdin=i, stdout=o, stderr=e)
        _, status, usage = os.wait4(proc.pid, 0)
        elapsed = time.time() - started
    if status != 0:
        raise RuntimeError(f"{' '.join(args[:2])} failed: {open(log_path).read()[-1000:]}")
    return elapsed, usage.ru_utime + usage.ru_stime


def per_user(before, after, n, seconds, cpu, backend_cpu):
    return {"users": n, "seconds": round(seconds, 2), "users_per_s": round(n / seconds),
            "client_cpu_ms_per_user": round(cpu * 1000 / n, 3), "db_cpu_ms_per_user": round(backend_cpu * 1000 / n, 3),
            "commits_per_user": round((after["commits"] - before["commits"]) / n, 3),
            "wal_bytes_per_user": round((after["wal_bytes"] - before["wal_bytes"]) / n)}


def import_with_forwarding(result, env_b, tuning, listing, users):
    """`transfer import` of the same list with SIWA_FORWARD_URL set, into bench_recv_fwd."""
    recv_fwd = database("bench_recv_fwd")
    secrets = os.path.join(TMP, "forward-secrets")
    with open(secrets, "w") as f:
        f.write("whsec_" + base64.b64encode(os.urandom(32)).decode() + "\n")
    env_fwd = {**env_b, "SIWA_DATABASE_URL": recv_fwd, "SIWA_FORWARD_URL": "http://127.0.0.1:9/never-sent",
               "SIWA_FORWARD_SECRET_FILE": secrets}
    before, cpu = db_counters("bench_recv_fwd"), BackendCPU("siwa-notify transfer import")
    seconds, client = timed_command(["transfer", "import", "-"] + tuning, env_fwd, stdin_path=listing)
    result["import_forwarding"] = per_user(before, db_counters("bench_recv_fwd"), users, seconds, client, cpu.stop())
    forwards = int(psql_db("bench_recv_fwd", "SELECT count(*) FROM siwa.forwards WHERE type = 'user-migrated'"))
    assert forwards == users, f"import with forwarding queued {forwards} forwards for {users} users"
    log(f"transfer import, forwarding on: {users} users in {seconds:.1f} s "
        f"({result['import_forwarding']['users_per_s']}/s), {forwards} forwards queued")


def transfer_mode():
    users = env_int("BENCH_TRANSFER_USERS", 100_000)
    tokens = env_int("BENCH_RECONCILE_TOKENS", 100_000)
    every = os.environ.get("BENCH_RECONCILE_EVERY", "50s")
    rate = env_int("BENCH_TRANSFER_RATE", 100_000)
    concurrency = env_int("BENCH_TRANSFER_CONCURRENCY", 4)
    devdir = os.path.join(TMP, "dev-apple")
    port, port_b = free_port(), free_port()
    fake_log = open(os.path.join(TMP, "dev-apple.log"), "w")
    fake = subprocess.Popen([BIN, "dev-apple", "--port", str(port), "--receiving-team", TEAM_B, "--receiving-port",
                             str(port_b), "--data-dir", devdir, "--accept-refresh-tokens", "bench-", "--quiet"],
                            stdout=fake_log, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 30
        while "Run `siwa-notify serve --dev`" not in open(fake_log.name).read():
            if time.time() > deadline or fake.poll() is not None:
                raise RuntimeError(f"dev-apple did not start: {open(fake_log.name).read()[-1000:]}")
            time.sleep(0.05)
        base = {**os.environ, "SIWA_KEY_ID": "DEVKEY0000", "SIWA_TOKEN_KEY_FILE": os.path.join(devdir, "dev-token.key"),
                "SIWA_AUDIENCES": AUDIENCE, "SIWA_LOG_LEVEL": "warning"}
        send = database("bench_send")
        recv = database("bench_recv")
        env_a = {**base, "SIWA_DATABASE_URL": send, "SIWA_TEAM_ID": "DEVTEAM000",
                 "SIWA_PRIVATE_KEY_FILE": os.path.join(devdir, "dev-apple-key.p8"), "SIWA_APPLE_URL": f"http://127.0.0.1:{port}"}
        env_b = {**base, "SIWA_DATABASE_URL": recv, "SIWA_TEAM_ID": TEAM_B,
                 "SIWA_PRIVATE_KEY_FILE": os.path.join(devdir, f"dev-apple-key-{TEAM_B}.p8"),
                 "SIWA_APPLE_URL": f"http://127.0.0.1:{port_b}"}
        tuning = ["--rate", str(rate), "--concurrency", str(concurrency)]
        result = {"users": users, "tokens": tokens, "rate_flag": rate, "concurrency": concurrency, "reconcile_every": every}

        # 1. Export: accounts on the sending team, a transfer identifier each.
        psql_db("bench_send", f"INSERT INTO siwa.accounts (apple_sub, email, is_private_email, status) "
                              f"SELECT '000111.' || md5(g::text) || '.0001', 'u' || g || '@privaterelay.appleid.com', true, "
                              f"'active' FROM generate_series(1, {users}) g")
        psql_db("bench_send", "ANALYZE")
        listing = os.path.join(TMP, "transfer-list.jsonl")
        before, cpu = db_counters("bench_send"), BackendCPU("siwa-notify transfer export")
        seconds, client = timed_command(["transfer", "export", "--to-team", TEAM_B] + tuning, env_a, stdout_path=listing)
        result["export"] = per_user(before, db_counters("bench_send"), users, seconds, client, cpu.stop())
        lines = sum(1 for _ in open(listing))
        assert lines == users, f"export listed {lines} of {users}"
        log(f"transfer export: {users} users in {seconds:.1f} s ({result['export']['users_per_s']}/s)")

        # 2. Import on the receiving team.
        before, cpu = db_counters("bench_recv"), BackendCPU("siwa-notify transfer import")
        seconds, client = timed_command(["transfer", "import", "-"] + tuning, env_b, stdin_path=listing)
        result["import"] = per_user(before, db_counters("bench_recv"), users, seconds, client, cpu.stop())
        mapped = int(psql_db("bench_recv", "SELECT count(*) FROM siwa.transfers WHERE new_sub IS NOT NULL"))
        assert mapped == users, f"import mapped {mapped} of {users}"
        log(f"transfer import: {users} users in {seconds:.1f} s ({result['import']['users_per_s']}/s)")

        # 2b. The same import with forwarding on (a user-migrated forward queued per user, in the same
        # statement; nothing sends them here), on a third database: the cost of the forwards.
        # BENCH_TRANSFER_FORWARD=0 skips it (a binary from before user-migrated forwards).
        if env_int("BENCH_TRANSFER_FORWARD", 1):
            import_with_forwarding(result, env_b, tuning, listing, users)

        # 3. Reconciliation: `tokens` refresh tokens, all due, 1% of them gone at Apple.
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
        import hashlib
        key = bytes.fromhex(open(os.path.join(devdir, "dev-token.key")).read().strip())
        key_id = hashlib.sha256(key).hexdigest()[:8]
        aes, rows = AESGCM(key), []
        for g in range(tokens):
            sub = f"000222.{g:032x}.0002"
            plain = (f"gone-{g}" if g % 100 == 0 else f"bench-{g}").encode()
            nonce = os.urandom(12)
            sealed = nonce + aes.encrypt(nonce, plain, sub.encode() + b"\0" + AUDIENCE.encode())
            rows.append(f"{sub}\t{AUDIENCE}\t{key_id}\t\\\\x{sealed.hex()}\n")
        psql_db("bench_send", "COPY siwa.apple_tokens (apple_sub, client_id, key_id, ciphertext) FROM STDIN", stdin="".join(rows))
        psql_db("bench_send", "UPDATE siwa.apple_tokens SET next_validation_at = now(); ANALYZE siwa.apple_tokens")
        before, cpu = db_counters("bench_send"), BackendCPU("siwa-notify reconciler")
        server = Server("work", 1)
        server_env_extra = {**env_a, "SIWA_RECONCILE_EVERY": every}
        server.log_file = open(server.log_path, "w")
        started = time.time()
        server.proc = subprocess.Popen([BIN, "work"], env={**server_env(server.port, server.admin_port, 1), **server_env_extra,
                                                          "SIWA_DATABASE_URL": send},
                                       stdout=server.log_file, stderr=subprocess.STDOUT)
        try:
            deadline = started + env_int("BENCH_RECONCILE_TIMEOUT", 900)
            while True:
                left = int(psql_db("bench_send", "SELECT count(*) FROM siwa.apple_tokens WHERE validated_at IS NULL"))
                if left == 0 or time.time() > deadline:
                    break
                time.sleep(0.5)
            seconds = time.time() - started
            client = server.cpu_seconds() or 0
        finally:
            server.stop()
        done = tokens - left
        result["reconcile"] = per_user(before, db_counters("bench_send"), done, seconds, client, cpu.stop())
        result["reconcile"]["tokens_validated"] = done
        result["reconcile"]["grants_gone"] = int(psql_db("bench_send", "SELECT count(*) FROM siwa.events WHERE jti LIKE 'siwa-reconcile-%'"))
        result["reconcile"]["target_rate"] = round(tokens / duration_seconds(every))
        log(f"reconcile: {done} tokens in {seconds:.1f} s ({result['reconcile']['users_per_s']}/s; "
            f"target {result['reconcile']['target_rate']}/s, at most 1,000/s), {result['reconcile']['grants_gone']} grants gone")
        result["summary"] = {"export_users_per_s": result["export"]["users_per_s"],
                             "import_users_per_s": result["import"]["users_per_s"],
                             "import_forwarding_users_per_s": result.get("import_forwarding", {}).get("users_per_s"),
                             "reconcile_tokens_per_s": result["reconcile"]["users_per_s"]}
        return result
    finally:
        fake.terminate()
        fake.wait()
        fake_log.close()


def duration_seconds(text):
    return int(text[:-1]) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[text[-1]]
