"""Mode sigterm: `receive` stopped by SIGTERM under load, many times (every exit must be 0)."""
import signal
import subprocess
import threading
import time
from .harness import PATH, Server, env_int, log, migrate, pct, presign, read_bodies


def sigterm():
    """BENCH_SIGTERM_CYCLES (default 200) times: start `receive`, load it from BENCH_SIGTERM_CLIENTS
    keep-alive clients (default 8), send SIGTERM once 50 requests were answered 200, and record
    the exit status, how long the stop took and what the load got (200, 503, no answer)."""
    import http.client
    cycles = env_int("BENCH_SIGTERM_CYCLES", 200)
    clients = env_int("BENCH_SIGTERM_CLIENTS", 8)
    bodies = read_bodies(presign("sigterm", 20000))
    migrate()
    exits, stops, interrupted = {}, [], 0
    totals = {"200": 0, "503": 0, "none": 0, "other": 0}
    log(f"sigterm: {cycles} cycles of receive under load from {clients} clients, SIGTERM after 50 answers 200")
    for cycle in range(cycles):
        server = Server("receive", 4).launch().wait_ready()
        stop = threading.Event()
        counts = {"200": 0, "503": 0, "none": 0, "other": 0}
        lock = threading.Lock()

        def client(k):
            conn, j = None, k
            while not stop.is_set():
                body = bodies[(cycle * 7919 + j) % len(bodies)]
                j += clients
                try:
                    if conn is None:
                        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
                    conn.request("POST", PATH, body, {"Content-Type": "application/json"})
                    r = conn.getresponse()
                    r.read()
                    key = str(r.status) if r.status in (200, 503) else "other"
                    if (r.getheader("Connection") or "").lower() == "close":
                        conn.close()
                        conn = None
                except (OSError, http.client.HTTPException):
                    key = "none"
                    if conn is not None:
                        conn.close()
                    conn = None
                    time.sleep(0.002)
                with lock:
                    counts[key] += 1

        threads = [threading.Thread(target=client, args=(k,), daemon=True) for k in range(clients)]
        for t in threads:
            t.start()
        deadline = time.time() + 60
        while counts["200"] < 50 and time.time() < deadline and server.proc.poll() is None:
            time.sleep(0.005)
        t0 = time.perf_counter()
        server.proc.send_signal(signal.SIGTERM)
        try:
            rc = server.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.proc.kill()
            rc = "hung (killed)"
        stops.append(time.perf_counter() - t0)
        stop.set()
        for t in threads:
            t.join()
        server.log_file.close()
        exits[str(rc)] = exits.get(str(rc), 0) + 1
        if rc != 0:
            log(f"sigterm: cycle {cycle} exited {rc}: {server.tail()[-800:]}")
        if counts["503"] + counts["none"] > 0:
            interrupted += 1
        for key in totals:
            totals[key] += counts[key]
        if (cycle + 1) % 25 == 0:
            log(f"sigterm: {cycle + 1}/{cycles} cycles, exits {exits}")
    ok = exits.get("0", 0) == cycles
    result = {"cycles": cycles, "clients": clients, "exit_codes": exits, "every_exit_0": ok,
              "cycles_with_load_interrupted": interrupted, "answers": totals,
              "stop_seconds": {"p50": round(pct(stops, 50), 3), "p99": round(pct(stops, 99), 3), "max": round(max(stops), 3)},
              "summary": {"cycles": cycles, "every_exit_0": ok, "exit_codes": exits}}
    log(f"sigterm: {cycles} SIGTERMs under load, exit codes {exits}, load interrupted in {interrupted}; "
        f"answers {totals}; stop p50 {result['stop_seconds']['p50']} s, max {result['stop_seconds']['max']} s")
    if not ok:
        raise SystemExit("sigterm: some exit was not 0")
    return result
