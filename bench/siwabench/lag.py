"""Mode lag: consent-revoked POSTed at a fixed rate to `serve`, time until the session is revoked."""
import time
from .backlog import WORKER_TABLES
from .harness import RSSSampler, Server, env_int, log, migrate, pct, presign, psql, read_bodies, sub_of
from .load import fixed_rate, summarize_fixed_rate


def lag():
    rate = env_int("BENCH_LAG_RATE", 1000)
    seconds = env_int("BENCH_LAG_SECONDS", 10)
    threads = env_int("BENCH_LATENCY_HTTP_THREADS", 4)
    bodies = read_bodies(presign("lag", rate * seconds))
    subs = [sub_of(b) for b in bodies]
    migrate()
    psql(f"TRUNCATE {WORKER_TABLES}")
    psql("COPY siwa.sessions (apple_sub, created_at) FROM STDIN",
         stdin="".join(f"{s}\t2000-01-01 00:00:00+00\n" for s in subs))
    psql("ANALYZE siwa.sessions")
    psql("CHECKPOINT")
    log(f"lag: {len(bodies)} consent-revoked at {rate}/s to serve (SIWA_HTTP_THREADS={threads}), one live session each")
    with Server("serve", threads) as server:
        sampler = RSSSampler(server)
        sampler.start()
        results = fixed_rate(server.port, bodies, rate, 64)
        deadline = time.time() + 60
        while time.time() < deadline:
            if int(psql("SELECT count(*) FROM siwa.sessions WHERE revoked_at IS NULL")) == 0:
                break
            time.sleep(0.1)
        memory = sampler.finish()
        warnings = server.warnings()
    rows = psql("SELECT apple_sub, extract(epoch FROM revoked_at), "
                "extract(epoch FROM pg_xact_commit_timestamp(xmin)) FROM siwa.sessions WHERE revoked_at IS NOT NULL")
    revoked = {}
    for line in rows.splitlines():
        sub, at, committed = line.split("|")
        revoked[sub] = (float(at), float(committed) if committed else None)
    lag_commit, lag_revoked_at, missing = [], [], 0
    for sub, r in zip(subs, results):
        if r is None or r[3] != 200 or sub not in revoked:
            missing += 1
            continue
        at, committed = revoked[sub]
        lag_revoked_at.append((at - r[5]) * 1000)
        if committed is not None:
            lag_commit.append((committed - r[5]) * 1000)
    summary = summarize_fixed_rate(results, rate)
    primary = lag_commit or lag_revoked_at
    result = {
        "rate": rate, "seconds": seconds, "http_threads": threads, "post": summary,
        "sessions_revoked": len(revoked), "not_revoked": missing,
        "lag_ms": {p: round(pct(primary, float(p)), 2) for p in ("50", "90", "99", "99.9")},
        "lag_max_ms": round(max(primary), 2),
        "lag_measured_to": "commit of the revoking transaction (pg_xact_commit_timestamp)" if lag_commit
                           else "revoked_at (start of the revoking transaction)",
        "lag_to_revoked_at_ms": {p: round(pct(lag_revoked_at, float(p)), 2) for p in ("50", "99")},
        "memory": memory, "server_warnings": warnings, "aims": {"lag_p99_ms": 50, "rate": 1000},
    }
    log(f"lag: POST -> session revoked p50 {result['lag_ms']['50']} ms, p99 {result['lag_ms']['99']} ms "
        f"({len(revoked)} revoked, {missing} missing); POST p99 {summary['latency_ms']['99']} ms")
    return result
