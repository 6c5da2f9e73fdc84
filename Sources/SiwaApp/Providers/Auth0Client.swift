import Foundation
import Logging
import SiwaCore
import SiwaRuntime
import Synchronization

/// Calls an Auth0 tenant's Management API v2 with a Machine-to-Machine application's client
/// credentials: an access token from `POST /oauth/token` (audience `https://<domain>/api/v2/`),
/// cached until shortly before it expires; a 401 drops it, and the call is tried once more with
/// a new one. Blocking (libcurl); thread-safe. Logs name the operation and the outcome, never the
/// secret, a token, a user id or a `sub` (docs/hosted-providers.md).
public final class Auth0Client: HostedProviderClient {
    public let provider = HostedProvider.auth0
    public let domain: String
    public let clientID: String
    private let clientSecret: String
    private let http: ProviderHTTP
    private let tokens = Mutex(BearerTokenCache())
    private let issued = Atomic<Int>(0)
    private let fetching = NSLock()

    /// - Parameters:
    ///   - domain: the tenant's domain (`SIWA_AUTH0_DOMAIN`: `example.eu.auth0.com` or a custom domain).
    ///   - url: the tenant's address when not `https://<domain>` (`SIWA_AUTH0_URL`).
    ///   - clock: for the token's lifetime and `x-ratelimit-reset` (tests give one).
    /// - Throws: an unusable `url`, as a `ConfigurationError` whose `variable` is `url`.
    public init(
        domain: String, clientID: String, clientSecret: String, url: String? = nil, options: ProviderHTTPOptions = ProviderHTTPOptions(),
        logger: Logger, clock: WallClock = .system
    ) throws(ConfigurationError) {
        self.domain = domain
        self.clientID = clientID
        self.clientSecret = clientSecret
        http = try ProviderHTTP(provider: .auth0, url: url ?? Auth0.baseURL(domain: domain), options: options, logger: logger, clock: clock)
    }

    /// Access tokens obtained so far.
    public var accessTokensObtained: Int { issued.load(ordering: .relaxed) }

    // MARK: - HostedProviderClient

    public func pausedUntil() -> Duration { http.pause.value }

    /// A token, then one user read of the smallest page: the credential, the Management API
    /// grant (`read:users`) and the tenant must all be right.
    public func check() -> ProviderOutcome {
        let (status, answer) = management(
            .init(operation: "check", method: "GET", path: "/api/v2/users", query: [("per_page", "1"), ("fields", "user_id")]))
        switch answer {
        case .success: return .done([], status: status ?? 200)
        case .notFound: return .refused(ProviderFailure(status: 404, reason: "http_404", blame: .tenant))
        case .failed(let outcome): return outcome
        }
    }

    public func apply(_ effect: ProviderEffect, sub: String) -> ProviderOutcome {
        let user: Auth0User
        var steps = ProviderSteps()
        switch findUser(sub: sub) {
        case .found(let found, let status):
            user = found
            steps.status = status
        case .notFound(let status): return .userNotFound(status: status)
        case .failed(let outcome): return outcome
        }
        return apply(effect, to: user, sub: sub, steps: &steps).reached(steps.actions)
    }

    /// The effect on the user found.
    private func apply(_ effect: ProviderEffect, to user: Auth0User, sub: String, steps: inout ProviderSteps) -> ProviderOutcome {
        if let failed = signOut(user.userID, into: &steps) { return failed }
        if effect == .endSessions { return steps.done }
        if effect == .deleteUser && user.appleOnly {
            return delete(user.userID, into: &steps) ?? steps.done
        }
        // Auth0 cannot unlink a user's main identity: the user keeps it (docs/hosted-providers.md).
        if user.applePrimary { return steps.done }
        let identity = "/api/v2/users/\(ProviderAnswer.pathSegment(user.userID))/identities/\(Auth0.appleProvider)/\(ProviderAnswer.pathSegment(sub))"
        if let failed = remove("unlink_identity", identity, done: .unlinked, into: &steps) { return failed }
        // Unlinking makes the Apple identity a user of its own (`apple|<sub>`); deleting the
        // identity for good is deleting that user, and only `delete_user` may delete.
        if effect == .deleteUser, steps.actions.last == .unlinked {
            return delete(Auth0.appleUserID(sub: sub), into: &steps) ?? steps.done
        }
        return steps.done
    }

    // MARK: - Steps

    enum Lookup {
        case found(Auth0User, status: Int)
        case notFound(status: Int)
        case failed(ProviderOutcome)
    }

    /// The user holding the Apple identity `sub`: `apple|<sub>`, else the user it is linked to
    /// (a user search on its identities).
    func findUser(sub: String) -> Lookup {
        let direct = management(
            .init(
                operation: "get_user", method: "GET", path: "/api/v2/users/\(ProviderAnswer.pathSegment(Auth0.appleUserID(sub: sub)))",
                query: [("fields", Auth0.userFields), ("include_fields", "true")]))
        switch direct.answer {
        case .success(let body):
            if let value = try? JSONParser.parse(body), let user = Auth0.user(value, sub: sub) {
                return .found(user, status: direct.status ?? 200)
            }
            return .failed(.retryLater(ProviderFailure(status: direct.status, reason: "malformed_response")))
        case .notFound: break
        case .failed(let outcome): return .failed(outcome)
        }
        let search = management(
            .init(
                operation: "search_users", method: "GET", path: "/api/v2/users",
                query: [
                    ("q", Auth0.searchQuery(sub: sub)), ("search_engine", "v3"), ("fields", Auth0.userFields),
                    ("include_fields", "true"), ("per_page", "10"),
                ]))
        switch search.answer {
        case .success(let body):
            guard let value = try? JSONParser.parse(body) else {
                return .failed(.retryLater(ProviderFailure(status: search.status, reason: "malformed_response")))
            }
            if let user = Auth0.user(inSearch: value, sub: sub) { return .found(user, status: search.status ?? 200) }
            return .notFound(status: search.status ?? 200)
        case .notFound: return .notFound(status: 404)
        case .failed(let outcome): return .failed(outcome)
        }
    }

    /// Ends every session and refresh token of the user (both answer 202: Auth0 does it shortly).
    private func signOut(_ userID: String, into steps: inout ProviderSteps) -> ProviderOutcome? {
        let user = ProviderAnswer.pathSegment(userID)
        for (operation, path) in [
            ("delete_sessions", "/api/v2/users/\(user)/sessions"), ("delete_refresh_tokens", "/api/v2/users/\(user)/refresh-tokens"),
        ] {
            let (status, answer) = management(.init(operation: operation, method: "DELETE", path: path))
            switch answer {
            case .success: steps.status = status ?? steps.status
            case .notFound: return .userNotFound(status: 404)
            case .failed(let outcome): return outcome
            }
        }
        steps.actions.append(.signedOut)
        return nil
    }

    /// Deletes the user.
    private func delete(_ userID: String, into steps: inout ProviderSteps) -> ProviderOutcome? {
        remove("delete_user", "/api/v2/users/\(ProviderAnswer.pathSegment(userID))", done: .deleted, into: &steps)
    }

    /// A DELETE that records `action`.
    private func remove(_ operation: String, _ path: String, done action: ProviderAction, into steps: inout ProviderSteps) -> ProviderOutcome? {
        steps.removal(management(.init(operation: operation, method: "DELETE", path: path)), done: action)
    }

    // MARK: - Calls

    /// A Management API call with the cached token; a 401 drops the token and the call is
    /// made once more with a new one.
    func management(_ request: ProviderHTTP.Request) -> (status: Int?, answer: ProviderAnswer) {
        for attempt in 0..<2 {
            let token: String
            switch accessToken() {
            case .token(let t): token = t
            case .failed(let outcome): return (nil, .failed(outcome))
            }
            var request = request
            request.bearer = token
            let result = http.send(request, code: Auth0.errorCode)
            if result.status == 401 {
                tokens.withLock { $0.invalidate() }
                if attempt == 0 { continue }
            }
            return result
        }
        preconditionFailure("unreachable: the second attempt returns")
    }

    enum TokenAnswer {
        case token(String)
        case failed(ProviderOutcome)
    }

    /// The cached access token, or a new one (one request at a time: threads that need a
    /// token together wait for the same one).
    func accessToken() -> TokenAnswer {
        if let token = tokens.withLock({ $0.valid(now: http.clock.sinceEpoch) }) { return .token(token) }
        fetching.lock()
        defer { fetching.unlock() }
        let now = http.clock.sinceEpoch
        if let token = tokens.withLock({ $0.valid(now: now) }) { return .token(token) }
        let (status, answer) = http.send(
            .init(
                operation: "token", method: "POST", path: "/oauth/token",
                form: [
                    ("grant_type", "client_credentials"), ("client_id", clientID), ("client_secret", clientSecret),
                    ("audience", Auth0.audience(domain: domain)),
                ]),
            code: Auth0.errorCode, blame: Auth0.tokenBlame)
        switch answer {
        case .success(let body):
            guard let (token, lifetime) = Auth0.token(body) else {
                return .failed(.retryLater(ProviderFailure(status: status, reason: "malformed_token_response")))
            }
            tokens.withLock { $0.store(token, now: now, lifetime: lifetime) }
            issued.add(1, ordering: .relaxed)
            return .token(token)
        case .notFound: return .failed(.refused(ProviderFailure(status: 404, reason: "http_404", blame: .tenant)))
        case .failed(let outcome): return .failed(outcome)
        }
    }
}
