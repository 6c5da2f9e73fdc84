#!/usr/bin/env python3
"""siwa-notify benchmark modes (driven by bench/run, which builds and starts PostgreSQL).

    bench.py throughput|latency|worker|lag|all

Environment (set by bench/run): BENCH_SOCKDIR (PostgreSQL unix socket dir), BENCH_TMP (scratch),
BENCH_BIN (release binary), BENCH_PGBIN (PostgreSQL bin dir). Tunables: see bench/README.md.
All traffic goes to 127.0.0.1; every run is bounded in count and in time.
"""
import asyncio
import base64
import datetime
import json
import os
import platform
import re
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CACHE = os.path.join(HERE, ".cache")
RESULTS = os.path.join(HERE, "results")
SOCKDIR = os.environ["BENCH_SOCKDIR"]
TMP = os.environ["BENCH_TMP"]
BIN = os.environ.get("BENCH_BIN", os.path.join(ROOT, ".build", "release", "siwa-notify"))
PGBIN = os.environ["BENCH_PGBIN"]
CONNINFO = f"host={SOCKDIR} port=5432 user=postgres dbname=postgres"
AUDIENCE = "com.example.bench"
PATH = "/apple/notifications"


def env_int(name, default):
    return int(os.environ.get(name, default))


def env_float(name, default):
    return float(os.environ.get(name, default))


def log(msg):
    print(f"bench: {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# PostgreSQL helpers (psql over the unix socket; no driver needed)

def psql(sql, stdin=None):
    out = subprocess.run([os.path.join(PGBIN, "psql"), "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1",
                          "-h", SOCKDIR, "-p", "5432", "-U", "postgres", "-d", "postgres", "-c", sql],
                         input=stdin, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"psql failed: {out.stderr.strip()}\nSQL: {sql[:300]}")
    return out.stdout.strip()


def psql_script(sql):
    out = subprocess.run([os.path.join(PGBIN, "psql"), "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1",
                          "-h", SOCKDIR, "-p", "5432", "-U", "postgres", "-d", "postgres"],
                         input=sql, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"psql failed: {out.stderr.strip()}")
    return out.stdout.strip()


def event_count():
    return int(psql("SELECT count(*) FROM siwa.events"))


def migrate():
    env = server_env(free_port(), free_port(), 1)
    out = subprocess.run([BIN, "migrate"], env=env, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"migrate failed: {out.stderr.strip()}")


def durability_settings():
    rows = psql("SELECT name || '=' || setting FROM pg_settings WHERE name IN "
                "('fsync','synchronous_commit','full_page_writes','wal_sync_method','shared_buffers',"
                "'max_wal_size','track_commit_timestamp','commit_delay') ORDER BY name")
    settings = dict(line.split("=", 1) for line in rows.splitlines())
    assert settings["fsync"] == "on" and settings["synchronous_commit"] == "on", \
        f"durability must stay on: {settings}"
    settings["version"] = psql("SHOW server_version")
    return settings


# ---------------------------------------------------------------------------------------------
# The server under test

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_env(port, admin_port, threads):
    env = dict(os.environ)
    env.update({
        "SIWA_DATABASE_URL": CONNINFO,
        "SIWA_AUDIENCES": AUDIENCE,
        "SIWA_JWKS_URL": "file://" + os.path.join(CACHE, "jwks.json"),
        "SIWA_LISTEN": f"127.0.0.1:{port}",
        "SIWA_ADMIN_LISTEN": f"127.0.0.1:{admin_port}",
        "SIWA_LOG_LEVEL": os.environ.get("BENCH_LOG_LEVEL", "warning"),
        "SIWA_HTTP_THREADS": str(threads),
    })
    return env


class Server:
    def __init__(self, role, threads):
        self.role, self.threads = role, threads
        self.port, self.admin_port = free_port(), free_port()
        self.log_path = os.path.join(TMP, f"server-{role}-{threads}-{int(time.time() * 1000)}.log")
        self.proc = None

    def __enter__(self):
        self.log_file = open(self.log_path, "w")
        self.proc = subprocess.Popen([BIN, self.role], env=server_env(self.port, self.admin_port, self.threads),
                                     stdout=self.log_file, stderr=subprocess.STDOUT)
        deadline = time.time() + 60
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.role} exited with {self.proc.returncode}: {self.tail()}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.admin_port}/readyz", timeout=1) as r:
                    if r.status == 200:
                        return self
            except OSError:
                pass
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"{self.role} not ready after 60 s: {self.tail()}")

    def __exit__(self, *exc):
        self.stop()

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if getattr(self, "log_file", None):
            self.log_file.close()

    def tail(self):
        try:
            with open(self.log_path) as f:
                return f.read()[-2000:]
        except OSError:
            return ""

    def memory(self):
        """VmRSS and VmHWM in kB."""
        out = {}
        try:
            with open(f"/proc/{self.proc.pid}/status") as f:
                for line in f:
                    if line.startswith(("VmRSS:", "VmHWM:")):
                        out[line.split(":")[0]] = int(line.split()[1])
        except OSError:
            pass
        return out

    def warnings(self):
        text = self.tail()
        return [l for l in text.splitlines() if '"level":"error"' in l or '"level":"warning"' in l][-5:]


class RSSSampler(threading.Thread):
    """Samples the server's /proc/<pid>/status every 100 ms."""

    def __init__(self, server):
        super().__init__(daemon=True)
        self.server, self.samples, self.stopping = server, [], threading.Event()

    def run(self):
        while not self.stopping.is_set():
            m = self.server.memory()
            if "VmRSS" in m:
                self.samples.append(m["VmRSS"])
            self.stopping.wait(0.1)

    def finish(self):
        self.stopping.set()
        self.join()
        hwm = self.server.memory().get("VmHWM", 0)
        return {"rss_peak_sampled_mb": round(max(self.samples, default=0) / 1024, 1),
                "rss_median_sampled_mb": round(statistics.median(self.samples) / 1024, 1) if self.samples else 0,
                "vm_hwm_mb": round(hwm / 1024, 1)}


# ---------------------------------------------------------------------------------------------
# Bodies

def presign(kind, count):
    out = subprocess.run([sys.executable, os.path.join(HERE, "presign.py"), "sign", CACHE, kind, str(count)],
                         stdout=subprocess.PIPE, text=True, check=True)
    return out.stdout.strip().splitlines()[-1]


def read_bodies(path):
    with open(path) as f:
        return [line.rstrip("\n") for line in f if line.strip()]


def sub_of(body):
    token = json.loads(body)["payload"]
    claims = token.split(".")[1]
    claims = json.loads(base64.urlsafe_b64decode(claims + "=" * (-len(claims) % 4)))
    return json.loads(claims["events"])["sub"]


def pct(values, p):
    if not values:
        return None
    values = sorted(values)
    k = min(len(values) - 1, max(0, int(round(p / 100 * len(values) + 0.5)) - 1))
    return values[k]


# ---------------------------------------------------------------------------------------------
# pgbench baseline

def pgbench_baseline():
    psql("CREATE TABLE IF NOT EXISTS public.bench_baseline ("
         " id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,"
         " k text NOT NULL UNIQUE, v jsonb NOT NULL, at timestamptz NOT NULL DEFAULT now())")
    script = os.path.join(TMP, "baseline.sql")
    with open(script, "w") as f:
        f.write("\\set k random(1, 9000000000000000)\n"
                "INSERT INTO bench_baseline (k, v) VALUES (:k, '{\"type\":\"consent-revoked\"}') ON CONFLICT DO NOTHING;\n")
    clients, seconds = env_int("BENCH_PGBENCH_CLIENTS", 16), env_int("BENCH_PGBENCH_SECONDS", 10)
    cmd = [os.environ.get("BENCH_PGBENCH") or os.path.join(PGBIN, "pgbench"), "-h", SOCKDIR, "-p", "5432", "-U", "postgres", "-n",
           "-c", str(clients), "-j", "2", "-T", str(seconds), "-M", "prepared", "-f", script, "postgres"]
    log(f"pgbench baseline: {clients} clients, {seconds} s, one INSERT ... ON CONFLICT DO NOTHING per transaction")
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 60)
    if out.returncode != 0:
        raise RuntimeError(f"pgbench failed: {out.stderr}")
    m = re.search(r"tps = ([0-9.]+) \(without initial connection time\)", out.stdout)
    lat = re.search(r"latency average = ([0-9.]+) ms", out.stdout)
    tps = float(m.group(1))
    log(f"pgbench baseline: {tps:.0f} tps")
    return {"tps": round(tps, 1), "latency_avg_ms": float(lat.group(1)) if lat else None,
            "clients": clients, "seconds": seconds, "command": " ".join(cmd)}


# ---------------------------------------------------------------------------------------------
# perf (optional)

def perf_start(seconds):
    if os.environ.get("BENCH_PERF", "0") != "1":
        return None
    perf = subprocess.run(["which", "perf"], capture_output=True, text=True).stdout.strip()
    if not perf:
        log("perf not installed: no profile")
        return None
    data = os.path.join(RESULTS, f"perf-{time.strftime('%Y%m%dT%H%M%S')}.data")
    return data, subprocess.Popen([perf, "record", "-q", "-F", "499", "-g", "-a", "-o", data, "--", "sleep", str(seconds)],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def perf_finish(handle):
    if not handle:
        return None
    data, proc = handle
    proc.wait()
    report = data.replace(".data", ".txt")
    demangle = "swift demangle --simplified" if subprocess.run(["which", "swift"], capture_output=True).returncode == 0 else "cat"
    cmd = (f"perf report -i {data} --no-children --percent-limit 0.3 --sort comm,dso,symbol --stdio -g none 2>/dev/null "
           f"| {demangle} > {report}; "
           f"perf report -i {data} --no-children --sort comm --stdio -g none 2>/dev/null | grep -v '^#' | grep -v '^$' > {report}.comm")
    subprocess.run(["bash", "-c", cmd])
    os.remove(data)
    log(f"perf profile: {report}")
    return report


# ---------------------------------------------------------------------------------------------
# Mode: throughput (wrk against `receive`)

def run_wrk(server, bodies_path, nbodies, seconds, threads, connections):
    done_dir = os.path.join(TMP, f"wrk-done-{time.time_ns()}")
    os.makedirs(done_dir)
    env = dict(os.environ, BENCH_BODIES=bodies_path, BENCH_WRK_THREADS=str(threads), BENCH_PATH=PATH,
               BENCH_DONE_DIR=done_dir)
    cmd = ["wrk", "-t", str(threads), "-c", str(connections), "-d", f"{seconds}s", "--timeout", "30s", "--latency",
           "-s", os.path.join(HERE, "post.lua"), f"http://127.0.0.1:{server.port}{PATH}"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + seconds + 30
    rows, still_since = None, None
    while proc.poll() is None and time.time() < deadline:
        markers = os.listdir(done_dir)
        if sum(m.startswith("thread-") for m in markers) >= threads:
            proc.send_signal(signal.SIGINT)  # every slice answered: let wrk report now
            break
        if sum(m.startswith("sent-") for m in markers) >= threads:
            # All sent; answers lost to connection errors never arrive: stop once nothing moves.
            now_rows = event_count()
            if now_rows != rows:
                rows, still_since = now_rows, time.time()
            elif time.time() - still_since > 3:
                log("wrk: every body sent, some never answered (socket errors); stopping wrk")
                proc.send_signal(signal.SIGINT)
                break
            time.sleep(0.25)
        time.sleep(0.05)
    try:
        stdout, stderr = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        stdout, stderr = proc.communicate()
    line = next((l for l in stdout.splitlines() if l.startswith("BENCH_JSON ")), None)
    if line is None:
        raise RuntimeError(f"wrk gave no result: {stdout}\n{stderr}")
    result = json.loads(line[len("BENCH_JSON "):])
    result["wrk_text"] = "\n".join(l for l in stdout.splitlines() if not l.startswith("BENCH_JSON "))
    return result


def throughput():
    n = env_int("BENCH_N", 100000)
    seconds = env_int("BENCH_MAX_SECONDS", 120)
    wrk_threads = env_int("BENCH_WRK_THREADS", 2)
    connections = env_int("BENCH_CONNECTIONS", 64)
    sweep = [int(x) for x in os.environ.get("BENCH_HTTP_THREADS", "4").replace(",", " ").split()]
    if n // wrk_threads < connections:
        raise SystemExit("BENCH_N / BENCH_WRK_THREADS must be at least BENCH_CONNECTIONS")
    bodies = presign("throughput", n)
    migrate()
    baseline = pgbench_baseline()
    runs = []
    for http_threads in sweep:
        psql("TRUNCATE siwa.events")
        psql("CHECKPOINT")
        before = event_count()
        log(f"throughput: {n} bodies, wrk -t{wrk_threads} -c{connections}, SIWA_HTTP_THREADS={http_threads}, receive")
        with Server("receive", http_threads) as server:
            sampler = RSSSampler(server)
            sampler.start()
            profile = perf_start(min(10, seconds)) if http_threads == sweep[0] else None
            w = run_wrk(server, bodies, n, seconds, wrk_threads, connections)
            memory = sampler.finish()
            report = perf_finish(profile)
            warnings = server.warnings()
        after = event_count()
        counts = w["counts"]
        accepted = counts.get("accepted", 0)
        non2xx = sum(v for k, v in counts.items() if k not in ("accepted", "duplicate", "ok_other"))
        elapsed = max(1e-9, w["last_recv"] - w["first_send"])
        pcts = w["latency_us"]["percentiles"]
        run = {
            "http_threads": http_threads,
            "bodies": n, "sent": w["sent"], "answered": w["received"], "counts": counts,
            "non_2xx": non2xx, "socket_errors": w["errors"],
            "seconds": round(elapsed, 3),
            "events_per_s": round(accepted / elapsed, 1),
            "ratio_to_pgbench": round(accepted / elapsed / baseline["tps"], 3),
            "latency_ms": {k: round(v / 1000, 3) for k, v in pcts.items()},
            "latency_mean_ms": round(w["latency_us"]["mean"] / 1000, 3),
            "latency_max_ms": round(w["latency_us"]["max"] / 1000, 3),
            "memory": memory,
            # ok: every answered "accepted" is stored, and any extra row belongs to a request whose
            # answer wrk did not record (in flight when wrk was stopped) — never a row from nowhere.
            "verify": {"accepted_answers": accepted, "rows_before": before, "rows_after": after,
                       "rows_added": after - before,
                       "unrecorded_answers": max(0, w["sent"] - w["received"]),
                       "ok": accepted <= after - before <= accepted + max(0, w["sent"] - w["received"]),
                       "every_accepted_stored": after - before >= accepted},
            "server_warnings": warnings,
            "perf_report": report,
            "wrk_output": w["wrk_text"],
        }
        runs.append(run)
        log(f"throughput: {run['events_per_s']:.0f} events/s verified={run['verify']['ok']} "
            f"({accepted} accepted, {after - before} rows), p50 {run['latency_ms']['50']} ms, "
            f"p99 {run['latency_ms']['99']} ms, non-2xx {non2xx}, {run['ratio_to_pgbench']}x pgbench, "
            f"RSS peak {memory['rss_peak_sampled_mb']} MB")
    best = max(runs, key=lambda r: r["events_per_s"] if r["verify"]["ok"] else -1)
    return {"baseline_pgbench": baseline, "runs": runs,
            "summary": {"events_per_s": best["events_per_s"], "http_threads": best["http_threads"],
                        "p50_ms": best["latency_ms"]["50"], "p99_ms": best["latency_ms"]["99"],
                        "non_2xx": best["non_2xx"], "pgbench_tps": baseline["tps"],
                        "ratio_to_pgbench": best["ratio_to_pgbench"],
                        "rss_peak_mb": best["memory"]["rss_peak_sampled_mb"],
                        "verified": all(r["verify"]["ok"] for r in runs),
                        "aims": {"events_per_s": 20000, "ratio_to_pgbench": 1.1, "rss_mb": 40}}}


# ---------------------------------------------------------------------------------------------
# Fixed-rate client (open loop) for the latency and lag modes

def build_request(port, body):
    data = body.encode()
    return (f"POST {PATH} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\n\r\n").encode() + data


async def _fixed_rate(port, requests, rate, connections):
    n = len(requests)
    results = [None] * n
    state = {"next": 0}
    start = time.perf_counter() + 0.3

    async def worker():
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            while state["next"] < n:
                i = state["next"]
                state["next"] += 1
                scheduled = start + i / rate
                wait = scheduled - time.perf_counter()
                if wait > 0:
                    await asyncio.sleep(wait)
                sent_wall = time.time()
                sent = time.perf_counter()
                writer.write(requests[i])
                try:
                    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
                    status = int(head[9:12])
                    m = re.search(rb"(?i)\r\ncontent-length:\s*(\d+)", head)
                    body = await asyncio.wait_for(reader.readexactly(int(m.group(1))), 30) if m else b""
                except (asyncio.IncompleteReadError, asyncio.TimeoutError, ConnectionError) as error:
                    writer.close()
                    results[i] = (scheduled, sent, time.perf_counter(), 0, repr(error).encode(), sent_wall)
                    reader, writer = await asyncio.open_connection("127.0.0.1", port)
                    continue
                results[i] = (scheduled, sent, time.perf_counter(), status, body, sent_wall)
        finally:
            writer.close()

    await asyncio.gather(*(worker() for _ in range(connections)))
    return results


def fixed_rate(port, bodies, rate, connections):
    requests = [build_request(port, b) for b in bodies]
    return asyncio.run(_fixed_rate(port, requests, rate, connections))


def summarize_fixed_rate(results, rate):
    done = [r for r in results if r is not None]
    service = [(r[2] - r[1]) * 1000 for r in done]
    corrected = [(r[2] - r[0]) * 1000 for r in done]
    late = [(r[1] - r[0]) * 1000 for r in done]
    statuses = {}
    for r in done:
        key = str(r[3])
        if r[3] == 200:
            key = "accepted" if b'"accepted"' in r[4] else "duplicate" if b'"duplicate"' in r[4] else "ok_other"
        statuses[key] = statuses.get(key, 0) + 1
    elapsed = max(r[2] for r in done) - min(r[1] for r in done)
    return {
        "target_rate": rate, "requests": len(done), "achieved_rate": round(len(done) / elapsed, 1),
        "counts": statuses, "non_2xx": sum(v for k, v in statuses.items() if k not in ("accepted", "duplicate", "ok_other")),
        "latency_ms": {p: round(pct(service, float(p)), 3) for p in ("50", "90", "99", "99.9")},
        "latency_max_ms": round(max(service), 3),
        "latency_from_schedule_ms": {p: round(pct(corrected, float(p)), 3) for p in ("50", "99", "99.9")},
        "send_late_p99_ms": round(pct(late, 99), 3),
    }


# ---------------------------------------------------------------------------------------------
# Mode: latency (fixed rate against `serve`)

def latency():
    rate = env_int("BENCH_LATENCY_RATE", 2000)
    seconds = env_int("BENCH_LATENCY_SECONDS", 10)
    connections = env_int("BENCH_LATENCY_CONNECTIONS", 64)
    threads = env_int("BENCH_LATENCY_HTTP_THREADS", 4)
    role = os.environ.get("BENCH_LATENCY_ROLE", "serve")
    bodies = read_bodies(presign("latency", rate * seconds))
    migrate()
    psql("TRUNCATE siwa.events")
    psql("CHECKPOINT")
    before = event_count()
    log(f"latency: {len(bodies)} requests at {rate}/s over {connections} connections, {role}, SIWA_HTTP_THREADS={threads}")
    with Server(role, threads) as server:
        sampler = RSSSampler(server)
        sampler.start()
        results = fixed_rate(server.port, bodies, rate, connections)
        memory = sampler.finish()
        warnings = server.warnings()
    after = event_count()
    summary = summarize_fixed_rate(results, rate)
    accepted = summary["counts"].get("accepted", 0)
    summary.update({"role": role, "http_threads": threads, "connections": connections, "memory": memory,
                    "verify": {"accepted_answers": accepted, "rows_added": after - before, "ok": after - before == accepted,
                       "every_accepted_stored": after - before >= accepted},
                    "server_warnings": warnings, "aims": {"p99_ms": 5, "rate": 2000}})
    log(f"latency: p50 {summary['latency_ms']['50']} ms, p99 {summary['latency_ms']['99']} ms at "
        f"{summary['achieved_rate']}/s, non-2xx {summary['non_2xx']}, verified={summary['verify']['ok']}, "
        f"RSS peak {memory['rss_peak_sampled_mb']} MB")
    return summary


# ---------------------------------------------------------------------------------------------
# Mode: worker (preload M pending events, time `work`)

def worker():
    m = env_int("BENCH_WORKER_EVENTS", 200000)
    timeout = env_int("BENCH_WORKER_MAX_SECONDS", 300)
    migrate()
    psql("TRUNCATE siwa.events, siwa.accounts, siwa.sessions")
    log(f"worker: preloading {m} pending events (4 types round robin) and one live session per sub")
    psql_script(f"""
        INSERT INTO siwa.events (jti, aud, sub, type, event_time, email, is_private_email, status, claims)
        SELECT 'bench-worker-' || g, '{AUDIENCE}', 'bench.worker.' || g, t.type,
               now() - interval '1 hour' + g * interval '1 millisecond',
               CASE WHEN t.type LIKE 'email-%' THEN 'w' || g || '@privaterelay.appleid.com' END,
               CASE WHEN t.type LIKE 'email-%' THEN true END,
               'pending',
               jsonb_build_object('iss', 'https://appleid.apple.com', 'aud', '{AUDIENCE}', 'jti', 'bench-worker-' || g,
                                  'iat', extract(epoch FROM now())::bigint,
                                  'events', json_build_object('type', t.type, 'sub', 'bench.worker.' || g)::text)
        FROM generate_series(1, {m}) g
        CROSS JOIN LATERAL (SELECT (ARRAY['consent-revoked', 'email-disabled', 'account-delete', 'email-enabled'])[1 + g % 4] AS type) t;
        INSERT INTO siwa.sessions (apple_sub, created_at)
        SELECT 'bench.worker.' || g, now() - interval '2 hours' FROM generate_series(1, {m}) g;
        ANALYZE siwa.events; ANALYZE siwa.sessions; ANALYZE siwa.accounts;
        CHECKPOINT;
    """)
    pending = lambda: int(psql("SELECT count(*) FROM siwa.events WHERE status IN ('pending', 'failed')"))
    assert pending() == m
    started = time.perf_counter()
    with Server("work", 1) as server:
        ready = time.perf_counter() - started
        sampler = RSSSampler(server)
        sampler.start()
        left = m
        while time.perf_counter() - started < timeout:
            left = pending()
            if left == 0:
                break
            time.sleep(0.2)
        elapsed = time.perf_counter() - started
        memory = sampler.finish()
        warnings = server.warnings()
    stats = psql("SELECT status || ':' || coalesce(outcome, '-') || ':' || count(*) FROM siwa.events GROUP BY status, outcome ORDER BY 1")
    span = float(psql("SELECT extract(epoch FROM max(processed_at) - min(processed_at)) FROM siwa.events") or 0)
    revoked = int(psql("SELECT count(*) FROM siwa.sessions WHERE revoked_at IS NOT NULL"))
    done = m - left
    result = {"events": m, "applied": done, "left": left, "seconds_wall": round(elapsed, 3),
              "seconds_to_ready": round(ready, 3),
              "events_per_s": round(done / elapsed, 1),
              "events_per_s_in_table": round(done / span, 1) if span > 0 else None,
              "status_outcome_counts": stats.splitlines(), "sessions_revoked": revoked,
              "memory": memory, "server_warnings": warnings, "aims": {"events_per_s": 20000}}
    log(f"worker: {done}/{m} applied in {elapsed:.1f} s -> {result['events_per_s']:.0f} events/s "
        f"(processed_at span: {result['events_per_s_in_table']} events/s), sessions revoked {revoked}")
    return result


# ---------------------------------------------------------------------------------------------
# Mode: lag (POST consent-revoked at a fixed rate to `serve`, time until the session is revoked)

def lag():
    rate = env_int("BENCH_LAG_RATE", 1000)
    seconds = env_int("BENCH_LAG_SECONDS", 10)
    threads = env_int("BENCH_LATENCY_HTTP_THREADS", 4)
    bodies = read_bodies(presign("lag", rate * seconds))
    subs = [sub_of(b) for b in bodies]
    migrate()
    psql("TRUNCATE siwa.events, siwa.accounts, siwa.sessions")
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


# ---------------------------------------------------------------------------------------------

def machine():
    info = {"cpus": os.cpu_count(), "kernel": platform.release()}
    try:
        with open("/proc/cpuinfo") as f:
            info["cpu"] = next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name"))
        with open("/proc/meminfo") as f:
            info["mem_gb"] = round(int(f.readline().split()[1]) / 1024 / 1024, 1)
    except (OSError, StopIteration):
        pass
    return info


MODES = {"throughput": throughput, "latency": latency, "worker": worker, "lag": lag}


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else "throughput"
    modes = list(MODES) if mode == "all" else [mode]
    if any(m not in MODES for m in modes):
        raise SystemExit(f"usage: bench/run [{'|'.join(MODES)}|all]")
    subprocess.run([sys.executable, os.path.join(HERE, "presign.py"), "key", CACHE], check=True, stdout=subprocess.DEVNULL)
    os.makedirs(RESULTS, exist_ok=True)
    common = {"machine": machine(), "postgres": durability_settings(), "binary": BIN}
    stamp = time.strftime("%Y%m%dT%H%M%S")
    summary = {}
    for m in modes:
        started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        result = MODES[m]()
        doc = {"mode": m, "started_at": started, **common, "result": result}
        path = os.path.join(RESULTS, f"{m}-{stamp}.json")
        with open(path, "w") as f:
            json.dump(doc, f, indent=2)
        log(f"{m}: results in {os.path.relpath(path, ROOT)}")
        summary[m] = result.get("summary", {k: v for k, v in result.items()
                                            if k in ("events_per_s", "lag_ms", "latency_ms", "achieved_rate", "non_2xx")})
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
