import Foundation
import Logging
import SiwaCore
import SiwaDevTools
import SiwaPostgres
import SiwaRuntime
import Testing

@testable import SiwaApp

/// Contract §8: no database transaction stays open while Apple is called, and a revocation whose
/// process died mid-call (its lease ran out) is claimed again.
@Suite(
    "Revocations: no transaction across the call to Apple", .serialized,
    .needsDatabase)
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
        "idle_in_transaction_session_timeout = 1s and Apple answering /auth/revoke after 3 s: the revocation ends done, no session idles in a transaction meanwhile"
    )
    func slowAppleWithIdleTransactionTimeout() throws {
        let harness = try DeletionHarness(conninfo: try Self.databaseWithIdleTransactionTimeout())
        defer { harness.stop() }
        #expect(try harness.scalar("SHOW idle_in_transaction_session_timeout") == "1s")
        let sub = "000739.slowrevoke.1"
        let token = try harness.signIn(sub: sub)
        harness.fake.answerRevoke(.delay(3))

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
    }

    @Test(
        "another session holds the user's accounts row and the revocation row FOR UPDATE while Apple answers: the revoker waits no longer than its lock timeout, revokes another user's token meanwhile, notifications apply, and the outcome is recorded once the lock is released"
    )
    func lockedRowsNeverHoldTheRevoker() throws {
        let h = try DeletionHarness()
        defer { h.stop() }
        let sub = "000739.locked.1", other = "000739.locked.2"
        let token = try h.signIn(sub: sub)
        let otherToken = try h.signIn(sub: other)
        h.fake.answerRevoke(.delay(3))
        _ = try h.query("SELECT siwa.request_deletion($1, NULL)", [sub])
        #expect(h.eventually(15) { h.fake.calls(to: "/auth/revoke").count == 1 })
        #expect(try h.revocations(sub) == ["running"] && h.accountStatus(sub) == "deleted")

        // While Apple holds the call, an operator's session locks the user's rows and keeps them.
        let locker = try PostgresConnection(conninfo: h.conninfo, applicationName: "locker")
        try locker.execute("BEGIN")
        _ = try locker.execute("SELECT status FROM siwa.accounts WHERE apple_sub = $1 FOR UPDATE", [sub])
        _ = try locker.execute("SELECT status FROM siwa.revocations WHERE apple_sub = $1 FOR UPDATE", [sub])
        let lockedAt = Date()
        // Apple accepts; the outcome cannot be written while the row is locked.
        #expect(h.eventually(10) { h.fake.revokedTokens == [token] })
        // The revoker is not held: another user's deletion is revoked meanwhile.
        _ = try h.query("SELECT siwa.request_deletion($1, NULL)", [other])
        var longestLockWait = 0.0
        let otherDone = try h.eventually(20) {
            let waiting = try h.scalar(
                """
                SELECT coalesce(max(extract(epoch FROM now() - query_start)), 0) FROM pg_stat_activity
                WHERE datname = current_database() AND application_name LIKE 'siwa-notify%' AND wait_event_type = 'Lock'
                """)
            longestLockWait = max(longestLockWait, Double(waiting ?? "0") ?? 0)
            return try h.revocations(other) == ["done"]
        }
        #expect(otherDone, "another user's revocation waited behind a locked row")
        #expect(h.fake.revokedTokens == [token, otherToken])
        // Notifications of other users apply meanwhile.
        for k in 0..<50 {
            #expect(try h.notify(type: "consent-revoked", sub: "000739.locked.crowd.\(k)").status == 200)
        }
        #expect(
            try h.eventually(10) {
                try h.scalar("SELECT count(*) FROM siwa.events WHERE type = 'consent-revoked' AND status = 'done'") == "50"
            })
        #expect(try h.revocations(sub) == ["running"], "recorded through the lock?")
        #expect(longestLockWait < 2.5, "a siwa-notify session waited \(longestLockWait) s on a lock (lock timeout 2 s)")
        // The outcome's lock wait ends (2 s) after Apple answered: under load, possibly after the
        // 50 notifications above.
        #expect(h.eventually(10) { h.logText.contains("another session holds its row locked") })
        let held = Date().timeIntervalSince(lockedAt)

        try locker.execute("ROLLBACK")
        let releasedAt = Date()
        #expect(try h.eventually(10) { try h.revocations(sub) == ["done"] })
        let recorded = Date().timeIntervalSince(releasedAt)
        // Recorded from the call that succeeded: Apple was not called again, one attempt.
        #expect(h.fake.calls(to: "/auth/revoke").count == 2)
        #expect(try h.scalar("SELECT attempts FROM siwa.revocations WHERE apple_sub = $1", [sub]) == "1")
        print(
            "rows locked \(String(format: "%.1f", held)) s: another revocation done and 50 notifications applied meanwhile, "
                + "longest lock wait of a siwa-notify session \(String(format: "%.2f", longestLockWait)) s, "
                + "outcome recorded \(String(format: "%.2f", recorded)) s after the release")
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

    /// A revoker alone (the harness runs no worker), its Apple the harness's fake.
    static func revoker(_ h: DeletionHarness, stopGrace: Duration) -> Revoker {
        let client = AppleClient(
            configuration: AppleAPIConfiguration(teamID: S.teamID, keyID: S.keyID, privateKeyFile: "-", tokenKeyFile: "-", baseURL: h.fake.baseURL),
            privateKey: S.teamKey, logger: Logger(label: "test") { _ in SwiftLogNoOpLogHandler() })
        var options = Revoker.Options()
        options.pollInterval = .milliseconds(100)
        options.stopGrace = stopGrace
        return Revoker(
            conninfo: h.conninfo, apple: AppleAPICredentials(client: client, vault: TokenVault(keys: [h.tokenKey])), options: options,
            logger: Logger(label: "test") { _ in SwiftLogNoOpLogHandler() }, metrics: Metrics())
    }

    @Test(
        "a revoker stopped with two revocations at Apple records the one Apple answers within the grace and leaves the other leased; the next run revokes that one; nothing is asked or recorded twice"
    )
    func stopRecordsWhatAnswersWithinTheGrace() throws {
        let h = try DeletionHarness(roles: .receive)
        defer { h.stop() }
        let vault = TokenVault(keys: [h.tokenKey])
        for sub in ["000739.stop.1", "000739.stop.2"] {
            let issued = try h.fake.issueTokens(for: .init(sub: sub), clientID: S.clientID)
            let sealed = try vault.seal(issued.refreshToken, sub: sub, clientID: S.clientID)
            _ = try h.query(
                "INSERT INTO siwa.revocations (apple_sub, client_id, key_id, ciphertext, reason) VALUES ($1, $2, $3, $4::bytea, 'in-app-deletion')",
                [sub, S.clientID, sealed.keyID, SQLEncoding.bytea(sealed.ciphertext)])
        }
        // Apple answers the first revoke a second after it came and holds the second past the grace.
        h.fake.answerRevoke(.hang, first: [.delay(1)])
        let first = Self.revoker(h, stopGrace: .seconds(6))
        first.start()
        #expect(h.eventually(15) { h.fake.calls(to: "/auth/revoke").count == 2 })
        first.stop(deadline: Deadline(after: .seconds(30)))

        let evidence = "(SELECT count(*) FROM siwa.revocation_calls c WHERE c.revocation_id = r.id)"
        func rows(_ sql: String) throws -> [[String]] { try h.query(sql).rows.map { $0.map { $0 ?? "" } } }
        let answered = try rows("SELECT apple_sub, attempts, \(evidence) FROM siwa.revocations r WHERE status = 'done'")
        #expect(answered.map { Array($0.dropFirst()) } == [["1", "2"]], "\(answered)")  // the revoke and its proof, once
        let leased = try rows("SELECT apple_sub, attempts, next_attempt_at > now(), \(evidence) FROM siwa.revocations r WHERE status = 'running'")
        #expect(leased.map { Array($0.dropFirst()) } == [["1", "t", "0"]], "\(leased)")

        // The next run, once the lease has run out: only the abandoned one is asked again.
        h.fake.answerRevoke(.normal)
        _ = try h.query("UPDATE siwa.revocations SET next_attempt_at = now() WHERE status = 'running'")
        let second = Self.revoker(h, stopGrace: .seconds(6))
        second.start()
        defer { second.stop(deadline: Deadline(after: .seconds(10))) }
        #expect(try h.eventually(15) { try h.scalar("SELECT count(*) FROM siwa.revocations WHERE status = 'done'") == "2" })
        let revokes = Dictionary(grouping: h.fake.calls(to: "/auth/revoke"), by: { $0.sub ?? "" }).mapValues(\.count)
        let doneFirst = answered.first?[0] ?? "-", abandoned = leased.first?[0] ?? "-"
        #expect(revokes == [doneFirst: 1, abandoned: 2], "\(revokes)")
        let all = try rows("SELECT apple_sub, attempts, \(evidence) FROM siwa.revocations r")
        #expect(Set(all) == [[doneFirst, "1", "2"], [abandoned, "2", "2"]], "\(all)")
    }
}
