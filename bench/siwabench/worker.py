"""Mode worker: 200,000 pending events preloaded, `work` timed until all are applied."""
import time
from .backlog import WORKER_TABLES, analyze_tables, drain, insert_backlog, pending_count
from .harness import env_int, log, migrate, psql, psql_script


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
