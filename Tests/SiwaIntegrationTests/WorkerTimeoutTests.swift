import Foundation
import SiwaApp
import SiwaPostgres
import Testing

/// The worker's statements are bounded: a hook that runs away (statement timeout) or a row lock
/// held elsewhere (lock timeout) fails that one event with a clear `last_error` and a retry; the
/// rest of the queue goes on.
@Suite("Worker statement and lock timeouts", .needsDatabase)
struct WorkerTimeoutTests {
    @Test("a hook that sleeps 10 s for one sub: with a 1 s statement timeout that event fails (57014) and is retried; the others are done")
    func statementTimeout() throws {
        let h = try TestHarness(maxAttempts: 50, retryBaseDelay: 1, timeouts: .init(workerStatement: 1))
        defer { h.stop() }
        _ = try h.query(
            """
            CREATE OR REPLACE FUNCTION siwa.on_event(event siwa.events, account siwa.accounts) RETURNS void
            LANGUAGE plpgsql AS $$
            BEGIN
                IF event.sub = 'sub.slow' THEN PERFORM pg_sleep(10); END IF;
            END $$;
            """)
        #expect(try h.post(token: try h.token(type: "consent-revoked", sub: "sub.slow")).code == "accepted")
        for i in 0..<5 {
            #expect(try h.post(token: try h.token(type: "email-disabled", sub: "sub.quick.\(i)")).code == "accepted")
        }
        // Well under the 10 s sleep: only a statement timeout can fail it this early.
        let failed = try eventually(timeout: 8) {
            try h.scalar(
                """
                SELECT count(*) FROM siwa.events WHERE sub = 'sub.slow' AND status = 'failed' AND attempts >= 1
                AND last_error LIKE '%57014%' AND last_error ILIKE '%statement timeout%'
                """) == "1"
        }
        let state = (try? h.query("SELECT status, attempts, last_error FROM siwa.events WHERE sub = 'sub.slow'").rows) ?? []
        #expect(failed, "\(state)")
        #expect(
            try eventually(timeout: 10) {
                try h.scalar("SELECT count(*) FROM siwa.events WHERE sub LIKE 'sub.quick.%' AND status = 'done'") == "5"
            })
        // The queue is not stalled behind it: events arriving now are applied while it keeps failing.
        for i in 0..<5 {
            #expect(try h.post(token: try h.token(type: "email-disabled", sub: "sub.later.\(i)")).code == "accepted")
        }
        #expect(
            try eventually(timeout: 10) {
                try h.scalar("SELECT count(*) FROM siwa.events WHERE sub LIKE 'sub.later.%' AND status = 'done'") == "5"
            })
        #expect(try h.scalar("SELECT status FROM siwa.events WHERE sub = 'sub.slow'") == "failed")
        // Its effects were rolled back with it: no account row for the slow sub.
        #expect(try h.scalar("SELECT count(*) FROM siwa.accounts WHERE apple_sub = 'sub.slow'") == "0")
        #expect(try h.scalar("SELECT count(*) FROM siwa.accounts WHERE apple_sub LIKE 'sub.quick.%' OR apple_sub LIKE 'sub.later.%'") == "10")
    }

    @Test(
        "a dashboard holds an account row FOR UPDATE: with a 1 s lock timeout that event fails (55P03); others are done; after the lock is released it is applied on retry"
    )
    func lockTimeout() throws {
        let h = try TestHarness(maxAttempts: 50, retryBaseDelay: 0.2, timeouts: .init(workerLock: 1))
        defer { h.stop() }
        // The account exists first.
        #expect(
            try h.post(
                token: try h.token(
                    type: "email-enabled", sub: "sub.locked",
                    eventTimeMillis: Int64(Date().timeIntervalSince1970 * 1000) - 60_000)
            ).code == "accepted")
        #expect(try h.waitForWorker())
        #expect(try h.scalar("SELECT status FROM siwa.accounts WHERE apple_sub = 'sub.locked'") == "active")

        // A dashboard-like session locks the row in an open transaction.
        let dashboard = try PostgresConnection(conninfo: h.conninfo)
        _ = try dashboard.execute("BEGIN")
        #expect(try dashboard.execute("SELECT apple_sub FROM siwa.accounts WHERE apple_sub = 'sub.locked' FOR UPDATE").rows.count == 1)
        var released = false
        defer { if !released { _ = try? dashboard.execute("ROLLBACK") } }

        #expect(try h.post(token: try h.token(type: "consent-revoked", sub: "sub.locked")).code == "accepted")
        for i in 0..<5 {
            #expect(try h.post(token: try h.token(type: "email-disabled", sub: "sub.free.\(i)")).code == "accepted")
        }
        let failed = try eventually(timeout: 8) {
            try h.scalar(
                """
                SELECT count(*) FROM siwa.events WHERE sub = 'sub.locked' AND type = 'consent-revoked'
                AND status = 'failed' AND attempts >= 1
                AND last_error LIKE '%55P03%' AND last_error ILIKE '%lock timeout%'
                """) == "1"
        }
        let state = (try? h.query("SELECT status, attempts, last_error FROM siwa.events WHERE sub = 'sub.locked'").rows) ?? []
        #expect(failed, "\(state)")
        #expect(
            try eventually(timeout: 10) {
                try h.scalar("SELECT count(*) FROM siwa.events WHERE sub LIKE 'sub.free.%' AND status = 'done'") == "5"
            })
        // Still locked: not applied.
        #expect(try h.scalar("SELECT status FROM siwa.events WHERE sub = 'sub.locked' AND type = 'consent-revoked'") != "done")

        _ = try dashboard.execute("COMMIT")
        released = true
        #expect(
            try eventually(timeout: 15) {
                try h.scalar("SELECT status FROM siwa.events WHERE sub = 'sub.locked' AND type = 'consent-revoked'") == "done"
            })
        #expect(try h.scalar("SELECT status FROM siwa.accounts WHERE apple_sub = 'sub.locked'") == "consent_revoked")
        let attempts = Int(try h.scalar("SELECT attempts FROM siwa.events WHERE sub = 'sub.locked' AND type = 'consent-revoked'") ?? "") ?? 0
        #expect(attempts >= 2, "applied after \(attempts) attempts: the first must have failed on the lock")
    }
}
