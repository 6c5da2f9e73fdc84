import Foundation
import Logging
import SiwaApp
import SiwaPostgres
import Testing

/// A database of its own (embedded PostgreSQL in a temp dir) that the test stops and starts.
@Suite("Database outage", .enabled(if: TestDatabase.hasServerBinaries, "needs the PostgreSQL server binaries (initdb, pg_ctl)"))
struct DatabaseOutageTests {
    @Test("database stopped: 503 + Retry-After; started again: the same notification is accepted and applied once")
    func outageAndRecovery() throws {
        try TestDatabase.withEmbedded("outage") { database in
            let h = try TestHarness(conninfo: database.conninfo)
            defer { h.stop() }

            let sub = "000739.outage.0001"
            let session = try h.addSession(sub: sub, createdAtMillis: Int64(Date().timeIntervalSince1970 * 1000) - 60_000)
            let token = try h.token(type: "consent-revoked", sub: sub)
            #expect(try h.scalar("SELECT 1") == "1")

            database.stop()
            let down = try h.post(token: token)
            #expect(down.status == 503)
            #expect(down.code == "database_unavailable")
            #expect(down.headers["retry-after"] != nil)
            #expect(try h.admin("/readyz").status == 503)

            try database.start()
            // The writer's pooled connection broke with the restart: it retries once on a fresh one
            // (the insert is idempotent), so the very first request after the restart succeeds.
            let reply = try h.post(token: token)
            #expect(reply.status == 200)
            #expect(reply.code == "accepted")
            #expect(try h.post(token: token).code == "duplicate")
            #expect(try h.waitForWorker(timeout: 15))
            #expect(try h.scalar("SELECT count(*) FROM siwa.events") == "1")
            #expect(try h.scalar("SELECT attempts FROM siwa.events") == "1")
            #expect(try h.scalar("SELECT revoked_reason FROM siwa.sessions WHERE id = $1", [session]) == "consent-revoked")
            #expect(try h.admin("/readyz").status == 200)
        }
    }
}
