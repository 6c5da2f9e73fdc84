import Foundation
import Logging
import SiwaCore
import SiwaCrypto
import SiwaPostgres
import SiwaRuntime
import Testing

@testable import SiwaApp

/// Reconciliation against the fake Apple and a real database: a grant revoked at Apple (whose
/// notification was missed) becomes a consent-revoked the worker applies; a valid token is left
/// alone; Apple down or throttling changes nothing and is tried later.
@Suite(
    "Reconciliation", .serialized,
    .needsDatabase)
struct ReconcileTests {
    typealias S = AppleTestSetup

    /// Stores a refresh token the fake issued for `sub`, as a sign-in would; returns it.
    static func storeToken(
        _ sub: String, fake: FakeApple, vault: TokenVault, conninfo: String, email: String = "x@privaterelay.appleid.com",
        clientID: String = S.clientID
    ) throws -> String {
        let (refreshToken, _) = try fake.issueTokens(for: .init(sub: sub, email: email, isPrivateEmail: true), clientID: clientID)
        try StoredTokenKeys.record(vault, conninfo: conninfo)  // as a worker's process starting with it would
        let connection = try PostgresConnection(conninfo: conninfo)
        let signIn = DeletionStatements.SignIn(
            sub: sub, clientID: clientID, token: try vault.seal(refreshToken, sub: sub, clientID: clientID), email: email,
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

    /// A reconciler alone (no worker), its Apple the fake: quick to look again, at most 0.5 s
    /// between calls unless `configure` says otherwise.
    static func reconciler(
        _ fake: FakeApple, conninfo: String, vault: TokenVault = newVault(), interval: Duration = .seconds(86_400),
        _ configure: (inout Reconciler.Options) -> Void = { _ in }
    ) throws -> (Reconciler, TokenVault) {
        let client = AppleClient(
            configuration: AppleAPIConfiguration(teamID: S.teamID, keyID: S.keyID, privateKeyFile: "-", tokenKeyFile: "-", baseURL: fake.baseURL),
            privateKey: S.teamKey, logger: Logger(label: "test") { _ in SwiftLogNoOpLogHandler() })
        var options = Reconciler.Options()
        options.idleWait = .milliseconds(100)
        options.recount = .milliseconds(100)
        options.maximumSpacing = .milliseconds(500)
        configure(&options)
        let reconciler = Reconciler(
            conninfo: conninfo, interval: interval, apple: AppleAPICredentials(client: client, vault: vault), options: options,
            logger: Logger(label: "test") { _ in SwiftLogNoOpLogHandler() }, metrics: Metrics())
        return (reconciler, vault)
    }

    static func newVault() -> TokenVault { TokenVault(keys: [try! TokenKey(bytes: SecureRandom.bytes(32))]) }

    /// Stores `tokens` (sub → refresh token) for `S.clientID` in one statement, all due now.
    static func storeTokens(_ tokens: [(sub: String, token: String)], vault: TokenVault, conninfo: String) throws {
        let sealed = try tokens.map { try vault.seal($0.token, sub: $0.sub, clientID: S.clientID) }
        _ = try TestDatabase.query(
            conninfo,
            """
            INSERT INTO siwa.apple_tokens (apple_sub, client_id, key_id, ciphertext, signed_in_at, next_validation_at)
            SELECT u.sub, $3, u.key_id, decode(u.hex, 'hex'), now() - interval '1 day', now()
            FROM unnest($1::text[], $2::text[], $4::text[]) AS u(sub, key_id, hex)
            """,
            [
                SQLEncoding.array(tokens.map(\.sub)), SQLEncoding.array(sealed.map(\.keyID)), S.clientID,
                SQLEncoding.array(sealed.map { Hex.encode($0.ciphertext) }),
            ])
    }

    /// The refresh-token validations Apple answered 200, in the order they came.
    static func validations(_ fake: FakeApple) -> [FakeApple.Call] {
        fake.calls(to: "/auth/token").filter { $0.form?["grant_type"] == "refresh_token" && $0.status == 200 }
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
        defer { reconciler.stop(deadline: Deadline(after: .seconds(5))) }
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
        // A minute later: the lease ran out, and the shared pace's next slot (one call a minute) has come.
        _ = try TestDatabase.query(harness.conninfo, "UPDATE siwa.apple_tokens SET next_validation_at = now()")
        _ = try TestDatabase.query(harness.conninfo, "UPDATE siwa.reconcile_pace SET next_slot = now()")
        let second = try ServerProcess(["work"], environment: env)
        defer { _ = second.terminate() }
        let validated = try eventually(timeout: 30) {
            try Self.value(harness.conninfo, "SELECT validated_at IS NOT NULL FROM siwa.apple_tokens WHERE apple_sub = '001.killed'") == "t"
        }
        #expect(validated, "\(second.log)")
        #expect(harness.fake.calls(to: "/auth/token").filter { $0.form?["grant_type"] == "refresh_token" }.count == 2)
        // The account is the sign-in event's, which a worker applies: the killed one may not have
        // (a batch rolled back), and the second process's runs beside its reconciler.
        let applied = try eventually(timeout: 30) { try Self.value(harness.conninfo, "SELECT count(*) FROM siwa.event_queue") == "0" }
        #expect(applied, "\(second.log)")
        let status = try Self.value(harness.conninfo, "SELECT status FROM siwa.accounts WHERE apple_sub = '001.killed'")
        #expect(status == "active", "account status \(status ?? "none")")
    }

    // MARK: The shared pace, leases, and what a kill loses

    @Test("two reconcilers share one pace: each due token validated once, one call a second in all, every lease covering its slot")
    func sharedPace() throws {
        let fake = try S.fake()
        defer { fake.stop() }
        let conninfo = try TestDatabase.create()
        let vault = Self.newVault()
        let subs = (1...8).map { "001.pace\($0)" }
        try Self.storeTokens(
            try subs.map { ($0, try fake.issueTokens(for: .init(sub: $0), clientID: S.clientID).refreshToken) }, vault: vault,
            conninfo: conninfo)
        // 8 tokens an hour is one call every 450 s, capped at 1 s. A claim takes 5 s of slots (5
        // tokens); each token is leased until 3 s after its own slot (a lease of 3 s for the
        // whole claim would run out while its later tokens wait, and the other reconciler would
        // take them again).
        let configure: (inout Reconciler.Options) -> Void = {
            $0.maximumSpacing = .seconds(1)
            $0.leaseMargin = .seconds(3)
            $0.flushEvery = .seconds(1)
        }
        let (a, _) = try Self.reconciler(fake, conninfo: conninfo, vault: vault, interval: .seconds(3600), configure)
        let (b, _) = try Self.reconciler(fake, conninfo: conninfo, vault: vault, interval: .seconds(3600), configure)
        a.start()
        b.start()
        #expect(eventually(timeout: 30) { Self.validations(fake).count >= 8 })
        // A second validation of a token comes from a claim made before its first was recorded,
        // at a slot handed out by then: once every token is recorded and the database's clock has
        // passed every slot handed out, the reconcilers' stop ends the calls in flight, and the
        // fake has seen every call they would make.
        let recorded = try eventually(timeout: 30) {
            try Self.value(conninfo, "SELECT count(*) FROM siwa.apple_tokens WHERE validated_at IS NOT NULL") == "8"
        }
        #expect(recorded, "the 8 validations were never all recorded")
        let slotsPassed = try eventually(timeout: 30) {
            try Self.value(conninfo, "SELECT now() > next_slot + interval '1 second' FROM siwa.reconcile_pace") == "t"
        }
        #expect(slotsPassed, "the slots handed out never passed")
        a.stop(deadline: Deadline(after: .seconds(5)))
        b.stop(deadline: Deadline(after: .seconds(5)))
        let calls = Self.validations(fake).sorted { $0.at < $1.at }
        #expect(calls.count == 8 && Set(calls.compactMap(\.sub)) == Set(subs), "\(calls.map(\.sub))")
        // One a second in all, not one a second per reconciler: never three calls within 1.5 s.
        for (first, third) in zip(calls, calls.dropFirst(2)) {
            #expect(third.at - first.at >= 1.5, "\(calls.map(\.at))")
        }
        #expect((calls.last?.at ?? 0) - (calls.first?.at ?? 0) >= 6.5)
        #expect(a.counts.valid + b.counts.valid == 8 && a.counts.valid > 0 && b.counts.valid > 0, "\(a.counts) \(b.counts)")
        #expect(try Self.value(conninfo, "SELECT count(*) FROM siwa.apple_tokens WHERE validated_at IS NOT NULL") == "8")
    }

    @Test("10,000 tokens, two reconcilers: every token validated once in the interval, never twice within it, calls spread evenly")
    func tenThousandTokensSpreadOverTheInterval() throws {
        let n = 10_000
        let interval = 50.0
        let fake = try S.fake(unknownRefreshToken: { $0.hasPrefix("bulk-") ? "001." + $0.dropFirst(5) : nil })
        defer { fake.stop() }
        let conninfo = try TestDatabase.create()
        let vault = Self.newVault()
        try Self.storeTokens((0..<n).map { ("001.\($0)", "bulk-\($0)") }, vault: vault, conninfo: conninfo)
        // The real reconcilers, with their default pace (one call every interval / n = 5 ms, in
        // all), leases and batches; two of them, as two `work` processes.
        let (a, _) = try Self.reconciler(fake, conninfo: conninfo, vault: vault, interval: .seconds(interval)) { $0 = Reconciler.Options() }
        let (b, _) = try Self.reconciler(fake, conninfo: conninfo, vault: vault, interval: .seconds(interval)) { $0 = Reconciler.Options() }
        a.start()
        b.start()
        Thread.sleep(forTimeInterval: interval * 1.5)
        a.stop(deadline: Deadline(after: .seconds(10)))
        b.stop(deadline: Deadline(after: .seconds(10)))

        let calls = Self.validations(fake).sorted { $0.at < $1.at }
        let start = try #require(calls.first?.at)
        var times: [String: [Double]] = [:]
        for call in calls { times[call.sub ?? "", default: []].append(call.at) }
        // Every token in about one interval (40% slack: with the whole suite running, the two
        // reconcilers and the fake fell 5% behind the 200 calls a second), none twice within one.
        let firstRound = Set(calls.filter { $0.at < start + interval * 1.4 }.compactMap(\.sub))
        #expect(firstRound.count == n, "\(firstRound.count) of \(n) validated within the interval")
        let closest = times.values.compactMap { t in zip(t, t.dropFirst()).map { $1 - $0 }.min() }.min() ?? .infinity
        #expect(closest >= interval - 0.5, "a token validated twice \(closest) s apart")
        // Evenly: any tenth of the interval holds about n/10 calls, never the double two
        // reconcilers pacing themselves would make.
        var windows: [Int] = []
        var edge = start
        while edge + interval / 10 <= (calls.last?.at ?? start) {
            windows.append(calls.filter { $0.at >= edge && $0.at < edge + interval / 10 }.count)
            edge += interval / 10
        }
        #expect(windows.count >= 10 && windows.allSatisfy { $0 <= n / 10 + n / 100 }, "\(windows)")
        print("10,000 tokens: calls per \(interval / 10) s window \(windows); closest per-token gap \(closest) s; \(a.counts) \(b.counts)")
        #expect(try Self.value(conninfo, "SELECT count(*) FROM siwa.apple_tokens WHERE validated_at IS NOT NULL") == String(n))
        // Each due again one interval after its validation (or leased for its next one).
        #expect(
            try Self.value(
                conninfo, "SELECT count(*) FROM siwa.apple_tokens WHERE next_validation_at - validated_at < make_interval(secs => $1)",
                [String(interval)]) == "0")
    }

    @Test("a work process killed -9 mid-batch loses at most flushEvery (2 s) of its validations, not its whole batch")
    func killedMidBatch() throws {
        let harness = try DeletionHarness(roles: .receive, reconcileEvery: 0)
        defer { harness.stop() }
        let vault = TokenVault(keys: [harness.tokenKey])
        // 600 tokens for 60 s: one call every 0.1 s, 50 tokens (5 s of slots) per claim.
        try Self.storeTokens(
            try (1...600).map { i in
                ("001.k\(i)", try harness.fake.issueTokens(for: .init(sub: "001.k\(i)"), clientID: S.clientID).refreshToken)
            }, vault: vault, conninfo: harness.conninfo)
        var env = harness.environment
        env["SIWA_RECONCILE_EVERY"] = "60s"
        let work = try ServerProcess(["work"], environment: env)
        #expect(eventually(timeout: 60) { Self.validations(harness.fake).count >= 30 }, "\(work.log)")
        work.kill9()
        let answered = Self.validations(harness.fake).count
        let recorded = Int(try Self.value(harness.conninfo, "SELECT count(*) FROM siwa.apple_tokens WHERE validated_at IS NOT NULL") ?? "") ?? -1
        print("killed mid-batch: Apple answered \(answered) validations, \(recorded) recorded")
        // 2 s at 10 calls a second, and the call in flight: 21 at most. (Recorded once per batch
        // of 50, none of these would be.)
        #expect(recorded >= 1 && answered - recorded <= 22, "answered \(answered), recorded \(recorded)")
        // Those answered and not recorded stay leased (until 60 s after their slot): no other
        // process asks Apple about them again meanwhile.
        let leased =
            Int(
                try Self.value(harness.conninfo, "SELECT count(*) FROM siwa.apple_tokens WHERE validated_at IS NULL AND next_validation_at > now()")
                    ?? "") ?? -1
        #expect(leased >= answered - recorded)
    }

    // MARK: A user who signed in again after the grant was gone

    /// The refresh token stored for `sub` and the test app, decrypted.
    static func storedToken(_ conninfo: String, _ sub: String, vault: TokenVault) throws -> String? {
        guard
            let row = try TestDatabase.query(
                conninfo, "SELECT key_id, encode(ciphertext, 'hex') FROM siwa.apple_tokens WHERE apple_sub = $1 AND client_id = $2",
                [sub, S.clientID]
            ).rows.first, let keyID = row[0], let hex = row[1], let bytes = Hex.decode(Array(hex.utf8))
        else { return nil }
        return try vault.open(.init(keyID: keyID, ciphertext: bytes), sub: sub, clientID: S.clientID)
    }

    @Test("a sign-in stored while Apple is answering invalid_grant for the old token wins: nothing queued, the new token kept")
    func signInBetweenClaimAndOutcome() throws {
        let harness = try DeletionHarness(reconcileEvery: 3600)
        defer { harness.stop() }
        let vault = TokenVault(keys: [harness.tokenKey])
        let sub = "001.back"
        let old = try harness.signIn(sub: sub)
        #expect(harness.eventually { (try? harness.accountStatus(sub)) == "active" })
        harness.fake.revokeGrant(old)
        // Apple takes 3 s to answer the validation; the user signs in again meanwhile.
        harness.fake.answerToken(.normal, first: [.delay(3)])
        try Self.due(harness.conninfo, sub)
        #expect(eventually(timeout: 20) { harness.fake.calls(to: "/auth/token").contains { $0.form?["refresh_token"] == old } })
        let new = try harness.signIn(sub: sub)
        #expect(try Self.storedToken(harness.conninfo, sub, vault: vault) == new)
        // The invalid_grant (about the old token) arrives and is recorded: it changes nothing.
        // Waited for by its own sign (counted as superseded), not by a sleep.
        #expect(
            eventually(timeout: 20) {
                harness.app.metrics.render(gauges: []).contains("siwa_reconcile_total{outcome=\"superseded\"} 1")
            }, "the outcome was recorded")
        let gone = harness.fake.calls(to: "/auth/token").filter { $0.form?["refresh_token"] == old }
        #expect(gone.count == 1 && gone.first?.error == "invalid_grant")
        #expect(try Self.value(harness.conninfo, "SELECT count(*) FROM siwa.events WHERE jti LIKE 'siwa-reconcile-%'") == "0")
        #expect(try harness.accountStatus(sub) == "active")
        #expect(
            try Self.value(harness.conninfo, "SELECT status FROM siwa.app_accounts WHERE apple_sub = $1 AND aud = $2", [sub, S.clientID])
                == "active")
        #expect(try Self.storedToken(harness.conninfo, sub, vault: vault) == new)
        // The new token is a new grant: first due one interval after it was stored.
        #expect(
            try Self.value(
                harness.conninfo,
                "SELECT next_validation_at > now() + interval '3500 seconds' AND validated_at IS NULL FROM siwa.apple_tokens WHERE apple_sub = $1",
                [sub]) == "t")
    }

    @Test("a sign-in newer than the reconcile consent-revoked wins: the app account active again, its new token kept")
    func signInNewerThanTheReconcileEvent() throws {
        let harness = try DeletionHarness(roles: .receive, reconcileEvery: 0)  // no worker until the end
        defer { harness.stop() }
        let vault = TokenVault(keys: [harness.tokenKey])
        let sub = "001.newer"
        let old = try harness.signIn(sub: sub)
        _ = try TestDatabase.query(
            harness.conninfo, "INSERT INTO siwa.sessions (apple_sub, aud, created_at) VALUES ($1, $2, now() - interval '1 hour')",
            [sub, S.clientID])
        harness.fake.revokeGrant(old)
        try Self.due(harness.conninfo, sub)
        let (reconciler, _) = try Self.reconciler(harness.fake, conninfo: harness.conninfo, vault: vault)
        reconciler.start()
        let queued = try eventually(timeout: 20) {
            try Self.value(harness.conninfo, "SELECT count(*) FROM siwa.events WHERE jti LIKE 'siwa-reconcile-%'") == "1"
        }
        reconciler.stop(deadline: Deadline(after: .seconds(5)))
        #expect(queued)
        // The user comes back after it (id_token times are whole seconds: the next one).
        untilNextSecond()
        let new = try harness.signIn(sub: sub)
        _ = try TestDatabase.query(
            harness.conninfo, "INSERT INTO siwa.sessions (apple_sub, aud, created_at) VALUES ($1, $2, now())", [sub, S.clientID])
        #expect(
            try Self.value(
                harness.conninfo,
                """
                SELECT s.event_time > r.event_time FROM siwa.events s, siwa.events r
                WHERE s.sub = $1 AND s.type = 'sign-in' AND r.jti LIKE 'siwa-reconcile-%' ORDER BY s.id DESC LIMIT 1
                """, [sub]) == "t")

        // Now a worker applies the three events: sign-in, consent-revoked (reconcile), sign-in.
        var env = harness.environment
        env["SIWA_RECONCILE_EVERY"] = "0"
        let work = try ServerProcess(["work"], environment: env)
        defer { _ = work.terminate() }
        let applied = try eventually(timeout: 30) {
            try Self.value(harness.conninfo, "SELECT count(*) FROM siwa.events WHERE sub = $1 AND status <> 'done'", [sub]) == "0"
        }
        #expect(applied, "\(work.log)")
        #expect(
            try Self.value(harness.conninfo, "SELECT outcome FROM siwa.events WHERE jti LIKE 'siwa-reconcile-%'") == "applied")
        #expect(try harness.accountStatus(sub) == "active")
        #expect(
            try Self.value(harness.conninfo, "SELECT status FROM siwa.app_accounts WHERE apple_sub = $1 AND aud = $2", [sub, S.clientID])
                == "active")
        #expect(try Self.storedToken(harness.conninfo, sub, vault: vault) == new)
        // The session from before the grant was gone is revoked; the one after the new sign-in lives.
        let sessions = try TestDatabase.query(
            harness.conninfo, "SELECT revoked_at IS NULL FROM siwa.sessions WHERE apple_sub = $1 ORDER BY created_at", [sub])
        #expect(sessions.rows.map { $0[0] } == ["f", "t"])
    }
}
