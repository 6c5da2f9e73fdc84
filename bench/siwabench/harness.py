"""The shared harness of every mode: the environment bench/run sets, PostgreSQL through psql,
the server under test (`siwa-notify` started, made ready, measured, stopped), pre-signed bodies
and the clock they need, percentiles and the machine's description."""
import base64
import json
import os
import platform
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request


# bench/: its scripts, .cache (keys and signed bodies) and results.
HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
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
