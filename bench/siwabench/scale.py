"""Mode scale: receive, serve and worker on an empty database, then on 1M accounts, 1M sessions
and 5M done events bulk-loaded without ANALYZE (and once ANALYZEd): the same figures, the ratio."""
import os
import time
from .backlog import QUEUE, WORKER_TABLES, analyze_tables, drain, has_queue
from .dataset import SCALE_FUNCTIONS, bulk_load, scale_accounts_sql, scale_backlog_sql, table_stats
from .harness import env_int, log, migrate, presign, psql, psql_script
from .load import ingest


def ingest_and_drain(label, n, http_threads, backlog_sql, quiet_backlog_sql):
    """The figures compared by the scale mode, on whatever the tables hold now."""
    out = {}
    out["receive"] = ingest("receive", "throughput", n, http_threads)
    # `receive` leaves its events pending: remove them, so serve's worker and the backlog below
    # start from the same queue in both phases.
    psql("DELETE FROM siwa.events WHERE status IN ('pending', 'failed')")
    out["serve"] = ingest("serve", "serve", n, http_threads, wait_applied=True)
    sql, _, _ = backlog_sql
    started = time.perf_counter()
    psql_script(sql)
    log(f"{label}: backlog inserted in {time.perf_counter() - started:.1f} s")
    psql("CHECKPOINT")
    out["worker"] = drain(1, label=f"{label} worker")
    out["worker"]["sessions_revoked"] = int(psql("SELECT count(*) FROM siwa.sessions WHERE revoked_at IS NOT NULL"))
    # The same size of backlog with no account-delete: what grows with the tables, apart from
    # erasing the history of deleted users (rows the empty database does not have).
    psql_script(quiet_backlog_sql[0])
    psql("CHECKPOINT")
    out["worker_no_erasure"] = drain(1, label=f"{label} worker, no account-delete")
    out["tables"] = table_stats()
    return out


def scale():
    accounts = env_int("SCALE_ACCOUNTS", 1000000)
    sessions = env_int("SCALE_SESSIONS", accounts)
    events = env_int("SCALE_EVENTS", 5 * accounts)
    backlog = env_int("SCALE_BACKLOG", 100000)
    n = env_int("SCALE_N", env_int("BENCH_N", 100000))
    threads = env_int("BENCH_LATENCY_HTTP_THREADS", 4)
    autovacuum = os.environ.get("SCALE_AUTOVACUUM", "0") == "1"
    if sessions > accounts:
        raise SystemExit("SCALE_SESSIONS must be at most SCALE_ACCOUNTS (one live session per account)")
    presign("throughput", n)
    presign("serve", n)
    migrate()
    psql_script(SCALE_FUNCTIONS)
    tables = WORKER_TABLES
    # TRUNCATE of siwa.events empties the queue too (its trigger); statistics cover both.
    quiet_tables = tables.split(", ") + [QUEUE] if has_queue() else tables.split(", ")
    if not autovacuum:
        # No statistics may arrive mid-run: autovacuum's ANALYZE would hide what a freshly loaded
        # table does to the plans (SCALE_AUTOVACUUM=1 leaves it on).
        for t in quiet_tables:
            psql(f"ALTER TABLE {t} SET (autovacuum_enabled = off)")
    backlog_sql = scale_backlog_sql(backlog, accounts)
    quiet_backlog_sql = scale_backlog_sql(backlog, accounts, erasure=False)
    _, half, step = backlog_sql
    if step < 2:
        raise SystemExit("SCALE_ACCOUNTS must be at least SCALE_BACKLOG (two sets of existing accounts)")
    try:
        # 1. Empty database: only the backlog's existing half has accounts and sessions.
        psql(f"TRUNCATE {tables}")
        for sql in scale_accounts_sql(half, step) + scale_accounts_sql(half, step, step // 2):
            psql_script(sql)
        log(f"scale: empty database ({2 * half} accounts with sessions for the backlogs' existing halves)")
        empty = ingest_and_drain("empty", n, threads, backlog_sql, quiet_backlog_sql)

        # 2. Bulk-loaded: no ANALYZE, no VACUUM afterwards (autovacuum off on these tables).
        psql(f"TRUNCATE {tables}")
        log(f"scale: preloading {accounts} accounts, {sessions} sessions, {events} done events")
        preload = bulk_load(accounts, sessions, events)
        loaded = ingest_and_drain("scale", n, threads, backlog_sql, quiet_backlog_sql)
        analyzed = None
        third = os.environ.get("SCALE_ANALYZE", "1")
        if third in ("1", "never"):
            # 3. The same tables once ANALYZEd (what autovacuum does within a minute of a load),
            # with the queue empty (its usual state: the statistics say it holds nothing), then a
            # backlog of the same size for other accounts, drained by one worker.
            # SCALE_ANALYZE=never: the same third pair without the ANALYZE (the control: what the
            # pages' state after two drains gives, whatever the statistics).
            t = time.perf_counter()
            if third == "1":
                psql_script(analyze_tables())
            log(f"scale: {'ANALYZE' if third == '1' else 'no ANALYZE (control)'} {time.perf_counter() - t:.1f} s; backlog again")
            analyzed = {}
            psql_script(scale_backlog_sql(backlog, accounts, again=True)[0])
            psql("CHECKPOINT")
            analyzed["worker"] = drain(1, label="analyzed worker" if third == "1" else "third worker (no ANALYZE)")
            psql_script(scale_backlog_sql(backlog, accounts, erasure=False, again=True)[0])
            psql("CHECKPOINT")
            analyzed["worker_no_erasure"] = drain(
                1, label="analyzed worker, no account-delete" if third == "1" else "third worker (no ANALYZE), no account-delete")
            analyzed["tables"] = table_stats()
    finally:
        if not autovacuum:
            for t in quiet_tables:
                psql(f"ALTER TABLE {t} RESET (autovacuum_enabled)")

    def ratio(a, b):
        return round(b / a, 3) if a and b else None

    figures = {
        "receive_events_per_s": (empty["receive"]["events_per_s"], loaded["receive"]["events_per_s"]),
        "serve_events_per_s": (empty["serve"]["events_per_s"], loaded["serve"]["events_per_s"]),
        "worker_events_per_s": (empty["worker"]["events_per_s"], loaded["worker"]["events_per_s"]),
        "worker_events_per_s_in_table": (empty["worker"]["events_per_s_in_table"], loaded["worker"]["events_per_s_in_table"]),
        "worker_no_erasure_events_per_s": (empty["worker_no_erasure"]["events_per_s"], loaded["worker_no_erasure"]["events_per_s"]),
    }
    summary = {k: {"empty": a, "scale": b, "ratio": ratio(a, b)} for k, (a, b) in figures.items()}
    if analyzed:
        for k in ("worker", "worker_no_erasure"):
            a, b = empty[k]["events_per_s"], analyzed[k]["events_per_s"]
            summary[f"{k}_events_per_s_{'after_analyze' if third == '1' else 'third_no_analyze'}"] = {"empty": a, "scale": b, "ratio": ratio(a, b)}
    summary["preload_s"] = preload["total_s"]
    summary["sizes"] = {"accounts": accounts, "sessions": sessions, "events": events, "backlog": backlog, "ingest_n": n}
    summary["aim_ratio"] = 0.8
    lines = [f"{'':32} {'empty':>10} {'scale':>10} {'ratio':>7}"]
    for k, v in summary.items():
        if isinstance(v, dict) and "ratio" in v:
            lines.append(f"{k:32} {v['empty'] or 0:>10.0f} {v['scale'] or 0:>10.0f} {v['ratio'] or 0:>7.3f}")
    log("scale (" + f"{accounts} accounts, {sessions} sessions, {events} done events, backlog {backlog}, "
        f"preload {preload['total_s']} s; aim ratio >= 0.8):\n" + "\n".join(lines))
    return {"settings": {"accounts": accounts, "sessions": sessions, "events": events, "backlog": backlog,
                         "backlog_existing": half, "backlog_existing_step": step, "ingest_n": n,
                         "http_threads": threads, "autovacuum": autovacuum},
            "empty": empty, "preload": preload, "scale": loaded, "analyzed": analyzed, "summary": summary}
