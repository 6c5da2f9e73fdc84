import Foundation
import SiwaApp
import SiwaCore
import SiwaPostgres
import SiwaRuntime
import Testing

/// The hosted providers end to end: notifications through the real receiver and worker, each
/// effect queued in `siwa.provider_calls` in the worker's transaction and made by the provider
/// sender against the provider (Cognito: moto's server, with a front for what moto lacks). The
/// scenarios take a `ProviderFixture`, so that every provider runs the same matrix.
@Suite("Provider calls", .serialized, .needsDatabase)
struct ProviderCallTests {
    /// The providers whose fixture runs the matrix.
    static let fixtures: [HostedProvider] = [.cognito, .firebase, .auth0, .clerk]

    static func make(_ provider: HostedProvider) throws -> any ProviderFixture {
        switch provider {
        case .cognito: return try CognitoFixture()
        case .firebase: return try FirebaseFixture()
        case .auth0: return try Auth0Fixture()
        case .clerk: return try ClerkFixture()
        }
    }

    static let apple = "001234.aaaa0000bbbb1111cccc2222dddd3333.0001"
    static let linked = "001234.eeee4444ffff5555aaaa6666bbbb7777.0002"
    static let other = "001234.99998888777766665555444433332222.0003"
    static let unknown = "001234.00000000000000000000000000000000.0004"

    /// A harness applying events to the fixture's provider, with quick retries.
    static func harness(
        _ fixture: any ProviderFixture, policy: AccountDeletePolicy = .unlink, wallClock: WallClock = .system
    ) throws -> TestHarness {
        try TestHarness { config, options in
            fixture.configure(&config)
            options.providers.wallClock = wallClock
            config.authLibraries.onAccountDelete = policy
            options.providers.pollInterval = .milliseconds(100)
            options.providers.schedule = ProviderCallSchedule(
                retryFor: .seconds(3600), backoff: RetryPolicy(maxAttempts: .max, baseDelay: .milliseconds(200), maxDelay: .milliseconds(400)))
        }
    }

    struct Row: Equatable {
        var effect: String
        var state: String
        var actions: String?
        var attempts: Int
    }

    static func calls(_ h: TestHarness, sub: String) throws -> [Row] {
        let result = try h.query(
            "SELECT effect, state, actions, attempts FROM siwa.provider_calls WHERE apple_sub = $1 ORDER BY id", [sub])
        return result.rows.map { r in Row(effect: r[0] ?? "", state: r[1] ?? "", actions: r[2], attempts: Int(r[3] ?? "0") ?? 0) }
    }

    /// Waits until no call of `sub` is pending; the calls then.
    static func settled(_ h: TestHarness, sub: String, timeout: Double = 20) throws -> [Row] {
        let done = try eventually(timeout: timeout) {
            try h.waitForWorker(timeout: timeout) && (try calls(h, sub: sub)).allSatisfy { $0.state != "pending" }
        }
        let rows = try calls(h, sub: sub)
        #expect(done, "calls still pending after \(timeout) s: \(rows)")
        return rows
    }

    func post(_ h: TestHarness, _ type: String, sub: String, at t: Int64) throws {
        let reply = try h.post(token: try h.token(type: type, sub: sub, eventTimeMillis: t))
        #expect(reply.status == 200, "\(reply.body)")
    }

    @Test("consent-revoked ends the user's sessions there, and only that user's", arguments: fixtures)
    func consent(_ provider: HostedProvider) throws {
        let fixture = try Self.make(provider)
        defer { fixture.stop() }
        try fixture.addAppleUser(sub: Self.apple)
        try fixture.addAppleUser(sub: Self.other)
        let mine = try fixture.startSession(sub: Self.apple)
        let theirs = try fixture.startSession(sub: Self.other)
        let h = try Self.harness(fixture)
        defer { h.stop() }
        try post(h, "consent-revoked", sub: Self.apple, at: 1_750_000_000_000)
        #expect(try Self.settled(h, sub: Self.apple) == [Row(effect: "end_sessions", state: "done", actions: "signed_out", attempts: 1)])
        #expect(try !fixture.sessionAlive(mine))
        #expect(try fixture.sessionAlive(theirs))
        #expect(try fixture.userExists(sub: Self.apple))
        #expect(try Self.calls(h, sub: Self.other).isEmpty)
        let metrics = try h.admin("/metrics").body
        #expect(metrics.contains(#"siwa_provider_calls_total{target="\#(fixture.provider.rawValue)",outcome="done"} 1"#), "\(metrics)")
    }

    @Test("account-delete with delete-user deletes an Apple-only user and unlinks a linked one", arguments: fixtures)
    func accountDelete(_ provider: HostedProvider) throws {
        let fixture = try Self.make(provider)
        defer { fixture.stop() }
        try fixture.addAppleUser(sub: Self.apple)
        try fixture.addLinkedUser(sub: Self.linked)
        try fixture.addAppleUser(sub: Self.other)
        let linkedSession = try fixture.startSession(sub: Self.linked)
        let h = try Self.harness(fixture, policy: .deleteUser)
        defer { h.stop() }
        try post(h, "account-delete", sub: Self.apple, at: 1_750_000_000_000)
        try post(h, "account-delete", sub: Self.linked, at: 1_750_000_000_000)
        let behaviour = fixture.behaviour
        #expect(
            try Self.settled(h, sub: Self.apple) == [Row(effect: "delete_user", state: "done", actions: behaviour.deleteAppleOnly, attempts: 1)])
        #expect(
            try Self.settled(h, sub: Self.linked) == [Row(effect: "delete_user", state: "done", actions: behaviour.deleteLinked, attempts: 1)])
        #expect(try !fixture.userExists(sub: Self.apple))
        #expect(try fixture.userExists(sub: Self.other))
        #expect(try !fixture.sessionAlive(linkedSession))
        #expect(fixture.unlinked == [Self.linked])
    }

    @Test("Auth0 below Enterprise: consent-revoked revokes the refresh tokens and ends done; account-delete deletes or unlinks after it")
    func auth0LowerPlan() throws {
        let fixture = try Auth0Fixture(plan: .professional)
        defer { fixture.stop() }
        try fixture.addAppleUser(sub: Self.apple)
        try fixture.addLinkedUser(sub: Self.linked)
        try fixture.addAppleUser(sub: Self.other)
        let mine = try fixture.startSession(sub: Self.apple)
        let theirs = try fixture.startSession(sub: Self.other)
        let h = try Self.harness(fixture, policy: .deleteUser)
        defer { h.stop() }
        try post(h, "consent-revoked", sub: Self.apple, at: 1_750_000_000_000)
        #expect(
            try Self.settled(h, sub: Self.apple)
                == [Row(effect: "end_sessions", state: "done", actions: "refresh_tokens_revoked,blocked,unblocked", attempts: 1)])
        #expect(try !fixture.sessionAlive(mine))
        #expect(try fixture.sessionAlive(theirs))
        #expect(fixture.tenant.user("apple|\(Self.apple)")?.blocked == false)
        try post(h, "account-delete", sub: Self.apple, at: 1_750_000_001_000)
        try post(h, "account-delete", sub: Self.linked, at: 1_750_000_001_000)
        #expect(
            try Self.settled(h, sub: Self.apple).last
                == Row(effect: "delete_user", state: "done", actions: fixture.behaviour.deleteAppleOnly, attempts: 1))
        #expect(
            try Self.settled(h, sub: Self.linked) == [Row(effect: "delete_user", state: "done", actions: fixture.behaviour.deleteLinked, attempts: 1)]
        )
        #expect(try !fixture.userExists(sub: Self.apple))
        #expect(fixture.unlinked == [Self.linked])
        // The Enterprise endpoints were asked once, by the start-up check, never per call.
        #expect(fixture.tenant.fake.requests.filter { $0.path.hasSuffix("/sessions") }.count == 1)
    }

    @Test("an in-app deletion unlinks; a later or duplicate event queues nothing more (deletion is final)", arguments: fixtures)
    func inAppDeletion(_ provider: HostedProvider) throws {
        let fixture = try Self.make(provider)
        defer { fixture.stop() }
        try fixture.addAppleUser(sub: Self.apple)
        let h = try Self.harness(fixture)
        defer { h.stop() }
        _ = try h.query("SELECT siwa.request_deletion($1, $2)", [Self.apple, TestHarness.audience])
        // Where the provider cannot unlink a user's only identity, the sessions end and it stays.
        let unlinks = fixture.behaviour.unlinksSoleIdentity
        let actions = unlinks ? "signed_out,unlinked" : "signed_out"
        #expect(try Self.settled(h, sub: Self.apple) == [Row(effect: "unlink", state: "done", actions: actions, attempts: 1)])
        #expect(fixture.unlinked == (unlinks ? [Self.apple] : []))
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        try post(h, "consent-revoked", sub: Self.apple, at: now - 60_000)
        try post(h, "account-delete", sub: Self.apple, at: now - 30_000)
        #expect(try Self.settled(h, sub: Self.apple).count == 1)
    }

    @Test("a stale consent-revoked (older than one applied) and a resent one queue nothing", arguments: fixtures)
    func staleAndDuplicate(_ provider: HostedProvider) throws {
        let fixture = try Self.make(provider)
        defer { fixture.stop() }
        try fixture.addAppleUser(sub: Self.apple)
        let h = try Self.harness(fixture)
        defer { h.stop() }
        let token = try h.token(type: "consent-revoked", sub: Self.apple, eventTimeMillis: 1_750_000_002_000)
        #expect(try h.post(token: token).status == 200)
        #expect(try h.post(token: token).status == 200)
        // Applied before the older one arrives: pending together, the worker would apply both in
        // event-time order, each ending the sessions begun before it.
        #expect(try h.waitForWorker())
        try post(h, "consent-revoked", sub: Self.apple, at: 1_750_000_001_000)
        try post(h, "email-disabled", sub: Self.apple, at: 1_750_000_003_000)
        let rows = try Self.settled(h, sub: Self.apple)
        #expect(rows.map(\.effect) == ["end_sessions"], "\(rows)")
    }

    @Test("a user the provider does not know is recorded as such, not an error", arguments: fixtures)
    func unknownUser(_ provider: HostedProvider) throws {
        let fixture = try Self.make(provider)
        defer { fixture.stop() }
        let h = try Self.harness(fixture)
        defer { h.stop() }
        try post(h, "consent-revoked", sub: Self.unknown, at: 1_750_000_000_000)
        let rows = try Self.settled(h, sub: Self.unknown)
        #expect(rows.map(\.state) == ["user_unknown"] && rows.first?.attempts == 1, "\(rows)")
    }

    @Test("a provider down loses nothing and holds no worker batch; a refused credential waits for the fix", arguments: fixtures)
    func downThenBack(_ provider: HostedProvider) throws {
        let fixture = try Self.make(provider)
        defer { fixture.stop() }
        try fixture.addAppleUser(sub: Self.apple)
        try fixture.addAppleUser(sub: Self.other)
        let h = try Self.harness(fixture)
        defer { h.stop() }
        fixture.down()
        try post(h, "consent-revoked", sub: Self.apple, at: 1_750_000_000_000)
        // The event is applied at once; the call waits, tried again and again.
        #expect(try h.waitForWorker())
        #expect(try eventually(timeout: 10) { (try Self.calls(h, sub: Self.apple).first?.attempts ?? 0) >= 3 })
        #expect(try Self.calls(h, sub: Self.apple).map(\.state) == ["pending"])
        #expect(try h.scalar("SELECT last_status FROM siwa.provider_calls WHERE apple_sub = $1", [Self.apple]) == "503")
        // `status` shows the call waiting.
        let report = try OutboxAdmin.status(conninfo: h.conninfo)
        #expect(report.providerCalls?.first { $0.target == fixture.provider.rawValue }?.waiting == 1, "\(report)")
        #expect(OutboxAdmin.render(report).contains("\(fixture.provider.rawValue) calls waiting"), "\(OutboxAdmin.render(report))")
        // A revoked credential: refused, kept, and said so.
        fixture.refuseCredential()
        try post(h, "consent-revoked", sub: Self.other, at: 1_750_000_000_000)
        #expect(
            try eventually(timeout: 10) {
                try h.scalar("SELECT last_reason FROM siwa.provider_calls WHERE apple_sub = $1", [Self.other])
                    == fixture.behaviour.refusedCredential
            })
        fixture.up()
        #expect(try Self.settled(h, sub: Self.apple).map(\.state) == ["done"])
        #expect(try Self.settled(h, sub: Self.other).map(\.state) == ["done"])
        // The gauge is read in the background: it shows the empty queue within a few refreshes.
        #expect(try eventually(timeout: 5) { try h.admin("/metrics").body.contains("siwa_provider_calls_waiting 0\n") })
    }

    @Test("a dead call is made again by replay", arguments: fixtures)
    func replay(_ provider: HostedProvider) throws {
        let fixture = try Self.make(provider)
        defer { fixture.stop() }
        try fixture.addAppleUser(sub: Self.apple)
        let h = try Self.harness(fixture)
        defer { h.stop() }
        fixture.down()
        try post(h, "consent-revoked", sub: Self.apple, at: 1_750_000_000_000)
        #expect(try eventually(timeout: 10) { (try Self.calls(h, sub: Self.apple).first?.attempts ?? 0) >= 1 })
        _ = try h.query("UPDATE siwa.provider_calls SET state = 'dead' WHERE apple_sub = $1", [Self.apple])
        fixture.up()
        #expect(try OutboxAdmin.replayProviderCalls(target: fixture.provider.rawValue, conninfo: h.conninfo) == 1)
        #expect(try Self.settled(h, sub: Self.apple).map(\.state) == ["done"])
    }

    @Test("user-report shows each provider call: which, when, the provider's status and what it did; never the credential")
    func userReport() throws {
        let fixture = try ClerkFixture()
        defer { fixture.stop() }
        try fixture.addAppleUser(sub: Self.apple)
        try fixture.addAppleUser(sub: Self.other)
        let h = try Self.harness(fixture)
        defer { h.stop() }
        try post(h, "consent-revoked", sub: Self.apple, at: 1_750_000_000_000)
        #expect(try Self.settled(h, sub: Self.apple).map(\.state) == ["done"])
        fixture.down()
        try post(h, "consent-revoked", sub: Self.other, at: 1_750_000_000_000)
        #expect(try eventually(timeout: 10) { (try Self.calls(h, sub: Self.other).first?.attempts ?? 0) >= 1 })

        let text = try #require(try UserReport.json(sub: Self.apple, conninfo: h.conninfo))
        #expect(!text.contains(FakeClerk.secretKey), "the report holds the provider's credential")
        let report = try JSONParser.parse(Array(text.utf8))
        // Only this user's call (the other user's is in their report).
        guard case .array(let calls)? = report["provider_calls"], calls.count == 1, let done = calls.first else {
            Issue.record("not one provider call in \(text)")
            return
        }
        #expect(done["target"]?.stringValue == "clerk" && done["effect"]?.stringValue == "end_sessions")
        #expect(done["event_type"]?.stringValue == "consent-revoked" && done["event_id"]?.int64Value != nil)
        #expect(done["state"]?.stringValue == "done" && done["attempts"]?.int64Value == 1 && done["http_status"]?.int64Value == 200)
        #expect(done["actions"]?.stringValue == "signed_out" && done["reason"] == .null)
        #expect(done["queued_at"]?.stringValue != nil && done["last_attempt_at"]?.stringValue != nil)
        #expect(done["finished_at"]?.stringValue != nil && done["next_attempt_at"] == .null)

        // A call waiting on a provider that is down: its status and error code, when it is tried next.
        let waitingText = try #require(try UserReport.json(sub: Self.other, conninfo: h.conninfo))
        guard case .array(let waitingCalls)? = try JSONParser.parse(Array(waitingText.utf8))["provider_calls"], let waiting = waitingCalls.first
        else {
            Issue.record("no provider call in \(waitingText)")
            return
        }
        #expect(waiting["state"]?.stringValue == "pending" && waiting["http_status"]?.int64Value == 503, "\(waitingText)")
        #expect(waiting["reason"]?.stringValue != nil && waiting["next_attempt_at"]?.stringValue != nil && waiting["finished_at"] == .null)
        fixture.up()
    }

    @Test("the start stops with one line naming the variable: a pool it does not know, a refused credential")
    func refusedStart() throws {
        let fixture = try CognitoFixture()
        defer { fixture.stop() }
        func startError(_ change: @escaping (inout ServerConfiguration) -> Void) -> String {
            do {
                let h = try TestHarness { config, _ in
                    fixture.configure(&config)
                    change(&config)
                }
                h.stop()
                return "started"
            } catch {
                return "\(error)"
            }
        }
        let wrongPool = startError { $0.hostedProviders.cognito?.userPoolID = "us-east-1_nothere" }
        #expect(wrongPool.hasPrefix("SIWA_COGNITO_USER_POOL_ID: "), "\(wrongPool)")
        fixture.refuseCredential()
        let refused = startError { _ in }
        #expect(refused.hasPrefix("AWS_ACCESS_KEY_ID: cognito refused the credential"), "\(refused)")
        fixture.down()
        let down = startError { _ in }
        #expect(down.hasPrefix("SIWA_COGNITO_URL: cognito did not answer"), "\(down)")
    }
}
