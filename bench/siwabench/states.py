"""Mode states: one long-running `work` process through the states a database goes through. An
empty database (accounts and live sessions only for the users of its backlog), then STATES_ACCOUNTS
accounts and as many live sessions bulk-loaded with STATES_HISTORY done events; STATES_BACKLOG
pending events for existing users (a third each email-disabled, email-enabled, consent-revoked)
drained; ANALYZE; as many again for other existing users. Autovacuum on. events/s of each drain
(from the commit of its backlog to the last event applied) and its ratio to the empty database's,
with the WAL, full-page images and HOT updates per event."""
import os
import time

from .backlog import WORKER_TABLES, analyze_tables, wal_stats
from .dataset import SCALE_FUNCTIONS, bulk_load, scale_accounts_sql
from .harness import AUDIENCE, Server, env_int, log, migrate, psql, psql_script

TYPES = ["email-disabled", "email-enabled", "consent-revoked"]


def backlog_sql(n, step, offset, tag):
    """n pending events, types in turn, for the users a = i * step + offset; the inserting
    transaction's id is printed (its commit time starts the clock)."""
    types = ", ".join(f"'{t}'" for t in TYPES)
    return f"""
        BEGIN;
        INSERT INTO siwa.events (jti, aud, sub, type, event_time, email, is_private_email, status, claims)
        SELECT x.jti, '{AUDIENCE}', x.sub, x.type, now() - interval '1 hour' + i * interval '1 millisecond',
               CASE WHEN x.type LIKE 'email-%' THEN 's' || i || '@privaterelay.appleid.com' END,
               CASE WHEN x.type LIKE 'email-%' THEN true END, 'pending',
               jsonb_build_object('iss', 'https://appleid.apple.com', 'aud', '{AUDIENCE}', 'jti', x.jti,
                                  'iat', extract(epoch FROM now())::bigint,
                                  'events', json_build_object('type', x.type, 'sub', x.sub)::text)
        FROM generate_series(0, {n - 1}) i,
             LATERAL (SELECT 'bench-states-{tag}-' || i AS jti, public.bench_sub(i::bigint * {step} + {offset}, '') AS sub,
                             (ARRAY[{types}])[1 + i % {len(TYPES)}] AS type) x;
        SELECT pg_current_xact_id();
        COMMIT;
    """


def table_counters():
    out = {}
    for line in psql("SELECT relname || '|' || n_tup_upd || '|' || n_tup_hot_upd FROM pg_stat_user_tables "
                     "WHERE schemaname = 'siwa' AND relname IN ('accounts', 'sessions', 'events', 'app_accounts')").splitlines():
        name, upd, hot = line.split("|")
        out[name] = (int(upd), int(hot))
    return out


def drain_phase(label, n, step, offset, timeout):
    """Inserts the backlog, waits until the running worker has applied it; events/s from the
    backlog's commit to the last processed_at."""
    wal_before, counters_before = wal_stats(), table_counters()
    xid = psql_script(backlog_sql(n, step, offset, label)).splitlines()[-1]
    committed = float(psql(f"SELECT extract(epoch FROM pg_xact_commit_timestamp('{xid}'::text::xid))"))
    started = time.perf_counter()
    while time.perf_counter() - started < timeout:
        if psql("SELECT NOT EXISTS (SELECT FROM siwa.event_queue WHERE status IN ('pending', 'failed'))") == "t":
            break
        time.sleep(0.2)
    else:
        raise RuntimeError(f"states {label}: not drained in {timeout} s")
    done, first, last = psql(f"SELECT count(*) || '|' || extract(epoch FROM min(processed_at)) || '|' || extract(epoch FROM max(processed_at)) "
                             f"FROM siwa.events WHERE jti LIKE 'bench-states-{label}-%' AND status = 'done'").split("|")
    time.sleep(1)  # the worker's statistics reach pg_stat within a second
    wal_after, counters_after = wal_stats(), table_counters()
    hot = {}
    for name, (upd, h) in counters_after.items():
        u0, h0 = counters_before.get(name, (0, 0))
        if upd - u0:
            hot[name] = {"updates_per_event": round((upd - u0) / n, 3), "hot_pct": round(100 * (h - h0) / (upd - u0), 1)}
    result = {"events": n, "done": int(done), "events_per_s": round(int(done) / (float(last) - committed), 1),
              "events_per_s_processed_span": round(int(done) / (float(last) - float(first)), 1) if float(last) > float(first) else None,
              "wal_per_event": {k: round((wal_after[k] - wal_before[k]) / n, 2) for k in wal_before},
              "hot": hot, "loadavg": [round(x, 2) for x in os.getloadavg()]}
    log(f"states {label}: {result['events_per_s']:.0f} events/s (span {result['events_per_s_processed_span']}), "
        f"WAL per event {result['wal_per_event']}, updates {hot}")
    return result


def states():
    accounts = env_int("STATES_ACCOUNTS", 1000000)
    history = env_int("STATES_HISTORY", 200000)
    n = env_int("STATES_BACKLOG", 100000)
    timeout = env_int("BENCH_WORKER_MAX_SECONDS", 300)
    step = accounts // n
    if step < 2:
        raise SystemExit("STATES_ACCOUNTS must be at least 2 x STATES_BACKLOG (two sets of existing users)")
    migrate()
    psql_script(SCALE_FUNCTIONS)
    psql(f"TRUNCATE {WORKER_TABLES}")
    for sql in scale_accounts_sql(n, step):
        psql_script(sql)
    psql("CHECKPOINT")
    worker = Server("work", 1).launch().wait_ready()
    phases = {}
    try:
        log(f"states: empty database ({n} accounts with a live session, the backlog's users)")
        phases["empty"] = drain_phase("empty", n, step, 0, timeout)
        psql(f"TRUNCATE {WORKER_TABLES}")
        log(f"states: bulk-loading {accounts} accounts, {accounts} live sessions, {history} done events (worker running)")
        preload = bulk_load(accounts, accounts, history, label="states")
        phases["loaded"] = drain_phase("loaded", n, step, 0, timeout)
        t = time.perf_counter()
        psql_script(analyze_tables())
        log(f"states: ANALYZE {time.perf_counter() - t:.1f} s")
        phases["analyzed"] = drain_phase("analyzed", n, step, step // 2, timeout)
    finally:
        worker.stop()
    base = phases["empty"]["events_per_s"]
    summary = {k: {"events_per_s": v["events_per_s"], "ratio": round(v["events_per_s"] / base, 3),
                   "wal_bytes_per_event": v["wal_per_event"]["bytes"], "fpi_per_event": v["wal_per_event"]["fpi"],
                   "hot": v["hot"]} for k, v in phases.items()}
    summary["aim_ratio"] = 0.8
    log("states (one worker; aim ratio >= 0.8):\n" + "\n".join(
        f"  {k:10} {v['events_per_s']:>10.0f} events/s  {v['ratio']:.3f}x  WAL {v['wal_bytes_per_event']:.0f} B/event, "
        f"FPI {v['fpi_per_event']}/event" for k, v in summary.items() if isinstance(v, dict)))
    return {"settings": {"accounts": accounts, "history": history, "backlog": n, "step": step},
            "preload": preload, "phases": phases, "summary": summary, "worker_warnings": worker.warnings()}
