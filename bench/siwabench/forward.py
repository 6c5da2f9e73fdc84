"""Mode forward: forwarding on, to a loopback receiver (bench/sink.c): deliveries/s of a backlog,
and POST -> delivered at a fixed rate."""
import base64
import json
import os
import re
import signal
import subprocess
import time
from .backlog import WORKER_TABLES, analyze_tables, insert_backlog, reset_statement_stats, waiting_events_sql
from .cpu import perf_finish, perf_start
from .harness import HERE, Server, TMP, env_int, free_port, log, migrate, pct, presign, psql, psql_script, read_bodies
from .load import fixed_rate, summarize_fixed_rate


def forward():
    """1. BENCH_FORWARD_EVENTS pending events preloaded as in *worker*; `work` with forwarding on
    applies and forwards them to bench/sink.c (C, epoll, 204 keep-alive); time from launch until
    every forward is delivered, CPU per delivery of siwa-notify and PostgreSQL. 2. `serve` with
    forwarding on, BENCH_FORWARD_RATE POSTs/s for BENCH_FORWARD_SECONDS (the fixed-rate client of
    *latency*): delivered_at - events.received_at, p50/p99."""
    m = env_int("BENCH_FORWARD_EVENTS", 30000)
    rate = env_int("BENCH_FORWARD_RATE", 1000)
    seconds = env_int("BENCH_FORWARD_SECONDS", 10)
    threads = env_int("BENCH_LATENCY_HTTP_THREADS", 4)
    timeout = env_int("BENCH_WORKER_MAX_SECONDS", 300)
    tick = os.sysconf("SC_CLK_TCK")

    def cpu_of(pid, children=False):
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return sum(int(x) for x in fields[11:15 if children else 13]) / tick

    def postgres_cpu():
        """PostgreSQL's CPU seconds: the postmaster with its reaped children, plus live children."""
        with open(os.path.join(TMP, "data", "postmaster.pid")) as f:
            master = int(f.readline())
        total = cpu_of(master, children=True)
        for pid in os.listdir("/proc"):
            if pid.isdigit():
                try:
                    with open(f"/proc/{pid}/stat") as f:
                        if int(f.read().rsplit(")", 1)[1].split()[1]) == master:
                            total += cpu_of(pid)
                except (OSError, ValueError, IndexError):
                    pass
        return total

    def anything_left():
        """Events waiting or forwards undelivered? Through the partial indexes (no table scan)."""
        return psql(f"SET enable_seqscan = off; SELECT {waiting_events_sql()} "
                    "OR EXISTS (SELECT FROM siwa.forwards WHERE status IN ('pending', 'failed'))").splitlines()[-1] == "t"

    # The receiver: compiled once, measured alone (keep-alive and a connection per request).
    sink_bin = os.path.join(TMP, "sink")
    subprocess.run([os.environ.get("CC", "cc"), "-O2", "-o", sink_bin, os.path.join(HERE, "sink.c")], check=True)

    class Sink:
        def __init__(self):
            self.port, self.stats_path = free_port(), os.path.join(TMP, f"sink-{time.time_ns()}.json")
            self.proc = subprocess.Popen([sink_bin, str(self.port), self.stats_path], stdout=subprocess.PIPE, text=True)
            assert self.proc.stdout.readline().strip() == "ready"

        def cpu(self):
            return cpu_of(self.proc.pid)

        def stop(self):
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=10)
            with open(self.stats_path) as f:
                return json.load(f)

    alone = {}
    for label, extra in (("keep_alive", []), ("connection_close", ["-H", "Connection: close"])):
        sink = Sink()
        cpu0 = sink.cpu()
        out = subprocess.run(["wrk", "-t1", "-c8", "-d3s", *extra, f"http://127.0.0.1:{sink.port}/"],
                             capture_output=True, text=True).stdout
        cpu1 = sink.cpu()
        stats = sink.stop()
        alone[label] = {"requests_per_s": float(re.search(r"Requests/sec:\s+([0-9.]+)", out).group(1)),
                        "sink_cpu_us_per_request": round((cpu1 - cpu0) * 1e6 / max(1, stats["requests"]), 1),
                        "connections": stats["connections"]}
    log(f"forward: receiver alone (wrk -t1 -c8, 3 s): {alone}")

    secret = os.path.join(TMP, "forward-secrets")
    with open(secret, "w") as f:
        f.write("whsec_" + base64.b64encode(os.urandom(32)).decode() + "\n")
    result = {"receiver_alone": alone, "events": m}
    migrate()
    os.environ["SIWA_FORWARD_SECRET_FILE"] = secret
    try:
        # 1. Backlog: applied and forwarded.
        psql(f"TRUNCATE {WORKER_TABLES}, siwa.forwards")
        log(f"forward: preloading {m} pending events (4 types round robin), one live session per sub")
        insert_backlog(m, prefix="bench.forward.")
        psql_script(analyze_tables() + "CHECKPOINT;")
        sink = Sink()
        os.environ["SIWA_FORWARD_URL"] = f"http://127.0.0.1:{sink.port}/hooks/siwa"
        server = Server("work", 1)
        statements_on = reset_statement_stats()  # BENCH_PG_OPTIONS="-c shared_preload_libraries=pg_stat_statements"
        pg0, sink0 = postgres_cpu(), sink.cpu()
        started_wall, started = time.time(), time.perf_counter()
        server.launch()
        perf = perf_start(8)  # BENCH_PERF=1: the whole machine for 8 s of the backlog
        try:
            while time.perf_counter() - started < timeout:
                if server.proc.poll() is not None:
                    raise RuntimeError(f"work exited with {server.proc.returncode}: {server.tail()}")
                if not anything_left():
                    break
                time.sleep(0.25)
            elapsed = time.perf_counter() - started
            work_cpu, pg_cpu, sink_cpu = server.cpu_seconds(), postgres_cpu() - pg0, sink.cpu() - sink0
            warnings = server.warnings()
            report = perf_finish(perf)
        finally:
            server.stop()
            received = sink.stop()
        row = psql("SELECT count(*) FILTER (WHERE status = 'delivered'), count(*), count(*) FILTER (WHERE attempts > 1), "
                   "extract(epoch FROM min(delivered_at)), extract(epoch FROM max(delivered_at)), "
                   "percentile_cont(0.5) WITHIN GROUP (ORDER BY delivery_ms), "
                   "percentile_cont(0.99) WITHIN GROUP (ORDER BY delivery_ms) FROM siwa.forwards")
        delivered, forwards, retried, first_at, last_at, d50, d99 = row.split("|")
        delivered, forwards = int(delivered), int(forwards)
        applied_at = float(psql("SELECT extract(epoch FROM max(processed_at)) FROM siwa.events"))
        to_last = float(last_at) - started_wall
        backlog = {
            "events": m, "forwards": forwards, "delivered": delivered, "resent": int(retried),
            "outcomes": psql("SELECT status || ':' || coalesce(outcome, '-') || ':' || count(*) FROM siwa.events "
                             "GROUP BY status, outcome ORDER BY 1").splitlines(),
            "seconds_to_last_delivered": round(to_last, 3), "seconds_polled": round(elapsed, 3),
            "seconds_to_last_applied": round(applied_at - started_wall, 3),
            "deliveries_per_s": round(delivered / to_last, 1),
            "deliveries_per_s_delivered_span": round(delivered / (float(last_at) - float(first_at)), 1)
            if delivered > 1 else None,
            "delivery_ms_p50": float(d50), "delivery_ms_p99": float(d99),
            # CPU over the whole run (launch to the poll that saw nothing left), per delivery.
            "cpu_us_per_delivery": {"siwa_notify": round(work_cpu * 1e6 / max(1, delivered), 1),
                                    "postgres": round(pg_cpu * 1e6 / max(1, delivered), 1),
                                    "receiver": round(sink_cpu * 1e6 / max(1, delivered), 1)},
            "receiver": received, "server_warnings": warnings, "perf_report": report,
            "statements": psql("SELECT round(total_exec_time::numeric / calls, 3) || ' ms x ' || calls || ' = ' "
                               "|| round(total_exec_time::numeric) || ' ms: ' || left(regexp_replace(query, '\\s+', ' ', 'g'), 90) "
                               "FROM pg_stat_statements WHERE query NOT LIKE '%pg_stat%' ORDER BY total_exec_time DESC "
                               "LIMIT 8").splitlines() if statements_on else None,
        }
        for line in backlog["statements"] or []:
            log(f"  {line}")
        backlog["verify"] = {"all_delivered": delivered == forwards > 0,
                             "receiver_saw_each": received["distinct_ids"] == delivered}
        result["backlog"] = backlog
        log(f"forward: {delivered}/{forwards} forwards of {m} events delivered in {to_last:.2f} s from launch -> "
            f"{backlog['deliveries_per_s']:.0f} deliveries/s (delivered_at span: "
            f"{backlog['deliveries_per_s_delivered_span']}/s; all applied after {backlog['seconds_to_last_applied']} s); "
            f"CPU µs/delivery {backlog['cpu_us_per_delivery']}; receiver {received}")

        # 2. POST -> delivered at a fixed rate against `serve`.
        bodies = read_bodies(presign("forward", rate * seconds))
        psql(f"TRUNCATE {WORKER_TABLES}, siwa.forwards")
        psql("CHECKPOINT")
        sink = Sink()
        os.environ["SIWA_FORWARD_URL"] = f"http://127.0.0.1:{sink.port}/hooks/siwa"
        log(f"forward: {len(bodies)} consent-revoked at {rate}/s to serve (SIWA_HTTP_THREADS={threads}), forwarding on")
        try:
            with Server("serve", threads) as server:
                posts = fixed_rate(server.port, bodies, rate, 64)
                deadline = time.time() + 60
                while time.time() < deadline:
                    if not anything_left():
                        break
                    time.sleep(0.1)
                warnings = server.warnings()
        finally:
            received = sink.stop()
        rows = psql("SELECT extract(epoch FROM f.delivered_at - e.received_at), "
                    "extract(epoch FROM pg_xact_commit_timestamp(f.xmin) - e.received_at), f.delivery_ms "
                    "FROM siwa.forwards f JOIN siwa.events e ON f.id = 'msg_' || e.id WHERE f.status = 'delivered'")
        to_at, to_commit, attempt = [], [], []
        for line in rows.splitlines():
            a, c, d = line.split("|")
            to_at.append(float(a) * 1000)
            if c:
                to_commit.append(float(c) * 1000)
            attempt.append(float(d))
        post = summarize_fixed_rate(posts, rate)
        lat = {
            "rate": rate, "seconds": seconds, "http_threads": threads, "post": post,
            "forwards": int(psql("SELECT count(*) FROM siwa.forwards")), "delivered": len(to_at),
            "received_to_delivered_at_ms": {p: round(pct(to_at, float(p)), 1) for p in ("50", "90", "99", "99.9")},
            "received_to_delivered_commit_ms": {p: round(pct(to_commit, float(p)), 1) for p in ("50", "90", "99", "99.9")}
            if to_commit else None,
            "received_to_delivered_max_ms": round(max(to_at), 1) if to_at else None,
            "post_attempt_to_commit_ms": {p: round(pct(attempt, float(p)), 1) for p in ("50", "99")} if attempt else None,
            "receiver": received, "server_warnings": warnings,
        }
        result["latency"] = lat
        log(f"forward: received -> delivered p50 {lat['received_to_delivered_at_ms']['50']} ms, p99 "
            f"{lat['received_to_delivered_at_ms']['99']} ms (to the commit: {lat['received_to_delivered_commit_ms']}); "
            f"{len(to_at)} delivered of {post['counts']} POSTs at {post['achieved_rate']}/s")
    finally:
        os.environ.pop("SIWA_FORWARD_URL", None)
        os.environ.pop("SIWA_FORWARD_SECRET_FILE", None)
    b, lat = result["backlog"], result["latency"]
    result["summary"] = {"deliveries_per_s": b["deliveries_per_s"], "cpu_us_per_delivery": b["cpu_us_per_delivery"],
                         "received_to_delivered_ms": lat["received_to_delivered_at_ms"],
                         "aims": {"deliveries_per_s": 5000, "p99_ms": 100}}
    return result
