import Foundation
import Logging
import SiwaApp
import SiwaCore
import SiwaHTTP
import Synchronization
import Testing

/// The Clerk Backend API client against a loopback instance written from Clerk's published
/// OpenAPI description (Fixtures/providers/clerk-backend-api.json): users with external
/// accounts, e-mail addresses and sessions, Clerk's error shape `{errors:[{code,message}]}`,
/// 429s with Retry-After. Every request and answer is checked against the description; the
/// 429 is documented on Clerk's rate-limits page, not in it, so it is allowed besides.
@Suite("Clerk Backend API client", .serialized, .enabled(if: OpenAPIChecker.runs, "needs python3 with jsonschema"))
struct ClerkClientTests {
    static let appleSub = "001234.5f3c8a9b0d1e4f2a8b7c6d5e4f3a2b1c.0042"
    static let linkedSub = "001234.aa11bb22cc33dd44ee55ff6677889900.0007"
    static let codeSub = "001234.cc11bb22cc33dd44ee55ff6677889900.0003"

    static func client(_ instance: FakeClerk, key: String = FakeClerk.secretKey) throws -> ClerkClient {
        try ClerkClient(
            secretKey: key, url: instance.fake.url + "/v1", logger: Logger(label: "clerk-test"), clock: .fixed(unixSeconds: 1_800_000_000))
    }

    static func expectValid(_ instance: FakeClerk, sourceLocation: SourceLocation = #_sourceLocation) throws {
        try ProviderOpenAPI.expectValid(
            instance.fake.requests, specs: ["clerk-backend-api.json"], extraStatus: [429], sourceLocation: sourceLocation)
    }

    /// An instance with: the Apple-only user (its relay address came with Apple), a user with a
    /// password and Apple linked, a user whose only password-less way besides Apple is an
    /// address verified by code, and a Google user; two sessions each.
    static func instance() throws -> FakeClerk {
        let instance = try FakeClerk()
        instance.add("user_apple", apple: appleSub, password: false, emails: [.apple])
        instance.add("user_pw", apple: linkedSub, password: true, emails: [.apple])
        instance.add("user_code", apple: codeSub, password: false, emails: [.apple, .code])
        instance.add("user_google", apple: nil, password: false, emails: [.code], google: "g-1")
        return instance
    }

    @Test("end_sessions: every active session of the Apple user is revoked, and only theirs")
    func endSessions() throws {
        let instance = try Self.instance()
        defer { instance.fake.stop() }
        let client = try Self.client(instance)
        #expect(client.apply(.endSessions, sub: Self.appleSub) == .done([.signedOut], status: 200))
        #expect(instance.user("user_apple")?.activeSessions == 0)
        #expect(instance.user("user_pw")?.activeSessions == 2)
        #expect(instance.user("user_google")?.activeSessions == 2)
        let find = try #require(instance.fake.requests.first)
        #expect(find.path == "/v1/users")
        #expect(find.argument("provider") == "oauth_apple")
        #expect(find.argument("provider_user_id") == Self.appleSub)
        #expect(instance.fake.requests.allSatisfy { $0.authorization == "Bearer \(FakeClerk.secretKey)" })
        // More sessions than a page, ended ones among them: every page read, by offset.
        instance.addSessions("user_pw", 150)
        instance.addSessions("user_pw", 70, status: "expired")
        #expect(client.apply(.endSessions, sub: Self.linkedSub) == .done([.signedOut], status: 200))
        #expect(instance.user("user_pw")?.activeSessions == 0)
        let lists = instance.fake.requests.filter { $0.path == "/v1/sessions" && $0.argument("user_id") == "user_pw" }
        #expect(lists.compactMap { $0.argument("offset") } == ["0", "100", "200"])
        // Ended sessions are left as they are.
        #expect(!instance.fake.requests.contains { $0.path.contains("_expired") })
        try Self.expectValid(instance)
    }

    @Test("a pending session (signed in, session tasks not finished) is revoked too; the status filter cannot list it")
    func pendingSession() throws {
        let instance = try Self.instance()
        defer { instance.fake.stop() }
        instance.addSessions("user_apple", 1, status: "pending")
        instance.addSessions("user_apple", 1, status: "ended")
        let client = try Self.client(instance)
        #expect(client.apply(.endSessions, sub: Self.appleSub) == .done([.signedOut], status: 200))
        let sessions = try #require(instance.user("user_apple")?.sessions)
        #expect(sessions.map(\.status) == ["revoked", "revoked", "revoked", "ended"])
        #expect(instance.fake.requests.filter { $0.path == "/v1/sessions" }.allSatisfy { $0.argument("status") == nil })
        #expect(instance.user("user_pw")?.activeSessions == 2)
        try Self.expectValid(instance)
    }

    @Test("Apple-only: a relay address Clerk linked to the Apple account (by its identification) is no other way in")
    func relayAddressLinked() throws {
        let instance = try Self.instance()
        defer { instance.fake.stop() }
        let user = try #require(instance.user("user_apple"))
        let account = try #require(user.externalAccounts.first)
        #expect(user.emails.first?.linkedTo == account.identificationID && account.identificationID != account.id)
        let client = try Self.client(instance)
        // The default keeps the only way in, Apple linked; delete-user deletes the user.
        #expect(client.apply(.unlink, sub: Self.appleSub) == .done([.signedOut], status: 200))
        #expect(instance.user("user_apple")?.externalAccounts == [account])
        #expect(client.apply(.deleteUser, sub: Self.appleSub) == .done([.signedOut, .deleted], status: 200))
        #expect(instance.user("user_apple") == nil)
        try Self.expectValid(instance)
    }

    @Test("unknown sub: recorded as no such user, nothing changed")
    func unknownUser() throws {
        let instance = try Self.instance()
        defer { instance.fake.stop() }
        let client = try Self.client(instance)
        for effect in ProviderEffect.allCases {
            #expect(client.apply(effect, sub: "001234.00000000000000000000000000000000.0000") == .userNotFound(status: 200))
        }
        // Google's account with an id equal to an Apple sub is not Apple's.
        #expect(client.apply(.deleteUser, sub: "g-1") == .userNotFound(status: 200))
        #expect(instance.users.count == 4)
        #expect(instance.users.values.allSatisfy { $0.activeSessions == 2 })
        try Self.expectValid(instance)
    }

    @Test("unlink: the Apple account is removed from a user with a password; an Apple-only user keeps it, signed out")
    func unlink() throws {
        let instance = try Self.instance()
        defer { instance.fake.stop() }
        let client = try Self.client(instance)
        #expect(client.apply(.unlink, sub: Self.linkedSub) == .done([.signedOut, .unlinked], status: 200))
        #expect(instance.user("user_pw")?.externalAccounts.isEmpty == true)
        #expect(instance.user("user_pw")?.activeSessions == 0)
        // Again: Clerk no longer finds the Apple account; nothing to do.
        #expect(client.apply(.unlink, sub: Self.linkedSub) == .userNotFound(status: 200))
        #expect(client.apply(.unlink, sub: Self.appleSub) == .done([.signedOut], status: 200))
        #expect(instance.user("user_apple")?.externalAccounts.count == 1)
        #expect(instance.user("user_code")?.activeSessions == 2)
        try Self.expectValid(instance)
    }

    @Test("delete_user: the Apple-only user is deleted; one with a password or a verified address is unlinked")
    func deleteUser() throws {
        let instance = try Self.instance()
        defer { instance.fake.stop() }
        let client = try Self.client(instance)
        #expect(client.apply(.deleteUser, sub: Self.appleSub) == .done([.signedOut, .deleted], status: 200))
        #expect(instance.user("user_apple") == nil)
        #expect(client.apply(.deleteUser, sub: Self.appleSub) == .userNotFound(status: 200))
        #expect(client.apply(.deleteUser, sub: Self.linkedSub) == .done([.signedOut, .unlinked], status: 200))
        #expect(instance.user("user_pw") != nil)
        // An address verified by code is a way in of its own.
        #expect(client.apply(.deleteUser, sub: Self.codeSub) == .done([.signedOut, .unlinked], status: 200))
        #expect(instance.user("user_code")?.emails.count == 2)
        #expect(instance.user("user_google")?.activeSessions == 2)
        try Self.expectValid(instance)
    }

    @Test("a user or account gone between the lookup and the removal counts as already done")
    func goneMeanwhile() throws {
        let instance = try Self.instance()
        defer { instance.fake.stop() }
        let client = try Self.client(instance)
        instance.vanishAfterLookup("user_apple")
        #expect(client.apply(.deleteUser, sub: Self.appleSub) == .done([.signedOut, .alreadyDone], status: 404))
        instance.vanishAfterLookup("user_pw")
        #expect(client.apply(.unlink, sub: Self.linkedSub) == .done([.signedOut, .alreadyDone], status: 404))
        try Self.expectValid(instance)
    }

    @Test("429 with Retry-After and 5xx are retried later; nobody listening too")
    func retryLater() throws {
        let instance = try Self.instance()
        defer { instance.fake.stop() }
        let client = try Self.client(instance)
        instance.fake.answer { request in
            request.head.path.hasSuffix("/revoke")
                ? .json(
                    429, #"{"errors":[{"message":"Too many requests","long_message":"Too many requests, retry later","code":"too_many_requests"}]}"#,
                    headers: [HTTPHeader("Retry-After", "9")]) : nil
        }
        #expect(
            client.apply(.endSessions, sub: Self.appleSub)
                == .retryLater(ProviderFailure(status: 429, reason: "too_many_requests", retryAfter: .seconds(9), progress: [])))
        instance.fake.answer { request in
            request.head.method == "DELETE"
                ? .json(500, #"{"errors":[{"message":"Oops","long_message":"Something went wrong","code":"internal_clerk_error"}]}"#) : nil
        }
        #expect(
            client.apply(.unlink, sub: Self.linkedSub)
                == .retryLater(ProviderFailure(status: 500, reason: "internal_clerk_error", progress: [.signedOut])))
        #expect(instance.user("user_pw")?.externalAccounts.count == 1)
        instance.fake.answer { _ in nil }
        try Self.expectValid(instance)
        instance.fake.stop()
        #expect(client.apply(.endSessions, sub: Self.appleSub) == .retryLater(ProviderFailure(reason: "couldNotConnect")))
    }

    @Test("check(): a wrong key blames the credential, a wrong address the instance")
    func startUpCheck() throws {
        let instance = try Self.instance()
        defer { instance.fake.stop() }
        #expect(try Self.client(instance).check() == .done([], status: 200))
        #expect(
            try Self.client(instance, key: "sk_test_wrong").check()
                == .refused(ProviderFailure(status: 401, reason: "authentication_invalid", blame: .credential)))
        try Self.expectValid(instance)
        let wrongBase = try ClerkClient(secretKey: FakeClerk.secretKey, url: instance.fake.url + "/v2", logger: Logger(label: "t"))
        #expect(wrongBase.check() == .refused(ProviderFailure(status: 404, reason: "http_404", blame: .tenant)))
        #expect(throws: ConfigurationError.self) { try ClerkClient(secretKey: "k", url: "http://api.clerk.example", logger: Logger(label: "t")) }
    }
}

/// A loopback Clerk instance: the Backend API operations the client uses, answering as Clerk's
/// published description says (full user and session objects, its error shape).
final class FakeClerk: Sendable {
    static let secretKey = "sk_test_siwaFakeInstanceKey0123456789"

    enum Email: Sendable { case apple, code }

    struct Account: Sendable, Equatable {
        var id: String
        var provider: String
        var providerUserID: String
        /// The identification Clerk made of the account (`idn_…`): what its addresses link to.
        var identificationID: String
    }

    struct User: Sendable, Equatable {
        var id: String
        var password: Bool
        var externalAccounts: [Account]
        /// Each address with the identification id of the account Clerk linked it to (nil:
        /// verified on its own).
        var emails: [(id: String, linkedTo: String?)]
        var sessions: [(id: String, status: String)]
        /// Sessions not ended: `active`, and `pending` (signed in, session tasks not finished).
        var activeSessions: Int { sessions.filter { FakeClerk.live($0.status) }.count }

        static func == (a: User, b: User) -> Bool { a.id == b.id && a.externalAccounts == b.externalAccounts }
    }

    struct State: Sendable {
        var users: [String: User] = [:]
        var vanishing: String?
    }

    let state = Mutex(State())
    let fake: ProviderFake

    static func live(_ status: String) -> Bool { status == "active" || status == "pending" }

    init() throws {
        fake = try ProviderFake()
        fake.route { [unowned self] request in self.route(request) }
    }

    var users: [String: User] { state.withLock { $0.users } }
    func user(_ id: String) -> User? { state.withLock { $0.users[id] } }

    /// Deletes the user (or its Apple account) once its sessions are revoked: someone else did.
    func vanishAfterLookup(_ id: String) { state.withLock { $0.vanishing = id } }

    func add(_ id: String, apple: String?, password: Bool, emails: [Email], google: String? = nil) {
        state.withLock { state in
            var accounts: [Account] = []
            if let apple {
                accounts.append(Account(id: "eac_apple_\(id)", provider: "oauth_apple", providerUserID: apple, identificationID: "idn_apple_\(id)"))
            }
            if let google {
                accounts.append(
                    Account(id: "eac_google_\(id)", provider: "oauth_google", providerUserID: google, identificationID: "idn_google_\(id)"))
            }
            // Clerk links an address that came with an OAuth account to that account's
            // identification (`linked_to[].id` = its `identification_id`), not to its `id`.
            let addresses = emails.enumerated().map { (n, email) in
                (id: "idn_\(id)_\(n)", linkedTo: email == .apple ? accounts.first?.identificationID : nil)
            }
            state.users[id] = User(
                id: id, password: password, externalAccounts: accounts, emails: addresses,
                sessions: [(id: "sess_\(id)_0", status: "active"), (id: "sess_\(id)_1", status: "active")])
        }
    }

    func addSessions(_ id: String, _ count: Int, status: String = "active") {
        state.withLock { state in
            let from = state.users[id]?.sessions.count ?? 0
            for n in from..<(from + count) { state.users[id]?.sessions.append((id: "sess_\(id)_\(status)\(n)", status: status)) }
        }
    }

    static func error(_ status: Int, _ code: String, _ message: String) -> HTTPResponse {
        .json(
            status,
            JSONValue.object([
                "errors": .array([.object(["code": .string(code), "message": .string(message), "long_message": .string(message)])]),
                "clerk_trace_id": .string("trace0123"),
            ]).serialized())
    }

    static let verified: JSONValue = .object([
        "object": .string("verification_from_oauth"), "status": .string("verified"), "strategy": .string("from_oauth_apple"),
        "attempts": .null, "expire_at": .null,
    ])

    static func json(_ user: User) -> JSONValue {
        let t: JSONValue = .number(1_700_000_000_000)
        let accounts: [JSONValue] = user.externalAccounts.map { account in
            .object([
                "object": .string("external_account"), "id": .string(account.id), "provider": .string(account.provider),
                "identification_id": .string(account.identificationID), "provider_user_id": .string(account.providerUserID),
                "approved_scopes": .string("email name"), "email_address": .string("relay@privaterelay.appleid.com"),
                "first_name": .string(""), "last_name": .string(""), "public_metadata": .object([:]), "created_at": t, "updated_at": t,
                "verification": .object([
                    "object": .string("verification_oauth"), "status": .string("verified"),
                    "strategy": .string(account.provider), "attempts": .null, "expire_at": .number(1_700_000_600_000),
                ]),
            ])
        }
        let emails: [JSONValue] = user.emails.map { email in
            .object([
                "id": .string(email.id), "object": .string("email_address"), "email_address": .string("\(email.id)@example.com"),
                "reserved": .bool(false),
                "verification": email.linkedTo == nil
                    ? .object([
                        "object": .string("verification_otp"), "status": .string("verified"), "strategy": .string("email_code"),
                        "attempts": .number(1), "expire_at": .number(1_700_000_600_000),
                    ]) : verified,
                "linked_to": .array(email.linkedTo.map { [.object(["type": .string("oauth_apple"), "id": .string($0)])] } ?? []),
                "created_at": t, "updated_at": t,
            ])
        }
        return .object([
            "id": .string(user.id), "object": .string("user"), "username": .null, "first_name": .null, "last_name": .null,
            "has_image": .bool(false), "primary_email_address_id": user.emails.first.map { .string($0.id) } ?? .null,
            "primary_phone_number_id": .null, "primary_web3_wallet_id": .null, "password_enabled": .bool(user.password),
            "two_factor_enabled": .bool(false), "totp_enabled": .bool(false), "backup_code_enabled": .bool(false),
            "email_addresses": .array(emails), "phone_numbers": .array([]), "web3_wallets": .array([]), "passkeys": .array([]),
            "external_accounts": .array(accounts), "saml_accounts": .array([]), "enterprise_accounts": .array([]),
            "public_metadata": .object([:]), "external_id": .null, "last_sign_in_at": t, "banned": .bool(false), "locked": .bool(false),
            "lockout_expires_in_seconds": .null, "verification_attempts_remaining": .number(100), "created_at": t, "updated_at": t,
            "delete_self_enabled": .bool(true), "create_organization_enabled": .bool(true), "last_active_at": t,
            "mfa_enabled_at": .null, "mfa_disabled_at": .null, "legal_accepted_at": .null,
        ])
    }

    static func json(session id: String, user: String, status: String) -> JSONValue {
        let t: JSONValue = .number(1_700_000_000_000)
        return .object([
            "object": .string("session"), "id": .string(id), "user_id": .string(user), "client_id": .string("client_\(user)"),
            "status": .string(status), "last_active_at": t, "expire_at": t, "abandon_at": t, "updated_at": t,
            "created_at": t,
        ])
    }

    private func route(_ request: HTTPRequest) -> HTTPResponse {
        let head = request.head
        guard head.authorization == "Bearer \(Self.secretKey)" else {
            return Self.error(401, "authentication_invalid", "Unable to authenticate the request, you need to supply an active API key")
        }
        let parts = head.path.split(separator: "/", omittingEmptySubsequences: false).map(String.init)
        guard parts.count >= 3, parts[1] == "v1" else { return HTTPResponse(status: 404, body: Array("404 page not found".utf8)) }
        let notFound = Self.error(404, "resource_not_found", "Resource not found")
        func argument(_ name: String) -> String? { head.query.first { $0.name == name }?.value }
        return state.withLock { state in
            switch (head.method, Array(parts.dropFirst(2))) {
            case ("GET", ["users"]):
                var found = state.users.values.sorted { $0.id < $1.id }
                if let provider = argument("provider"), let id = argument("provider_user_id") {
                    found = found.filter { $0.externalAccounts.contains { $0.provider == provider && $0.providerUserID == id } }
                }
                let limit = argument("limit").flatMap(Int.init) ?? 10
                return .json(200, JSONValue.array(found.prefix(limit).map(Self.json)).serialized())
            case ("GET", ["sessions"]):
                guard let id = argument("user_id"), let user = state.users[id] else { return .json(200, "[]") }
                let limit = argument("limit").flatMap(Int.init) ?? 10
                let offset = argument("offset").flatMap(Int.init) ?? 0
                // Newest first; the `status` filter takes one of the description's values, which
                // do not include `pending`.
                let listed = user.sessions.reversed().filter { argument("status") == nil || $0.status == argument("status") }
                    .dropFirst(offset).prefix(limit)
                return .json(200, JSONValue.array(listed.map { Self.json(session: $0.id, user: id, status: $0.status) }).serialized())
            case ("POST", let path) where path.count == 3 && path[0] == "sessions" && path[2] == "revoke":
                for (userID, user) in state.users {
                    guard let n = user.sessions.firstIndex(where: { $0.id == path[1] }) else { continue }
                    state.users[userID]?.sessions[n].status = "revoked"
                    if state.vanishing == userID, state.users[userID]?.activeSessions == 0 {
                        state.users[userID]?.externalAccounts = []
                        if user.password == false && user.emails.allSatisfy({ $0.linkedTo != nil }) { state.users[userID] = nil }
                    }
                    return .json(200, Self.json(session: path[1], user: userID, status: "revoked").serialized())
                }
                return notFound
            case ("DELETE", let path) where path.count == 2 && path[0] == "users":
                guard state.users.removeValue(forKey: path[1]) != nil else { return notFound }
                return .json(200, #"{"object":"user","id":"\#(path[1])","deleted":true}"#)
            case ("DELETE", let path) where path.count == 4 && path[0] == "users" && path[2] == "external_accounts":
                guard let user = state.users[path[1]], user.externalAccounts.contains(where: { $0.id == path[3] }) else { return notFound }
                state.users[path[1]]?.externalAccounts.removeAll { $0.id == path[3] }
                return .json(200, #"{"object":"external_account","id":"\#(path[3])","deleted":true}"#)
            default:
                return notFound
            }
        }
    }
}
