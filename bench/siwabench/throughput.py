"""Mode throughput: wrk against `receive`, next to a pgbench single-row insert baseline on the
same database."""
import os
from .harness import env_int, migrate, presign, psql
from .load import ingest, pgbench_baseline


def throughput():
    n = env_int("BENCH_N", 100000)
    sweep = [int(x) for x in os.environ.get("BENCH_HTTP_THREADS", "4").replace(",", " ").split()]
    # BENCH_ROLES="receive serve" also loads `serve` (its worker applying meanwhile) against the
    # same pgbench baseline.
    roles = os.environ.get("BENCH_ROLES", "receive").split()
    presign("throughput", n)
    if "serve" in roles:
        presign("serve", n)
    migrate()
    baseline = pgbench_baseline()
    runs = []
    for http_threads in sweep:
        psql("TRUNCATE siwa.events")
        runs.append(ingest("receive", "throughput", n, http_threads, baseline["tps"], profile=http_threads == sweep[0]))
    serve = None
    if "serve" in roles:
        psql("TRUNCATE siwa.events")
        serve = ingest("serve", "serve", n, sweep[0], baseline["tps"], wait_applied=True)
    best = max(runs, key=lambda r: r["events_per_s"] if r["verify"]["ok"] else -1)
    return {"baseline_pgbench": baseline, "runs": runs, "serve": serve,
            "summary": {"events_per_s": best["events_per_s"], "http_threads": best["http_threads"],
                        "p50_ms": best["latency_ms"]["50"], "p99_ms": best["latency_ms"]["99"],
                        "non_2xx": best["non_2xx"], "pgbench_tps": baseline["tps"],
                        "ratio_to_pgbench": best["ratio_to_pgbench"],
                        "rss_peak_mb": best["memory"]["rss_peak_sampled_mb"],
                        "cpu_idle_pct": best["cpu"]["idle_pct"], "cpu_us_per_event": best["cpu"]["us_per_event"],
                        "verified": all(r["verify"]["ok"] for r in runs) and (serve is None or serve["verify"]["ok"]),
                        "serve_events_per_s": serve and serve["events_per_s"],
                        "serve_ratio_to_pgbench": serve and serve["ratio_to_pgbench"],
                        "aims": {"events_per_s": 20000, "ratio_to_pgbench": 1.1, "rss_mb": 40}}}
