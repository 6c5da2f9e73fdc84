import Foundation
import Logging
import SiwaCore
import SiwaRuntime
import Synchronization

/// Calls an Auth0 tenant's Management API v2 with a Machine-to-Machine application's client
/// credentials: an access token from `POST /oauth/token` (audience `https://<domain>/api/v2/`),
/// cached until shortly before it expires; a 401 drops it, and the call is tried once more with
/// a new one. The sign-out uses what the tenant's plan allows (`Auth0SignOut`), learned by the
/// start-up check or the first refusal and kept while the process runs. Blocking (libcurl);
/// thread-safe. Logs name the operation and the outcome, never the secret, a token, a user id or
/// a `sub` (docs/hosted-providers.md).
public final class Auth0Client: HostedProviderClient {
    public let provider = HostedProvider.auth0
    public let domain: String
    public let clientID: String
    private let clientSecret: String
    private let http: ProviderHTTP
    private let tokens = Mutex(BearerTokenCache())
    private let issued = Atomic<Int>(0)
    private let fetching = NSLock()
    private let learned = Mutex<Auth0SignOut?>(nil)
    private let logger: Logger

    /// Largest number of device credential pages read per token type in one call: a user with
    /// more refresh tokens than that is finished by the next try.
    public static let maxDeviceCredentialPages = 20
    /// A user id nobody has: the start-up check asks to end its sessions to learn whether the
    /// tenant's plan allows the Enterprise endpoints, changing nothing.
    static let probeUserID = "auth0|siwa-notify-start-check"

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
        self.logger = logger
        http = try ProviderHTTP(provider: .auth0, url: url ?? Auth0.baseURL(domain: domain), options: options, logger: logger, clock: clock)
    }

    /// Access tokens obtained so far.
    public var accessTokensObtained: Int { issued.load(ordering: .relaxed) }

    // MARK: - HostedProviderClient

    public func pausedUntil() -> Duration { http.pause.value }

    /// How this tenant signs users out, once the start-up check or a call has learned it.
    public var signOutMethod: Auth0SignOut? { learned.withLock { $0 } }

    public func signOutDescription() -> String? { signOutMethod?.description }

    /// A token, one user read of the smallest page (the credential, the Management API grant
    /// `read:users` and the tenant must all be right), then the sign-out learned: the sessions
    /// of a user nobody has ended (202 or 404: the Enterprise endpoints answer), and where the
    /// plan refuses them, the device credentials of that user listed. A missing scope refuses.
    public func check() -> ProviderOutcome {
        let (status, answer) = management(
            .init(operation: "check", method: "GET", path: "/api/v2/users", query: [("per_page", "1"), ("fields", "user_id")]))
        switch answer {
        case .success: break
        case .notFound: return .refused(ProviderFailure(status: 404, reason: "http_404", blame: .tenant))
        case .failed(let outcome): return outcome
        }
        let probe = ProviderAnswer.pathSegment(Self.probeUserID)
        let sessions = management(
            .init(
                operation: "check_sign_out", method: "DELETE", path: "/api/v2/users/\(probe)/sessions",
                expectedRefusal: Auth0.refusedByPlan))
        switch sessions.answer {
        case .success, .notFound:
            learn(.sessionEndpoints)
            return .done([], status: status ?? 200)
        case .failed(let outcome) where Auth0.refusedByPlan(outcome): break
        case .failed(let outcome): return outcome
        }
        let listed = management(
            .init(
                operation: "check_device_credentials", method: "GET", path: "/api/v2/device-credentials",
                query: [("user_id", Self.probeUserID), ("type", Auth0.refreshTokenTypes[0]), ("per_page", "1"), ("fields", "id")]))
        switch listed.answer {
        case .success, .notFound:
            learn(.deviceCredentials)
            return .done([], status: status ?? 200)
        case .failed(let outcome): return outcome
        }
    }

    private func learn(_ method: Auth0SignOut) {
        let before = learned.withLock { learned in
            defer { learned = method }
            return learned
        }
        if before != method { logger.info("auth0 sign-out method", metadata: ["provider": "auth0", "sign_out": "\(method.rawValue)"]) }
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
        if let failed = signOut(user, into: &steps) { return failed }
        if effect == .endSessions { return steps.done }
        if effect == .deleteUser && user.appleOnly {
            return delete(user.userID, into: &steps) ?? steps.done
        }
        // Auth0 cannot unlink a user's main identity: the user keeps it (docs/hosted-providers.md).
        if user.applePrimary { return steps.done }
        let identity = "/api/v2/users/\(ProviderAnswer.pathSegment(user.userID))/identities/\(Auth0.appleProvider)/\(ProviderAnswer.pathSegment(sub))"
        let unlinked = management(.init(operation: "unlink_identity", method: "DELETE", path: identity))
        if case .failed(.refused(let failure)) = unlinked.answer, failure.status == 400 {
            // Auth0 answers an unlink whose user is not there with a 400 whose message varies (its
            // description lists no 404): read again whether the identity is still linked there.
            switch findUser(sub: sub) {
            case .found(let now, _) where now.userID == user.userID: return .refused(failure)
            case .found(_, let status), .notFound(let status):
                steps.actions.append(.alreadyDone)
                steps.status = status
            case .failed(let outcome): return outcome
            }
        } else if let failed = steps.removal(unlinked, done: .unlinked) {
            return failed
        }
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

    /// Ends every session and refresh token of the user: through the Enterprise endpoints unless
    /// the tenant's plan is known to refuse them, else (or when they are refused so) through
    /// device credentials and a block.
    private func signOut(_ user: Auth0User, into steps: inout ProviderSteps) -> ProviderOutcome? {
        if signOutMethod != .deviceCredentials {
            switch endSessions(user.userID, into: &steps) {
            case nil:
                learn(.sessionEndpoints)
                return nil
            case let failed? where Auth0.refusedByPlan(failed): learn(.deviceCredentials)
            case let failed?: return failed
            }
        }
        if let failed = revokeRefreshTokens(user.userID, into: &steps) { return failed }
        return endAuth0Session(user, into: &steps)
    }

    /// The Enterprise endpoints (both answer 202: Auth0 does it shortly).
    private func endSessions(_ userID: String, into steps: inout ProviderSteps) -> ProviderOutcome? {
        let user = ProviderAnswer.pathSegment(userID)
        for (operation, path) in [
            ("delete_sessions", "/api/v2/users/\(user)/sessions"), ("delete_refresh_tokens", "/api/v2/users/\(user)/refresh-tokens"),
        ] {
            let (status, answer) = management(.init(operation: operation, method: "DELETE", path: path, expectedRefusal: Auth0.refusedByPlan))
            switch answer {
            case .success: steps.status = status ?? steps.status
            case .notFound: return .userNotFound(status: 404)
            case .failed(let outcome): return outcome
            }
        }
        steps.actions.append(.signedOut)
        return nil
    }

    /// Every refresh token of the user, of either type, deleted as a device credential, a page
    /// at a time (a deleted one leaves the list, so each page is read from the start).
    private func revokeRefreshTokens(_ userID: String, into steps: inout ProviderSteps) -> ProviderOutcome? {
        for type in Auth0.refreshTokenTypes {
            var finished = false
            for _ in 0..<Self.maxDeviceCredentialPages {
                let listed = management(
                    .init(
                        operation: "list_device_credentials", method: "GET", path: "/api/v2/device-credentials",
                        query: [
                            ("user_id", userID), ("type", type), ("per_page", "\(Auth0.deviceCredentialPage)"), ("fields", "id"),
                            ("include_fields", "true"),
                        ]))
                let ids: [String]
                switch listed.answer {
                case .success(let body):
                    guard let list = (try? JSONParser.parse(body)).flatMap(Auth0.deviceCredentialIDs) else {
                        return .retryLater(ProviderFailure(status: listed.status, reason: "malformed_response"))
                    }
                    ids = list
                    steps.status = listed.status ?? steps.status
                case .notFound: return .userNotFound(status: 404)
                case .failed(let outcome): return outcome
                }
                for id in ids {
                    let deleted = management(
                        .init(
                            operation: "delete_device_credential", method: "DELETE",
                            path: "/api/v2/device-credentials/\(ProviderAnswer.pathSegment(id))"))
                    switch deleted.answer {
                    case .success: steps.status = deleted.status ?? steps.status
                    case .notFound: break  // revoked meanwhile
                    case .failed(let outcome): return outcome
                    }
                }
                if ids.count < Auth0.deviceCredentialPage {
                    finished = true
                    break
                }
            }
            if !finished { return .retryLater(ProviderFailure(reason: "device_credential_pages_left")) }
        }
        steps.actions.append(.refreshTokensRevoked)
        return nil
    }

    /// Ends the user's Auth0 session (not the app's own) by blocking the user and lifting the
    /// block at once. A user an administrator blocked (no `Auth0.signOutMark`) has no session
    /// to end and stays blocked; one the sign-out left blocked (its unblock did not answer) is
    /// unblocked now.
    private func endAuth0Session(_ user: Auth0User, into steps: inout ProviderSteps) -> ProviderOutcome? {
        if user.blocked && !user.blockedBySignOut { return nil }
        let path = "/api/v2/users/\(ProviderAnswer.pathSegment(user.userID))"
        var changes: [(Bool, ProviderAction)] = [(false, .unblocked)]
        if !user.blocked { changes.insert((true, .blocked), at: 0) }
        for (blocked, action) in changes {
            let (status, answer) = management(
                .init(operation: blocked ? "block_user" : "unblock_user", method: "PATCH", path: path, json: Auth0.blockBody(blocked)))
            switch answer {
            case .success:
                steps.actions.append(action)
                steps.status = status ?? steps.status
            case .notFound: return .userNotFound(status: 404)
            case .failed(let outcome): return outcome
            }
        }
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
