import Foundation
import SiwaApp
import SiwaCore
import SiwaCrypto
import SiwaDevTools
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Fault injection against the real binary and a real PostgreSQL: kill -9 at random moments,
/// several workers on one queue. Exactly-once is measured with a hook that logs every
/// application of an event in the same transaction (a double application would log twice).
@Suite("Crash safety and scale-out", .serialized, .needsDatabase)
struct CrashSafetyTests {
    static let signer = NotificationSigner(key: TestHarness.sharedKey, kid: "test-key-1")

    struct Environment {
        let conninfo: String
        let jwks: String

        init() throws {
            conninfo = try TestDatabase.create()
            _ = try TestDatabase.query(conninfo, RetryAndHookTests.hookLog)
            jwks = NSTemporaryDirectory() + "siwa-crash-jwks-\(UInt32.random(in: 0...UInt32.max)).json"
            try CrashSafetyTests.signer.jwks.write(toFile: jwks, atomically: true, encoding: .utf8)
        }

        func start(_ command: String, environment extra: [String: String] = [:]) throws -> (ServerProcess, String) {
            let port = ServerProcess.freePort()
            let process = try ServerProcess(
                [command],
                environment: [
                    "SIWA_DATABASE_URL": conninfo, "SIWA_AUDIENCES": TestHarness.audience, "SIWA_JWKS_URL": "file://" + jwks,
                    "SIWA_LISTEN": "127.0.0.1:\(port)", "SIWA_ADMIN_LISTEN": "127.0.0.1:\(ServerProcess.freePort())",
                    "SIWA_LOG_LEVEL": "info",
                ].merging(extra) { _, new in new })
            return (process, "http://127.0.0.1:\(port)/apple/notifications")
        }

        func count(_ sql: String) throws -> Int {
            Int(try TestDatabase.query(conninfo, sql).scalar ?? "-1") ?? -1
        }
    }

    static func tokens(_ n: Int, prefix: String) throws -> [(jti: String, token: String)] {
        let now = Int64(Date().timeIntervalSince1970)
        return try (0..<n).map { i in
            let jti = NotificationSigner.newJTI()
            let claims = NotificationSigner.claims(
                audience: TestHarness.audience, type: "consent-revoked",
                sub: "\(prefix).\(i)", eventTimeMillis: now * 1000 - Int64(i), jti: jti)
            return (jti, try signer.sign(claims: claims))
        }
    }

    @Test("receiver and worker killed -9 under load: every 200 is stored, resends are accepted or duplicate, all applied exactly once")
    func killReceiverUnderLoad() throws {
        let env = try Environment()
        var answered = 0
        var answeredBeforeKills: [Int] = []
        var unanswered: [(jti: String, token: String)] = []
        let trials = 6
        for trial in 0..<trials {
            let (server, url) = try env.start("serve")
            #expect(server.waitForLog("worker started"), "\(server.log.suffix(500))")
            let sender = LoadSender(url: url, tokens: try Self.tokens(300, prefix: "kill\(trial)"))
            let sent = DispatchSemaphore(value: 0)
            Thread.detachNewThread {
                sender.run(threads: 4)
                sent.signal()
            }
            // Killed mid-load: once a random number of notifications (of 300) were answered 200,
            // whatever the machine's speed.
            let target = Int.random(in: 10...120)
            let reached = eventually(timeout: 60) { sender.accepted.count >= target }
            let beforeKill = sender.accepted.count
            server.kill9()
            sent.wait()
            answeredBeforeKills.append(beforeKill)
            #expect(reached, "trial \(trial): \(beforeKill) answered 200 of the \(target) awaited before the kill")
            #expect(beforeKill > 0, "trial \(trial): nothing was answered 200 before the kill")
            #expect(!sender.unanswered.isEmpty, "trial \(trial): the load was over before the kill: it interrupted nothing")
            let accepted = sender.accepted
            #expect(accepted.count >= beforeKill)
            answered += accepted.count
            // Every notification answered 200 is in the outbox.
            let list = "{" + accepted.sorted().joined(separator: ",") + "}"
            let stored = try TestDatabase.query(env.conninfo, "SELECT count(*) FROM siwa.events WHERE jti = ANY($1::text[])", [list]).scalar
            #expect(stored == String(accepted.count), "trial \(trial): answered \(accepted.count), stored \(stored ?? "?")")
            unanswered += sender.unanswered
        }
        // Apple's retries: resend what got no 200.
        let (server, url) = try env.start("serve")
        defer { server.terminate() }
        #expect(server.waitForLog("worker started"))
        let resend = LoadSender(url: url, tokens: unanswered)
        resend.run(threads: 4)
        let codes = resend.outcomes.withLock { $0.values.map { $0.code ?? "none" } }
        #expect(codes.allSatisfy { $0 == "accepted" || $0 == "duplicate" }, "\(Set(codes))")
        #expect(resend.accepted.count == unanswered.count)
        let total = trials * 300
        let finished = eventually(timeout: 30) { (try? env.count("SELECT count(*) FROM siwa.events WHERE status = 'done'")) == total }
        #expect(finished)
        #expect(try env.count("SELECT count(*) FROM siwa.events") == total)
        #expect(try env.count("SELECT count(*) FROM public.hook_log") == total, "an event was applied twice or not at all")
        #expect(try env.count("SELECT count(DISTINCT event_id) FROM public.hook_log") == total)
        #expect(try env.count("SELECT count(*) FROM siwa.events WHERE attempts <> 1") == 0)
        #expect(try env.count("SELECT count(*) FROM siwa.accounts WHERE status = 'consent_revoked'") == total)
        #expect(answered > 0)
        #expect(!unanswered.isEmpty, "no kill interrupted the load")
        print(
            "kill -9 receiver: \(trials) trials, \(answered) answered 200 before the kills (per kill: \(answeredBeforeKills)), \(unanswered.count) resent, lost 0, double-applied 0"
        )
    }

    @Test("worker killed -9 mid-batch, many times: every event applied exactly once, none stuck")
    func killWorkerMidBatch() throws {
        let env = try Environment()
        let n = 40000
        _ = try TestDatabase.query(
            env.conninfo,
            """
            INSERT INTO siwa.sessions (apple_sub, created_at) SELECT 'w.' || g, now() - interval '1 hour' FROM generate_series(1, \(n)) g;
            INSERT INTO siwa.events (jti, aud, sub, type, event_time, status, claims)
            SELECT 'w-' || g, 'a', 'w.' || g, 'consent-revoked', now() - interval '1 minute', 'pending', '{}'
            FROM generate_series(1, \(n)) g;
            """)
        var kills = 0
        var progress: [Int] = []
        for k in 0..<8 {
            let before = progress.last ?? 0
            let (worker, _) = try env.start("work")
            #expect(worker.waitForLog("worker started", timeout: 20), "\(worker.log.suffix(500))")
            // Killed while applying: once it has moved past a point spread over the backlog
            // (about k+1 tenths, jittered), whatever the machine's speed.
            let target = max(before + 1, n * (k + 1) / 10 + Int.random(in: 0..<(n / 20)))
            let moved = eventually(timeout: 60) {
                (try? env.count("SELECT count(*) FROM siwa.events WHERE status = 'done'")).map { $0 >= target } ?? false
            }
            worker.kill9()
            kills += 1
            let done = try env.count("SELECT count(*) FROM siwa.events WHERE status = 'done'")
            progress.append(done)
            // The preconditions of the test: the worker was killed mid-run, with progress made
            // since the last kill and work left (so batches were in flight).
            #expect(moved, "kill \(kills): done \(done), awaited \(target)")
            #expect(done > before, "kill \(kills): no progress since the last kill (\(before) done)")
            #expect(done < n, "kill \(kills): the worker had finished the backlog before the kill")
            if done >= n { break }
        }
        #expect(kills == 8)
        let (worker, _) = try env.start("work")
        defer { worker.terminate() }
        let finished = eventually(timeout: 60) { (try? env.count("SELECT count(*) FROM siwa.events WHERE status = 'done'")) == n }
        #expect(finished)
        #expect(try env.count("SELECT count(*) FROM public.hook_log") == n)
        #expect(try env.count("SELECT count(DISTINCT event_id) FROM public.hook_log") == n)
        #expect(try env.count("SELECT count(*) FROM siwa.events WHERE attempts <> 1") == 0)
        #expect(try env.count("SELECT count(*) FROM siwa.sessions WHERE revoked_at IS NULL") == 0)
        print("kill -9 worker: \(kills) kills over \(n) events (done after each kill: \(progress)), lost 0, double-applied 0")
    }

    @Test("three workers started together on one large backlog: each does a share, every event applied exactly once")
    func threeWorkers() throws {
        let env = try Environment()
        // Each application of an event also sleeps in the hook (pg_sleep rounds up to 1 ms), so
        // one worker alone would need ~30 s for the backlog: far longer than the others take to
        // start, so the three must share it. Subs repeat every 10,000 events (three events each,
        // in different batches), so concurrent batches seldom wait on one another's accounts.
        let n = 30000
        _ = try TestDatabase.query(
            env.conninfo,
            """
            CREATE OR REPLACE FUNCTION siwa.on_event(event siwa.events, account siwa.accounts) RETURNS void
            LANGUAGE plpgsql AS $$
            BEGIN
                INSERT INTO public.hook_log VALUES (event.id, event.sub, event.type, account.status);
                PERFORM pg_sleep(0.0005);
            END $$;
            INSERT INTO siwa.events (jti, aud, sub, type, event_time, status, claims)
            SELECT 's-' || g, 'a', 's.' || (g % 10000), (ARRAY['email-disabled', 'email-enabled', 'consent-revoked'])[1 + g % 3],
                   now() - interval '1 hour' + (g || ' ms')::interval, 'pending', '{}'
            FROM generate_series(1, \(n)) g;
            """)
        #expect(try env.count("SELECT count(*) FROM siwa.events WHERE status = 'pending'") == n)
        // Started together (three launches a few ms apart), on the backlog already there.
        let workers = try (0..<3).map { _ in try env.start("work").0 }
        defer { workers.forEach { $0.terminate() } }
        let finished = eventually(timeout: 180) { (try? env.count("SELECT count(*) FROM siwa.events WHERE status = 'done'")) == n }
        #expect(finished, "done: \((try? env.count("SELECT count(*) FROM siwa.events WHERE status = 'done'")) ?? -1) of \(n)")
        // Exactly once: one hook call per event (the hook runs in the transaction that marks the
        // event done, so a double application would leave two rows), and one attempt each.
        #expect(try env.count("SELECT count(*) FROM public.hook_log") == n, "an event was applied twice or not at all")
        #expect(try env.count("SELECT count(DISTINCT event_id) FROM public.hook_log") == n)
        #expect(try env.count("SELECT count(*) FROM siwa.events WHERE attempts <> 1 OR outcome IS NULL") == 0)
        // Workers log an event once its transaction has committed: the last lines may trail the rows.
        var shares: [Int] = []
        let logged = eventually(timeout: 20) {
            shares = workers.map { $0.log.components(separatedBy: "\"event applied\"").count - 1 }
            return shares.reduce(0, +) == n
        }
        #expect(logged, "applied events logged: \(shares), expected \(n) in all")
        let idle = workers.enumerated().filter { shares[$0.offset] == 0 }.map { worker in
            "worker \(worker.offset) running=\(worker.element.process.isRunning): "
                + worker.element.log.split(separator: "\n").filter { !$0.contains("\"event applied\"") }.suffix(8).joined(separator: "\n")
        }
        #expect(shares.count == 3 && shares.allSatisfy { $0 > 0 }, "every worker must apply a share: \(shares)\n\(idle.joined(separator: "\n"))")
        print("3 workers: \(n) events applied once each; shares \(shares)")
    }

    @Test("one work process: its second connection joins in on a backlog, alongside the first; every event applied once")
    func secondConnectionHelpsWithBacklog() throws {
        let env = try Environment()
        let n = 6000
        // The hook records which backend applied each event (and sleeps a little, so one
        // connection alone would take a while).
        _ = try TestDatabase.query(
            env.conninfo,
            """
            CREATE TABLE public.applied_by (event_id bigint, backend int, at timestamptz);
            CREATE OR REPLACE FUNCTION siwa.on_event(event siwa.events, account siwa.accounts) RETURNS void
            LANGUAGE plpgsql AS $$
            BEGIN
                INSERT INTO public.applied_by VALUES (event.id, pg_backend_pid(), clock_timestamp());
                PERFORM pg_sleep(0.0005);
            END $$;
            INSERT INTO siwa.events (jti, aud, sub, type, event_time, status, claims)
            SELECT 'h-' || g, 'a', 'h.' || g, 'consent-revoked', now() - interval '1 hour', 'pending', '{}'
            FROM generate_series(1, \(n)) g;
            """)
        let (worker, _) = try env.start("work", environment: ["SIWA_WORKER_CONNECTIONS": "2"])
        defer { worker.terminate() }
        let finished = eventually(timeout: 120) { (try? env.count("SELECT count(*) FROM siwa.events WHERE status = 'done'")) == n }
        #expect(finished)
        #expect(try env.count("SELECT count(*) FROM public.applied_by") == n)
        #expect(try env.count("SELECT count(DISTINCT event_id) FROM public.applied_by") == n)
        // Two backends applying at the same time (one connection that reconnected would give two
        // backends one after the other): some pair of their busy intervals overlaps.
        #expect(
            try env.count(
                """
                WITH b AS (SELECT backend, min(at) AS first, max(at) AS last FROM public.applied_by GROUP BY backend)
                SELECT count(*) FROM b x JOIN b y ON x.backend < y.backend AND x.first < y.last AND y.first < x.last
                """) >= 1, "the second connection never worked alongside the first")
        #expect(!worker.log.contains("reconnecting"), "a loop reconnected: \(worker.log.suffix(2000))")
    }
}
