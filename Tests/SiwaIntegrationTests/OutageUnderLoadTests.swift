import Foundation
import Logging
import SiwaApp
import SiwaPostgres
import Testing

@Suite("Database restart under load", .enabled(if: TestDatabase.hasServerBinaries, "needs the PostgreSQL server binaries (initdb, pg_ctl)"))
struct OutageUnderLoadTests {
    @Test("PostgreSQL restarted under load: 503 during the outage, recovery by itself within 2 s, nothing lost or doubled")
    func restartUnderLoad() throws {
        let dir = NSTemporaryDirectory() + "siwa-restart-\(UInt32.random(in: 0...UInt32.max))"
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let database = try EmbeddedPostgres(dataDirectory: dir, logger: Logger(label: "db") { _ in SwiftLogNoOpLogHandler() })
        try database.start()
        defer { database.stop() }
        let h = try TestHarness(conninfo: database.conninfo)
        defer { h.stop() }
        _ = try h.query(RetryAndHookTests.hookLog)

        let tokens = try CrashSafetyTests.tokens(1200, prefix: "restart")
        let sender = LoadSender(url: h.baseURL + "/apple/notifications", tokens: tokens)
        let senderDone = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            sender.run(threads: 2, pause: 0.005)
            senderDone.signal()
        }
        // The load flows (answers stored) before the database goes away.
        #expect(eventually { sender.outcomes.withLock { $0.values.contains { $0.status == 200 } } }, "no notification accepted before the outage")
        database.stop()
        let downAt = Date()
        Thread.sleep(forTimeInterval: 1.5)
        try database.start()
        let upAt = Date()
        _ = senderDone.wait(timeout: .now() + 60)

        let outcomes = sender.outcomes.withLock { $0 }
        let during = outcomes.values.filter { $0.time > downAt.addingTimeInterval(0.05) && $0.time < upAt.addingTimeInterval(-0.3) }
        #expect(!during.isEmpty)
        #expect(
            during.allSatisfy { $0.status == 503 && $0.code == "database_unavailable" },
            "\(Set(during.map { "\($0.status ?? 0) \($0.code ?? "-")" }))")
        let firstOK = outcomes.values.filter { $0.time > upAt && $0.status == 200 }.map(\.time).min()
        let recovery = firstOK.map { $0.timeIntervalSince(upAt) } ?? .infinity
        #expect(recovery <= 2.0, "recovered after \(recovery) s")

        // Nothing lost: every 200 is stored; Apple would resend the 503s.
        let accepted = sender.accepted
        let list = "{" + accepted.sorted().joined(separator: ",") + "}"
        #expect(try h.scalar("SELECT count(*) FROM siwa.events WHERE jti = ANY($1::text[])", [list]) == String(accepted.count))
        let resend = LoadSender(url: h.baseURL + "/apple/notifications", tokens: sender.unanswered)
        resend.run(threads: 2)
        #expect(resend.accepted.count == sender.unanswered.count)
        // Nothing doubled; the worker reconnected, re-prepared and re-subscribed by itself.
        #expect(try h.waitForWorker(timeout: 30))
        #expect(try h.scalar("SELECT count(*) FROM siwa.events WHERE status = 'done'") == "1200")
        #expect(try h.scalar("SELECT count(*), count(DISTINCT event_id) FROM public.hook_log") == "1200")
        #expect(try h.scalar("SELECT count(DISTINCT event_id) FROM public.hook_log") == "1200")
        let listening = eventually(timeout: 5) {
            (try? h.scalar("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'siwa-notify listener'")) == "1"
        }
        #expect(listening)
        print(
            "database restart under load: \(during.count) answered 503 during the outage, first 200 \(String(format: "%.3f", recovery)) s after restart, \(accepted.count) accepted, lost 0, doubled 0"
        )
    }
}
