"""Mode latency: a fixed rate (2,000/s for 10 s by default) against `serve`, p50/p99 from the
Python open-loop client and from wrk on the same schedule."""
import os
from .backlog import reset_statement_stats, statement_stats
from .harness import RSSSampler, Server, env_int, event_count, log, migrate, presign, psql, read_bodies
from .load import fixed_rate, run_wrk, summarize_fixed_rate


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
