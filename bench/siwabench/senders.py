"""Mode senders: a burst of email-disabled events of relay addresses (the `sendgrid` email service)
against a loopback SendGrid that enforces a rate limit the way SendGrid documents it (a window of
requests, every answer saying X-RateLimit-Limit / -Remaining / -Reset, then 429): how the calls
pace themselves against the limit, what they waste on 429s, and that the worker applies the events
meanwhile."""
import json
import math
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote

from .backlog import WORKER_TABLES, analyze_tables
from .dataset import SCALE_FUNCTIONS, scale_accounts_sql
from .harness import AUDIENCE, TMP, Server, env_int, log, migrate, psql, psql_script


class RateLimitedSendGrid:
    """The global-suppression calls the `sendgrid` sender makes (a lookup, then an add), behind a
    fixed window of `limit` requests per `window` seconds. Every answer carries the window's
    X-RateLimit-* headers (Reset in Unix seconds); past the limit, 429."""

    def __init__(self, limit, window):
        self.limit, self.window = limit, window
        self.lock = threading.Lock()
        self.window_start = time.time()
        self.in_window = 0
        self.answered = 0
        self.refused = 0
        self.per_second = {}
        self.suppressed = set()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def reply(self, status, body, headers):
                data = b"" if body is None else json.dumps(body).encode()
                self.send_response(status)
                if body is not None:
                    self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for name, value in headers:
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

            def answer(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                admitted, remaining, reset = fake.admit()
                headers = [("X-RateLimit-Limit", str(fake.limit)), ("X-RateLimit-Remaining", str(remaining)),
                           ("X-RateLimit-Reset", str(reset))]
                if not admitted:
                    self.reply(429, {"errors": [{"field": None, "message": "too many requests"}]}, headers)
                    return
                root = "/v3/asm/suppressions/global"
                if self.command == "GET" and self.path.startswith(root + "/"):
                    address = unquote(self.path[len(root) + 1:])
                    self.reply(200, {"recipient_email": address} if address in fake.suppressed else {}, headers)
                elif self.command == "POST" and self.path == root:
                    emails = json.loads(body or b"{}").get("recipient_emails", [])
                    with fake.lock:
                        fake.suppressed.update(emails)
                    self.reply(201, {"recipient_emails": emails}, headers)
                elif self.command == "DELETE" and self.path.startswith(root + "/"):
                    self.reply(204, None, headers)
                else:
                    self.reply(404, {"errors": [{"field": None, "message": "not found"}]}, headers)

            do_GET = answer
            do_POST = answer
            do_DELETE = answer

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def admit(self):
        """(admitted, remaining in the window, the window's reset in Unix seconds)."""
        with self.lock:
            now = time.time()
            if now - self.window_start >= self.window:
                self.window_start += math.floor((now - self.window_start) / self.window) * self.window
                self.in_window = 0
            reset = math.ceil(self.window_start + self.window)
            if self.in_window < self.limit:
                self.in_window += 1
                self.answered += 1
                second = int(now)
                self.per_second[second] = self.per_second.get(second, 0) + 1
                return True, self.limit - self.in_window, reset
            self.refused += 1
            return False, 0, reset

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


def senders():
    """BENCH_SENDER_EVENTS email-disabled events of as many users' relay addresses (each one call of
    two requests: look the address up, add it), queued at once; `work` with
    SIWA_EMAIL_SENDERS=sendgrid against the rate-limited loopback SendGrid (BENCH_SENDER_LIMIT
    requests per BENCH_SENDER_WINDOW seconds). Measures when the worker had applied every event,
    when every call was done, the requests answered per second against the limit, the 429s, the
    calls' attempts, and whether every address ended suppressed."""
    events = env_int("BENCH_SENDER_EVENTS", 4000)
    limit = env_int("BENCH_SENDER_LIMIT", 600)
    window = env_int("BENCH_SENDER_WINDOW", 10)
    timeout = env_int("BENCH_WORKER_MAX_SECONDS", 600)
    migrate()
    psql_script(SCALE_FUNCTIONS)
    psql(f"TRUNCATE {WORKER_TABLES}, siwa.provider_calls, siwa.email_suppressions")
    for sql in scale_accounts_sql(events, 1):
        psql_script(sql)
    psql_script(f"""
        INSERT INTO siwa.events (jti, aud, sub, type, event_time, status, email, is_private_email, claims)
        SELECT 'bench-sender-' || a, '{AUDIENCE}', public.bench_sub(a, ''), 'email-disabled',
               now() - interval '1 hour' + a * interval '1 millisecond', 'pending',
               'bench' || a || '@privaterelay.appleid.com', true,
               jsonb_build_object('iss', 'https://appleid.apple.com', 'aud', '{AUDIENCE}', 'jti', 'bench-sender-' || a,
                                  'events', json_build_object('type', 'email-disabled', 'sub', public.bench_sub(a, ''),
                                                              'email', 'bench' || a || '@privaterelay.appleid.com',
                                                              'is_private_email', 'true')::text)
        FROM generate_series(0, {events - 1}) a;
    """)
    psql_script(analyze_tables() + "CHECKPOINT;")
    fake = RateLimitedSendGrid(limit, window)
    key = os.path.join(TMP, "sendgrid-api-key")
    with open(key, "w") as f:
        f.write("SG.bench\n")
    variables = {"SIWA_EMAIL_SENDERS": "sendgrid", "SIWA_SENDGRID_URL": f"http://127.0.0.1:{fake.port}",
                 "SIWA_SENDGRID_API_KEY_FILE": key}
    os.environ.update(variables)
    server = Server("work", 1)
    applied_at = calls_at = None
    try:
        started = time.perf_counter()
        server.launch()
        while time.perf_counter() - started < timeout:
            if server.proc.poll() is not None:
                raise RuntimeError(f"work exited with {server.proc.returncode}: {server.tail()}")
            if applied_at is None and psql(
                    "SELECT NOT EXISTS (SELECT FROM siwa.events WHERE jti LIKE 'bench-sender-%' AND status <> 'done')") == "t":
                applied_at = time.perf_counter() - started
            if applied_at is not None and psql(
                    "SELECT count(*) = " + str(events) + " FROM siwa.provider_calls WHERE state IN ('done', 'dead', 'user_unknown')") == "t":
                calls_at = time.perf_counter() - started
                break
            time.sleep(0.2)
    finally:
        server.stop()
        for name in variables:
            os.environ.pop(name, None)
        fake.stop()
    states = dict(line.split("|") for line in psql(
        "SELECT state || '|' || count(*) FROM siwa.provider_calls GROUP BY state").splitlines() if line)
    attempts = psql("SELECT coalesce(max(attempts), 0) || '|' || coalesce(round(avg(attempts), 2), 0) FROM siwa.provider_calls").split("|")
    recorded = int(psql("SELECT count(*) FROM siwa.email_suppressions"))
    busy = sorted(fake.per_second.items())
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
        "addresses_suppressed": len(fake.suppressed), "suppressions_recorded": recorded,
    }
    result["summary"] = {k: result.get(k) for k in ("worker_applied_s", "calls_done_s", "answered_per_s", "use_of_limit",
                                                     "requests_refused_429", "attempts_max", "addresses_suppressed")}
    log(f"senders: {events} email-disabled applied by the worker in {result['worker_applied_s']} s; sendgrid calls done in "
        f"{result['calls_done_s']} s: {result['answered_per_s']} requests/s answered of {allowed:.0f} allowed "
        f"({result['use_of_limit']}), {fake.refused} refused with 429, attempts max {result['attempts_max']} "
        f"mean {result['attempts_mean']}, calls {result['calls_by_state']}, {len(fake.suppressed)} addresses suppressed")
    return result
