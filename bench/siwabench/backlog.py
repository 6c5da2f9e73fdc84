"""The worker's side: a backlog of pending events preloaded in siwa.events, drained by one or
several `siwa-notify work` processes, with WAL and per-statement figures."""
import time
from .cpu import CPUMeter
from .harness import AUDIENCE, RSSSampler, Server, env_int, log, psql, psql_script


def pending_count():
    return int(psql("SELECT count(*) FROM siwa.events WHERE status IN ('pending', 'failed')"))


QUEUE = "siwa.event_queue"


def has_queue():
    """True on a schema with siwa.event_queue (an older BENCH_BIN's has none)."""
    return psql(f"SELECT to_regclass('{QUEUE}') IS NOT NULL") == "t"


def analyze_tables():
    """ANALYZE of the worker's tables, the queue included when there is one."""
    return "ANALYZE siwa.events; ANALYZE siwa.sessions; ANALYZE siwa.accounts; " + (f"ANALYZE {QUEUE}; " if has_queue() else "")


def waiting_events_sql():
    """An EXISTS over the events still to do, through an index whatever the statistics say (no scan
    of a 5M-row table per probe): siwa.event_queue, or, on a schema before it (BENCH_BIN of an
    older release, for A/B runs), the due index of siwa.events."""
    table = QUEUE if has_queue() else "siwa.events"
    return f"EXISTS (SELECT FROM {table} WHERE status IN ('pending', 'failed'))"


def pending_exists():
    return psql("SET enable_seqscan = off; SET enable_bitmapscan = off; "
                f"SELECT {waiting_events_sql()}").splitlines()[-1] == "t"


def drain(workers=1, app_prefix=None, label="worker"):
    """Starts `workers` `siwa-notify work` processes at once (launched back to back, none waits for
    another to be ready) on the pending backlog already in siwa.events, and polls every 0.2 s until
    none is left. events/s = applied / wall time from the first launch; also from the span of
    processed_at (excludes start-up: connecting, preparing, the first pruning pass)."""
    timeout = env_int("BENCH_WORKER_MAX_SECONDS", 300)
    queue = QUEUE if has_queue() else "siwa.events"
    first_id = int(psql(f"SET enable_seqscan = off; SELECT coalesce(min(id), 0) FROM {queue} "
                        "WHERE status IN ('pending', 'failed')").splitlines()[-1])
    backlog = pending_count()
    statements_on = reset_statement_stats()
    wal_before = wal_stats()
    servers = [Server("work", 1, app_name=f"{app_prefix}{k + 1}" if app_prefix else None) for k in range(workers)]
    left = backlog
    restarts = []
    started_wall, started = time.time(), time.perf_counter()
    try:
        for server in servers:
            server.launch()
        sampler = RSSSampler(servers[0])
        sampler.start()
        # Machine idle % and CPU per event of siwa-notify (one process only) and PostgreSQL.
        meter = CPUMeter(servers[0] if workers == 1 else None)
        while time.perf_counter() - started < timeout:
            # A cheap probe while the worker runs (a count(*) of a 100k backlog every 0.2 s took
            # a third of a core from the worker on this 2-core machine); the count at the end.
            if not pending_exists():
                left = 0
                break
            for k, server in enumerate(servers):
                if server.proc.poll() is not None:
                    # Recorded, then started again (at most 3 times per worker): e.g. a worker that
                    # starts while another is mid-batch has been seen to die in its start-up migration.
                    reason = [l for l in server.tail().splitlines() if "rror" in l][-1:] or [f"exit {server.proc.returncode}"]
                    restarts.append({"worker": k + 1, "after_s": round(time.perf_counter() - started, 2), "reason": reason[0][-300:]})
                    log(f"{label}: worker {k + 1} exited ({reason[0][-200:]}); starting it again")
                    if sum(r["worker"] == k + 1 for r in restarts) > 3:
                        raise RuntimeError(f"work exited with {server.proc.returncode}: {server.tail()}")
                    server.log_file.close()
                    server.launch()
            time.sleep(0.2)
        elapsed = time.perf_counter() - started
        memory = sampler.finish()
        cpu_end = meter.snapshot(None)
        if left != 0:
            left = pending_count()
    finally:
        for server in servers:
            server.stop()
    warnings = [w for server in servers for w in server.warnings()]
    row = psql(f"SELECT count(*), extract(epoch FROM min(processed_at)), extract(epoch FROM max(processed_at)) "
               f"FROM siwa.events WHERE id >= {first_id} AND status = 'done' AND processed_at >= to_timestamp({started_wall})")
    done_rows, first_at, last_at = row.split("|")
    wal_after = wal_stats()
    span = float(last_at) - float(first_at) if first_at else 0
    applied = backlog - left
    statements = statement_stats(applied) if statements_on else None
    cpu = meter.finish(applied, end=cpu_end)
    result = {"workers": workers, "backlog": backlog, "applied": applied, "left": left, "cpu": cpu,
              "done_rows": int(done_rows), "seconds_wall": round(elapsed, 3),
              "events_per_s": round(applied / elapsed, 1),
              "events_per_s_in_table": round(int(done_rows) / span, 1) if span > 0 else None,
              "seconds_to_first_applied": round(float(first_at) - started_wall, 3) if first_at else None,
              "memory_first_worker": memory, "worker_restarts": restarts, "server_warnings": warnings[-10:],
              # WAL written per applied event (whole cluster while the worker ran): full-page images
              # are what a large table's random index pages cost after a checkpoint.
              "wal_per_event": {k: round((wal_after[k] - wal_before[k]) / applied, 2) for k in wal_before}
              if applied and wal_before and wal_after else None,
              # Per statement, when pg_stat_statements is loaded (BENCH_PG_OPTIONS=
              # "-c shared_preload_libraries=pg_stat_statements"): where the time and the WAL go.
              "statements": statements}
    log(f"{label}: {applied}/{backlog} applied by {workers} worker(s) in {elapsed:.1f} s -> "
        f"{result['events_per_s']:.0f} events/s (processed_at span: {result['events_per_s_in_table']} events/s, "
        f"first applied after {result['seconds_to_first_applied']} s; WAL per event {result['wal_per_event']})")
    log(f"{label}: {meter.line(cpu)}")
    return result


def wal_stats():
    """The cluster's WAL counters so far (pg_stat_wal): records, full-page images, bytes."""
    try:
        records, fpi, size = psql("SELECT wal_records, wal_fpi, wal_bytes FROM pg_stat_wal").split("|")
        return {"records": int(records), "fpi": int(fpi), "bytes": int(float(size))}
    except (RuntimeError, ValueError):
        return None


def reset_statement_stats():
    """True when pg_stat_statements is loaded (its counters are then reset for the next step)."""
    try:
        psql("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        psql("SELECT pg_stat_statements_reset()")
        return True
    except RuntimeError:
        return False


def statement_stats(events):
    """The worker's statements by WAL written: per applied event, ms per call, calls."""
    rows = psql("SELECT left(regexp_replace(query, '\\s+', ' ', 'g'), 70) || '|' || calls || '|' "
                "|| round(total_exec_time::numeric, 1) || '|' || wal_fpi || '|' || wal_bytes || '|' "
                "|| shared_blks_read || '|' || shared_blks_written "
                "FROM pg_stat_statements WHERE query NOT LIKE '%pg_stat%' ORDER BY wal_bytes DESC, total_exec_time DESC LIMIT 10")
    out = []
    for line in rows.splitlines():
        query, calls, ms, fpi, size, read, written = line.rsplit("|", 6)
        # Blocks read from outside shared_buffers, and dirty blocks this statement wrote out to
        # make room (the buffer pool is smaller than the tables: bench/README "authlib").
        out.append({"query": query, "calls": int(calls), "ms_per_call": round(float(ms) / max(1, int(calls)), 2),
                    "fpi_per_event": round(int(fpi) / max(1, events), 3),
                    "wal_bytes_per_event": round(int(float(size)) / max(1, events)),
                    "blocks_read_per_event": round(int(read) / max(1, events), 3),
                    "blocks_written_per_event": round(int(written) / max(1, events), 3)})
    for o in out:
        log(f"  {o['fpi_per_event']:>6} FPI/event {o['wal_bytes_per_event']:>6} B/event {o['ms_per_call']:>8} ms/call "
            f"{o['calls']:>6} calls {o['blocks_read_per_event']:>6} read {o['blocks_written_per_event']:>6} written/event  {o['query']}")
    return out


# What the worker writes for the bench's events, emptied before each drain: app accounts left by
# an earlier drain over the same subs make every new sub an import (inserted, decided again,
# updated), and update_accounts then takes 2-3.5x as long per batch.
WORKER_TABLES = "siwa.events, siwa.accounts, siwa.app_accounts, siwa.sessions"


def insert_backlog(m, prefix="bench.worker."):
    """m pending events (4 types round robin: consent-revoked, email-disabled, account-delete,
    email-enabled), distinct subs, one live session per sub."""
    psql_script(f"""
        INSERT INTO siwa.events (jti, aud, sub, type, event_time, email, is_private_email, status, claims)
        SELECT '{prefix}' || g, '{AUDIENCE}', '{prefix}' || g, t.type,
               now() - interval '1 hour' + g * interval '1 millisecond',
               CASE WHEN t.type LIKE 'email-%' THEN 'w' || g || '@privaterelay.appleid.com' END,
               CASE WHEN t.type LIKE 'email-%' THEN true END,
               'pending',
               jsonb_build_object('iss', 'https://appleid.apple.com', 'aud', '{AUDIENCE}', 'jti', '{prefix}' || g,
                                  'iat', extract(epoch FROM now())::bigint,
                                  'events', json_build_object('type', t.type, 'sub', '{prefix}' || g)::text)
        FROM generate_series(1, {m}) g
        CROSS JOIN LATERAL (SELECT (ARRAY['consent-revoked', 'email-disabled', 'account-delete', 'email-enabled'])[1 + g % 4] AS type) t;
        INSERT INTO siwa.sessions (apple_sub, created_at)
        SELECT '{prefix}' || g, now() - interval '2 hours' FROM generate_series(1, {m}) g;
    """)
