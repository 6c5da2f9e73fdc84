"""Mode compare: pgbench baseline, p99 at 2,000/s and the scale mode in one run, and the markdown
table of the aims next to what the run measured (also written after `all`)."""
from .harness import env_int, migrate, presign
from .latency import latency
from .load import pgbench_baseline
from .scale import scale


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
