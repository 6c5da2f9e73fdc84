import Foundation
import SiwaApp
import SiwaCore
import SiwaPostgres
import Testing

/// Contract §8: a revocation is proven, not assumed (Apple's revoke answers 200 to anything), and
/// a deletion keeps its evidence, which `user-report` prints.
@Suite("Revocation proof", .serialized, .needsDatabase)
struct RevocationProofTests {
    typealias S = AppleTestSetup
    typealias H = DeletionHarness

    /// The refresh-token validations the fake received (`grant_type=refresh_token`).
    static func validations(_ h: H) -> [FakeApple.Call] {
        h.fake.calls(to: "/auth/token").filter { $0.form?["grant_type"] == "refresh_token" }
    }

    /// `siwa.revocation_calls` of `sub`: "kind status outcome", oldest first.
    static func calls(_ h: H, _ sub: String) throws -> [String] {
        try h.query(
            """
            SELECT c.kind || ' ' || coalesce(c.http_status::text, '-') || ' ' || c.outcome FROM siwa.revocation_calls c
            JOIN siwa.revocations r ON r.id = c.revocation_id WHERE r.apple_sub = $1 ORDER BY c.id
            """, [sub]
        ).rows.compactMap { $0.first ?? nil }
    }

    @Test("Apple's 200 is followed by one validation of the same token: invalid_grant confirms it, each call is evidence")
    func confirmed() throws {
        let h = try H()
        defer { h.stop() }
        let sub = "001234.proof.0001"
        let token = try h.signIn(sub: sub)
        _ = try h.query("SELECT siwa.request_deletion($1, $2)", [sub, S.clientID])
        #expect(try h.eventually { try h.revocations(sub) == ["done"] })
        #expect(
            try h.scalar("SELECT confirmation || ' ' || (confirmed_at IS NOT NULL) FROM siwa.revocations WHERE apple_sub = $1", [sub])
                == "confirmed true")
        #expect(try Self.calls(h, sub) == ["revoke 200 success", "validate 400 invalid_grant"])
        // The same token, once, after the revoke.
        let validations = Self.validations(h)
        #expect(validations.count == 1 && validations.first?.form?["refresh_token"] == token && validations.first?.error == "invalid_grant")
        #expect(h.fake.calls(to: "/auth/revoke").count == 1)
        #expect(try h.scalar("SELECT ciphertext IS NULL FROM siwa.revocations WHERE apple_sub = $1", [sub]) == "t")
    }

    @Test("a revoke Apple answers 200 and does not perform ends unconfirmed: status, /metrics, revoked again with backoff, then confirmed")
    func unconfirmed() throws {
        let h = try H(retryBaseDelay: 0.2)
        defer { h.stop() }
        let sub = "001234.proof.0002"
        let token = try h.signIn(sub: sub)
        h.fake.answerRevoke(.acceptWithoutEffect)
        _ = try h.query("SELECT siwa.request_deletion($1, $2)", [sub, S.clientID])
        #expect(try h.eventually { try h.scalar("SELECT confirmation FROM siwa.revocations WHERE apple_sub = $1", [sub]) == "unconfirmed" })
        // Not done: still encrypted, retried (revoked again, and validated again), reported.
        #expect(try h.revocations(sub) == ["failed"])
        #expect(try h.scalar("SELECT ciphertext IS NOT NULL FROM siwa.revocations WHERE apple_sub = $1", [sub]) == "t")
        #expect(try h.scalar("SELECT last_error FROM siwa.revocations WHERE apple_sub = $1", [sub])?.hasPrefix("unconfirmed:") == true)
        #expect(try Array(Self.calls(h, sub).prefix(2)) == ["revoke 200 success", "validate 200 success"])
        #expect(h.eventually { h.fake.calls(to: "/auth/revoke").count >= 2 }, "revoked again")
        let report = try OutboxAdmin.status(conninfo: h.conninfo, inAppDeletion: true)
        #expect(report.revocationsUnconfirmed == 1 && report.revocationsDone == 0)
        #expect(OutboxAdmin.render(report).contains("revocations unconfirmed"))
        #expect(h.eventually { (try? h.admin("/metrics"))?.body.contains("\nsiwa_revocations_unconfirmed 1\n") == true })
        #expect(try h.admin("/metrics").body.contains(#"siwa_revocations_total{outcome="unconfirmed"} "#))
        #expect(try h.scalar("SELECT count(*) FROM siwa.unconfirmed_revocations WHERE sub_hash = siwa.subject_hash($1)", [sub]) == "1")
        #expect(h.logText.contains("revocation at Apple unconfirmed"))
        #expect(!h.logText.contains(token))

        // Apple performs the next one: proven, erased, the gauge back to 0.
        h.fake.answerRevoke(.normal)
        #expect(try h.eventually { try h.revocations(sub) == ["done"] })
        #expect(try h.scalar("SELECT confirmation FROM siwa.revocations WHERE apple_sub = $1", [sub]) == "confirmed")
        #expect(try h.scalar("SELECT ciphertext IS NULL FROM siwa.revocations WHERE apple_sub = $1", [sub]) == "t")
        #expect(try Self.calls(h, sub).suffix(2) == ["revoke 200 success", "validate 400 invalid_grant"])
        #expect(h.eventually { (try? h.admin("/metrics"))?.body.contains("\nsiwa_revocations_unconfirmed 0\n") == true })
        #expect(h.fake.revokedTokens == [token])
    }

    @Test("a validation Apple throttles is retried alone: the token is revoked once, proven on the next try")
    func throttledValidation() throws {
        let h = try H(retryBaseDelay: 0.2)
        defer { h.stop() }
        let sub = "001234.proof.0003"
        try h.signIn(sub: sub)
        h.fake.answerToken(.normal, first: [.throttled(retryAfter: 1)])
        _ = try h.query("SELECT siwa.request_deletion($1, $2)", [sub, S.clientID])
        #expect(try h.eventually { try h.revocations(sub) == ["done"] })
        #expect(try Self.calls(h, sub) == ["revoke 200 success", "validate 429 transient", "validate 400 invalid_grant"])
        #expect(h.fake.calls(to: "/auth/revoke").count == 1)
        #expect(try h.scalar("SELECT confirmation FROM siwa.revocations WHERE apple_sub = $1", [sub]) == "confirmed")
    }

    @Test("user-report: the timeline as JSON with the deletion's evidence, no token, no unmasked email; the same function for siwa_dashboard")
    func userReport() throws {
        let h = try H()
        defer { h.stop() }
        let sub = "001234.proof.0004", email = "jane.doe@privaterelay.appleid.com"
        let token = try h.signIn(sub: sub, email: email)
        let session = try h.scalar("INSERT INTO siwa.sessions (apple_sub) VALUES ($1) RETURNING id", [sub])
        #expect(try h.eventually { try h.accountStatus(sub) == "active" })
        // Before the deletion: the email shows masked only.
        let before = try #require(try UserReport.json(sub: sub, conninfo: h.conninfo))
        #expect(before.contains("j\u{2022}\u{2022}\u{2022}@privaterelay.appleid.com") && !before.contains(email))
        #expect(!before.contains(token))

        _ = try h.query("SELECT siwa.request_deletion($1, $2)", [sub, S.clientID])
        #expect(try h.eventually { try h.revocations(sub) == ["done"] })
        let text = try #require(try UserReport.json(sub: sub, conninfo: h.conninfo))
        for secret in Array(h.fake.issuedRefreshTokens.keys) + [email, token] {
            #expect(!text.contains(secret), "the report holds a token or an email")
        }
        let report = try JSONParser.parse(Array(text.utf8))
        #expect(report["sub"]?.stringValue == sub && report["account"]?["status"]?.stringValue == "deleted")
        // The deletion: requested, applied locally, the revocation it queued.
        guard case .array(let deletions)? = report["deletions"], let deletion = deletions.first else {
            Issue.record("no deletion in \(text)")
            return
        }
        #expect(deletion["source"]?.stringValue == "in-app" && deletion["outcome"]?.stringValue == "applied")
        #expect(deletion["requested_at"]?.stringValue != nil && deletion["applied_at"]?.stringValue != nil)
        guard case .array(let revocations)? = report["revocations"], let revocation = revocations.first,
            case .array(let calls)? = revocation["calls"]
        else {
            Issue.record("no revocation in \(text)")
            return
        }
        #expect(deletion["revocation_ids"] == .array([revocation["id"]!]))
        #expect(revocation["status"]?.stringValue == "done" && revocation["confirmation"]?.stringValue == "confirmed")
        #expect(revocation["confirmed_at"]?.stringValue != nil && revocation["queued_at"]?.stringValue != nil)
        #expect(calls.map { $0["call"]?.stringValue ?? "" } == ["revoke", "validate"])
        #expect(calls.map { $0["http_status"]?.int64Value ?? 0 } == [200, 400])
        #expect(calls.allSatisfy { $0["at"]?.stringValue != nil })
        guard case .array(let sessions)? = report["sessions_revoked"], case .array(let events)? = report["events"] else {
            Issue.record("no effects in \(text)")
            return
        }
        #expect(sessions.compactMap { $0["id"]?.int64Value.map(String.init) } == [session ?? ""])
        #expect(events.map { $0["type"]?.stringValue ?? "" } == ["sign-in", "deletion-requested"])

        // The console's role reads the same function; it reads neither tokens nor raw emails.
        let dashboard = try PostgresConnection(conninfo: h.conninfo)
        _ = try dashboard.execute("SET ROLE siwa_dashboard")
        #expect(try dashboard.execute("SELECT siwa.user_report($1) ->> 'sub'", [sub]).scalar == sub)
        #expect(try dashboard.execute("SELECT count(*) FROM siwa.revocation_proofs").scalar == "1")
        #expect(throws: (any Error).self) { try dashboard.execute("SELECT ciphertext FROM siwa.revocations") }
        #expect(throws: (any Error).self) { try dashboard.execute("SELECT email FROM siwa.accounts") }
        // Nothing stored: nil (the command exits 1).
        #expect(try UserReport.json(sub: "001234.nobody.0000", conninfo: h.conninfo) == nil)
        #expect(
            try h.scalar("SELECT siwa.mask_email('j@x.example') || ' ' || siwa.mask_email('nodomain')")
                == "j\u{2022}\u{2022}\u{2022}@x.example \u{2022}\u{2022}\u{2022}")
    }

    @Test("the command line: delete-user queues a deletion, revoke is its alias and says so, user-report prints the JSON or exits 1")
    func commandLine() throws {
        let h = try H()
        defer { h.stop() }
        let sub = "001234.proof.0005"
        try h.signIn(sub: sub)
        let env = ["SIWA_DATABASE_URL": h.conninfo, "SIWA_AUDIENCES": S.clientID]
        let queued = try OperatorCommandTests.run(["delete-user", "--sub", sub, "--aud", S.clientID], environment: env)
        #expect(queued.status == 0 && queued.output.contains("queued 1 deletion"), "\(queued.output)")
        #expect(try h.eventually { try h.revocations(sub) == ["done"] })
        let report = try OperatorCommandTests.run(["user-report", "--sub", sub], environment: env)
        #expect(report.status == 0, "\(report.output)")
        let json = try JSONParser.parse(Array(report.output.utf8))
        #expect(json["revocations"]?.arrayValue?.first?["confirmation"]?.stringValue == "confirmed")
        let unknown = try OperatorCommandTests.run(["user-report", "--sub", "001234.nobody.0000"], environment: env)
        #expect(unknown.status != 0 && unknown.output.contains("nothing is stored about this sub"))
        let alias = try OperatorCommandTests.run(["revoke", "--help"], environment: env)
        #expect(alias.status == 0 && alias.output.contains("Alias of delete-user"))
        let bad = try OperatorCommandTests.run(["revoke", "--sub", sub, "--aud", "com.example.unknown"], environment: env)
        #expect(bad.status != 0 && bad.output.contains("revoke: --aud"))
    }
}
