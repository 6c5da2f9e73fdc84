import Foundation
import SiwaPostgres
import Synchronization
import Testing

/// Distinct events are never merged: two notifications of one user, app and type with different
/// `event_time`s (and `jti`s) committed in one batch are both stored. (Apple never re-sends an
/// event answered 200, so one wrongly called a duplicate is lost.)
@Suite("Same-type events in one batch", .needsDatabase)
struct SameTypeEventsTests {
    final class Replies: Sendable {
        let all = Mutex<[String: TestHarness.Reply]>([:])
    }

    /// The `siwa_writer_queue` gauge of `/metrics`.
    static func writerQueue(_ h: TestHarness) throws -> Int? {
        let metrics = try h.admin("/metrics").body
        guard let line = metrics.split(separator: "\n").first(where: { $0.hasPrefix("siwa_writer_queue ") }) else { return nil }
        return Double(line.split(separator: " ")[1]).map { Int($0) }
    }

    @Test("over HTTP: email-disabled, email-enabled, email-disabled of one user in one batch: all accepted, all stored")
    func oneBatchOverHTTP() throws {
        let h = try TestHarness(timeouts: .init(commit: 120))
        defer { h.stop() }
        let sub = "000739.sametype.0001"
        let base: Int64 = 1_752_572_190_719
        // Holds inserts (not reads) until released: the first request's batch waits on it, the
        // next ones queue behind it and are taken together as the second batch.
        let locker = try PostgresConnection(conninfo: h.conninfo)
        _ = try locker.execute("BEGIN")
        _ = try locker.execute("LOCK TABLE siwa.events IN SHARE MODE")
        let replies = Replies()
        let group = DispatchGroup()
        func send(_ name: String, _ token: String) {
            group.enter()
            Thread {
                let reply = try? h.post(token: token)
                replies.all.withLock { $0[name] = reply }
                group.leave()
            }.start()
        }
        send("blocker", try h.token(type: "consent-revoked", sub: "000739.blocker.0001"))
        // The writer's own session waiting on the lock, not any lock on the table: the worker's
        // loops (retention, claims) wait on it too, and one of them seen first let the blocker
        // still be queued when the next three came, so the queue never showed exactly three.
        #expect(
            try eventually(timeout: 30) {
                try h.scalar(
                    """
                    SELECT count(*) FROM pg_stat_activity
                    WHERE datname = current_database() AND application_name = 'siwa-notify writer' AND wait_event_type = 'Lock'
                    """) == "1"
            }, "the first batch waits on the lock")
        #expect(try Self.writerQueue(h) == 0, "the blocker's batch taken, nothing queued yet")
        let types = ["email-disabled", "email-enabled", "email-disabled"]
        for (i, type) in types.enumerated() {
            send("e\(i)", try h.token(type: type, sub: sub, eventTimeMillis: base + Int64(i), email: "x@privaterelay.appleid.com"))
        }
        #expect(try eventually(timeout: 30) { try Self.writerQueue(h) == types.count }, "the three wait together")
        _ = try locker.execute("COMMIT")
        group.wait()
        let answered = replies.all.withLock { $0 }
        #expect(answered["blocker"]?.code == "accepted")
        for i in types.indices {
            #expect(answered["e\(i)"]?.status == 200 && answered["e\(i)"]?.code == "accepted", "event \(i)")
        }
        #expect(try h.scalar("SELECT count(*) FROM siwa.events WHERE sub = $1", [sub]) == "3")
        #expect(
            try h.scalar("SELECT string_agg(type, ',' ORDER BY event_time) FROM siwa.events WHERE sub = $1", [sub])
                == types.joined(separator: ","))
    }
}
