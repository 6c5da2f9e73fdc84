"""Mode cost: what each event writes, and for whom. On bulk-loaded data (COST_ACCOUNTS accounts,
each with its app account and a live session, COST_EVENTS done events), one window per event
type drained by `work` and one ingest by `receive`: every WAL record of the window by relation
and record type (pg_walinspect), the tables' inserted/updated/HOT-updated/deleted rows
(pg_stat_user_tables) and the trigger functions called (pg_stat_user_functions), per event, each
relation beside the reader it serves. Prints the markdown table of bench/README.md "cost"
(COST_WRITE_README=1 writes it there)."""
import os
import re
import time

from .backlog import WORKER_TABLES
from .dataset import SCALE_FUNCTIONS, bulk_load
from .harness import AUDIENCE, HERE, Server, env_int, log, migrate, presign, psql, psql_script
from .load import run_wrk

# Who reads each relation the worker or the receiver writes (grep Sources/ and schema.sql). A
# relation not listed here is printed with "?": a write nobody has claimed yet.
READERS = {
    "events": "the outbox: the claim, the console, `user_report`, dashboards",
    "events_pkey": "`claim_events`, `mark_done` (by id); the console's id windows (overview, rollup, lists) and event page",
    "events_jti_key": "the receiver's `ON CONFLICT` (Apple's retry: same jti)",
    "events_dedupe_key": "the receiver's `ON CONFLICT` (re-signed retry); `erase_event_emails` and `user_report` (by sub)",
    "events_received_day_idx": "a day range: `events_per_day`, `status` (`counts_last_day`), retention `prune`",
    "events_unknown_type_idx": "`erase_raced_ignored_emails` (unknown types only)",
    "events_reconcile_gone_idx": "`status`: grants found gone (reconcile rows only)",
    "event_queue": "`claim_events`, `siwa.backlog` (gauges, /metrics)",
    "event_queue_pkey": "the queue triggers (by id: `mark_done` deletes the row); console queue window",
    "event_queue_due_idx": "`claim_events` (due order), `drop_stale_queue_rows`; `siwa.backlog` (index-only)",
    "event_queue_dead_idx": "`siwa.dead_letters`, console dead letters",
    "accounts": "worker (`lock_accounts`), `on_event`, console user page, `user_report`",
    "accounts_pkey": "worker (`create_or_lock_accounts`, `lock_accounts`, `update_accounts`), console, `user_report`",
    "accounts_status_idx": "`siwa.account_status_summary` (dashboard view, index-only scan)",
    "accounts_sub_hash_idx": "console `/console/users?q=<sub hash>`",
    "app_accounts": "worker (`lock_app_accounts`), `user_report`",
    "app_accounts_pkey": "worker (`lock_app_accounts`, `insert_app_accounts`, `write_app_accounts`), `user_report`",
    "app_accounts_status_idx": "`siwa.app_account_status_summary` (`status`: users per app)",
    "sessions": "the app's session check; console user page; `user_report`",
    "sessions_pkey": "`revoke_sessions` (update by id); the app's session check",
    "sessions_live_idx": "`revoke_sessions` (a user's live sessions)",
    "sessions_sub_idx": "console user page (a user's sessions, newest first); `user_report` (revoked ones)",
    "events_id_seq": "`siwa.events.id` (its identity)",
    "count_changes": "maintained counts: `status`, /metrics, console",
    "counts": "maintained counts: `status`, /metrics, console",
}

# The record types per event, in this order (the rest summed under "other").
ORDER = ["INSERT", "INSERT+INIT", "HEAP_CONFIRM", "MULTI_INSERT", "MULTI_INSERT+INIT", "UPDATE", "UPDATE+INIT", "HOT_UPDATE",
         "LOCK", "DELETE", "PRUNE", "VISIBLE",
         "INSERT_LEAF", "INSERT_UPPER", "SPLIT_L", "SPLIT_R", "DEDUP", "COMMIT"]

TYPES = ["email-disabled", "email-enabled", "consent-revoked", "account-delete"]


def snapshot():
    """Where the WAL is now, and the counters of the siwa tables and trigger functions."""
    lsn = psql("SELECT pg_current_wal_insert_lsn()")
    tables = {}
    for line in psql("SELECT relname || '|' || n_tup_ins || '|' || n_tup_upd || '|' || n_tup_hot_upd || '|' || n_tup_del "
                     "FROM pg_stat_user_tables WHERE schemaname = 'siwa'").splitlines():
        name, *v = line.split("|")
        tables[name] = [int(x) for x in v]
    functions = {}
    for line in psql("SELECT funcname || '|' || calls FROM pg_stat_user_functions WHERE schemaname = 'siwa'").splitlines():
        name, calls = line.split("|")
        functions[name] = int(calls)
    return {"lsn": lsn, "tables": tables, "functions": functions}


def wal_by_relation(start, end):
    """WAL records between two LSNs: per (relation, resource manager, record type) the records,
    bytes (full-page images included) and records carrying a full-page image. A record is counted
    against the relation of its first block; records of no relation (commits) under "-"; catalog
    relations (the started process's schema migration, not the events) under "(catalog)"."""
    rows = psql(f"""
        WITH r AS (
            SELECT resource_manager AS rm, record_type AS rt, record_length AS len, fpi_length AS fpi,
                   substring(block_ref FROM 'rel [0-9]+/[0-9]+/([0-9]+)')::oid AS node
            FROM pg_get_wal_records_info('{start}', '{end}')
        ), named AS (
            SELECT r.*, pg_filenode_relation(0, r.node) AS rel FROM r
        ), labelled AS (
            SELECT CASE WHEN n.rel IS NULL THEN CASE WHEN n.node IS NULL THEN '-' ELSE '(dropped)' END
                        WHEN c.relnamespace = 'siwa'::regnamespace THEN c.relname::text
                        WHEN c.relnamespace = 'pg_toast'::regnamespace
                             AND substring(c.relname FROM '[0-9]+')::oid::regclass::text LIKE 'siwa.%'
                            THEN substring(c.relname FROM '[0-9]+')::oid::regclass::text || ' (toast)'
                        ELSE '(catalog)' END AS label, n.rm, n.rt, n.len, n.fpi
            FROM named n LEFT JOIN pg_class c ON c.oid = n.rel
        )
        SELECT label || '|' || rm || '|' || rt || '|' || count(*) || '|' || sum(len) || '|' || count(*) FILTER (WHERE fpi > 0)
        FROM labelled GROUP BY label, rm, rt ORDER BY label, rm, rt
    """)
    out = []
    for line in rows.splitlines():
        rel, rm, rt, count, size, fpi = line.rsplit("|", 5)
        out.append({"relation": rel, "rm": rm, "type": rt, "records": int(count), "bytes": int(size), "fpi": int(fpi)})
    return out


def window(label, events, before, after):
    """The per-event figures of one window (snapshots before and after)."""
    records = wal_by_relation(before["lsn"], after["lsn"])
    per_rel = {}
    for r in records:
        rel = per_rel.setdefault(r["relation"], {"types": {}, "bytes": 0, "fpi": 0, "records": 0})
        rel["types"][r["type"]] = rel["types"].get(r["type"], 0) + r["records"]
        rel["bytes"] += r["bytes"]
        rel["fpi"] += r["fpi"]
        rel["records"] += r["records"]
    rows = []
    for rel, v in per_rel.items():
        rows.append({"relation": rel, "reader": READERS.get(rel, "" if rel in ("-", "(catalog)") else "?"),
                     "per_event": {t: round(n / events, 3) for t, n in v["types"].items()},
                     "bytes_per_event": round(v["bytes"] / events, 1), "fpi_per_event": round(v["fpi"] / events, 3),
                     "records_per_event": round(v["records"] / events, 3)})
    counted = [r for r in rows if r["relation"] != "(catalog)"]
    tables = {}
    for name, a in after["tables"].items():
        b = before["tables"].get(name, [0, 0, 0, 0])
        d = [x - y for x, y in zip(a, b)]
        if any(d):
            tables[name] = {"ins": round(d[0] / events, 3), "upd": round(d[1] / events, 3),
                            "hot_pct": round(100 * d[2] / d[1], 1) if d[1] else None, "del": round(d[3] / events, 3)}
    triggers = {f: round((n - before["functions"].get(f, 0)) / events, 3)
                for f, n in after["functions"].items() if n != before["functions"].get(f, 0)}
    total = {"records": round(sum(r["records_per_event"] for r in counted), 2),
             "bytes": round(sum(r["bytes_per_event"] for r in counted)),
             "fpi": round(sum(r["fpi_per_event"] for r in counted), 3),
             "catalog_bytes_whole_window": round(sum(r["bytes_per_event"] for r in rows if r["relation"] == "(catalog)") * events)}
    log(f"cost {label}: {events} events, {total['records']} WAL records, {total['bytes']} B, {total['fpi']} FPI per event; "
        f"rows {tables}; triggers {triggers}")
    return {"label": label, "events": events, "relations": sorted(rows, key=lambda r: -r["bytes_per_event"]),
            "tables": tables, "triggers": triggers, "total": total}


def wait_drained(timeout):
    started = time.perf_counter()
    while time.perf_counter() - started < timeout:
        if psql("SELECT NOT EXISTS (SELECT FROM siwa.event_queue WHERE status IN ('pending', 'failed'))") == "t":
            return
        time.sleep(0.2)
    raise RuntimeError(f"cost: the backlog was not drained in {timeout} s")


def worker_window(event_type, n, accounts, k):
    """n events of one type for n existing users (spread over the table, a set of its own per
    type), inserted while no worker runs; then CHECKPOINT, and the window: `work` started, the
    backlog drained, `work` stopped (its statistics reach pg_stat when it exits)."""
    step = max(1, accounts // (n * len(TYPES)))
    psql_script(f"""
        INSERT INTO siwa.events (jti, aud, sub, type, event_time, email, is_private_email, status, claims)
        SELECT 'bench-cost-{event_type}-' || i, '{AUDIENCE}', x.sub, '{event_type}', now() - interval '1 hour' + i * interval '1 millisecond',
               CASE WHEN '{event_type}' LIKE 'email-%' THEN 'c' || i || '@privaterelay.appleid.com' END,
               CASE WHEN '{event_type}' LIKE 'email-%' THEN true END, 'pending',
               jsonb_build_object('iss', 'https://appleid.apple.com', 'aud', '{AUDIENCE}', 'jti', 'bench-cost-{event_type}-' || i,
                                  'iat', extract(epoch FROM now())::bigint,
                                  'events', json_build_object('type', '{event_type}', 'sub', x.sub)::text)
        FROM generate_series(0, {n - 1}) i, LATERAL (SELECT public.bench_sub(i::bigint * {step * len(TYPES)} + {k * step}, '') AS sub) x;
        CHECKPOINT;
    """)
    before = snapshot()
    server = Server("work", 1).launch()
    try:
        wait_drained(env_int("BENCH_WORKER_MAX_SECONDS", 300))
    finally:
        server.stop()
    time.sleep(1)
    return window(event_type, n, before, snapshot())


def receiver_window(n):
    """n notifications (the throughput bodies) to `receive`: the window opens once it is ready."""
    bodies = presign("throughput", n)
    psql("CHECKPOINT")
    rows = int(psql("SELECT count(*) FROM siwa.events"))
    with Server("receive", env_int("BENCH_LATENCY_HTTP_THREADS", 4)) as server:
        before = snapshot()
        run_wrk(server, bodies, n, env_int("BENCH_MAX_SECONDS", 120), env_int("BENCH_WRK_THREADS", 2),
                env_int("BENCH_CONNECTIONS", 64))
    time.sleep(1)
    added = int(psql("SELECT count(*) FROM siwa.events")) - rows
    return window("receive", added, before, snapshot())


# Readers whose plan depends on the indexes the writes above maintain: what each reads now.
READS = {
    "`siwa.account_status_summary`": "SELECT * FROM siwa.account_status_summary",
    "`siwa.app_account_status_summary`": "SELECT * FROM siwa.app_account_status_summary",
    "console user page's sessions": "SELECT id, revoked_at FROM siwa.sessions WHERE apple_sub = public.bench_sub(4242, '') "
                                    "ORDER BY created_at DESC LIMIT 100",
    "`siwa.events_per_day` (two days)": "SELECT * FROM siwa.events_per_day WHERE day >= current_date - 1",
    "`counts_last_day` (`status`)": "SELECT type, status, count(*) FROM siwa.events "
                                    "WHERE (received_at AT TIME ZONE 'UTC')::date >= (now() AT TIME ZONE 'UTC')::date - 1 "
                                    "AND received_at > now() - interval '1 day' GROUP BY 1, 2",
    "`prune_events` (older than 20 days)": "SELECT id FROM siwa.events "
                                           "WHERE (received_at AT TIME ZONE 'UTC')::date < (now() AT TIME ZONE 'UTC')::date - 19 "
                                           "AND status IN ('done', 'ignored') AND type <> 'deletion-requested' "
                                           "AND coalesce(processed_at, received_at) < now() - interval '20 days' LIMIT 1000",
}


def reader_costs():
    """Each of READS once (EXPLAIN ANALYZE, BUFFERS, warm): its scan, buffers and time."""
    out = {}
    for name, sql in READS.items():
        psql(sql)
        plan = psql(f"EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, TIMING OFF) {sql}")
        scans = sorted(set(re.findall(r"((?:Parallel )?(?:Seq Scan|Index Only Scan|Index Scan Backward|Index Scan|Bitmap Heap Scan|Bitmap Index Scan)(?: using \S+)? on \S+)", plan)))
        hit = re.search(r"Buffers: shared hit=(\d+)(?: read=(\d+))?", plan)
        ms = re.search(r"Execution Time: ([0-9.]+) ms", plan)
        out[name] = {"scans": scans, "buffers": (int(hit.group(1)) + int(hit.group(2) or 0)) if hit else None,
                     "ms": float(ms.group(1)) if ms else None}
    return out


def fmt_types(per_event):
    parts = []
    other = 0.0
    for t, v in sorted(per_event.items(), key=lambda kv: ORDER.index(kv[0]) if kv[0] in ORDER else 99):
        if t in ORDER and v >= 0.005:
            parts.append(f"{t} {v:.2f}")
        else:
            other += v
    if other >= 0.005:
        parts.append(f"other {other:.2f}")
    return ", ".join(parts)


def markdown(windows, header, reads):
    """One table per window: each relation's writes per event, WAL bytes and full-page images per
    event, its reader; then the rows and triggers per event; then what the readers read."""
    out = [header, ""]
    for w in windows:
        t = w["total"]
        out.append(f"**{w['label']}** ({w['events']:,} events): **{t['bytes']:,} WAL bytes, {t['records']} records, "
                   f"{t['fpi']} full-page images per event**")
        out.append("")
        out.append("| relation | WAL records per event | bytes/event | FPI/event | reader |")
        out.append("|---|---|---|---|---|")
        for r in w["relations"]:
            if r["relation"] == "(catalog)" or r["bytes_per_event"] < 0.5:
                continue
            name = "commit and other records of no relation" if r["relation"] == "-" else f"`{r['relation']}`"
            out.append(f"| {name} | {fmt_types(r['per_event'])} | {r['bytes_per_event']:,.0f} | {r['fpi_per_event']:.2f} | {r['reader']} |")
        rows = "; ".join(f"`{n}` " + ", ".join(f"{k} {v}" for k, v in d.items() if k != "hot_pct" and v)
                         + (f" (HOT {d['hot_pct']} %)" if d["hot_pct"] is not None else "")
                         for n, d in sorted(w["tables"].items()) if any(d[k] for k in ("ins", "upd", "del")))
        out.append("")
        out.append(f"Rows per event: {rows}. Trigger functions per event: "
                   + (", ".join(f"`{f}` {v}" for f, v in sorted(w["triggers"].items())) or "none") + ".")
        out.append("")
    out.append("Readers (warm, once; the time is the loaded machine's): " + "; ".join(
        f"{name}: {', '.join(r['scans'])}, {r['buffers']:,} buffers, {r['ms']:.0f} ms" for name, r in reads.items()) + ".")
    return "\n".join(out)


def write_readme(table):
    path = os.path.join(HERE, "README.md")
    with open(path) as f:
        text = f.read()
    begin, end = "<!-- cost table: bench/run cost writes it (COST_WRITE_README=1) -->", "<!-- end of cost table -->"
    if begin not in text or end not in text:
        raise SystemExit(f"cost: {path} has no cost table markers")
    text = re.sub(re.escape(begin) + ".*?" + re.escape(end), lambda _: begin + "\n" + table + "\n" + end, text, flags=re.S)
    with open(path, "w") as f:
        f.write(text)
    log(f"cost: table written to {os.path.relpath(path)}")


def cost():
    accounts = env_int("COST_ACCOUNTS", 1000000)
    history = env_int("COST_EVENTS", 200000)
    n = env_int("COST_N", 20000)
    receive_n = env_int("COST_RECEIVE_N", n)
    if n * len(TYPES) > accounts:
        raise SystemExit("COST_N x 4 must be at most COST_ACCOUNTS (each event for a user of its own)")
    presign("throughput", receive_n)
    migrate()
    psql_script(SCALE_FUNCTIONS + "CREATE EXTENSION IF NOT EXISTS pg_walinspect;"
                "ALTER SYSTEM SET track_functions = 'all'; SELECT pg_reload_conf();")
    psql(f"TRUNCATE {WORKER_TABLES}")
    log(f"cost: loading {accounts} accounts with their app account and a live session, {history} done events")
    preload = bulk_load(accounts, accounts, history, app_accounts=True, label="cost")
    windows = [worker_window(t, n, accounts, k) for k, t in enumerate(TYPES)]
    windows.append(receiver_window(receive_n))
    psql_script("ALTER SYSTEM RESET track_functions; SELECT pg_reload_conf();")
    reads = reader_costs()
    # The space the fillfactor buys the HOT updates with: heap and index sizes once the windows ran.
    sizes = dict(line.split("|") for line in psql(
        "SELECT c.relname || '|' || pg_size_pretty(pg_relation_size(c.oid)) || ' + ' || pg_size_pretty(pg_indexes_size(c.oid)) "
        "FROM pg_class c WHERE c.relnamespace = 'siwa'::regnamespace AND c.relname IN ('accounts', 'app_accounts', 'sessions') "
        "ORDER BY 1").splitlines())
    commit = os.popen(f"git -C {HERE} rev-parse --short HEAD 2>/dev/null").read().strip()
    header = (f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {commit}, {accounts:,} accounts (app account, live "
              f"session each) and {history:,} done events bulk-loaded, a CHECKPOINT before each window; the worker's "
              f"windows drain {n:,} events of one type for users of their own, the receiver's takes {receive_n:,} "
              f"notifications. Per event; counts do not depend on the machine's load.")
    table = markdown(windows, header, reads) + "\n\nHeap + index sizes after the windows: " + "; ".join(
        f"`{k}` {v}" for k, v in sizes.items()) + "."
    print("\n" + table)
    if os.environ.get("COST_WRITE_README") == "1":
        write_readme(table)
    return {"settings": {"accounts": accounts, "history": history, "n": n, "receive_n": receive_n},
            "preload": preload, "windows": windows, "reads": reads, "sizes": sizes, "markdown": table,
            "summary": {w["label"]: w["total"] for w in windows}}
