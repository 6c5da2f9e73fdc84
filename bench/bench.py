#!/usr/bin/env python3
"""siwa-notify benchmark: runs one mode of the siwabench package (driven by bench/run, which
builds the release binary and starts PostgreSQL).

    bench.py throughput|latency|worker|lag|workers|scale|forward|compare|burst|transfer|authlib|sigterm|console|cost|states|providers|senders|all

Environment (set by bench/run): BENCH_SOCKDIR (PostgreSQL unix socket dir), BENCH_TMP (scratch),
BENCH_BIN (release binary), BENCH_PGBIN (PostgreSQL bin dir). Tunables: see bench/README.md.
All traffic goes to 127.0.0.1; every run is bounded in count and in time. Each mode's result is
written to bench/results/<mode>-<timestamp>.json with the machine and PostgreSQL's settings.
"""
import datetime
import json
import os
import subprocess
import sys
import time

from siwabench import (authlib, burst, compare, console, cost, forward, lag, latency, providers, scale, senders, sigterm, states,
                       throughput, transfer, worker, workers)
from siwabench.harness import BIN, CACHE, HERE, RESULTS, ROOT, durability_settings, log, machine

MODES = {"throughput": throughput.throughput, "latency": latency.latency, "worker": worker.worker, "lag": lag.lag,
         "workers": workers.workers, "scale": scale.scale, "compare": compare.compare, "transfer": transfer.transfer_mode,
         "forward": forward.forward, "authlib": authlib.authlib, "sigterm": sigterm.sigterm, "burst": burst.burst,
         "console": console.console, "cost": cost.cost, "states": states.states,
         "providers": providers.providers, "senders": senders.senders}
# `all`: one database, and the compare table at the end (not compare itself, not the long ones).
ALL = ["throughput", "latency", "worker", "lag", "workers", "scale"]


def summary_of(mode, result):
    if mode == "compare":
        return {"pgbench_tps": result["baseline_pgbench"]["tps"], "scale": result["scale"]["summary"],
                "latency_ms": result["latency"]["latency_ms"]}
    return result.get("summary", {k: v for k, v in result.items()
                                  if k in ("events_per_s", "lag_ms", "latency_ms", "achieved_rate", "non_2xx")})


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
        summary[m] = summary_of(m, result)
    # The side-by-side table, when this run measured what it needs.
    if "compare" in results:
        r = results["compare"]
        table = compare.compare_table(r["baseline_pgbench"], r["latency"], r["scale"])
    elif "throughput" in results and "scale" in results:
        table = compare.compare_table(results["throughput"]["baseline_pgbench"], results.get("latency"), results["scale"])
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
