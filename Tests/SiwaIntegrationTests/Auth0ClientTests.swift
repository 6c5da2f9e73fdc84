import Foundation
import Logging
import SiwaApp
import SiwaCore
import SiwaHTTP
import SiwaRuntime
import Synchronization
import Testing

/// The Auth0 Management API client against a loopback tenant written from Auth0's published
/// OpenAPI descriptions (the Management API v2 and the Authentication API's token endpoint,
/// Fixtures/providers/): users with linked identities, sessions and refresh tokens, a token
/// endpoint whose tokens expire, Auth0's error shape, 429s with `x-ratelimit-reset`. Every
/// request a test makes, and the fake's answer, is checked against those descriptions.
@Suite("Auth0 Management API client", .serialized, .enabled(if: OpenAPIChecker.runs, "needs python3 with jsonschema"))
struct Auth0ClientTests {
    static let specs = ["auth0-management-api.json", "auth0-authentication-api.json"]
    static let appleSub = "001234.5f3c8a9b0d1e4f2a8b7c6d5e4f3a2b1c.0042"
    static let linkedSub = "001234.aa11bb22cc33dd44ee55ff6677889900.0007"
    static let otherSub = "001234.99999999999999999999999999999999.0001"

    static func client(_ tenant: FakeAuth0, secret: String = FakeAuth0.secret) throws -> Auth0Client {
        try Auth0Client(
            domain: FakeAuth0.domain, clientID: FakeAuth0.clientID, clientSecret: secret, url: tenant.fake.url, logger: Logger(label: "auth0-test"),
            clock: WallClock { .seconds(tenant.now) })
    }

    /// A tenant with: the Apple-only user, a password user with another Apple identity linked,
    /// an Apple user with Google linked to it (Apple primary), and a Google user with a third
    /// Apple identity linked, each signed in.
    static func tenant(plan: FakeAuth0.Plan = .enterprise) throws -> FakeAuth0 {
        let tenant = try FakeAuth0(plan: plan)
        tenant.add("apple|\(appleSub)", [("apple", appleSub)])
        tenant.add("auth0|64f0c0ffee", [("auth0", "64f0c0ffee"), ("apple", linkedSub)])
        tenant.add("apple|\(otherSub)", [("apple", otherSub), ("google-oauth2", "1084")])
        tenant.add("google-oauth2|2001", [("google-oauth2", "2001")])
        return tenant
    }

    @Test("end_sessions: the Apple user's sessions and refresh tokens end, and only theirs")
    func endSessions() throws {
        let tenant = try Self.tenant()
        defer { tenant.fake.stop() }
        let client = try Self.client(tenant)
        #expect(client.apply(.endSessions, sub: Self.appleSub) == .done([.signedOut], status: 202))
        #expect(tenant.user("apple|\(Self.appleSub)")?.signedIn == false)
        #expect(tenant.user("auth0|64f0c0ffee")?.signedIn == true)
        #expect(tenant.user("google-oauth2|2001")?.signedIn == true)
        // A linked Apple identity: found through the user search, its primary user signed out.
        #expect(client.apply(.endSessions, sub: Self.linkedSub) == .done([.signedOut], status: 202))
        #expect(tenant.user("auth0|64f0c0ffee")?.signedIn == false)
        #expect(tenant.user("google-oauth2|2001")?.signedIn == true)
        let search = try #require(tenant.fake.requests.first { $0.path == "/api/v2/users" })
        #expect(search.argument("q") == #"identities.user_id:"\#(Self.linkedSub)" AND identities.provider:"apple""#)
        #expect(search.argument("search_engine") == "v3")
        #expect(client.accessTokensObtained == 1)
        try ProviderOpenAPI.expectValid(tenant.fake.requests, specs: Self.specs)
    }

    @Test("unknown sub: recorded as no such user, nothing changed")
    func unknownUser() throws {
        let tenant = try Self.tenant()
        defer { tenant.fake.stop() }
        let client = try Self.client(tenant)
        for effect in ProviderEffect.allCases {
            #expect(client.apply(effect, sub: "001234.00000000000000000000000000000000.0000") == .userNotFound(status: 200))
        }
        #expect(tenant.users.count == 4)
        #expect(tenant.users.values.allSatisfy { $0.signedIn })
        #expect(!tenant.fake.requests.contains { $0.method == "DELETE" })
        try ProviderOpenAPI.expectValid(tenant.fake.requests, specs: Self.specs)
    }

    @Test("unlink: a linked Apple identity is unlinked from its user, who keeps the password; an Apple primary identity stays")
    func unlink() throws {
        let tenant = try Self.tenant()
        defer { tenant.fake.stop() }
        let client = try Self.client(tenant)
        #expect(client.apply(.unlink, sub: Self.linkedSub) == .done([.signedOut, .unlinked], status: 200))
        #expect(tenant.user("auth0|64f0c0ffee")?.identities.map(\.provider) == ["auth0"])
        #expect(tenant.user("auth0|64f0c0ffee")?.signedIn == false)
        // Auth0 makes the unlinked identity a user of its own: unlink does not delete it.
        #expect(tenant.user("apple|\(Self.linkedSub)") != nil)
        // Again: the identity is now that standalone user's own; nothing more to unlink.
        #expect(client.apply(.unlink, sub: Self.linkedSub) == .done([.signedOut], status: 202))
        // Apple as the main identity: Auth0 cannot unlink it; sessions end, the user stays whole.
        #expect(client.apply(.unlink, sub: Self.otherSub) == .done([.signedOut], status: 202))
        #expect(tenant.user("apple|\(Self.otherSub)")?.identities.count == 2)
        #expect(!tenant.fake.requests.contains { $0.path.contains("/identities/apple/\(Self.otherSub)") })
        #expect(tenant.user("apple|\(Self.appleSub)")?.signedIn == true)
        try ProviderOpenAPI.expectValid(tenant.fake.requests, specs: Self.specs)
    }

    @Test("delete_user: the Apple-only user is deleted; a user with other ways in is unlinked and keeps them")
    func deleteUser() throws {
        let tenant = try Self.tenant()
        defer { tenant.fake.stop() }
        let client = try Self.client(tenant)
        #expect(client.apply(.deleteUser, sub: Self.appleSub) == .done([.signedOut, .deleted], status: 204))
        #expect(tenant.user("apple|\(Self.appleSub)") == nil)
        // Deleted: Auth0 keeps no trace, so the same effect again finds no such user.
        #expect(client.apply(.deleteUser, sub: Self.appleSub) == .userNotFound(status: 200))
        // Linked to a password user: unlinked, and the standalone user Auth0 makes of it deleted.
        #expect(client.apply(.deleteUser, sub: Self.linkedSub) == .done([.signedOut, .unlinked, .deleted], status: 204))
        #expect(tenant.user("auth0|64f0c0ffee")?.identities.map(\.provider) == ["auth0"])
        #expect(tenant.user("apple|\(Self.linkedSub)") == nil)
        // Apple primary with Google linked: not the only way in, so the user stays.
        #expect(client.apply(.deleteUser, sub: Self.otherSub) == .done([.signedOut], status: 202))
        #expect(tenant.user("apple|\(Self.otherSub)") != nil)
        #expect(tenant.users.count == 3)
        try ProviderOpenAPI.expectValid(tenant.fake.requests, specs: Self.specs)
    }

    @Test("a user gone between the lookup and the unlink (Auth0's 400) counts as already done; gone before the sign-out, as unknown")
    func goneMeanwhile() throws {
        let tenant = try Self.tenant()
        defer { tenant.fake.stop() }
        let client = try Self.client(tenant)
        // Deleted by someone else once signed out: the unlink gets the 400 the description gives
        // a user that is not there, and a second look finds nobody holding the identity.
        tenant.remove("auth0|64f0c0ffee", afterLookup: false)
        #expect(client.apply(.unlink, sub: Self.linkedSub) == .done([.signedOut, .alreadyDone], status: 200))
        let unlink = try #require(tenant.fake.requests.first { $0.method == "DELETE" && $0.path.contains("/identities/apple/") })
        #expect(unlink.answer.status == 400)
        // Another 400 where the identity is still linked (the main identity) stays a refusal.
        tenant.add("auth0|77", [("auth0", "77"), ("apple", Self.otherSub + "x")])
        tenant.fake.answer { request in
            request.head.method == "DELETE" && request.head.path.contains("/identities/apple/")
                ? FakeAuth0.error(400, "Bad Request", "Main identity cannot be removed.") : nil
        }
        #expect(
            client.apply(.unlink, sub: Self.otherSub + "x")
                == .refused(ProviderFailure(status: 400, reason: "http_400", blame: .request, progress: [.signedOut])))
        tenant.fake.answer { _ in nil }
        tenant.remove("apple|\(Self.appleSub)", afterLookup: true)
        #expect(client.apply(.endSessions, sub: Self.appleSub) == .userNotFound(status: 404))
        try ProviderOpenAPI.expectValid(tenant.fake.requests, specs: Self.specs)
    }

    @Test("below Enterprise: refresh tokens revoked as device credentials, the Auth0 session ended by a block lifted at once")
    func lowerPlanEndSessions() throws {
        let tenant = try Self.tenant(plan: .professional)
        defer { tenant.fake.stop() }
        // More refresh tokens than a page: listed again until none is left.
        tenant.addRefreshTokens("apple|\(Self.appleSub)", 150)
        let client = try Self.client(tenant)
        #expect(client.apply(.endSessions, sub: Self.appleSub) == .done([.refreshTokensRevoked, .blocked, .unblocked], status: 200))
        let user = try #require(tenant.user("apple|\(Self.appleSub)"))
        #expect(user.refreshTokens.isEmpty && user.sessions == 0 && user.blocks == 1)
        #expect(!user.blocked && user.appMetadata.isEmpty)
        #expect(client.signOutMethod == .deviceCredentials)
        for other in ["auth0|64f0c0ffee", "apple|\(Self.otherSub)", "google-oauth2|2001"] {
            #expect(tenant.user(other)?.refreshTokens.count == 2 && tenant.user(other)?.sessions == 1, "\(other)")
        }
        // Both kinds listed (rotating ones too), and the plan's refusal asked once, not per call.
        let lists = tenant.fake.requests.filter { $0.path == "/api/v2/device-credentials" }
        #expect(Set(lists.compactMap { $0.argument("type") }) == ["refresh_token", "rotating_refresh_token"])
        #expect(lists.allSatisfy { $0.argument("user_id") == "apple|\(Self.appleSub)" })
        #expect(client.apply(.endSessions, sub: Self.linkedSub) == .done([.refreshTokensRevoked, .blocked, .unblocked], status: 200))
        #expect(tenant.user("auth0|64f0c0ffee")?.signedIn == false)
        #expect(tenant.fake.requests.filter { $0.path.hasSuffix("/sessions") }.count == 1)
        let block = try #require(tenant.fake.requests.first { $0.method == "PATCH" })
        #expect(block.contentType == "application/json")
        #expect(String(decoding: block.body, as: UTF8.self) == #"{"app_metadata":{"siwa_notify_sign_out":true},"blocked":true}"#)
        try ProviderOpenAPI.expectValid(tenant.fake.requests, specs: Self.specs)
    }

    @Test("below Enterprise: unlink and delete_user proceed after that sign-out")
    func lowerPlanUnlinkAndDelete() throws {
        let tenant = try Self.tenant(plan: .professional)
        defer { tenant.fake.stop() }
        let client = try Self.client(tenant)
        let signedOut: [ProviderAction] = [.refreshTokensRevoked, .blocked, .unblocked]
        #expect(client.apply(.unlink, sub: Self.linkedSub) == .done(signedOut + [.unlinked], status: 200))
        #expect(tenant.user("auth0|64f0c0ffee")?.identities.map(\.provider) == ["auth0"])
        #expect(tenant.user("auth0|64f0c0ffee")?.blocked == false)
        #expect(client.apply(.deleteUser, sub: Self.appleSub) == .done(signedOut + [.deleted], status: 204))
        #expect(tenant.user("apple|\(Self.appleSub)") == nil)
        #expect(client.apply(.deleteUser, sub: Self.otherSub) == .done(signedOut, status: 200))
        #expect(tenant.user("apple|\(Self.otherSub)")?.identities.count == 2)
        try ProviderOpenAPI.expectValid(tenant.fake.requests, specs: Self.specs)
    }

    @Test("a plan refusal is told from a missing scope: any other 403 falls back, insufficient_scope waits for the operator")
    func planOrScope() throws {
        let tenant = try Self.tenant(plan: .professional)
        defer { tenant.fake.stop() }
        tenant.scopes.remove("delete:sessions")
        let client = try Self.client(tenant)
        #expect(
            client.apply(.endSessions, sub: Self.appleSub)
                == .refused(ProviderFailure(status: 403, reason: "insufficient_scope", blame: .permission, progress: [])))
        #expect(client.signOutMethod == nil)
        #expect(tenant.user("apple|\(Self.appleSub)")?.signedIn == true)
        // Auth0 does not publish a lower plan's refusal: a 403 without a code is the plan too.
        tenant.scopes.insert("delete:sessions")
        tenant.fake.answer { request in
            request.head.path.hasSuffix("/sessions") ? .json(403, #"{"statusCode":403,"error":"Forbidden","message":"Forbidden"}"#) : nil
        }
        #expect(client.apply(.endSessions, sub: Self.appleSub) == .done([.refreshTokensRevoked, .blocked, .unblocked], status: 200))
        #expect(client.signOutMethod == .deviceCredentials)
        tenant.fake.answer { _ in nil }
        // The device credentials' own scope missing is a permission refusal.
        tenant.scopes.remove("delete:device_credentials")
        #expect(
            client.apply(.endSessions, sub: Self.otherSub)
                == .refused(ProviderFailure(status: 403, reason: "insufficient_scope", blame: .permission, progress: [])))
        try ProviderOpenAPI.expectValid(tenant.fake.requests, specs: Self.specs)
    }

    @Test("a block the sign-out left (its unblock unanswered) is lifted by the next try; an administrator's block stays")
    func blockLeftOrAdministrators() throws {
        let tenant = try Self.tenant(plan: .professional)
        defer { tenant.fake.stop() }
        let client = try Self.client(tenant)
        tenant.fake.answer { request in
            request.head.method == "PATCH" && String(decoding: request.body, as: UTF8.self).contains(#""blocked":false"#)
                ? FakeAuth0.error(503, "Service Unavailable", "The service is unavailable.") : nil
        }
        #expect(
            client.apply(.endSessions, sub: Self.appleSub)
                == .retryLater(ProviderFailure(status: 503, reason: "http_503", progress: [.refreshTokensRevoked, .blocked])))
        #expect(tenant.user("apple|\(Self.appleSub)")?.blocked == true)
        tenant.fake.answer { _ in nil }
        #expect(client.apply(.endSessions, sub: Self.appleSub) == .done([.refreshTokensRevoked, .unblocked], status: 200))
        #expect(tenant.user("apple|\(Self.appleSub)")?.blocked == false)
        #expect(tenant.user("apple|\(Self.appleSub)")?.appMetadata.isEmpty == true)
        tenant.change("apple|\(Self.otherSub)") {
            $0.blocked = true
            $0.sessions = 0
        }
        let patches = tenant.fake.requests.filter { $0.method == "PATCH" }.count
        #expect(client.apply(.endSessions, sub: Self.otherSub) == .done([.refreshTokensRevoked], status: 204))
        #expect(tenant.user("apple|\(Self.otherSub)")?.blocked == true)
        #expect(tenant.fake.requests.filter { $0.method == "PATCH" }.count == patches)
        // The 503 is from in front of the API, where the description does not reach.
        try ProviderOpenAPI.expectValid(tenant.fake.requests, specs: Self.specs, extraStatus: [503])
    }

    @Test("429: retried later, not before x-ratelimit-reset (or Retry-After); 5xx and the network too")
    func rateLimited() throws {
        let tenant = try Self.tenant()
        defer { tenant.fake.stop() }
        let client = try Self.client(tenant)
        let limited = #"{"statusCode":429,"error":"Too Many Requests","message":"Global limit has been reached","errorCode":"too_many_requests"}"#
        tenant.fake.answer { request in
            request.head.path.hasSuffix("/sessions")
                ? .json(
                    429, limited,
                    headers: [
                        HTTPHeader("x-ratelimit-limit", "10"), HTTPHeader("x-ratelimit-remaining", "0"),
                        HTTPHeader("x-ratelimit-reset", "\(Int(tenant.now) + 7)"),
                    ]) : nil
        }
        #expect(
            client.apply(.endSessions, sub: Self.appleSub)
                == .retryLater(ProviderFailure(status: 429, reason: "too_many_requests", retryAfter: .seconds(7), progress: [])))
        tenant.fake.answer { request in
            request.head.path.hasSuffix("/sessions") ? .json(429, limited, headers: [HTTPHeader("Retry-After", "3")]) : nil
        }
        #expect(
            client.apply(.endSessions, sub: Self.appleSub)
                == .retryLater(ProviderFailure(status: 429, reason: "too_many_requests", retryAfter: .seconds(3), progress: [])))
        // The search's documented 503 (a query that timed out).
        tenant.fake.answer { request in
            request.head.path == "/api/v2/users"
                ? .json(503, #"{"statusCode":503,"error":"Service Unavailable","message":"The query exceeded the timeout."}"#) : nil
        }
        #expect(client.apply(.unlink, sub: Self.linkedSub) == .retryLater(ProviderFailure(status: 503, reason: "http_503")))
        tenant.fake.answer { _ in nil }
        #expect(tenant.users.values.allSatisfy { $0.signedIn })
        try ProviderOpenAPI.expectValid(tenant.fake.requests, specs: Self.specs)
        tenant.fake.stop()
        #expect(client.apply(.endSessions, sub: Self.appleSub) == .retryLater(ProviderFailure(reason: "couldNotConnect")))
    }

    @Test("the token is cached, renewed before it expires, and a refused one is dropped and renewed once")
    func tokenLifetime() throws {
        let tenant = try Self.tenant()
        defer { tenant.fake.stop() }
        tenant.tokenLifetime = 3600
        let client = try Self.client(tenant)
        #expect(client.check() == .done([], status: 200))
        #expect(client.apply(.endSessions, sub: Self.appleSub) == .done([.signedOut], status: 202))
        #expect(client.accessTokensObtained == 1)
        // Within the renewal margin (a tenth of an hour's lifetime): a new token first.
        tenant.now += 3600 - 300
        #expect(client.check() == .done([], status: 200))
        #expect(client.accessTokensObtained == 2)
        // Auth0 refuses the cached token (revoked, or clocks apart): one new token, the call again.
        tenant.expireTokens()
        #expect(client.check() == .done([], status: 200))
        #expect(client.accessTokensObtained == 3)
        let tokenCalls = tenant.fake.requests.filter { $0.path == "/oauth/token" }
        #expect(tokenCalls.count == 3)
        let first = try #require(tokenCalls.first)
        #expect(first.field("grant_type") == "client_credentials")
        #expect(first.field("audience") == "https://\(FakeAuth0.domain)/api/v2/")
        #expect(first.field("client_id") == FakeAuth0.clientID)
        // Every token Auth0 gives is refused: the second 401 is the answer, not a loop.
        tenant.fake.answer { request in
            request.head.path.hasPrefix("/api/v2/")
                ? .json(401, #"{"statusCode":401,"error":"Unauthorized","message":"Invalid token"}"#) : nil
        }
        #expect(client.check() == .refused(ProviderFailure(status: 401, reason: "http_401", blame: .credential)))
        #expect(client.accessTokensObtained == 4)
        tenant.fake.answer { _ in nil }
        try ProviderOpenAPI.expectValid(tenant.fake.requests, specs: Self.specs)
    }

    @Test("check(): it learns the sign-out the plan allows, changing nothing; a missing scope for it refuses")
    func startUpCheckSignOut() throws {
        let tenant = try Self.tenant()
        defer { tenant.fake.stop() }
        let enterprise = try Self.client(tenant)
        #expect(enterprise.check() == .done([], status: 200))
        #expect(enterprise.signOutMethod == .sessionEndpoints)
        #expect(enterprise.signOutDescription()?.contains("Enterprise session") == true)
        tenant.plan = .professional
        let lower = try Self.client(tenant)
        #expect(lower.signOutMethod == nil && lower.signOutDescription() == nil)
        #expect(lower.check() == .done([], status: 200))
        #expect(lower.signOutMethod == .deviceCredentials)
        #expect(lower.signOutDescription()?.contains("device credentials") == true)
        #expect(tenant.users.values.allSatisfy { $0.signedIn && !$0.blocked })
        tenant.scopes.remove("read:device_credentials")
        #expect(try Self.client(tenant).check() == .refused(ProviderFailure(status: 403, reason: "insufficient_scope", blame: .permission)))
        tenant.plan = .enterprise
        tenant.scopes.remove("delete:sessions")
        #expect(try Self.client(tenant).check() == .refused(ProviderFailure(status: 403, reason: "insufficient_scope", blame: .permission)))
        try ProviderOpenAPI.expectValid(tenant.fake.requests, specs: Self.specs)
    }

    @Test("check(): a wrong secret blames the credential, a missing grant the permission, a wrong domain the tenant")
    func startUpCheck() throws {
        let tenant = try Self.tenant()
        defer { tenant.fake.stop() }
        #expect(
            try Self.client(tenant, secret: "wrong").check() == .refused(ProviderFailure(status: 401, reason: "access_denied", blame: .credential)))
        tenant.scopes.remove("read:users")
        #expect(try Self.client(tenant).check() == .refused(ProviderFailure(status: 403, reason: "insufficient_scope", blame: .permission)))
        let otherDomain = try Auth0Client(
            domain: "other.eu.auth0.com", clientID: FakeAuth0.clientID, clientSecret: FakeAuth0.secret, url: tenant.fake.url,
            logger: Logger(label: "t"), clock: WallClock { .seconds(tenant.now) })
        #expect(otherDomain.check() == .refused(ProviderFailure(status: 403, reason: "access_denied", blame: .tenant)))
        tenant.fake.answer { _ in .json(429, #"{"error":"too_many_requests","error_description":"Too many requests"}"#) }
        #expect(try Self.client(tenant).check() == .retryLater(ProviderFailure(status: 429, reason: "too_many_requests")))
        tenant.fake.answer { _ in nil }
        try ProviderOpenAPI.expectValid(tenant.fake.requests, specs: Self.specs)
        // No tenant at that address (outside the description: Auth0 names no such answer).
        tenant.fake.answer { $0.head.path == "/oauth/token" ? HTTPResponse(status: 404) : nil }
        #expect(try Self.client(tenant).check() == .refused(ProviderFailure(status: 404, reason: "http_404", blame: .tenant)))
        #expect(throws: ConfigurationError.self) {
            try Auth0Client(domain: "t.auth0.com", clientID: "c", clientSecret: "s", url: "http://auth0.example.com", logger: Logger(label: "t"))
        }
    }
}

/// A loopback Auth0 tenant: a token endpoint (client credentials, tokens that expire on the
/// test's clock) and the Management API operations the client uses, answering as Auth0's
/// published description says, with its error shape `{statusCode,error,message,errorCode}`.
/// `plan` below Enterprise refuses the session and refresh-token endpoints with a 403 that is not
/// a missing scope (Auth0 does not publish that answer: `planRefusal` is the fake's guess, and
/// the tests try others); device credentials and user updates work on every plan.
final class FakeAuth0: Sendable {
    static let domain = "siwa-test.eu.auth0.com"
    static let clientID = "m2mClientId0123456789"
    static let secret = "m2m-client-secret-value"

    enum Plan: Sendable { case enterprise, professional }

    struct Identity: Sendable, Equatable {
        var provider: String
        var userID: String
    }

    struct RefreshToken: Sendable, Equatable {
        var id: String
        var type: String
    }

    struct User: Sendable, Equatable {
        var id: String
        var identities: [Identity]
        /// Auth0 sessions (ended by the sessions endpoint or by a block).
        var sessions = 1
        var refreshTokens: [RefreshToken] = []
        var blocked = false
        var appMetadata: [String: JSONValue] = [:]
        var signedIn: Bool { sessions + refreshTokens.count > 0 }
        /// Times the user was blocked.
        var blocks = 0
    }

    struct State: Sendable {
        var users: [String: User] = [:]
        var tokens: [String: Double] = [:]
        var issued = 0
        var credentials = 0
        var now: Double = 1_800_000_000
        var tokenLifetime: Double = 86_400
        var scopes: Set<String> = [
            "read:users", "update:users", "delete:users", "delete:sessions", "delete:refresh_tokens", "read:device_credentials",
            "delete:device_credentials",
        ]
        var plan = Plan.enterprise
        var vanishing: String?
        var vanishingAfterSignOut: String?
    }

    let state = Mutex(State())
    let fake: ProviderFake

    /// The 403 the fake gives a lower plan on the Enterprise endpoints.
    static let planRefusal = error(
        403, "Forbidden", "This feature is not available for your plan. Upgrade to Enterprise.", code: "operation_not_supported")

    init(plan: Plan = .enterprise) throws {
        fake = try ProviderFake()
        state.withLock { $0.plan = plan }
        fake.route { [unowned self] request in self.route(request) }
    }

    var now: Double {
        get { state.withLock { $0.now } }
        set { state.withLock { $0.now = newValue } }
    }
    var tokenLifetime: Double {
        get { state.withLock { $0.tokenLifetime } }
        set { state.withLock { $0.tokenLifetime = newValue } }
    }
    var scopes: Set<String> {
        get { state.withLock { $0.scopes } }
        set { state.withLock { $0.scopes = newValue } }
    }
    var plan: Plan {
        get { state.withLock { $0.plan } }
        set { state.withLock { $0.plan = newValue } }
    }
    var users: [String: User] { state.withLock { $0.users } }
    func user(_ id: String) -> User? { state.withLock { $0.users[id] } }

    /// A user signed in once, with one Auth0 session and one refresh token of each kind.
    func add(_ id: String, _ identities: [(String, String)]) {
        state.withLock { state in
            var user = User(id: id, identities: identities.map { Identity(provider: $0.0, userID: $0.1) })
            for type in ["refresh_token", "rotating_refresh_token"] { user.refreshTokens.append(Self.credential(&state, type)) }
            state.users[id] = user
        }
    }

    /// `count` more refresh tokens of the user.
    func addRefreshTokens(_ id: String, _ count: Int) {
        state.withLock { state in
            for _ in 0..<count {
                let token = Self.credential(&state, "refresh_token")
                state.users[id]?.refreshTokens.append(token)
            }
        }
    }

    private static func credential(_ state: inout State, _ type: String) -> RefreshToken {
        state.credentials += 1
        return RefreshToken(id: "dcr_\(String(state.credentials, radix: 16))", type: type)
    }

    /// Changes a user as an administrator would.
    func change(_ id: String, _ change: (inout User) -> Void) { state.withLock { if $0.users[id] != nil { change(&$0.users[id]!) } } }

    /// Deletes the user as soon as it has been read, by id or by search (`afterLookup`), or once
    /// it is signed out (another admin deleting it meanwhile).
    func remove(_ id: String, afterLookup: Bool) {
        state.withLock {
            if afterLookup { $0.vanishing = id } else { $0.vanishingAfterSignOut = id }
        }
    }

    func expireTokens() { state.withLock { $0.tokens = [:] } }

    static func error(_ status: Int, _ error: String, _ message: String, code: String? = nil) -> HTTPResponse {
        var body: [String: JSONValue] = ["statusCode": .number(Double(status)), "error": .string(error), "message": .string(message)]
        if let code { body["errorCode"] = .string(code) }
        return .json(status, JSONValue.object(body).serialized())
    }

    static func json(_ user: User) -> JSONValue {
        var fields: [String: JSONValue] = [
            "user_id": .string(user.id),
            "identities": .array(
                user.identities.map {
                    .object([
                        "provider": .string($0.provider), "user_id": .string($0.userID),
                        "connection": .string($0.provider == "auth0" ? "Username-Password-Authentication" : $0.provider),
                        "isSocial": .bool($0.provider != "auth0"),
                    ])
                }),
        ]
        if user.blocked { fields["blocked"] = .bool(true) }
        if !user.appMetadata.isEmpty { fields["app_metadata"] = .object(user.appMetadata) }
        return .object(fields)
    }

    private func route(_ request: HTTPRequest) -> HTTPResponse {
        let head = request.head
        return state.withLock { state in
            if head.path == "/oauth/token" { return token(request, &state) }
            guard let bearer = head.authorization, bearer.hasPrefix("Bearer "), let expiry = state.tokens[String(bearer.dropFirst(7))] else {
                return Self.error(401, "Unauthorized", "Invalid token")
            }
            if state.now >= expiry { return Self.error(401, "Unauthorized", "Expired token received for JSON Web Token validation") }
            return management(request, &state)
        }
    }

    private func token(_ request: HTTPRequest, _ state: inout State) -> HTTPResponse {
        let form = FormURLEncoding.decodeUnique(request.body) ?? [:]
        guard form["grant_type"] == "client_credentials", form["client_id"] == Self.clientID, form["client_secret"] == Self.secret else {
            return .json(401, #"{"error":"access_denied","error_description":"Unauthorized"}"#)
        }
        guard form["audience"] == "https://\(Self.domain)/api/v2/" else {
            return .json(403, #"{"error":"access_denied","error_description":"Service not enabled within domain: \#(form["audience"] ?? "")"}"#)
        }
        state.issued += 1
        let token = "eyJ.fake-management-token-\(state.issued)"
        state.tokens[token] = state.now + state.tokenLifetime
        return .json(
            200,
            JSONValue.object(["access_token": .string(token), "token_type": .string("Bearer"), "expires_in": .number(state.tokenLifetime)])
                .serialized())
    }

    private func management(_ request: HTTPRequest, _ state: inout State) -> HTTPResponse {
        let head = request.head
        let parts = head.path.split(separator: "/", omittingEmptySubsequences: false).map(String.init)
        guard parts.count >= 4, parts[1] == "api", parts[2] == "v2" else { return Self.error(404, "Not Found", "Not Found") }
        let scopes = state.scopes
        func needs(_ scope: String) -> HTTPResponse? {
            scopes.contains(scope) ? nil : Self.error(403, "Forbidden", "Insufficient scope, expected any of: \(scope)", code: "insufficient_scope")
        }
        func argument(_ name: String) -> String? { head.query.first { $0.name == name }?.value }
        if parts[3] == "device-credentials" { return deviceCredentials(head.method, parts, argument, needs, &state) }
        guard parts[3] == "users" else { return Self.error(404, "Not Found", "Not Found") }
        let notFound = Self.error(404, "Not Found", "The user does not exist.", code: "inexistent_user")
        switch (head.method, parts.count) {
        case ("GET", 4):
            if let refused = needs("read:users") { return refused }
            var found = Array(state.users.values).sorted { $0.id < $1.id }
            if let q = argument("q") {
                found = found.filter { Self.matches(q, $0) }
                for user in found where state.vanishing == user.id { state.users[user.id] = nil }
            }
            let perPage = argument("per_page").flatMap { Int($0) } ?? 50
            return .json(200, JSONValue.array(found.prefix(perPage).map(Self.json)).serialized())
        case ("GET", 5):
            if let refused = needs("read:users") { return refused }
            guard let user = state.users[parts[4]] else { return notFound }
            if state.vanishing == user.id { state.users[user.id] = nil }
            return .json(200, Self.json(user).serialized())
        case ("PATCH", 5):
            if let refused = needs("update:users") { return refused }
            guard state.users[parts[4]] != nil else { return notFound }
            guard case .object(let body)? = try? JSONParser.parse(request.body) else {
                return Self.error(400, "Bad Request", "Invalid request body.")
            }
            if let blocked = body["blocked"]?.boolValue {
                // A block ends the user's Auth0 session; a blocked user cannot sign in again.
                if blocked && !state.users[parts[4]]!.blocked {
                    state.users[parts[4]]!.sessions = 0
                    state.users[parts[4]]!.blocks += 1
                }
                state.users[parts[4]]!.blocked = blocked
            }
            // app_metadata is merged at its first level; a null removes the key.
            if case .object(let metadata)? = body["app_metadata"] {
                for (key, value) in metadata { state.users[parts[4]]!.appMetadata[key] = value == .null ? nil : value }
            }
            let answer = Self.json(state.users[parts[4]]!).serialized()
            if body["blocked"]?.boolValue == false, state.vanishingAfterSignOut == parts[4] { state.users[parts[4]] = nil }
            return .json(200, answer)
        case ("DELETE", 5):
            if let refused = needs("delete:users") { return refused }
            state.users[parts[4]] = nil
            return HTTPResponse(status: 204)
        case ("DELETE", 6) where parts[5] == "sessions" || parts[5] == "refresh-tokens":
            if let refused = needs(parts[5] == "sessions" ? "delete:sessions" : "delete:refresh_tokens") { return refused }
            if state.plan != .enterprise { return Self.planRefusal }
            guard state.users[parts[4]] != nil else { return notFound }
            if parts[5] == "sessions" { state.users[parts[4]]?.sessions = 0 } else { state.users[parts[4]]?.refreshTokens = [] }
            if parts[5] == "refresh-tokens", state.vanishingAfterSignOut == parts[4] { state.users[parts[4]] = nil }
            return HTTPResponse(status: 202)
        case ("DELETE", 8) where parts[5] == "identities":
            if let refused = needs("update:users") { return refused }
            // The description lists no 404 here: a user that is not there is its 400 ("Invalid
            // request URI. The message will vary depending on the cause").
            guard let user = state.users[parts[4]] else { return Self.error(400, "Bad Request", "User not found") }
            let identity = Identity(provider: parts[6], userID: parts[7])
            if user.identities.first == identity { return Self.error(400, "Bad Request", "Main identity cannot be removed.") }
            if user.identities.contains(identity) {
                // Auth0 makes the unlinked identity a user of its own.
                state.users[parts[4]]?.identities.removeAll { $0 == identity }
                let standalone = "\(identity.provider)|\(identity.userID)"
                state.users[standalone] = User(id: standalone, identities: [identity], sessions: 0)
            }
            return .json(200, (Self.json(state.users[parts[4]]!)["identities"] ?? .array([])).serialized())
        default:
            return Self.error(404, "Not Found", "Not Found")
        }
    }

    /// `GET /api/v2/device-credentials` (by `user_id` and `type`, which defaults to
    /// `refresh_token`; paged by `page` and `per_page`; `fields` kept) and `DELETE …/{id}`.
    private func deviceCredentials(
        _ method: String, _ parts: [String], _ argument: (String) -> String?, _ needs: (String) -> HTTPResponse?, _ state: inout State
    ) -> HTTPResponse {
        switch (method, parts.count) {
        case ("GET", 4):
            if let refused = needs("read:device_credentials") { return refused }
            let type = argument("type") ?? "refresh_token"
            let owners = state.users.values.filter { argument("user_id") == nil || $0.id == argument("user_id") }.sorted { $0.id < $1.id }
            let all = owners.flatMap { user in user.refreshTokens.filter { $0.type == type }.map { (user.id, $0) } }
            let perPage = argument("per_page").flatMap { Int($0) } ?? 50
            let page = argument("page").flatMap { Int($0) } ?? 0
            let fields = argument("fields").map { Set($0.split(separator: ",").map(String.init)) }
            let listed: [JSONValue] = all.dropFirst(page * perPage).prefix(perPage).map { owner, token in
                var object: [String: JSONValue] = [
                    "id": .string(token.id), "device_name": .string("iPhone"), "type": .string(token.type), "user_id": .string(owner),
                    "client_id": .string("appClientId0123456789"),
                ]
                if let fields, argument("include_fields") != "false" { object = object.filter { fields.contains($0.key) } }
                return .object(object)
            }
            return .json(200, JSONValue.array(listed).serialized())
        case ("DELETE", 5):
            if let refused = needs("delete:device_credentials") { return refused }
            // The description lists no answer for an id that is not there (no 404): the fake
            // answers it as deleted.
            for id in state.users.keys { state.users[id]?.refreshTokens.removeAll { $0.id == parts[4] } }
            return HTTPResponse(status: 204)
        default:
            return Self.error(404, "Not Found", "Not Found")
        }
    }

    /// The one query form the client sends: `identities.user_id:"<id>" AND identities.provider:"<p>"`.
    static func matches(_ q: String, _ user: User) -> Bool {
        let pattern = #/^identities\.user_id:"((?:[^"\\]|\\.)*)" AND identities\.provider:"([^"]*)"$/#
        guard let match = q.wholeMatch(of: pattern) else { return false }
        let id = String(match.1).replacingOccurrences(of: "\\\"", with: "\"").replacingOccurrences(of: "\\\\", with: "\\")
        let provider = String(match.2)
        return user.identities.contains { $0.userID == id } && user.identities.contains { $0.provider == provider }
    }
}
