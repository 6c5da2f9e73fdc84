#!/usr/bin/env python3
"""siwa-notify benchmark modes (driven by bench/run, which builds and starts PostgreSQL).

    bench.py throughput|latency|worker|lag|workers|scale|compare|burst|all

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
                "'max_wal_size','track_commit_timestamp','commit_delay','wal_compression','checkpoint_timeout','min_wal_size','wal_init_zero') ORDER BY name")
    settings_extra = os.environ.get("BENCH_PG_OPTIONS", "")
    settings = dict(line.split("=", 1) for line in rows.splitlines())
    assert settings["fsync"] == "on" and settings["synchronous_commit"] == "on", \
        f"durability must stay on: {settings}"
    settings["version"] = psql("SHOW server_version")
    if settings_extra:
        settings["bench_pg_options"] = settings_extra
    return settings


# ---------------------------------------------------------------------------------------------
# The server under test

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_env(port, admin_port, threads, app_name=None):
    env = dict(os.environ)
    env.update({
        # A conninfo's application_name overrides the one the binary sets (it is expanded last):
        # the workers mode tells its workers apart by it.
        "SIWA_DATABASE_URL": CONNINFO + (f" application_name={app_name}" if app_name else ""),
        "SIWA_AUDIENCES": AUDIENCE,
        "SIWA_JWKS_URL": "file://" + os.path.join(CACHE, "jwks.json"),
        "SIWA_LISTEN": f"127.0.0.1:{port}",
        "SIWA_ADMIN_LISTEN": f"127.0.0.1:{admin_port}",
        "SIWA_LOG_LEVEL": os.environ.get("BENCH_LOG_LEVEL", "warning"),
        "SIWA_HTTP_THREADS": str(threads),
    })
    if CLOCK_SHIFT:
        env.update({"LD_PRELOAD": FAKETIME_LIB, "FAKETIME": f"-{CLOCK_SHIFT}", "FAKETIME_DONT_FAKE_MONOTONIC": "1"})
    return env


class Server:
    def __init__(self, role, threads, app_name=None):
        self.role, self.threads, self.app_name = role, threads, app_name
        self.port, self.admin_port = free_port(), free_port()
        self.log_path = os.path.join(TMP, f"server-{role}-{threads}-{time.time_ns()}.log")
        self.proc = None

    def launch(self):
        """Starts the process without waiting (the workers mode starts several at once)."""
        self.log_file = open(self.log_path, "w")
        self.proc = subprocess.Popen([BIN, self.role], env=server_env(self.port, self.admin_port, self.threads, self.app_name),
                                     stdout=self.log_file, stderr=subprocess.STDOUT)
        return self

    def wait_ready(self, timeout=60):
        deadline = time.time() + timeout
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
        raise RuntimeError(f"{self.role} not ready after {timeout} s: {self.tail()}")

    def __enter__(self):
        return self.launch().wait_ready()

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

    def cpu_seconds(self):
        """User + system CPU seconds the process has used so far (/proc/<pid>/stat)."""
        try:
            with open(f"/proc/{self.proc.pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, IndexError, ValueError):
            return None

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
# CPU accounting (every ingest run): machine idle % and CPU per event of each process group

CLK_TCK = os.sysconf("SC_CLK_TCK")


def proc_cpu(pid, children=False):
    """User + system CPU seconds of `pid` (with `children`: plus its reaped children's)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        ticks = int(fields[11]) + int(fields[12])
        if children:
            ticks += int(fields[13]) + int(fields[14])
        return ticks / CLK_TCK
    except (OSError, IndexError, ValueError):
        return None


def postgres_cpu():
    """CPU seconds of this run's PostgreSQL: the postmaster (with its exited backends, which it
    reaped) plus every live child. Other clusters on the machine are not counted."""
    try:
        with open(os.path.join(TMP, "data", "postmaster.pid")) as f:
            master = int(f.readline())
    except (OSError, ValueError):
        return None
    total = proc_cpu(master, children=True) or 0.0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            if int(fields[1]) == master:
                total += (int(fields[11]) + int(fields[12])) / CLK_TCK
        except (OSError, IndexError, ValueError):
            continue
    return total


def machine_cpu():
    """(busy, idle) seconds of all CPUs so far (/proc/stat; iowait counts as idle, steal as busy)."""
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:]]
    idle = values[3] + values[4]
    return (sum(values[:8]) - idle) / CLK_TCK, idle / CLK_TCK


class CPUMeter:
    """CPU while a load runs: machine idle %, and µs per event of the server, this run's
    PostgreSQL, the load generator and everything else on the machine (other users' builds)."""

    def __init__(self, server):
        self.server = server
        self.start = self.snapshot(None)

    def snapshot(self, load_pid):
        busy, idle = machine_cpu()
        return {"busy": busy, "idle": idle, "server": self.server.cpu_seconds() if self.server else None,
                "postgres": postgres_cpu(), "load": proc_cpu(load_pid) if load_pid else None,
                "wall": time.perf_counter()}

    def finish(self, events, load_cpu_seconds=None, end=None):
        end = end or self.snapshot(None)
        a = self.start
        busy, idle = end["busy"] - a["busy"], end["idle"] - a["idle"]

        def per_event(seconds):
            return round(seconds * 1e6 / events, 1) if events and seconds is not None else None

        server = end["server"] - a["server"] if end["server"] is not None and a["server"] is not None else None
        pg = end["postgres"] - a["postgres"] if end["postgres"] is not None and a["postgres"] is not None else None
        other = busy - sum(x for x in (server, pg, load_cpu_seconds) if x is not None)
        return {"idle_pct": round(100 * idle / max(1e-9, busy + idle), 1),
                "seconds": round(end["wall"] - a["wall"], 2),
                "us_per_event": {"siwa-notify": per_event(server), "postgres": per_event(pg),
                                 "load_generator": per_event(load_cpu_seconds), "other": per_event(other)}}

    def line(self, cpu):
        u = cpu["us_per_event"]
        return (f"CPU idle {cpu['idle_pct']}%, µs/event: siwa-notify {u['siwa-notify']}, postgres {u['postgres']}, "
                f"load {u['load_generator']}, other {u['other']}")


# ---------------------------------------------------------------------------------------------
# Bodies

def presign(kind, count, once=False):
    """The path of `count` bodies of `kind`, signed now or taken from the cache. `once`: signed
    once and kept whatever their age (signing a million is slow: bench/README); the caller then
    runs the server at their time (`clock_shift`)."""
    out = subprocess.run([sys.executable, os.path.join(HERE, "presign.py"), "sign-once" if once else "sign", CACHE, kind,
                          str(count)], stdout=subprocess.PIPE, text=True, check=True)
    return out.stdout.strip().splitlines()[-1]


# Seconds the siwa-notify processes' clock runs behind (libfaketime), so that bodies signed long
# ago are still within their day of validity (iat ≤ now + 60 s, now < iat + 86,400): only the
# token checks read that clock; PostgreSQL and everything it stamps keep the real time.
CLOCK_SHIFT = 0
FAKETIME_LIB = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1"


def clock_shift(path, longest_run):
    """Sets CLOCK_SHIFT for the bodies at `path` when a run of `longest_run` seconds would reach
    their expiry; returns (signed at, shift)."""
    global CLOCK_SHIFT
    with open(path + ".json") as f:
        iat = json.load(f)["iat"]
    age = time.time() - iat
    if age + longest_run + 600 > 86400:
        if not os.path.exists(FAKETIME_LIB):
            raise SystemExit(f"bench: bodies signed {age / 3600:.1f} h ago need libfaketime ({FAKETIME_LIB}): apt-get install faketime")
        CLOCK_SHIFT = int(age) - 300  # the server's clock starts 5 minutes after the signing
        log(f"bench: bodies signed {age / 3600:.1f} h ago: siwa-notify runs {CLOCK_SHIFT} s behind (libfaketime)")
    return iat, CLOCK_SHIFT


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


class PerfStat:
    """BENCH_PERF_STAT=1: hardware counters (instructions, cycles) of the server and of this run's
    PostgreSQL (the postmaster and its children at the start) while the load runs, per row added
    to siwa.events meanwhile. Instructions per event stay put on a machine shared with other
    builds, where CPU time per event does not (bench/README, "receiver CPU")."""

    def __init__(self, server):
        self.procs = []
        perf = subprocess.run(["which", "perf"], capture_output=True, text=True).stdout.strip()
        if os.environ.get("BENCH_PERF_STAT", "0") != "1" or not perf:
            return
        with open(os.path.join(TMP, "data", "postmaster.pid")) as f:
            master = int(f.readline())
        pg = [master]
        for entry in os.listdir("/proc"):
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if entry.isdigit() and int(f.read().rsplit(")", 1)[1].split()[1]) == master:
                        pg.append(int(entry))
            except (OSError, IndexError, ValueError):
                continue
        self.rows = event_count()
        # One perf per process: a backend that exits meanwhile (a psql's) costs only its own count.
        for name, pids in (("siwa-notify", [server.proc.pid]), ("postgres", pg)):
            for pid in pids:
                out = os.path.join(TMP, f"perf-stat-{name}-{pid}-{time.time_ns()}.csv")
                proc = subprocess.Popen([perf, "stat", "-x", ",", "-e", "instructions,cycles", "-o", out, "-p", str(pid)],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                self.procs.append((name, proc, out))

    def finish(self):
        if not self.procs:
            return None
        rows = event_count() - self.rows
        result = {"events": rows}
        totals = {}
        for name, proc, out in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
            proc.wait()
            counts = totals.setdefault(name, {})
            try:
                with open(out) as f:
                    for line in f:
                        fields = line.strip().split(",")
                        if len(fields) > 2 and fields[0].isdigit():
                            event = fields[2].split(":")[0]
                            counts[event] = counts.get(event, 0) + int(fields[0])
            except OSError:
                continue
        for name, counts in totals.items():
            result[name] = {k + "_per_event": round(v / max(1, rows)) for k, v in counts.items()}
        log(f"perf stat over {rows} events: " + ", ".join(
            f"{n} {result[n].get('instructions_per_event')} instructions / {result[n].get('cycles_per_event')} cycles"
            for n in ("siwa-notify", "postgres")) + " per event")
        return result


# ---------------------------------------------------------------------------------------------
# Mode: throughput (wrk against `receive`)

def run_wrk(server, bodies_path, nbodies, seconds, threads, connections, rate=0, meter=None):
    done_dir = os.path.join(TMP, f"wrk-done-{time.time_ns()}")
    os.makedirs(done_dir)
    env = dict(os.environ, BENCH_BODIES=bodies_path, BENCH_WRK_THREADS=str(threads), BENCH_PATH=PATH,
               BENCH_DONE_DIR=done_dir, BENCH_RATE=str(rate))
    cmd = ["wrk", "-t", str(threads), "-c", str(connections), "-d", f"{seconds}s", "--timeout", "30s", "--latency",
           "-s", os.path.join(HERE, "post.lua"), f"http://127.0.0.1:{server.port}{PATH}"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + seconds + 30
    rows, still_since = None, None
    end = None
    counters, started = None, time.time()
    rows_at_start = event_count() if os.environ.get("BENCH_PERF_STAT", "0") == "1" else None
    while proc.poll() is None and time.time() < deadline:
        markers = os.listdir(done_dir)
        if counters is None and rows_at_start is not None and time.time() - started > 0.5 and event_count() > rows_at_start:
            counters = PerfStat(server)  # once rows commit: the writer's backend is there to count
        if sum(m.startswith("thread-") for m in markers) >= threads:
            end = meter.snapshot(proc.pid) if meter else None
            proc.send_signal(signal.SIGINT)  # every slice answered: let wrk report now
            break
        if sum(m.startswith("sent-") for m in markers) >= threads:
            # All sent; answers lost to connection errors never arrive: stop once nothing moves.
            now_rows = event_count()
            if now_rows != rows:
                rows, still_since = now_rows, time.time()
            elif time.time() - still_since > 3:
                log("wrk: every body sent, some never answered (socket errors); stopping wrk")
                end = meter.snapshot(proc.pid) if meter else None
                proc.send_signal(signal.SIGINT)
                break
            time.sleep(0.25)
        time.sleep(0.05)
    perf_stat = counters.finish() if counters else None
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
    result["cpu_end"] = end
    result["perf_stat"] = perf_stat
    return result


def ingest(role, kind, n, http_threads, baseline_tps=None, profile=False, wait_applied=False):
    """wrk with n pre-signed bodies (kind) against `role` (receive or serve), each body sent once;
    events/s = accepted answers / (last answer - first send), verified against the rows added."""
    seconds = env_int("BENCH_MAX_SECONDS", 120)
    wrk_threads = env_int("BENCH_WRK_THREADS", 2)
    connections = env_int("BENCH_CONNECTIONS", 64)
    if n // wrk_threads < connections:
        raise SystemExit("BENCH_N / BENCH_WRK_THREADS must be at least BENCH_CONNECTIONS")
    bodies = presign(kind, n)
    psql("CHECKPOINT")
    before = event_count()
    log(f"ingest: {n} bodies, wrk -t{wrk_threads} -c{connections}, SIWA_HTTP_THREADS={http_threads}, {role}")
    with Server(role, http_threads) as server:
        sampler = RSSSampler(server)
        sampler.start()
        perf = perf_start(min(10, seconds)) if profile else None
        cpu_before = server.cpu_seconds()
        meter = CPUMeter(server)
        w = run_wrk(server, bodies, n, seconds, wrk_threads, connections, meter=meter)
        cpu_after = server.cpu_seconds()
        memory = sampler.finish()
        report = perf_finish(perf)
        warnings = server.warnings()
        applied_after = None
        if wait_applied:  # serve: let its worker finish before the next step (bounded)
            t = time.perf_counter()
            while pending_count() > 0 and time.perf_counter() - t < env_int("BENCH_WORKER_MAX_SECONDS", 300):
                time.sleep(0.2)
            applied_after = round(time.perf_counter() - t, 2)
    after = event_count()
    counts = w["counts"]
    accepted = counts.get("accepted", 0)
    non2xx = sum(v for k, v in counts.items() if k not in ("accepted", "duplicate", "ok_other"))
    elapsed = max(1e-9, w["last_recv"] - w["first_send"])
    pcts = w["latency_us"]["percentiles"]
    end = w.get("cpu_end")
    cpu = meter.finish(accepted, end["load"] if end else None, end)
    run = {
        "role": role, "http_threads": http_threads,
        "bodies": n, "sent": w["sent"], "answered": w["received"], "counts": counts,
        "non_2xx": non2xx, "socket_errors": w["errors"],
        "seconds": round(elapsed, 3),
        "events_per_s": round(accepted / elapsed, 1),
        "ratio_to_pgbench": round(accepted / elapsed / baseline_tps, 3) if baseline_tps else None,
        "latency_ms": {k: round(v / 1000, 3) for k, v in pcts.items()},
        "latency_mean_ms": round(w["latency_us"]["mean"] / 1000, 3),
        "latency_max_ms": round(w["latency_us"]["max"] / 1000, 3),
        "memory": memory,
        # The server's user + system CPU per accepted event while wrk ran (serve: its worker too).
        "cpu_us_per_event": round((cpu_after - cpu_before) * 1e6 / accepted, 1)
        if accepted and cpu_before is not None and cpu_after is not None else None,
        # Machine idle % and CPU µs per accepted event of each process while wrk ran.
        "cpu": cpu,
        # ok: every answered "accepted" is stored, and any extra row belongs to a request whose
        # answer wrk did not record (in flight when wrk was stopped) — never a row from nowhere.
        "verify": {"accepted_answers": accepted, "rows_before": before, "rows_after": after,
                   "rows_added": after - before,
                   "unrecorded_answers": max(0, w["sent"] - w["received"]),
                   "ok": accepted <= after - before <= accepted + max(0, w["sent"] - w["received"]),
                   "every_accepted_stored": after - before >= accepted},
        "server_warnings": warnings,
        "worker_caught_up_after_s": applied_after,
        "perf_report": report,
        "perf_stat": w.get("perf_stat"),
        "wrk_output": w["wrk_text"],
    }
    log(f"ingest ({role}): {run['events_per_s']:.0f} events/s verified={run['verify']['ok']} "
        f"({accepted} accepted, {after - before} rows), p50 {run['latency_ms']['50']} ms, "
        f"p99 {run['latency_ms']['99']} ms, non-2xx {non2xx}"
        + (f", {run['ratio_to_pgbench']}x pgbench" if baseline_tps else "")
        + f", RSS peak {memory['rss_peak_sampled_mb']} MB, CPU {run['cpu_us_per_event']} µs/event")
    log(f"ingest ({role}): " + meter.line(cpu))
    return run


def throughput():
    n = env_int("BENCH_N", 100000)
    sweep = [int(x) for x in os.environ.get("BENCH_HTTP_THREADS", "4").replace(",", " ").split()]
    presign("throughput", n)
    migrate()
    baseline = pgbench_baseline()
    runs = []
    for http_threads in sweep:
        psql("TRUNCATE siwa.events")
        runs.append(ingest("receive", "throughput", n, http_threads, baseline["tps"], profile=http_threads == sweep[0]))
    best = max(runs, key=lambda r: r["events_per_s"] if r["verify"]["ok"] else -1)
    return {"baseline_pgbench": baseline, "runs": runs,
            "summary": {"events_per_s": best["events_per_s"], "http_threads": best["http_threads"],
                        "p50_ms": best["latency_ms"]["50"], "p99_ms": best["latency_ms"]["99"],
                        "non_2xx": best["non_2xx"], "pgbench_tps": baseline["tps"],
                        "ratio_to_pgbench": best["ratio_to_pgbench"],
                        "rss_peak_mb": best["memory"]["rss_peak_sampled_mb"],
                        "cpu_idle_pct": best["cpu"]["idle_pct"], "cpu_us_per_event": best["cpu"]["us_per_event"],
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
    # The same schedule from wrk (C, 2 threads, timed from each send): the Python client takes
    # about a core at 2,000/s on this 2-core machine, and its event loop adds its own delays.
    wrk_bodies = presign("latency-wrk", rate * seconds)
    psql("TRUNCATE siwa.events")  # the same start as the Python pass (its rows are counted already)
    psql("CHECKPOINT")
    wrk_before = event_count()
    statements_on = reset_statement_stats()
    with Server(role, threads) as server:
        w = run_wrk(server, wrk_bodies, rate * seconds, seconds + 30, 2, connections, rate=rate)
    # Per statement during the wrk pass (BENCH_PG_OPTIONS with pg_stat_statements): how many
    # transactions the worker ran beside the receiver's, and what each cost.
    statements = statement_stats(rate * seconds) if statements_on else None
    wrk_accepted = w["counts"].get("accepted", 0)
    wrk_elapsed = max(1e-9, w["last_recv"] - w["first_send"])
    summary["wrk"] = {"latency_ms": {k: round(v / 1000, 3) for k, v in w["latency_us"]["percentiles"].items()},
                      "achieved_rate": round(w["received"] / wrk_elapsed, 1), "counts": w["counts"],
                      "rows_added": event_count() - wrk_before, "accepted": wrk_accepted,
                      "unrecorded_answers": max(0, w["sent"] - w["received"]), "errors": w["errors"],
                      "late_sends": w.get("late", 0), "late_max_ms": w.get("late_max_ms", 0)}
    # As in ingest: every accepted answer stored; an extra row only for a request whose answer
    # wrk did not record (its known quirk), never a row from nowhere.
    wl = summary["wrk"]
    wl["ok"] = wl["accepted"] <= wl["rows_added"] <= wl["accepted"] + wl["unrecorded_answers"]
    wl["all_accepted"] = set(w["counts"]) <= {"accepted"} and not any(w["errors"].values())
    summary.update({"role": role, "http_threads": threads, "connections": connections, "memory": memory,
                    "statements": statements,
                    "verify": {"accepted_answers": accepted, "rows_added": after - before, "ok": after - before == accepted,
                       "every_accepted_stored": after - before >= accepted},
                    "server_warnings": warnings, "aims": {"p99_ms": 5, "rate": 2000}})
    log(f"latency: p50 {summary['latency_ms']['50']} ms, p99 {summary['latency_ms']['99']} ms at "
        f"{summary['achieved_rate']}/s, non-2xx {summary['non_2xx']}, verified={summary['verify']['ok']}, "
        f"RSS peak {memory['rss_peak_sampled_mb']} MB (Python client); wrk at the same rate: p50 "
        f"{summary['wrk']['latency_ms']['50']} ms, p99 {summary['wrk']['latency_ms']['99']} ms at "
        f"{summary['wrk']['achieved_rate']}/s, {wrk_accepted} accepted, {summary['wrk']['rows_added']} rows, "
        f"verified={summary['wrk']['ok']}, {summary['wrk']['late_sends']} sends late (max "
        f"{summary['wrk']['late_max_ms']} ms)")
    return summary


# ---------------------------------------------------------------------------------------------
# Workers: draining a pending backlog

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


# What the worker writes for the bench's events, emptied before each drain. Left over, the app
# accounts of the run before (same subs) made every new sub of the next run an import (app
# accounts without an account: inserted, decided again, updated): update_accounts took 2-3.5x
# as long per batch (bench/README "Results of session 14").
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


# ---------------------------------------------------------------------------------------------
# Mode: worker (preload M pending events, time `work`)

def worker():
    m = env_int("BENCH_WORKER_EVENTS", 200000)
    migrate()
    psql(f"TRUNCATE {WORKER_TABLES}")
    log(f"worker: preloading {m} pending events (4 types round robin) and one live session per sub")
    insert_backlog(m)
    psql_script(analyze_tables() + "CHECKPOINT;")
    assert pending_count() == m
    result = drain(1)
    stats = psql("SELECT status || ':' || coalesce(outcome, '-') || ':' || count(*) FROM siwa.events GROUP BY status, outcome ORDER BY 1")
    revoked = int(psql("SELECT count(*) FROM siwa.sessions WHERE revoked_at IS NOT NULL"))
    time.sleep(1)  # the statistics of the worker's last transactions reach pg_stat a moment later
    upd, hot = psql("SELECT n_tup_upd || ' ' || n_tup_hot_upd FROM pg_stat_user_tables "
                    "WHERE relid = 'siwa.events'::regclass").split()
    result.update({"events": m, "status_outcome_counts": stats.splitlines(), "sessions_revoked": revoked,
                   "events_updates": int(upd), "events_hot_updates": int(hot),
                   "aims": {"events_per_s": 20000}})
    log(f"worker: sessions revoked {revoked}; siwa.events updates {upd}, of which HOT {hot}")
    return result


# ---------------------------------------------------------------------------------------------
# Mode: workers (scale-out: 1, 2, 4 `work` processes started together on one backlog)

SHARES_SQL = """
    CREATE TABLE IF NOT EXISTS public.bench_shares (app text NOT NULL, pid int NOT NULL, events bigint NOT NULL);
    CREATE OR REPLACE FUNCTION public.bench_count_done() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO public.bench_shares
        SELECT current_setting('application_name'), pg_backend_pid(), count(*) FROM bench_new WHERE status = 'done'
        HAVING count(*) > 0;
        RETURN NULL;
    END $$;
    DROP TRIGGER IF EXISTS bench_count_done ON siwa.events;
    CREATE TRIGGER bench_count_done AFTER UPDATE ON siwa.events REFERENCING NEW TABLE AS bench_new
        FOR EACH STATEMENT EXECUTE FUNCTION public.bench_count_done();
"""


def workers():
    m = env_int("BENCH_WORKERS_EVENTS", 200000)
    counts = [int(x) for x in os.environ.get("BENCH_WORKERS", "1 2 4").replace(",", " ").split()]
    migrate()
    runs = []
    try:
        # Shares: a statement-level trigger adds (application_name, backend pid, events set done)
        # for every UPDATE of siwa.events, in the worker's own transaction (so a rolled-back batch
        # counts nothing); each worker connects with application_name bench-worker-<k>.
        psql_script(SHARES_SQL)
        for k in counts:
            psql(f"TRUNCATE {WORKER_TABLES}, public.bench_shares")
            log(f"workers: {m} pending events, one live session per sub; {k} worker(s) started together")
            insert_backlog(m)
            psql_script(analyze_tables() + "CHECKPOINT;")
            result = drain(k, app_prefix="bench-worker-", label=f"workers x{k}")
            shares = {}
            for line in psql("SELECT app, sum(events) FROM public.bench_shares GROUP BY app ORDER BY app").splitlines():
                app, n = line.split("|")
                shares[app] = int(n)
            exactly_once = psql("SELECT count(*) FILTER (WHERE status = 'done') || '|' || count(*) FILTER (WHERE attempts <> 1) "
                                "FROM siwa.events").split("|")
            result.update({
                "shares": shares,
                "share_fractions": {a: round(n / max(1, m), 3) for a, n in shares.items()},
                "verify": {"done": int(exactly_once[0]), "attempts_not_1": int(exactly_once[1]),
                           "shares_sum": sum(shares.values()),
                           "ok": int(exactly_once[0]) == m and int(exactly_once[1]) == 0 and sum(shares.values()) == m},
            })
            log(f"workers x{k}: shares {shares}, verified={result['verify']['ok']}")
            runs.append(result)
    finally:
        psql_script("DROP TRIGGER IF EXISTS bench_count_done ON siwa.events; DROP TABLE IF EXISTS public.bench_shares;")
    base = runs[0]["events_per_s"] if runs else 0
    return {"events": m, "runs": runs,
            "summary": {f"x{r['workers']}": {"events_per_s": r["events_per_s"],
                                             "speedup": round(r["events_per_s"] / base, 2) if base else None,
                                             "shares": list(r["shares"].values()), "verified": r["verify"]["ok"]}
                        for r in runs}}


# ---------------------------------------------------------------------------------------------
# Mode: scale (the same ingest and worker figures on an empty database and on one bulk-loaded
# with 1M accounts, 1M sessions, 5M done events, without fresh statistics)

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
                "WHERE c.relnamespace = 'siwa'::regnamespace AND c.relname IN ('accounts', 'sessions', 'events') ORDER BY 1")
    out = {}
    for line in rows.splitlines():
        name, reltuples, live, analyzed, vacuumed, size = line.split("|")
        out[name] = {"reltuples": int(reltuples), "n_live_tup": int(live), "analyzes": int(analyzed),
                     "vacuums": int(vacuumed), "total_size": size}
    return out


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
        preload = {}
        started = time.perf_counter()
        account_sql, session_sql = scale_accounts_sql(accounts, 1)
        # As a bulk import does: drop the indexes, load, build them again (sorted, so it takes
        # seconds where 5M random index insertions take many minutes). CREATE INDEX records the
        # tables' row counts (pg_class.reltuples) but no column statistics: no ANALYZE, no VACUUM.
        recreate = drop_indexes(["siwa.accounts", "siwa.sessions", "siwa.events"])
        t = time.perf_counter()
        psql_script(account_sql)
        preload["accounts_s"] = round(time.perf_counter() - t, 1)
        t = time.perf_counter()
        psql_script(scale_accounts_sql(sessions, 1)[1])
        preload["sessions_s"] = round(time.perf_counter() - t, 1)
        # Events in SCALE_LOAD_STREAMS concurrent sessions (2: one per core), each in chunks.
        t = time.perf_counter()
        streams = max(1, env_int("SCALE_LOAD_STREAMS", 2))
        chunk = max(1, env_int("SCALE_LOAD_CHUNK", 500000))
        ranges = [(a, min(a + chunk, events) - 1) for a in range(0, events, chunk)]
        errors = []

        def load(mine):
            try:
                for first, last in mine:
                    psql_script(scale_events_sql(first, last, accounts, events))
            except Exception as error:  # reported below
                errors.append(error)

        loaders = [threading.Thread(target=load, args=(ranges[k::streams],)) for k in range(streams)]
        for th in loaders:
            th.start()
        for th in loaders:
            th.join()
        if errors:
            raise errors[0]
        preload["events_s"] = round(time.perf_counter() - t, 1)
        t = time.perf_counter()
        # Index builds on SCALE_LOAD_STREAMS sessions too (each CREATE INDEX is one statement).
        built = []

        def build(mine):
            try:
                for sql in mine:
                    psql(sql)
            except Exception as error:
                built.append(error)

        builders = [threading.Thread(target=build, args=(recreate[k::streams],)) for k in range(streams)]
        for th in builders:
            th.start()
        for th in builders:
            th.join()
        if built:
            raise built[0]
        preload["indexes_s"] = round(time.perf_counter() - t, 1)
        t = time.perf_counter()
        psql("CHECKPOINT")
        preload["checkpoint_s"] = round(time.perf_counter() - t, 1)
        preload["total_s"] = round(time.perf_counter() - started, 1)
        preload["tables"] = table_stats()
        log(f"scale: preload {preload['total_s']} s (accounts {preload['accounts_s']} s, sessions "
            f"{preload['sessions_s']} s, events {preload['events_s']} s on {streams} streams, indexes "
            f"{preload['indexes_s']} s, checkpoint "
            f"{preload['checkpoint_s']} s); tables {preload['tables']}")
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


# ---------------------------------------------------------------------------------------------
# Mode: lag (POST consent-revoked at a fixed rate to `serve`, time until the session is revoked)

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


# ---------------------------------------------------------------------------------------------
# Mode: forward (forwarding on, to a loopback receiver: deliveries/s of a backlog, POST -> delivered)

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


# ---------------------------------------------------------------------------------------------
# Mode: burst (the day after an outage: a backlog re-sent at full speed to `serve`)

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


def compare():
    """pgbench baseline, p99 at 2,000/s, then the scale mode (receive, serve and worker on an empty
    and on a bulk-loaded database), all in one run; the table is written by main()."""
    presign("throughput", env_int("SCALE_N", env_int("BENCH_N", 100000)))
    migrate()
    baseline = pgbench_baseline()
    return {"baseline_pgbench": baseline, "latency": latency(), "scale": scale()}


def cpu_note(run):
    """`; idle 26%, µs/event siwa-notify 106 / postgres 40 / wrk 20` for an ingest run."""
    cpu = run.get("cpu")
    if not cpu:
        return ""
    u = cpu["us_per_event"]
    return (f"; CPU idle {cpu['idle_pct']}%, µs/event siwa-notify {u['siwa-notify']} / postgres {u['postgres']}"
            f" / wrk {u['load_generator']} / other {u['other']}")


def compare_table(baseline, lat, sc):
    """One markdown table: the issue's aims next to what this run measured."""
    tps = baseline["tps"]
    e, l = sc["empty"], sc["scale"]
    acc = sc["settings"]["accounts"]

    def yes(ok):
        return "yes" if ok else "**no**"

    def ratio(a, b):
        return b / a if a and b else 0

    rss = [("receive", e["receive"]["memory"]["rss_peak_sampled_mb"]), ("serve", e["serve"]["memory"]["rss_peak_sampled_mb"]),
           ("receive at scale", l["receive"]["memory"]["rss_peak_sampled_mb"]),
           ("serve at scale", l["serve"]["memory"]["rss_peak_sampled_mb"]),
           ("work", e["worker"]["memory_first_worker"]["rss_peak_sampled_mb"]),
           ("work at scale", l["worker"]["memory_first_worker"]["rss_peak_sampled_mb"])]
    if lat:
        rss.append(("serve at 2,000/s", lat["memory"]["rss_peak_sampled_mb"]))
    worst = max(rss, key=lambda r: r[1])
    recv, serve = e["receive"]["events_per_s"], e["serve"]["events_per_s"]
    w0, w1 = e["worker"]["events_per_s"], l["worker"]["events_per_s"]
    rows = [
        ("pgbench, 16 clients, single-row `INSERT … ON CONFLICT DO NOTHING` (same run, same database)", "baseline",
         f"{tps:,.0f} tps", "—"),
        ("`receive` verified events/s (wrk, empty database)", f"≥ 1.5× pgbench ({1.5 * tps:,.0f})",
         f"{recv:,.0f} ({recv / tps:.2f}×){cpu_note(e['receive'])}", yes(recv >= 1.5 * tps)),
        ("`serve` verified events/s (wrk, empty database)", f"≥ 1.1× pgbench ({1.1 * tps:,.0f})",
         f"{serve:,.0f} ({serve / tps:.2f}×){cpu_note(e['serve'])}", yes(serve >= 1.1 * tps)),
    ]
    if lat:
        rows.append((f"p99 at {lat['target_rate']:,} requests/s (`{lat['role']}`, open loop)", "≤ 5 ms",
                     f"{lat['latency_ms']['99']} ms (p50 {lat['latency_ms']['50']} ms, {lat['achieved_rate']:,.0f}/s reached)",
                     yes(lat["latency_ms"]["99"] <= 5 and lat["non_2xx"] == 0)))
        if lat.get("wrk"):
            wl = lat["wrk"]
            rows.append((f"p99 at {lat['target_rate']:,} requests/s (`{lat['role']}`, wrk on a fixed schedule)", "≤ 5 ms",
                         f"{wl['latency_ms']['99']} ms (p50 {wl['latency_ms']['50']} ms, {wl['achieved_rate']:,.0f}/s reached, "
                         f"{wl.get('late_sends', 0)} sends late by up to {wl.get('late_max_ms', 0)} ms)",
                         yes(wl["latency_ms"]["99"] <= 5 and wl.get("ok", False) and wl.get("all_accepted", False))))
    rows += [
        (f"worker events/s, empty database ({e['worker']['backlog']:,} pending, half for existing accounts)", "≥ 20,000",
         f"{w0:,.0f}", yes(w0 >= 20000)),
        (f"worker events/s, {acc:,} freshly loaded accounts (+ {sc['settings']['sessions']:,} sessions, "
         f"{sc['settings']['events']:,} done events, no ANALYZE)", f"≥ 80% of empty ({0.8 * w0:,.0f})",
         f"{w1:,.0f} ({ratio(w0, w1):.0%})", yes(w1 >= 0.8 * w0)),
    ]
    if e.get("worker_no_erasure") and l.get("worker_no_erasure"):
        q0, q1 = e["worker_no_erasure"]["events_per_s"], l["worker_no_erasure"]["events_per_s"]
        rows.append(("the same, with consent-revoked in place of account-delete (no deleted user's history to erase)",
                     f"≥ 80% of empty ({0.8 * q0:,.0f})", f"{q1:,.0f} ({ratio(q0, q1):.0%}; empty {q0:,.0f})",
                     yes(q1 >= 0.8 * q0)))
    rows += [
        ("`receive` events/s at scale", "within 20% of empty",
         f"{l['receive']['events_per_s']:,.0f} ({ratio(recv, l['receive']['events_per_s']):.0%})",
         yes(ratio(recv, l["receive"]["events_per_s"]) >= 0.8)),
        ("`serve` events/s at scale", "within 20% of empty",
         f"{l['serve']['events_per_s']:,.0f} ({ratio(serve, l['serve']['events_per_s']):.0%})",
         yes(ratio(serve, l["serve"]["events_per_s"]) >= 0.8)),
        ("peak RSS of any server process under load", "≤ 40 MB", f"{worst[1]} MB ({worst[0]})", yes(worst[1] <= 40)),
        ("preload (bulk load of the scale data)", "≤ ~3 min", f"{sc['preload']['total_s']} s", yes(sc["preload"]["total_s"] <= 180)),
    ]
    out = ["| metric | aim | measured | met |", "|---|---|---|---|"]
    out += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows]
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------------------------
# transfer: an app transfer (export + import of BENCH_TRANSFER_USERS users) and reconciliation of
# BENCH_RECONCILE_TOKENS stored refresh tokens, against the loopback fake Apple (`dev-apple`, two
# teams), each on a database of its own in the same cluster.

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


# ---------------------------------------------------------------------------------------------
# Mode: authlib (the worker with SIWA_APPLY_TO=supabase against without, at AUTHLIB_ACCOUNTS users)

# Supabase Auth's tables as far as the worker uses them (columns, keys, indexes and foreign keys of
# github.com/supabase/auth's migrations; the full schema is in the tests, AuthLibrarySchemas.swift).
AUTHLIB_SUPABASE_SQL = """
    DROP SCHEMA IF EXISTS auth CASCADE;
    CREATE SCHEMA auth;
    CREATE TABLE auth.users (id uuid PRIMARY KEY, email varchar(255), created_at timestamptz);
    CREATE TABLE auth.identities (provider_id text NOT NULL, user_id uuid NOT NULL REFERENCES auth.users ON DELETE CASCADE,
        identity_data jsonb NOT NULL, provider text NOT NULL, created_at timestamptz, updated_at timestamptz,
        email text GENERATED ALWAYS AS (lower(identity_data ->> 'email')) STORED,
        id uuid NOT NULL DEFAULT gen_random_uuid() PRIMARY KEY, UNIQUE (provider_id, provider));
    CREATE TABLE auth.sessions (id uuid PRIMARY KEY, user_id uuid NOT NULL REFERENCES auth.users ON DELETE CASCADE,
        created_at timestamptz, updated_at timestamptz);
    CREATE TABLE auth.refresh_tokens (id bigserial PRIMARY KEY, token varchar(255) UNIQUE, user_id varchar(255),
        revoked bool, created_at timestamptz, session_id uuid REFERENCES auth.sessions ON DELETE CASCADE);
"""


def authlib_load(accounts, app_accounts):
    """siwa's accounts and sessions, and a Supabase user (Apple identity, session, refresh token) for each.
    `app_accounts`: each account also has its app account for the bench's audience, as on a server
    that has run a while (the first event or sign-in of an app creates it); without, the worker
    creates one for each existing user it meets (the model of sessions 11-13)."""
    psql(f"TRUNCATE {WORKER_TABLES}")
    for sql in scale_accounts_sql(accounts, 1):
        psql_script(sql)
    if app_accounts:
        psql_script(f"""
            INSERT INTO siwa.app_accounts (apple_sub, aud, status, email, is_private_email, email_forwarding,
                                           last_event_time, email_event_time, created_at, updated_at)
            SELECT apple_sub, '{AUDIENCE}', status, email, is_private_email, email_forwarding,
                   last_event_time, email_event_time, created_at, updated_at FROM siwa.accounts;
        """)
    psql_script(AUTHLIB_SUPABASE_SQL)
    psql_script(f"""
        INSERT INTO auth.users (id, created_at) SELECT md5('u' || a)::uuid, now() FROM generate_series(0, {accounts - 1}) a;
        INSERT INTO auth.identities (provider_id, user_id, identity_data, provider, created_at)
        SELECT public.bench_sub(a, ''), md5('u' || a)::uuid, '{{}}', 'apple', now() FROM generate_series(0, {accounts - 1}) a;
        INSERT INTO auth.sessions (id, user_id, created_at)
        SELECT md5('s' || a)::uuid, md5('u' || a)::uuid, now() - interval '3 days' FROM generate_series(0, {accounts - 1}) a;
        INSERT INTO auth.refresh_tokens (token, user_id, revoked, created_at, session_id)
        SELECT md5('t' || a), md5('u' || a), false, now() - interval '3 days', md5('s' || a)::uuid FROM generate_series(0, {accounts - 1}) a;
        CREATE INDEX ON auth.identities (user_id);
        CREATE INDEX ON auth.sessions (user_id, created_at);
        CREATE INDEX ON auth.refresh_tokens (session_id, revoked);
        CHECKPOINT;
    """)


def authlib():
    accounts = env_int("AUTHLIB_ACCOUNTS", 1000000)
    backlog = env_int("AUTHLIB_BACKLOG", 100000)
    app_accounts = env_int("AUTHLIB_APP_ACCOUNTS", 1) == 1
    # AUTHLIB_LIVED (percent, default 0: the fresh bulk load, every page full): that share of the
    # rows the worker updates rewritten once and vacuumed, as sign-ins leave a table that has
    # lived (Supabase rewrites the identity at each one): free space on the pages, for both runs.
    lived = env_int("AUTHLIB_LIVED", 0)
    migrate()
    psql_script(SCALE_FUNCTIONS)
    backlog_sql, _, _ = scale_backlog_sql(backlog, accounts)
    runs = {}
    # Each run on a fresh load (the first run's deletions would change the second's work).
    for target in ["", "supabase"]:
        label = f"authlib {target or 'no target'}"
        log(f"{label}: loading {accounts} accounts with a session, and as many Supabase users")
        authlib_load(accounts, app_accounts)
        if lived:
            psql_script(f"""
                UPDATE siwa.accounts SET updated_at = updated_at + interval '1 second' WHERE hashtext(apple_sub) % 100 < {lived} AND hashtext(apple_sub) % 100 > -{lived};
                UPDATE siwa.app_accounts SET updated_at = updated_at + interval '1 second' WHERE hashtext(apple_sub) % 100 < {lived} AND hashtext(apple_sub) % 100 > -{lived};
                UPDATE auth.identities SET updated_at = now() WHERE hashtext(provider_id) % 100 < {lived} AND hashtext(provider_id) % 100 > -{lived};
                VACUUM siwa.accounts, siwa.app_accounts, auth.identities;
            """)
        psql_script(backlog_sql)
        psql_script(analyze_tables() + "ANALYZE siwa.app_accounts, auth.users, auth.identities, auth.sessions, auth.refresh_tokens; CHECKPOINT;")
        os.environ["SIWA_APPLY_TO"] = target
        try:
            runs[target or "none"] = drain(1, label=label)
        finally:
            os.environ.pop("SIWA_APPLY_TO", None)
        runs[target or "none"]["supabase_sessions_left"] = int(psql("SELECT count(*) FROM auth.sessions"))
    ratio = round(runs["supabase"]["events_per_s"] / runs["none"]["events_per_s"], 3) if runs["none"]["events_per_s"] else None
    log(f"authlib: {runs['none']['events_per_s']:.0f} events/s without a target, {runs['supabase']['events_per_s']:.0f} with "
        f"supabase: ratio {ratio} (aim >= 0.8)")
    return {"accounts": accounts, "backlog": backlog, "app_accounts": app_accounts, "lived_percent": lived, "runs": runs, "ratio": ratio,
            "aims": {"ratio": 0.8}}
# sigterm: `receive` stopped by SIGTERM under load, many times (every exit must be 0)

def sigterm():
    """BENCH_SIGTERM_CYCLES (default 200) times: start `receive`, load it from BENCH_SIGTERM_CLIENTS
    keep-alive clients (default 8), send SIGTERM once 50 requests were answered 200, and record
    the exit status, how long the stop took and what the load got (200, 503, no answer)."""
    import http.client
    cycles = env_int("BENCH_SIGTERM_CYCLES", 200)
    clients = env_int("BENCH_SIGTERM_CLIENTS", 8)
    bodies = read_bodies(presign("sigterm", 20000))
    migrate()
    exits, stops, interrupted = {}, [], 0
    totals = {"200": 0, "503": 0, "none": 0, "other": 0}
    log(f"sigterm: {cycles} cycles of receive under load from {clients} clients, SIGTERM after 50 answers 200")
    for cycle in range(cycles):
        server = Server("receive", 4).launch().wait_ready()
        stop = threading.Event()
        counts = {"200": 0, "503": 0, "none": 0, "other": 0}
        lock = threading.Lock()

        def client(k):
            conn, j = None, k
            while not stop.is_set():
                body = bodies[(cycle * 7919 + j) % len(bodies)]
                j += clients
                try:
                    if conn is None:
                        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
                    conn.request("POST", PATH, body, {"Content-Type": "application/json"})
                    r = conn.getresponse()
                    r.read()
                    key = str(r.status) if r.status in (200, 503) else "other"
                    if (r.getheader("Connection") or "").lower() == "close":
                        conn.close()
                        conn = None
                except (OSError, http.client.HTTPException):
                    key = "none"
                    if conn is not None:
                        conn.close()
                    conn = None
                    time.sleep(0.002)
                with lock:
                    counts[key] += 1

        threads = [threading.Thread(target=client, args=(k,), daemon=True) for k in range(clients)]
        for t in threads:
            t.start()
        deadline = time.time() + 60
        while counts["200"] < 50 and time.time() < deadline and server.proc.poll() is None:
            time.sleep(0.005)
        t0 = time.perf_counter()
        server.proc.send_signal(signal.SIGTERM)
        try:
            rc = server.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.proc.kill()
            rc = "hung (killed)"
        stops.append(time.perf_counter() - t0)
        stop.set()
        for t in threads:
            t.join()
        server.log_file.close()
        exits[str(rc)] = exits.get(str(rc), 0) + 1
        if rc != 0:
            log(f"sigterm: cycle {cycle} exited {rc}: {server.tail()[-800:]}")
        if counts["503"] + counts["none"] > 0:
            interrupted += 1
        for key in totals:
            totals[key] += counts[key]
        if (cycle + 1) % 25 == 0:
            log(f"sigterm: {cycle + 1}/{cycles} cycles, exits {exits}")
    ok = exits.get("0", 0) == cycles
    result = {"cycles": cycles, "clients": clients, "exit_codes": exits, "every_exit_0": ok,
              "cycles_with_load_interrupted": interrupted, "answers": totals,
              "stop_seconds": {"p50": round(pct(stops, 50), 3), "p99": round(pct(stops, 99), 3), "max": round(max(stops), 3)},
              "summary": {"cycles": cycles, "every_exit_0": ok, "exit_codes": exits}}
    log(f"sigterm: {cycles} SIGTERMs under load, exit codes {exits}, load interrupted in {interrupted}; "
        f"answers {totals}; stop p50 {result['stop_seconds']['p50']} s, max {result['stop_seconds']['max']} s")
    if not ok:
        raise SystemExit("sigterm: some exit was not 0")
    return result


MODES = {"throughput": throughput, "latency": latency, "worker": worker, "lag": lag, "workers": workers,
         "scale": scale, "compare": compare, "transfer": transfer_mode}
MODES["forward"] = forward
MODES["authlib"] = authlib
MODES["sigterm"] = sigterm
MODES["burst"] = burst
ALL = ["throughput", "latency", "worker", "lag", "workers", "scale"]


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else "throughput"
    modes = ALL if mode == "all" else [mode]
    if any(m not in MODES for m in modes):
        raise SystemExit(f"usage: bench/run [{'|'.join(MODES)}|all]")
    subprocess.run([sys.executable, os.path.join(HERE, "presign.py"), "key", CACHE], check=True, stdout=subprocess.DEVNULL)
    os.makedirs(RESULTS, exist_ok=True)
    common = {"machine": machine(), "postgres": durability_settings(), "binary": BIN}
    stamp = time.strftime("%Y%m%dT%H%M%S")
    summary, results = {}, {}
    for m in modes:
        started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        load = os.getloadavg()  # other work on the machine skews every figure: recorded
        result = MODES[m]()
        results[m] = result
        doc = {"mode": m, "started_at": started, "loadavg_at_start": load, "loadavg_at_end": os.getloadavg(),
               **common, "result": result}
        path = os.path.join(RESULTS, f"{m}-{stamp}.json")
        with open(path, "w") as f:
            json.dump(doc, f, indent=2)
        log(f"{m}: results in {os.path.relpath(path, ROOT)}")
        if m == "compare":
            summary[m] = {"pgbench_tps": result["baseline_pgbench"]["tps"], "scale": result["scale"]["summary"],
                          "latency_ms": result["latency"]["latency_ms"]}
        else:
            summary[m] = result.get("summary", {k: v for k, v in result.items()
                                                if k in ("events_per_s", "lag_ms", "latency_ms", "achieved_rate", "non_2xx")})
    # The side-by-side table, when this run measured what it needs.
    if "compare" in results:
        r = results["compare"]
        table = compare_table(r["baseline_pgbench"], r["latency"], r["scale"])
    elif "throughput" in results and "scale" in results:
        table = compare_table(results["throughput"]["baseline_pgbench"], results.get("latency"), results["scale"])
    else:
        table = None
    print(json.dumps(summary, indent=2))
    if table:
        path = os.path.join(RESULTS, f"compare-{stamp}.md")
        with open(path, "w") as f:
            f.write(f"siwa-notify bench, {stamp}, {common['machine'].get('cpu', '')} x{common['machine']['cpus']}, "
                    f"PostgreSQL {common['postgres']['version']} (fsync=on, synchronous_commit=on)\n\n" + table)
        print("\n" + table)
        log(f"table in {os.path.relpath(path, ROOT)}")


if __name__ == "__main__":
    main()
