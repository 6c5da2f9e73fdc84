"""Mode providers: a burst of consent-revoked events for users of a hosted provider (the `clerk`
target) against a loopback provider that enforces a rate limit the way Clerk documents it (a
fixed window of requests, then 429 with Retry-After): how the provider calls pace themselves
against the limit, what they waste on 429s, and that the worker applies the events meanwhile."""
import json
import math
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

from .backlog import WORKER_TABLES, analyze_tables
from .dataset import SCALE_FUNCTIONS, scale_accounts_sql
from .harness import AUDIENCE, TMP, Server, env_int, log, migrate, psql, psql_script


class RateLimitedClerk:
    """The Backend API calls the `clerk` target makes, each user found and without sessions, behind
    a fixed window: `limit` requests per `window` seconds are answered, the others get 429 with
    Retry-After (whole seconds to the window's end), as Clerk's rate-limit page describes."""

    def __init__(self, limit, window):
        self.limit, self.window = limit, window
        self.lock = threading.Lock()
        self.window_start = time.monotonic()
        self.in_window = 0
        self.answered = 0
        self.refused = 0
        self.per_second = {}
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def reply(self, status, body, headers=()):
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for name, value in headers:
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

            def answer(self):
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                wait = fake.admit()
                if wait is not None:
                    self.reply(429, {"errors": [{"code": "too_many_requests", "message": "Too many requests"}]},
                               [("Retry-After", str(wait))])
                    return
                url = urlparse(self.path)
                query = parse_qs(url.query)
                if self.command == "GET" and url.path.endswith("/users"):
                    sub = query.get("provider_user_id", [None])[0]
                    users = [] if sub is None else [{
                        "id": f"user_{sub}", "password_enabled": True,
                        "external_accounts": [{"id": f"eac_{sub}", "provider": "oauth_apple", "provider_user_id": sub}],
                    }]
                    self.reply(200, users)
                elif self.command == "GET" and url.path.endswith("/sessions"):
                    self.reply(200, [])
                else:
                    self.reply(404, {"errors": [{"code": "resource_not_found", "message": "not found"}]})

            do_GET = answer
            do_POST = answer
            do_DELETE = answer

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def admit(self):
        """None when the request is within the window's limit, else the seconds to wait."""
        with self.lock:
            now = time.monotonic()
            if now - self.window_start >= self.window:
                self.window_start += math.floor((now - self.window_start) / self.window) * self.window
                self.in_window = 0
            second = int(now)
            if self.in_window < self.limit:
                self.in_window += 1
                self.answered += 1
                self.per_second[second] = self.per_second.get(second, 0) + 1
                return None
            self.refused += 1
            return max(1, math.ceil(self.window_start + self.window - now))

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


def providers():
    """BENCH_PROVIDER_EVENTS consent-revoked events for as many existing users (each one provider
    call of two requests: find the user, list its sessions), queued at once; `work` with
    SIWA_APPLY_TO=clerk against the rate-limited loopback Clerk (BENCH_PROVIDER_LIMIT requests per
    BENCH_PROVIDER_WINDOW seconds). Measures when the worker had applied every event, when every
    provider call was done, the requests answered per second against the limit, the 429s, and
    the calls' attempts; then what a 1M burst would take at Clerk's production limit."""
    events = env_int("BENCH_PROVIDER_EVENTS", 4000)
    limit = env_int("BENCH_PROVIDER_LIMIT", 1000)
    window = env_int("BENCH_PROVIDER_WINDOW", 10)
    timeout = env_int("BENCH_WORKER_MAX_SECONDS", 600)
    migrate()
    psql_script(SCALE_FUNCTIONS)
    psql(f"TRUNCATE {WORKER_TABLES}, siwa.provider_calls")
    for sql in scale_accounts_sql(events, 1):
        psql_script(sql)
    psql_script(f"""
        INSERT INTO siwa.events (jti, aud, sub, type, event_time, status, claims)
        SELECT 'bench-provider-' || a, '{AUDIENCE}', public.bench_sub(a, ''), 'consent-revoked',
               now() - interval '1 hour' + a * interval '1 millisecond', 'pending',
               jsonb_build_object('iss', 'https://appleid.apple.com', 'aud', '{AUDIENCE}', 'jti', 'bench-provider-' || a,
                                  'events', json_build_object('type', 'consent-revoked', 'sub', public.bench_sub(a, ''))::text)
        FROM generate_series(0, {events - 1}) a;
    """)
    psql_script(analyze_tables() + "CHECKPOINT;")
    fake = RateLimitedClerk(limit, window)
    key = os.path.join(TMP, "clerk-secret-key")
    with open(key, "w") as f:
        f.write("sk_test_bench\n")
    os.environ.update({"SIWA_APPLY_TO": "clerk", "SIWA_CLERK_URL": f"http://127.0.0.1:{fake.port}/v1",
                       "SIWA_CLERK_SECRET_KEY_FILE": key})
    server = Server("work", 1)
    applied_at = calls_at = None
    try:
        started = time.perf_counter()
        server.launch()
        while time.perf_counter() - started < timeout:
            if server.proc.poll() is not None:
                raise RuntimeError(f"work exited with {server.proc.returncode}: {server.tail()}")
            if applied_at is None and psql(
                    "SELECT NOT EXISTS (SELECT FROM siwa.events WHERE jti LIKE 'bench-provider-%' AND status <> 'done')") == "t":
                applied_at = time.perf_counter() - started
            if applied_at is not None and psql(
                    "SELECT count(*) = " + str(events) + " FROM siwa.provider_calls WHERE state IN ('done', 'dead', 'user_unknown')") == "t":
                calls_at = time.perf_counter() - started
                break
            time.sleep(0.2)
    finally:
        server.stop()
        for name in ("SIWA_APPLY_TO", "SIWA_CLERK_URL", "SIWA_CLERK_SECRET_KEY_FILE"):
            os.environ.pop(name, None)
        fake.stop()
    states = dict(line.split("|") for line in psql(
        "SELECT state || '|' || count(*) FROM siwa.provider_calls GROUP BY state").splitlines() if line)
    attempts = psql("SELECT coalesce(max(attempts), 0) || '|' || coalesce(round(avg(attempts), 2), 0) FROM siwa.provider_calls").split("|")
    busy = sorted(fake.per_second.items())
    # The steady rate: seconds wholly inside the run, without the first and the last.
    inner = [n for _, n in busy[1:-1]]
    allowed = limit / window
    achieved = fake.answered / calls_at if calls_at else None
    result = {
        "events": events, "limit": limit, "window_s": window, "allowed_per_s": allowed,
        "worker_applied_s": round(applied_at, 2) if applied_at else None,
        "calls_done_s": round(calls_at, 2) if calls_at else None,
        "requests_answered": fake.answered, "requests_refused_429": fake.refused,
        "answered_per_s": round(achieved, 1) if achieved else None,
        "use_of_limit": round(achieved / allowed, 3) if achieved else None,
        "busiest_second": max(inner) if inner else None,
        "calls_by_state": {k: int(v) for k, v in states.items()},
        "attempts_max": int(attempts[0]), "attempts_mean": float(attempts[1]),
    }
    if achieved:
        requests_per_event = fake.answered / events
        # Clerk's production limit is the default (1,000 per 10 s); the same use of it.
        result["one_million_hours"] = round(1_000_000 * requests_per_event / (allowed * result["use_of_limit"]) / 3600, 1)
    result["summary"] = {k: result.get(k) for k in ("worker_applied_s", "calls_done_s", "answered_per_s", "use_of_limit",
                                                     "requests_refused_429", "attempts_max", "one_million_hours")}
    log(f"providers: {events} consent-revoked applied by the worker in {result['worker_applied_s']} s; provider calls done in "
        f"{result['calls_done_s']} s: {result['answered_per_s']} requests/s answered of {allowed:.0f} allowed "
        f"({result['use_of_limit']}), {fake.refused} refused with 429, attempts max {result['attempts_max']} "
        f"mean {result['attempts_mean']}, calls {result['calls_by_state']}; 1M at this use: {result.get('one_million_hours')} h")
    return result
