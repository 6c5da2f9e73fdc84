"""Mode console: the operator console's page times at scale.

Bulk-loads 1M accounts with a live session each and 5M done events (the scale mode's data:
indexes rebuilt after the load, no ANALYZE), adds dead letters and a small backlog, starts
`receive` with the API (and so the console) on, signs in over HTTP and times every page
(BENCH_CONSOLE_RUNS requests each, one at a time): median, p95, max in ms. Also reports how long
the background rollup of the hourly charts took to count the last 7 days.
"""
import os
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from .dataset import SCALE_FUNCTIONS, drop_indexes, in_parallel, scale_accounts_sql, scale_backlog_sql, scale_events_sql
from .harness import BIN, TMP, env_int, free_port, log, migrate, presign, psql, psql_script, server_env

TOKEN = "bench_console_token_0123456789abcdef"


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


def load(accounts, events):
    """The scale mode's data: indexes dropped, rows loaded on two sessions, indexes built again."""
    psql_script(SCALE_FUNCTIONS)
    recreate = drop_indexes(["siwa.accounts", "siwa.sessions", "siwa.events"])
    account_sql, session_sql = scale_accounts_sql(accounts, 1)
    psql_script(account_sql)
    psql_script(session_sql)
    chunk = 500000
    ranges = [(a, min(a + chunk, events) - 1) for a in range(0, events, chunk)]
    in_parallel(ranges, 2, lambda r: psql_script(scale_events_sql(r[0], r[1], accounts, events)))
    in_parallel(recreate, 2, psql_script)

def console():
    accounts = env_int("SCALE_ACCOUNTS", 1000000)
    events = env_int("SCALE_EVENTS", 5 * accounts)
    runs = env_int("BENCH_CONSOLE_RUNS", 20)
    presign("throughput", 10)
    migrate()
    for t in ("siwa.accounts", "siwa.sessions", "siwa.events", "siwa.event_queue"):
        psql(f"ALTER TABLE {t} SET (autovacuum_enabled = off)")
    started = time.perf_counter()
    load(accounts, events)
    preload_s = round(time.perf_counter() - started, 1)
    log(f"console: {accounts} accounts, {events} events loaded in {preload_s} s")
    # 200 dead letters and 1,000 pending events (the queue's pages and the backlog).
    psql_script(scale_backlog_sql(1200, accounts)[0])
    psql("UPDATE siwa.events SET status = 'dead', last_error = 'bench' WHERE id IN "
           "(SELECT id FROM siwa.event_queue ORDER BY id LIMIT 200)")

    token_file = os.path.join(TMP, "api-tokens")
    with open(token_file, "w") as f:
        f.write(TOKEN + "\n")
    port, admin = free_port(), free_port()
    env = server_env(port, admin, 2)
    env["SIWA_API_TOKEN_FILE"] = token_file
    server_log = open(os.path.join(TMP, "console-server.log"), "w")
    server = subprocess.Popen([BIN, "receive"], env=env, stdout=server_log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{admin}"
    try:
        deadline = time.time() + 60
        while True:
            try:
                urllib.request.urlopen(base + "/console/sign-in", timeout=2)
                break
            except Exception:
                if time.time() > deadline or server.poll() is not None:
                    raise RuntimeError("server did not start: " + open(server_log.name).read()[-2000:])
                time.sleep(0.3)
        opener = urllib.request.build_opener(NoRedirect)
        added = subprocess.run([b.BIN, "operator", "add", "bench"], env=env, capture_output=True, text=True, check=True)
        form = urllib.parse.urlencode({"operator": "bench", "token": added.stdout.strip()}).encode()
        request = urllib.request.Request(base + "/console/sign-in", data=form, headers={"Origin": base})
        try:
            opener.open(request)
            raise RuntimeError("sign-in did not redirect")
        except urllib.error.HTTPError as answer:
            cookie = answer.headers["Set-Cookie"].split(";")[0]

        # The background rollup counts the last 7 days (~1.5M events here) in steps.
        t = time.perf_counter()
        final = psql("SELECT coalesce((SELECT min(id) - 1 FROM siwa.event_queue WHERE status IN ('pending', 'failed')), 0)")
        while int(psql("SELECT last_id FROM siwa.console_rollup")) < int(final) and time.perf_counter() - t < 600:
            time.sleep(1)
        rollup_s = round(time.perf_counter() - t, 1)

        sub = psql(f"SELECT apple_sub FROM siwa.accounts ORDER BY apple_sub OFFSET {accounts // 2} LIMIT 1")
        sub_hash = psql(f"SELECT siwa.subject_hash('{sub}')")
        some_id = psql(f"SELECT max(id) / 2 FROM siwa.events")
        three_days = time.strftime("%Y-%m-%d %H:%M", time.gmtime(time.time() - 3 * 86400))
        pages = [
            "/console", "/console/events", "/console/events?type=account-delete", "/console/events?status=dead",
            "/console/events?status=done&app=com.example.bench", f"/console/events?q={sub_hash}",
            "/console/events?" + urllib.parse.urlencode({"to": three_days}), f"/console/events/{some_id}",
            "/console/failures", f"/console/users?q={sub_hash}", f"/console/users?q={urllib.parse.quote(sub)}",
            "/console/sync", "/console/audit",
        ]
        results = {}
        for page in pages:
            times = []
            for _ in range(runs):
                t = time.perf_counter()
                answer = opener.open(urllib.request.Request(base + page, headers={"Cookie": cookie}))
                answer.read()
                times.append((time.perf_counter() - t) * 1000)
                if answer.status != 200:
                    raise RuntimeError(f"{page}: {answer.status}")
            times.sort()
            results[page] = {"median_ms": round(statistics.median(times), 1), "p95_ms": round(times[int(0.95 * (len(times) - 1))], 1),
                             "max_ms": round(times[-1], 1)}
            log(f"console: {page}: median {results[page]['median_ms']} ms, p95 {results[page]['p95_ms']} ms")
        return {"accounts": accounts, "events": events, "preload_s": preload_s, "rollup_7_days_s": rollup_s, "runs": runs,
                "pages": results,
                "summary": {"rollup_7_days_s": rollup_s, "median_ms": {p: r["median_ms"] for p, r in results.items()}}}
    except Exception:
        server_log.flush()
        print(open(server_log.name).read()[-3000:], file=sys.stderr)
        raise
    finally:
        server.terminate()
        server.wait(30)
        server_log.close()

