#!/usr/bin/env python3
"""The operator console in a real browser (headless Chromium through selenium).

Starts `siwa-notify serve --dev` (embedded PostgreSQL in a temporary directory, an API token
file), adds a named operator with `operator add`, sends notifications with `simulate`, and
drives the console as that operator would: sign in (the API token and a wrong token refused
first), the overview's numbers against SQL, its automatic refresh leaving the idle clock alone, a dead letter
replayed and applied, a user found by the hash of their sub and deleted after typing the sub
again, the deletion in the audit trail under the operator's name, a cross-site form post refused, sign-out ending the
session, the pages with JavaScript off (listing and replaying), and no error in the browser's
console. A screenshot of each page goes to test-artifacts/console/.

Usage: console_test.py PATH-TO-siwa-notify
"""
import hashlib
import http.server
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

from selenium import webdriver
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

BINARY = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else ".build/debug/siwa-notify")
ARTIFACTS = os.path.abspath("test-artifacts/console")
TOKEN = "console_browser_" + hashlib.sha256(os.urandom(16)).hexdigest()[:24]
OPERATOR = "jane.doe"
CHECKS = []


def check(condition, what):
    CHECKS.append(what)
    if not condition:
        raise AssertionError(what)
    print("  ok  " + what, flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def eventually(condition, seconds=20, what="condition"):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if condition():
            return True
        time.sleep(0.2)
    raise AssertionError("timed out waiting for " + what)


def sub_hash(sub):
    return hashlib.sha256(sub.encode()).hexdigest()[:16]


class Server:
    def __init__(self, directory):
        self.directory = directory
        self.port, self.admin = free_port(), free_port()
        self.token_file = os.path.join(directory, "api-tokens")
        with open(self.token_file, "w") as f:
            f.write(TOKEN + "\n")
        os.chmod(directory, 0o755)
        self.log = open(os.path.join(directory, "server.log"), "w")
        env = dict(os.environ, SIWA_DATA_DIR=directory, SIWA_API_TOKEN_FILE=self.token_file, SIWA_LOG_LEVEL="info")
        env.pop("SIWA_DATABASE_URL", None)
        self.env = env
        self.process = subprocess.Popen(
            [BINARY, "serve", "--dev", "--listen", f"127.0.0.1:{self.port}", "--admin-listen", f"127.0.0.1:{self.admin}"],
            env=env, stdout=self.log, stderr=subprocess.STDOUT)
        self.base = f"http://127.0.0.1:{self.admin}"
        eventually(self.up, 120, "the server to start")
        self.conninfo = f"host={directory}/postgres/run port=5432 user=postgres dbname=postgres"
        out = subprocess.run([BINARY, "operator", "add", OPERATOR], env=env, capture_output=True, text=True)
        check(out.returncode == 0 and out.stdout.startswith("siwa_console_"), f"operator add {OPERATOR} prints a token")
        self.operator_token = out.stdout.strip()

    def up(self):
        if self.process.poll() is not None:
            raise AssertionError("server exited:\n" + open(self.log.name).read()[-4000:])
        try:
            return urllib.request.urlopen(self.base + "/console/sign-in", timeout=2).status == 200
        except Exception:
            return False

    def sql(self, statement):
        out = subprocess.run(["psql", self.conninfo, "-AtX", "-c", statement], capture_output=True, text=True, check=True)
        return out.stdout.strip()

    def simulate(self, type_, sub, email=None):
        args = [BINARY, "simulate", "--type", type_, "--sub", sub, "--url", f"http://127.0.0.1:{self.port}/apple/notifications"]
        if email:
            args += ["--email", email, "--private"]
        out = subprocess.run(args, env=self.env, capture_output=True, text=True)
        check(out.returncode == 0 and "accepted" in out.stdout, f"simulate {type_} accepted")

    def settled(self):
        return self.sql("SELECT count(*) FROM siwa.event_queue WHERE status IN ('pending', 'failed')") == "0"

    def stop(self):
        self.process.terminate()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self.log.close()


def browser(javascript=True):
    options = Options()
    options.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
    for a in ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1000", "--disable-gpu"]:
        options.add_argument(a)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    if not javascript:
        options.add_experimental_option("prefs", {"profile.managed_default_content_settings.javascript": 2})
    return webdriver.Chrome(service=Service(shutil.which("chromedriver") or "/usr/bin/chromedriver"), options=options)


def shot(driver, name):
    height = driver.execute_script("return document.body.scrollHeight") if name != "nojs" else 1400
    driver.set_window_size(1400, min(max((height or 1000) + 40, 700), 4000))
    driver.save_screenshot(os.path.join(ARTIFACTS, name + ".png"))
    driver.set_window_size(1400, 1000)


def console_errors(driver):
    return [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]


def gone(element):
    """True once `element` is no longer in the page. Chrome answers a look at an element of a
    page being replaced with "stale element" or, mid-navigation, with "unhandled inspector error:
    Node with given id does not belong to the document": both mean it went (selenium's
    staleness_of takes only the first, and fails the test on the second)."""
    try:
        element.is_enabled()
        return False
    except WebDriverException:
        return True


def sign_in(driver, server, token, name=OPERATOR):
    driver.get(server.base + "/console")
    check(driver.current_url.endswith("/console/sign-in"), "signed out: /console leads to the sign-in form")
    for field, value in (("operator", name), ("token", token)):
        box = driver.find_element(By.NAME, field)
        box.clear()
        box.send_keys(value)
    button = driver.find_element(By.CSS_SELECTOR, "form.signin button[type=submit]")
    button.click()
    # The sign-in form's own page is "complete" until the answer replaces it: wait for that page
    # to go first, or the next page is asked for before the session cookie is set (the sign-in
    # form then comes back in its place).
    WebDriverWait(driver, 15).until(lambda _: gone(button))
    eventually(lambda: driver.execute_script("return document.readyState") == "complete", 15, "the page after sign-in")


def text(driver):
    return driver.find_element(By.TAG_NAME, "body").text


def shows(driver, wanted, seconds=15):
    """True once the page shows `wanted` (a click's navigation may still be under way)."""
    def found():
        try:
            return wanted in text(driver)
        except Exception:  # the old page went away mid-read
            return False
    try:
        return eventually(found, seconds, repr(wanted))
    except AssertionError:
        return False


def at(driver, suffix, seconds=15):
    try:
        return eventually(lambda: driver.current_url.endswith(suffix), seconds, suffix)
    except AssertionError:
        return False


def stat(driver, label):
    for card in driver.find_elements(By.CSS_SELECTOR, ".stat"):
        if card.find_element(By.CSS_SELECTOR, ".label").text.strip().lower() == label.lower():
            return card.find_element(By.CSS_SELECTOR, ".value").text.strip()
    raise AssertionError("no stat " + label)


def evil_site(target):
    """A page on another origin (another port) whose form posts to the console."""
    page = f"""<!doctype html><html><body><form id="f" method="post" action="{target}/console/replay">
<input name="csrf" value="0000"><input name="kind" value="events"><input name="scope" value="all">
<button id="go" type="submit">win a prize</button></form></body></html>""".encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        timeout = 5  # a connection Chrome opened ahead and never used is dropped, not waited on

        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.end_headers()
            self.wfile.write(page)

        def log_message(self, *args):
            pass

    # Threaded: with one thread, a spare connection Chrome keeps idle held serve_forever, and
    # shutdown() with it, until Chrome dropped the socket a minute later.
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def main():
    os.makedirs(ARTIFACTS, exist_ok=True)
    directory = tempfile.mkdtemp(prefix="siwa-console-browser-")
    server = Server(directory)
    driver = nojs = None
    try:
        # Data: users with email events, one to delete, events that will be dead letters.
        for i in range(1, 4):
            server.simulate("email-disabled", f"000739.browser.000{i}", f"user{i}@privaterelay.appleid.com")
        server.simulate("consent-revoked", "000739.browser.0002")
        victim = "000739.browser.delete.me"
        server.simulate("email-enabled", victim, "victim@privaterelay.appleid.com")
        server.simulate("consent-revoked", "000739.browser.dead1")
        server.simulate("email-enabled", "000739.browser.dead2", "dead2@privaterelay.appleid.com")
        eventually(server.settled, 30, "the worker to apply the events")
        server.sql("UPDATE siwa.events SET status = 'dead', last_error = 'apply failed: simulated' "
                   "WHERE sub IN ('000739.browser.dead1', '000739.browser.dead2')")
        dead1 = server.sql("SELECT id FROM siwa.events WHERE sub = '000739.browser.dead1'")
        dead2 = server.sql("SELECT id FROM siwa.events WHERE sub = '000739.browser.dead2'")

        driver = browser()
        # The API's token and a wrong one: one generic refusal, no session.
        sign_in(driver, server, TOKEN)
        check(shows(driver, "Sign-in refused."), "the API token does not open the console")
        sign_in(driver, server, "not-the-token-0123456789")
        check(shows(driver, "Sign-in refused."), "a wrong token is refused")
        check(driver.get_cookie("siwa_console") is None, "no session cookie after a refusal")
        shot(driver, "sign-in-refused")
        driver.get_log("browser")  # the 401 itself is logged by the browser: expected here

        sign_in(driver, server, server.operator_token)
        check(at(driver, "/console"), "signed in: the overview")
        check(driver.find_element(By.CSS_SELECTOR, "header .who span").text == OPERATOR, "the header names the operator")
        cookie = driver.get_cookie("siwa_console")
        check(cookie and cookie["httpOnly"] and cookie.get("sameSite") == "Strict" and cookie["path"] == "/console",
              "session cookie HttpOnly, SameSite=Strict, Path=/console")

        # The overview's numbers are what SQL says.
        pending, failed, dead = server.sql("SELECT pending, failed, dead FROM siwa.backlog").split("|")
        check(stat(driver, "pending") == pending and stat(driver, "failed") == failed and stat(driver, "dead") == dead,
              f"overview pending/failed/dead = SQL ({pending}/{failed}/{dead})")
        check(len(driver.find_elements(By.CSS_SELECTOR, "figure.chart svg")) == 4, "four server-drawn charts")
        check("events/min" in driver.page_source and "events/h" in driver.page_source, "charts carry their units")
        shot(driver, "overview")

        # The overview refreshes itself every 15 s without counting as activity: the idle clock
        # set an hour back stays there once the page has been replaced by a refresh.
        server.sql("UPDATE siwa.console_sessions SET last_seen_at = now() - interval '1 hour' WHERE ended_at IS NULL")
        driver.execute_script("document.querySelector('main').dataset.before = 'refresh'")
        eventually(lambda: driver.execute_script("return document.querySelector('main').dataset.before") is None, 25,
                   "the overview's automatic refresh")
        check(stat(driver, "dead") == dead, "the refreshed overview shows the numbers")
        check(server.sql("SELECT bool_and(last_seen_at < now() - interval '59 minutes') FROM siwa.console_sessions "
                         "WHERE ended_at IS NULL") == "t", "the automatic refresh did not reset the idle clock")

        driver.get(server.base + "/console/events")
        check("email-disabled" in text(driver), "events listed")
        shot(driver, "events")
        driver.find_element(By.CSS_SELECTOR, "table tbody tr td a").click()
        check(shows(driver, "Verified claims"), "an event's page")
        # An event that holds an address (column and claims): only its masked form, anywhere in the page.
        mailed = server.sql("SELECT id FROM siwa.events WHERE sub = '000739.browser.0001' AND type = 'email-disabled'")
        check(server.sql(f"SELECT email FROM siwa.events WHERE id = {mailed}") == "user1@privaterelay.appleid.com",
              "the event shown holds an address")
        driver.get(server.base + f"/console/events/{mailed}")
        check(shows(driver, "Verified claims") and "u•••@privaterelay.appleid.com" in text(driver), "the event's address shown masked")
        check("user1" not in driver.page_source, "the raw address nowhere on the event page")
        shot(driver, "event")

        # A dead letter replayed (its row's button) and applied by the worker.
        driver.get(server.base + "/console/failures")
        check(f"/console/events/{dead1}" in driver.page_source, "the dead letter is listed")
        shot(driver, "failures")
        driver.find_element(By.CSS_SELECTOR, f"button[name=one][value='{dead1}']").click()
        check(shows(driver, "1 dead event put back in the queue."), "replay confirmed on the page")
        eventually(lambda: server.sql(f"SELECT status FROM siwa.events WHERE id = {dead1}") == "done", 20, "the replayed event to apply")
        check(True, "the replayed dead letter was applied")

        # A dead call to a hosted provider: on the overview's card, listed on Failures, replayed by
        # its row's button (no provider is configured here: it then waits in the queue).
        call = server.sql("INSERT INTO siwa.provider_calls (target, apple_sub, effect, event_id, event_type, event_time, "
                          f"state, attempts, last_status, last_reason) VALUES ('clerk', '000739.browser.dead1', 'end_sessions', {dead1}, "
                          "'consent-revoked', now(), 'dead', 9, 503, 'service_unavailable') RETURNING id").splitlines()[0]
        driver.get(server.base + "/console")
        card = driver.find_element(By.ID, "provider-calls").text
        check("clerk" in card and "not configured" in card, "the overview's provider-calls card shows the dead call's provider")
        driver.get(server.base + "/console/failures")
        check("Dead provider calls" in text(driver) and "service_unavailable" in text(driver), "the dead provider call is listed")
        driver.find_element(By.CSS_SELECTOR, f"#replay-provider-calls button[name=one][value='{call}']").click()
        check(shows(driver, "1 dead provider call put back in the queue."), "provider call replay confirmed on the page")
        check(server.sql(f"SELECT state || ' ' || attempts FROM siwa.provider_calls WHERE id = {call}") == "pending 0",
              "the replayed provider call is back in the queue")

        # A user found by the hash of their sub, deleted after typing the sub again.
        driver.get(server.base + "/console/users")
        box = driver.find_element(By.NAME, "q")
        box.send_keys(sub_hash(victim))
        box.submit()
        check(shows(driver, victim) and "v•••@privaterelay.appleid.com" in text(driver), "user found by sub hash, email masked")
        shot(driver, "user")
        button = driver.find_element(By.CSS_SELECTOR, "form.danger-zone button")
        check(not button.is_enabled(), "delete disabled until the sub is typed")
        driver.find_element(By.NAME, "confirm").send_keys(victim)
        check(button.is_enabled(), "delete enabled once the sub is typed")
        button.click()
        check(shows(driver, "Deletion requested"), "deletion requested")
        eventually(lambda: server.sql(f"SELECT status FROM siwa.accounts WHERE apple_sub = '{victim}'") == "deleted", 20,
                   "the deletion to apply")
        check(True, "the user is deleted")
        driver.get(server.base + "/console/audit")
        check("delete-user" in text(driver) and "user:" + sub_hash(victim) in text(driver), "the deletion is in the audit trail")
        check(victim not in driver.page_source, "the audit trail names the user by hash only")
        check(OPERATOR in text(driver), "the audit trail names the operator")
        check(server.sql("SELECT operator FROM siwa.operator_actions WHERE action = 'delete-user'") == OPERATOR,
              "the deletion's audit row names the operator")

        driver.get(server.base + "/console/sync")
        check("App transfer" in text(driver), "reconciliation and transfer page")
        shot(driver, "sync")
        driver.get(server.base + "/console/audit")
        shot(driver, "audit")
        errors = console_errors(driver)
        check(not errors, "no error in the browser's console: " + repr(errors))

        # A cross-site form post (another origin: the console's cookie is same-site on a loopback IP,
        # so the Origin check is what refuses it).
        evil = evil_site(server.base)
        driver.get(f"http://127.0.0.1:{evil.server_address[1]}/")
        driver.find_element(By.ID, "go").click()
        check(shows(driver, "Refused"), "a cross-site form post is refused")
        check(server.sql(f"SELECT status FROM siwa.events WHERE id = {dead2}") == "dead", "and replayed nothing")
        shot(driver, "cross-site-refused")
        evil.shutdown()
        driver.get_log("browser")  # the 403 itself: expected

        # Sign-out ends the session: the old cookie no longer opens a page.
        driver.get(server.base + "/console")
        old = driver.get_cookie("siwa_console")
        driver.find_element(By.CSS_SELECTOR, "header .who button").click()
        check(at(driver, "/console/sign-in"), "signed out")
        driver.add_cookie({"name": "siwa_console", "value": old["value"], "path": "/console"})
        driver.get(server.base + "/console")
        check(driver.current_url.endswith("/console/sign-in"), "the old session cookie is refused after sign-out")
        check("sign-out" in server.sql("SELECT string_agg(action, ',') FROM siwa.operator_actions"), "sign-out recorded")

        # JavaScript off: still lists and replays.
        nojs = browser(javascript=False)
        sign_in(nojs, server, server.operator_token)
        nojs.get(server.base + "/console/failures")
        check(f"/console/events/{dead2}" in nojs.page_source, "JS off: dead letters listed")
        nojs.find_element(By.CSS_SELECTOR, f"input[type=checkbox][value='{dead2}']").click()
        nojs.find_element(By.CSS_SELECTOR, "form.replay button[name=scope][value=selected]").click()
        check(shows(nojs, "1 dead event put back in the queue."), "JS off: replay selected")
        eventually(lambda: server.sql(f"SELECT status FROM siwa.events WHERE id = {dead2}") == "done", 20, "the replay (JS off)")
        check(True, "JS off: the replayed event was applied")
        shot(nojs, "failures-no-javascript")
        check(not console_errors(nojs), "no error in the browser's console with JS off")
        print(f"console browser test: {len(CHECKS)} checks passed; screenshots in {ARTIFACTS}")
    except Exception:
        print("server log (tail):\n" + open(os.path.join(directory, "server.log")).read()[-3000:], file=sys.stderr)
        raise
    finally:
        for d in (driver, nojs):
            if d:
                d.quit()
        server.stop()
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
