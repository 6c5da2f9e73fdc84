"""The operator console's page times at scale (bench/run console).

Bulk-loads 1M accounts with a live session each and 5M done events (bench.py's scale data:
indexes rebuilt after the load, no ANALYZE), adds dead letters and a small backlog, starts
`receive` with the API (and so the console) on, signs in over HTTP and times every page
(BENCH_CONSOLE_RUNS requests each, one at a time): median, p95, max in ms. Also reports how long
the background rollup of the hourly charts took to count the last 7 days.
"""
import json
import os
import statistics
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench as b  # noqa: E402  (reads BENCH_* set by bench/run)

TOKEN = "bench_console_token_0123456789abcdef"


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


def load(accounts, events):
    b.psql_script(b.SCALE_FUNCTIONS)
    recreate = b.drop_indexes(["siwa.accounts", "siwa.sessions", "siwa.events"])
    account_sql, session_sql = b.scale_accounts_sql(accounts, 1)
    b.psql_script(account_sql)
    b.psql_script(session_sql)
    chunk = 500000
    ranges = [(a, min(a + chunk, events) - 1) for a in range(0, events, chunk)]
    errors = []

    def run(mine, statements):
        try:
            for item in mine:
                b.psql_script(statements(item))
        except Exception as error:  # reported below
            errors.append(error)

    for work, statements in ((ranges, lambda r: b.scale_events_sql(r[0], r[1], accounts, events)), (recreate, lambda s: s)):
        threads = [threading.Thread(target=run, args=(work[k::2], statements)) for k in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]


def main():
    accounts = b.env_int("SCALE_ACCOUNTS", 1000000)
    events = b.env_int("SCALE_EVENTS", 5 * accounts)
    runs = b.env_int("BENCH_CONSOLE_RUNS", 20)
    b.presign("throughput", 10)
    b.migrate()
    for t in ("siwa.accounts", "siwa.sessions", "siwa.events", "siwa.event_queue"):
        b.psql(f"ALTER TABLE {t} SET (autovacuum_enabled = off)")
    started = time.perf_counter()
    load(accounts, events)
    preload_s = round(time.perf_counter() - started, 1)
    b.log(f"console: {accounts} accounts, {events} events loaded in {preload_s} s")
    # 200 dead letters and 1,000 pending events (the queue's pages and the backlog).
    b.psql_script(b.scale_backlog_sql(1200, accounts)[0])
    b.psql("UPDATE siwa.events SET status = 'dead', last_error = 'bench' WHERE id IN "
           "(SELECT id FROM siwa.event_queue ORDER BY id LIMIT 200)")

    token_file = os.path.join(b.TMP, "api-tokens")
    with open(token_file, "w") as f:
        f.write(TOKEN + "\n")
    port, admin = b.free_port(), b.free_port()
    env = b.server_env(port, admin, 2)
    env["SIWA_API_TOKEN_FILE"] = token_file
    log = open(os.path.join(b.TMP, "console-server.log"), "w")
    server = subprocess.Popen([b.BIN, "receive"], env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{admin}"
    try:
        deadline = time.time() + 60
        while True:
            try:
                urllib.request.urlopen(base + "/console/sign-in", timeout=2)
                break
            except Exception:
                if time.time() > deadline or server.poll() is not None:
                    raise RuntimeError("server did not start: " + open(log.name).read()[-2000:])
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
        final = b.psql("SELECT coalesce((SELECT min(id) - 1 FROM siwa.event_queue WHERE status IN ('pending', 'failed')), 0)")
        while int(b.psql("SELECT last_id FROM siwa.console_rollup")) < int(final) and time.perf_counter() - t < 600:
            time.sleep(1)
        rollup_s = round(time.perf_counter() - t, 1)

        sub = b.psql("SELECT apple_sub FROM siwa.accounts ORDER BY apple_sub OFFSET 500000 LIMIT 1")
        sub_hash = b.psql(f"SELECT siwa.subject_hash('{sub}')")
        some_id = b.psql(f"SELECT max(id) / 2 FROM siwa.events")
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
            b.log(f"console: {page}: median {results[page]['median_ms']} ms, p95 {results[page]['p95_ms']} ms")
        out = {"accounts": accounts, "events": events, "preload_s": preload_s, "rollup_7_days_s": rollup_s, "runs": runs,
               "binary": b.BIN, "pages": results}
        os.makedirs(b.RESULTS, exist_ok=True)
        path = os.path.join(b.RESULTS, f"console-{time.strftime('%Y%m%dT%H%M%S')}.json")
        with open(path, "w") as f:
            json.dump(out, f, indent=2)
        print(json.dumps(out, indent=2))
    except Exception:
        log.flush()
        print(open(log.name).read()[-3000:], file=sys.stderr)
        raise
    finally:
        server.terminate()
        server.wait(30)
        log.close()


if __name__ == "__main__":
    main()
