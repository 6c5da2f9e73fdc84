"""Mode burst: the day after an outage: 1M notifications of every type re-sent at full speed to
`serve` on 1M accounts, an ANALYZE halfway."""
import os
import threading
import time
import urllib.request
from .backlog import pending_exists
from .cpu import CPUMeter
from .dataset import SCALE_FUNCTIONS, drop_indexes, scale_accounts_sql
from .harness import Server, TMP, clock_shift, env_int, log, migrate, presign, psql, psql_script, read_bodies
from .load import run_wrk


BURST_TABLES = ["siwa.events", "siwa.event_queue", "siwa.accounts", "siwa.app_accounts", "siwa.sessions",
                "siwa.forwards", "siwa.revocations", "siwa.apple_tokens"]


def metric_sum(port, name, match=""):
    """Sum of the samples of `name` on the admin /metrics whose labels contain `match`."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    return sum(float(l.rsplit(" ", 1)[1]) for l in text.splitlines()
               if l.startswith(name + "{") and match in l)


def burst():
    """BURST_ACCOUNTS users with a live session each (bulk-loaded, then ANALYZEd), a queue that an
    earlier burst left empty (ANALYZEd so), then BURST_N notifications (every type, nine in ten for
    those users, one in fifty sent twice) at full speed to `serve`, with an ANALYZE of every table
    once half of them are stored. Prints the time until the last is answered and until the last
    is applied, the worker's events/s per tenth of the applied events, the receiver's p99 and the
    CPU per event of serve and PostgreSQL."""
    accounts = env_int("BURST_ACCOUNTS", 1000000)
    n = env_int("BURST_N", 1000000)
    threads = env_int("BENCH_LATENCY_HTTP_THREADS", 4)
    timeout = env_int("BURST_MAX_SECONDS", 1800)
    path = presign(f"burst{accounts}", n, once=True)
    signed_at, shift = clock_shift(path, timeout)
    bodies = read_bodies(path)
    # Apple's retries: one in fifty again, twenty-five bodies after its first.
    sent = []
    for k, body in enumerate(bodies):
        sent.append(body)
        if k % 50 == 49:
            sent.append(bodies[k - 25])
    burst_path = os.path.join(TMP, "burst.bodies")
    with open(burst_path, "w") as f:
        f.write("\n".join(sent) + "\n")
    migrate()
    psql_script(SCALE_FUNCTIONS)
    started = time.perf_counter()
    recreate = drop_indexes(["siwa.accounts", "siwa.sessions"])
    for sql in scale_accounts_sql(accounts, 1, now=f"to_timestamp({signed_at})"):
        psql_script(sql)
    for sql in recreate:
        psql(sql)
    # An earlier burst, drained: the queue is empty and keeps its pages (autovacuum's ANALYZE
    # finds it so, its usual state).
    psql_script("""
        INSERT INTO siwa.events (jti, aud, sub, type, event_time, claims)
        SELECT 'bench-warm-' || g, 'com.example.bench', public.bench_sub(g, 'warm'), 'consent-revoked', now() - interval '2 days', '{}'
        FROM generate_series(1, 20000) g;
        UPDATE siwa.events SET status = 'done', processed_at = now(), outcome = 'applied' WHERE jti LIKE 'bench-warm-%';
    """)
    psql("ANALYZE " + ", ".join(BURST_TABLES))
    psql("CHECKPOINT")
    preload_s = round(time.perf_counter() - started, 1)
    log(f"burst: {accounts} accounts and sessions loaded and analyzed in {preload_s} s; sending {len(sent)} bodies")
    first_id = int(psql("SELECT coalesce(max(id), 0) FROM siwa.events"))
    load_start = os.getloadavg()
    timeline, analyzed_at = [], []
    stop = threading.Event()
    with Server("serve", threads) as server:
        meter = CPUMeter(server)
        t0 = time.monotonic()

        def watch():
            # Applied events (the worker's counter) twice a second; the ANALYZE once half the
            # bodies are stored (ids are handed out in order: max(id) is one index probe).
            while not stop.is_set():
                try:
                    applied = metric_sum(server.admin_port, "siwa_events_total", 'outcome="applied"')
                    timeline.append((time.monotonic(), applied))
                    if not analyzed_at and int(psql("SELECT coalesce(max(id), 0) FROM siwa.events")) - first_id >= n // 2:
                        a = time.monotonic()
                        psql("ANALYZE " + ", ".join(BURST_TABLES))
                        analyzed_at.append((a - t0, time.monotonic() - a))
                        log(f"burst: ANALYZE of every table at {a - t0:.1f} s ({time.monotonic() - a:.1f} s)")
                except Exception as error:  # a slow scrape is skipped, not fatal
                    log(f"burst: watcher: {error}")
                stop.wait(0.5)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        w = run_wrk(server, burst_path, len(sent), timeout, env_int("BENCH_WRK_THREADS", 2),
                    env_int("BENCH_CONNECTIONS", 64), meter=meter)
        # Every accepted event of a known type is queued: wait until the queue is empty.
        while time.monotonic() - t0 < timeout and pending_exists():
            time.sleep(0.5)
        time.sleep(1.0)
        stop.set()
        watcher.join()
        cpu = meter.finish(w["counts"].get("accepted", 0))
        warnings = server.warnings()
    counts = w["counts"]
    first_send = w["first_send"]
    applied_total = timeline[-1][1] if timeline else 0
    # When the k-th tenth of the applied events was reached (linear between samples).
    def reached(target):
        for (ta, a), (tb, b) in zip(timeline, timeline[1:]):
            if b >= target:
                return ta + (tb - ta) * ((target - a) / (b - a) if b > a else 1)
        return None

    marks = [reached(applied_total * k / 10) if k else reached(1) for k in range(11)]
    deciles = [round(applied_total / 10 / (marks[k + 1] - marks[k]), 1)
               if marks[k] is not None and marks[k + 1] is not None and marks[k + 1] > marks[k] else None for k in range(10)]
    last_applied = marks[10] - first_send if marks[10] is not None else None
    result = {
        "settings": {"accounts": accounts, "bodies": n, "sent": len(sent), "http_threads": threads,
                     "bodies_signed_at": signed_at, "server_clock_shift_s": shift},
        "load_average": {"start": load_start, "end": os.getloadavg()},
        "preload_s": preload_s, "counts": counts, "socket_errors": w["errors"],
        "last_answered_s": round(w["last_recv"] - first_send, 2),
        "last_applied_s": round(last_applied, 2) if last_applied is not None else None,
        "applied": int(applied_total),
        "events_per_s_by_tenth": deciles,
        "last_to_first_tenth": round(deciles[9] / deciles[0], 3) if deciles[0] and deciles[9] else None,
        "receiver_latency_ms": {k: round(v / 1000, 1) for k, v in w["latency_us"]["percentiles"].items()},
        "receiver_latency_max_ms": round(w["latency_us"]["max"] / 1000, 1),
        "analyze_at_s": analyzed_at, "cpu": cpu, "server_warnings": warnings,
    }
    result["summary"] = {k: result[k] for k in ("last_answered_s", "last_applied_s", "applied", "events_per_s_by_tenth",
                                                "last_to_first_tenth", "receiver_latency_ms", "receiver_latency_max_ms")}
    result["summary"]["cpu_us_per_event"] = cpu["us_per_event"]
    result["summary"]["aims"] = {"last_applied_s": 300, "last_to_first_tenth": 0.8, "receiver_latency_max_ms": 5000}
    lat = result["receiver_latency_ms"]
    log("burst table:\n"
        f"| {accounts:,} accounts, {len(sent):,} sent ({n:,} bodies + {len(sent) - n:,} again) | figure | aim |\n"
        "|---|---|---|\n"
        f"| last answered (from the first send) | {result['last_answered_s']} s | |\n"
        f"| last applied (from the first send) | {result['last_applied_s']} s | ≤ 300 s |\n"
        f"| worker events/s, first tenth → last tenth | {deciles[0]} → {deciles[9]} ({result['last_to_first_tenth']}×) | ≥ 0.8× |\n"
        f"| worker events/s by tenth | {deciles} | |\n"
        f"| receiver p50 / p99 / max | {lat.get('50')} / {lat.get('99')} / {result['receiver_latency_max_ms']} ms | max ≤ 5,000 ms |\n"
        f"| answers | {counts} | |\n"
        f"| CPU µs/event (serve, postgres, load, other); idle | {cpu['us_per_event']}; {cpu['idle_pct']}% | |\n"
        f"| load average (1, 5, 15 min) at the start / the end | {load_start} / {result['load_average']['end']} | |")
    return result
