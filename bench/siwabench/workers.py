"""Mode workers: 1, 2 and 4 `work` processes started together on one backlog: events/s, and
each one's share counted by a trigger in the worker's own transactions."""
import os
from .backlog import WORKER_TABLES, analyze_tables, drain, insert_backlog
from .harness import env_int, log, migrate, psql, psql_script


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
