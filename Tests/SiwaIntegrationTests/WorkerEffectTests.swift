import Foundation
import SiwaApp
import SiwaCore
import SiwaDevTools
import Testing

/// What each event type does to `siwa.accounts` and `siwa.sessions`, through the whole path:
/// HTTP → outbox → worker.
@Suite(
    "Worker: event effects on accounts and sessions", .needsDatabase
)
struct WorkerEffectTests {
    static let hour: Int64 = 3_600_000

    func now() -> Int64 { Int64(Date().timeIntervalSince1970 * 1000) }

    @Test("email-disabled / email-enabled set forwarding and record the email")
    func emailEvents() throws {
        try TestHarness.with { h throws in
            let sub = "000739.email.0001"
            let t = now()
            #expect(
                try h.post(
                    token: try h.token(
                        type: "email-disabled", sub: sub, eventTimeMillis: t - 2 * Self.hour,
                        email: "abc@privaterelay.appleid.com", isPrivateEmail: true)
                ).code == "accepted")
            #expect(try h.waitForWorker())
            var row = try h.query("SELECT email_forwarding, email, is_private_email, status FROM siwa.accounts WHERE apple_sub = $1", [sub])
            #expect(row.value(0, "email_forwarding") == "f")
            #expect(row.value(0, "email") == "abc@privaterelay.appleid.com")
            #expect(row.value(0, "is_private_email") == "t")
            #expect(row.value(0, "status") == "active")
            #expect(
                try h.post(
                    token: try h.token(
                        type: "email-enabled", sub: sub, eventTimeMillis: t - Self.hour,
                        email: "abc@privaterelay.appleid.com", isPrivateEmail: true)
                ).code == "accepted")
            #expect(try h.waitForWorker())
            row = try h.query("SELECT email_forwarding FROM siwa.accounts WHERE apple_sub = $1", [sub])
            #expect(row.value(0, "email_forwarding") == "t")
            #expect(try h.scalar("SELECT count(*) FROM siwa.events WHERE status = 'done'") == "2")
        }
    }

    @Test("a late, older email-enabled never re-enables after a newer email-disabled")
    func outOfOrderEmail() throws {
        try TestHarness.with { h throws in
            let sub = "000739.order.0001"
            let t = now()
            #expect(try h.post(token: try h.token(type: "email-disabled", sub: sub, eventTimeMillis: t)).code == "accepted")
            #expect(try h.waitForWorker())
            #expect(try h.post(token: try h.token(type: "email-enabled", sub: sub, eventTimeMillis: t - Self.hour)).code == "accepted")
            #expect(try h.waitForWorker())
            #expect(try h.scalar("SELECT email_forwarding FROM siwa.accounts WHERE apple_sub = $1", [sub]) == "f")
            #expect(try h.scalar("SELECT outcome FROM siwa.events WHERE type = 'email-enabled'") == "stale")
        }
    }

    @Test("consent-revoked revokes sessions created at or before event_time; later ones survive")
    func consentRevoked() throws {
        try TestHarness.with { h throws in
            let sub = "000739.consent.0001"
            let bystander = "000739.other.0001"
            let t = now() - Self.hour
            let old1 = try h.addSession(sub: sub, createdAtMillis: t - 2 * Self.hour)
            let exact = try h.addSession(sub: sub, createdAtMillis: t)
            let later = try h.addSession(sub: sub, createdAtMillis: t + 60_000)
            let other = try h.addSession(sub: bystander, createdAtMillis: t - Self.hour)
            #expect(try h.post(token: try h.token(type: "consent-revoked", sub: sub, eventTimeMillis: t)).code == "accepted")
            #expect(try h.waitForWorker())
            func revoked(_ id: String) throws -> String? {
                try h.scalar("SELECT revoked_reason FROM siwa.sessions WHERE id = $1", [id])
            }
            #expect(try revoked(old1) == "consent-revoked")
            #expect(try revoked(exact) == "consent-revoked")
            #expect(try revoked(later) == nil)
            #expect(try revoked(other) == nil)
            #expect(try h.scalar("SELECT status FROM siwa.accounts WHERE apple_sub = $1", [sub]) == "consent_revoked")
        }
    }

    @Test("account-delete revokes every session, erases the email, and is final")
    func accountDelete() throws {
        try TestHarness.with { h throws in
            let sub = "000739.delete.0001"
            let t = now() - Self.hour
            #expect(
                try h.post(
                    token: try h.token(
                        type: "email-enabled", sub: sub, eventTimeMillis: t - Self.hour,
                        email: "someone@example.com", isPrivateEmail: false)
                ).code == "accepted")
            #expect(try h.waitForWorker())
            let s1 = try h.addSession(sub: sub, createdAtMillis: t - Self.hour)
            let s2 = try h.addSession(sub: sub, createdAtMillis: t + Self.hour / 2)
            #expect(try h.post(token: try h.token(type: "account-delete", sub: sub, eventTimeMillis: t)).code == "accepted")
            #expect(try h.waitForWorker())
            let row = try h.query("SELECT status, email, deleted_at IS NOT NULL AS gone FROM siwa.accounts WHERE apple_sub = $1", [sub])
            #expect(row.value(0, "status") == "deleted")
            #expect(row.value(0, "email") == nil)
            #expect(row.value(0, "gone") == "t")
            #expect(try h.scalar("SELECT count(*) FROM siwa.sessions WHERE apple_sub = $1 AND revoked_at IS NULL", [sub]) == "0")
            #expect(try h.scalar("SELECT revoked_reason FROM siwa.sessions WHERE id = $1", [s1]) == "account-delete")
            #expect(try h.scalar("SELECT revoked_reason FROM siwa.sessions WHERE id = $1", [s2]) == "account-delete")
            // Deleted is final: a newer email-enabled changes nothing.
            #expect(
                try h.post(
                    token: try h.token(
                        type: "email-enabled", sub: sub, eventTimeMillis: t + Self.hour,
                        email: "back@example.com")
                ).code == "accepted")
            #expect(try h.waitForWorker())
            let after = try h.query("SELECT status, email, email_forwarding FROM siwa.accounts WHERE apple_sub = $1", [sub])
            #expect(after.value(0, "status") == "deleted")
            #expect(after.value(0, "email") == nil)
            // ... and its email is erased from the outbox too (column and claims).
            let late = try h.query(
                "SELECT outcome, email, claims::text LIKE '%back@example.com%' AS in_claims FROM siwa.events WHERE sub = $1 AND type = 'email-enabled' ORDER BY event_time DESC LIMIT 1",
                [sub])
            #expect(late.value(0, "outcome") == "final_deleted")
            #expect(late.value(0, "email") == nil)
            #expect(late.value(0, "in_claims") == "f")
        }
    }

    @Test("events claim as a JSON string (Apple) and as an object (Apple's doc) both apply")
    func eventsStringAndObject() throws {
        try TestHarness.with { h throws in
            let asString = try h.token(type: "consent-revoked", sub: "000739.string.0001")
            var claims = NotificationSigner.claims(audience: TestHarness.audience, type: "consent-revoked", sub: "000739.object.0001")
            claims["events"] = .object([
                "type": .string("consent-revoked"), "sub": .string("000739.object.0001"),
                "event_time": .number(Double(now())),
            ])
            let asObject = try h.signer.sign(claims: claims)
            #expect(try h.post(token: asString).code == "accepted")
            #expect(try h.post(token: asObject).code == "accepted")
            #expect(try h.waitForWorker())
            #expect(try h.scalar("SELECT count(*) FROM siwa.accounts WHERE status = 'consent_revoked'") == "2")
        }
    }

    @Test("an event for an unknown sub creates the account")
    func unknownSubCreatesAccount() throws {
        try TestHarness.with { h throws in
            #expect(try h.post(token: try h.token(type: "email-disabled", sub: "000739.new.0001")).code == "accepted")
            #expect(try h.waitForWorker())
            #expect(try h.scalar("SELECT email_forwarding FROM siwa.accounts WHERE apple_sub = '000739.new.0001'") == "f")
        }
    }

    @Test("at a trickle, events of a few commits share one worker transaction; a lone event goes at once")
    func trickleGathers() throws {
        // A long gather, so the test does not depend on how fast this machine is (and a gather
        // wrongly taken after empty batches too would hold the first event for seconds).
        let h = try TestHarness(workerGather: .seconds(5))
        defer { h.stop() }
        let t = now()
        // A quiet spell first (the worker has claimed nothing for a second), then the first
        // event after it: claimed at once, not after a gather.
        Thread.sleep(forTimeInterval: 1)
        #expect(try h.post(token: try h.token(sub: "000739.trickle.a", eventTimeMillis: t)).code == "accepted")
        #expect(try h.waitForWorker(timeout: 1.5))
        // Two commits 0.3 s apart while the worker gathers after that batch: one transaction.
        let first = NotificationSigner.newJTI(), second = NotificationSigner.newJTI()
        #expect(try h.post(token: try h.token(sub: "000739.trickle.b", eventTimeMillis: t, jti: first)).code == "accepted")
        Thread.sleep(forTimeInterval: 0.3)
        #expect(try h.post(token: try h.token(sub: "000739.trickle.c", eventTimeMillis: t, jti: second)).code == "accepted")
        #expect(try h.waitForWorker())
        #expect(try h.scalar("SELECT count(DISTINCT xmin::text) FROM siwa.events WHERE jti IN ($1, $2)", [first, second]) == "1")
        #expect(try h.scalar("SELECT count(*) FROM siwa.events WHERE status = 'done'") == "3")
    }
}
