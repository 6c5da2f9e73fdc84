import Foundation
import Logging
import SiwaCore
import SiwaCrypto
import SiwaPostgres
import Testing

@testable import SiwaApp

/// Reconciliation against the fake Apple and a real database: a grant revoked at Apple (whose
/// notification was missed) becomes a consent-revoked the worker applies; a valid token is left
/// alone; Apple down or throttling changes nothing and is tried later.
@Suite(
    "Reconciliation", .serialized,
    .enabled(if: TestDatabase.isAvailable, "needs SIWA_TEST_DATABASE_URL (scripts/test starts one)"))
struct ReconcileTests {
    typealias S = AppleTestSetup

    /// Stores a refresh token the fake issued for `sub`, as a sign-in would; returns it.
    static func storeToken(
        _ sub: String, fake: FakeApple, vault: TokenVault, conninfo: String, email: String = "x@privaterelay.appleid.com"
    ) throws -> String {
        let (refreshToken, _) = try fake.issueTokens(for: .init(sub: sub, email: email, isPrivateEmail: true), clientID: S.clientID)
        let connection = try PostgresConnection(conninfo: conninfo)
        let signIn = DeletionStatements.SignIn(
            sub: sub, clientID: S.clientID, token: try vault.seal(refreshToken, sub: sub, clientID: S.clientID), email: email,
            isPrivateEmail: true, signedInAt: Int64(Date().timeIntervalSince1970) - 60)
        _ = try connection.row(DeletionStatements.storeToken, signIn)
        return refreshToken
    }

    static func due(_ conninfo: String, _ sub: String? = nil) throws {
        _ = try TestDatabase.query(
            conninfo, "UPDATE siwa.apple_tokens SET next_validation_at = now() WHERE $1::text IS NULL OR apple_sub = $1", [sub])
    }

    static func value(_ conninfo: String, _ sql: String, _ parameters: [String?] = []) throws -> String? {
        try TestDatabase.query(conninfo, sql, parameters).rows.first?[0] ?? nil
    }

    @Test("a grant revoked at Apple becomes a consent-revoked the worker applies; a valid token is left alone")
    func revokedGrantFoundAndApplied() throws {
        // Two tokens, four seconds: one validation every two seconds.
        let harness = try DeletionHarness(reconcileEvery: 4)
        defer { harness.stop() }
        let vault = TokenVault(keys: [harness.tokenKey])
        let gone = try Self.storeToken("001.gone", fake: harness.fake, vault: vault, conninfo: harness.conninfo)
        _ = try Self.storeToken("001.kept", fake: harness.fake, vault: vault, conninfo: harness.conninfo)
        _ = try TestDatabase.query(
            harness.conninfo,
            """
            INSERT INTO siwa.sessions (apple_sub, created_at, expires_at)
            VALUES ('001.gone', now() - interval '1 hour', now() + interval '1 day'),
                   ('001.kept', now() - interval '1 hour', now() + interval '1 day')
            """)
        harness.fake.revokeGrant(gone)  // the user stopped using Apple sign-in; the notification never came
        try Self.due(harness.conninfo)

        let applied = try eventually(timeout: 20) {
            try Self.value(harness.conninfo, "SELECT status FROM siwa.accounts WHERE apple_sub = '001.gone'") == "consent_revoked"
        }
        #expect(applied)
        let event = try TestDatabase.query(
            harness.conninfo, "SELECT jti, aud, type, claims->>'source', status FROM siwa.events WHERE sub = '001.gone' AND type <> 'sign-in'")
        #expect(event.rows.count == 1)
        #expect(event.rows.first?[0]?.hasPrefix("siwa-reconcile-") == true)
        #expect(Array(event.rows.first?[1...4] ?? []) == [S.clientID, "consent-revoked", "reconcile", "done"])
        #expect(try Self.value(harness.conninfo, "SELECT count(*) FROM siwa.sessions WHERE apple_sub = '001.gone' AND revoked_at IS NULL") == "0")

        // The valid token: validated, due again one interval later, account and session untouched.
        let kept = try eventually(timeout: 20) {
            try Self.value(harness.conninfo, "SELECT validated_at IS NOT NULL FROM siwa.apple_tokens WHERE apple_sub = '001.kept'") == "t"
        }
        #expect(kept)
        #expect(try Self.value(harness.conninfo, "SELECT status FROM siwa.accounts WHERE apple_sub = '001.kept'") == "active")
        #expect(try Self.value(harness.conninfo, "SELECT count(*) FROM siwa.sessions WHERE apple_sub = '001.kept' AND revoked_at IS NULL") == "1")
        #expect(
            try Self.value(
                harness.conninfo,
                "SELECT next_validation_at - validated_at = interval '4 seconds' FROM siwa.apple_tokens WHERE apple_sub = '001.kept'")
                == "t")
        // The gone one was asked once (its dead token is then erased), as a refresh-token grant.
        let validations = harness.fake.calls(to: "/auth/token").filter { $0.form?["grant_type"] == "refresh_token" }
        #expect(validations.filter { $0.form?["refresh_token"] == gone }.count == 1 && validations.contains { $0.sub == "001.kept" })
        #expect(try Self.value(harness.conninfo, "SELECT count(*) FROM siwa.apple_tokens WHERE apple_sub = '001.gone'") == "0")

        // status and /metrics count them.
        let report = try OutboxAdmin.status(conninfo: harness.conninfo, inAppDeletion: true)
        #expect(report.reconciliation?.grantsGone == 1 && report.reconciliation?.validated == 1)
        let metrics = harness.app.metrics.render(gauges: [])
        #expect(metrics.contains("siwa_reconcile_total{outcome=\"grant_gone\"} 1") && metrics.contains("siwa_reconcile_total{outcome=\"error\"} 0"))
    }

    /// A reconciler alone (no worker) on a fresh database, its Apple the fake.
    static func reconciler(_ fake: FakeApple, conninfo: String) throws -> (Reconciler, TokenVault) {
        let vault = TokenVault(keys: [try TokenKey(bytes: SecureRandom.bytes(32))])
        let client = AppleClient(
            configuration: AppleAPIConfiguration(teamID: S.teamID, keyID: S.keyID, privateKeyFile: "-", tokenKeyFile: "-", baseURL: fake.baseURL),
            privateKey: S.teamKey, logger: Logger(label: "test") { _ in SwiftLogNoOpLogHandler() })
        var options = Reconciler.Options()
        options.idleWait = 0.1
        options.recount = 0.1
        options.maximumSpacing = 0.5
        let reconciler = Reconciler(
            conninfo: conninfo, interval: 86_400, revocation: InAppDeletion(client: client, vault: vault), options: options,
            logger: Logger(label: "test") { _ in SwiftLogNoOpLogHandler() }, metrics: Metrics())
        return (reconciler, vault)
    }

    /// One token, due now, validated by a lone reconciler while Apple answers `answer`; `body`
    /// runs once the first validation failed.
    static func failingValidation(_ answer: FakeApple.Answer, _ body: (FakeApple, String, Reconciler) throws -> Void) throws {
        let fake = try S.fake()
        defer { fake.stop() }
        let conninfo = try TestDatabase.create()
        let (reconciler, vault) = try Self.reconciler(fake, conninfo: conninfo)
        _ = try Self.storeToken("001.a", fake: fake, vault: vault, conninfo: conninfo)
        try Self.due(conninfo)
        fake.answerToken(answer)
        reconciler.start()
        defer { reconciler.stop(deadline: ShutdownDeadline(secondsFromNow: 5)) }
        let failed = try eventually(timeout: 10) {
            try Self.value(conninfo, "SELECT validation_failures FROM siwa.apple_tokens") == "1"
        }
        #expect(failed)
        #expect(try Self.value(conninfo, "SELECT count(*) FROM siwa.events WHERE type <> 'sign-in'") == "0")
        #expect(try Self.value(conninfo, "SELECT validated_at IS NULL FROM siwa.apple_tokens") == "t")
        try body(fake, conninfo, reconciler)
    }

    @Test("Apple down: nothing changes, the token is tried later; then it validates")
    func appleDown() throws {
        try Self.failingValidation(.status(503, #"{"error":"temporarily_unavailable"}"#)) { fake, conninfo, reconciler throws in
            // Backoff: the first retry is 30-60 s later, not at once.
            #expect(
                try Self.value(
                    conninfo,
                    "SELECT next_validation_at BETWEEN now() + interval '25 seconds' AND now() + interval '61 seconds' FROM siwa.apple_tokens") == "t"
            )
            #expect(reconciler.counts.errors == 1)

            fake.answerToken(.normal)
            try Self.due(conninfo)
            let validated = try eventually(timeout: 10) {
                try Self.value(conninfo, "SELECT validated_at IS NOT NULL AND validation_failures = 0 FROM siwa.apple_tokens") == "t"
            }
            #expect(validated)
            #expect(reconciler.counts == .init(valid: 1, gone: 0, errors: 1))
        }
    }

    @Test("429: the token backs off at least as long as Retry-After")
    func throttled() throws {
        try Self.failingValidation(.throttled(retryAfter: 300)) { fake, conninfo, _ throws in
            #expect(
                try Self.value(
                    conninfo, "SELECT next_validation_at >= now() + interval '295 seconds' FROM siwa.apple_tokens") == "t")
            #expect(fake.calls(to: "/auth/token").count == 1)
        }
    }

    @Test("a work process killed -9 while Apple holds a validation: the lease runs out, the next process validates it")
    func killedMidway() throws {
        let harness = try DeletionHarness(roles: .receive, reconcileEvery: 0)
        defer { harness.stop() }
        let vault = TokenVault(keys: [harness.tokenKey])
        _ = try Self.storeToken("001.killed", fake: harness.fake, vault: vault, conninfo: harness.conninfo)
        harness.fake.answerToken(.hang)
        try Self.due(harness.conninfo)
        var env = harness.environment
        env["SIWA_RECONCILE_EVERY"] = "60s"
        let first = try ServerProcess(["work"], environment: env)
        let held = eventually(timeout: 30) { harness.fake.calls(to: "/auth/token").contains { $0.form?["grant_type"] == "refresh_token" } }
        #expect(held, "\(first.log)")
        first.kill9()
        // Leased, never validated: another process skips it until the lease runs out.
        #expect(
            try Self.value(
                harness.conninfo, "SELECT validated_at IS NULL AND next_validation_at > now() FROM siwa.apple_tokens WHERE apple_sub = '001.killed'")
                == "t")
        harness.fake.answerToken(.normal)
        _ = try TestDatabase.query(harness.conninfo, "UPDATE siwa.apple_tokens SET next_validation_at = now()")  // the lease ran out
        let second = try ServerProcess(["work"], environment: env)
        defer { _ = second.terminate() }
        let validated = try eventually(timeout: 30) {
            try Self.value(harness.conninfo, "SELECT validated_at IS NOT NULL FROM siwa.apple_tokens WHERE apple_sub = '001.killed'") == "t"
        }
        #expect(validated, "\(second.log)")
        #expect(harness.fake.calls(to: "/auth/token").filter { $0.form?["grant_type"] == "refresh_token" }.count == 2)
        #expect(try Self.value(harness.conninfo, "SELECT status FROM siwa.accounts WHERE apple_sub = '001.killed'") == "active")
    }
}
