"""CPU accounting of every ingest and drain: machine idle %, CPU per event of the server, this
run's PostgreSQL, the load generator and everything else; optional perf profiles and counters."""
import os
import signal
import subprocess
import time
from .harness import RESULTS, TMP, event_count, log


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
