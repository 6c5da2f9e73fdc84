import Foundation
import SiwaCore
import SiwaDevTools
import SiwaPostgres
import Testing

@testable import SiwaApp

/// Contract §8: no database transaction stays open while Apple is called, and a revocation whose
/// process died mid-call (its lease ran out) is claimed again.
@Suite(
    "Revocations: no transaction across the call to Apple", .serialized,
    .enabled(if: TestDatabase.isAvailable, "needs SIWA_TEST_DATABASE_URL (scripts/test starts one)"))
struct RevocationTransactionTests {
    typealias S = AppleTestSetup

    /// A new database on which every session is cut after 1 s idle in a transaction.
    static func databaseWithIdleTransactionTimeout() throws -> String {
        let conninfo = try TestDatabase.create()
        let name = conninfo.split(separator: " ").last { $0.hasPrefix("dbname=") }.map { String($0.dropFirst("dbname=".count)) } ?? ""
        _ = try TestDatabase.query(try TestDatabase.adminURL(), "ALTER DATABASE \(name) SET idle_in_transaction_session_timeout = '1s'")
        return conninfo
    }

    @Test(
        "idle_in_transaction_session_timeout = 1s and Apple answering /auth/revoke after 3 s: the revocation ends done, no session idles in a transaction meanwhile, an open reader of siwa.accounts blocks nothing"
    )
    func slowAppleWithIdleTransactionTimeout() throws {
        let harness = try DeletionHarness(conninfo: try Self.databaseWithIdleTransactionTimeout())
        defer { harness.stop() }
        #expect(try harness.scalar("SHOW idle_in_transaction_session_timeout") == "1s")
        let sub = "000739.slowrevoke.1"
        let token = try harness.signIn(sub: sub)
        harness.fake.answerRevoke(.delay(3))

        // A dashboard-like reader keeps a transaction open on siwa.accounts (exempt from the timeout).
        let reader = try PostgresConnection(conninfo: harness.conninfo, applicationName: "reader")
        try reader.execute("SET idle_in_transaction_session_timeout = 0")
        try reader.execute("BEGIN")
        _ = try reader.execute("SELECT * FROM siwa.accounts")

        _ = try harness.query("SELECT siwa.request_deletion($1, NULL)", [sub])
        // Apple has the call and holds its answer: no siwa-notify session is inside a transaction.
        #expect(harness.eventually(15) { harness.fake.calls(to: "/auth/revoke").count == 1 })
        #expect(try harness.revocations(sub) == ["running"])
        let idle = try harness.scalar(
            """
            SELECT count(*) FROM pg_stat_activity
            WHERE datname = current_database() AND application_name LIKE 'siwa-notify%' AND state LIKE 'idle in transaction%'
            """)
        #expect(idle == "0")

        #expect(try harness.eventually(15) { try harness.revocations(sub) == ["done"] })
        #expect(harness.fake.revokedTokens == [token])
        #expect(try harness.accountStatus(sub) == "deleted")
        #expect(try harness.scalar("SELECT attempts FROM siwa.revocations WHERE apple_sub = $1", [sub]) == "1")
        #expect(!harness.logText.contains("idle-in-transaction") && !harness.logText.contains("revoker database error"), "\(harness.logText)")
        try reader.execute("COMMIT")
    }

    @Test(
        "a running revocation whose lease ran out (its process was killed) is claimed again and counted as an attempt; one still leased is left alone"
    )
    func expiredLeaseIsClaimedAgain() throws {
        let harness = try DeletionHarness()
        defer { harness.stop() }
        let vault = TokenVault(keys: [harness.tokenKey])
        var ids: [String: String] = [:]
        var tokens: [String: String] = [:]
        for (name, leaseEnd) in [("expired", "now() - interval '1 second'"), ("leased", "now() + interval '1 hour'")] {
            let sub = "000739.lease.\(name)"
            let issued = try harness.fake.issueTokens(for: .init(sub: sub), clientID: S.clientID)
            let sealed = try vault.seal(issued.refreshToken, sub: sub, clientID: S.clientID)
            tokens[name] = issued.refreshToken
            ids[name] = try harness.scalar(
                """
                INSERT INTO siwa.revocations (apple_sub, client_id, key_id, ciphertext, reason, status, attempts, next_attempt_at)
                VALUES ($1, $2, $3, $4::bytea, 'in-app-deletion', 'running', 1, \(leaseEnd)) RETURNING id
                """, [sub, S.clientID, sealed.keyID, SQLEncoding.bytea(sealed.ciphertext)])
        }
        #expect(
            try harness.eventually(15) { try harness.scalar("SELECT status FROM siwa.revocations WHERE id = $1", [ids["expired"]]) == "done" })
        let expired = try harness.query("SELECT attempts, ciphertext IS NULL FROM siwa.revocations WHERE id = $1", [ids["expired"]]).rows.first
        #expect(expired == ["2", "t"])
        #expect(harness.fake.revokedTokens == [tokens["expired"] ?? "-"])
        let leased = try harness.query("SELECT status, attempts FROM siwa.revocations WHERE id = $1", [ids["leased"]]).rows.first
        #expect(leased == ["running", "1"])
    }
}
