import Foundation
import Logging
import SiwaCore
import SiwaRuntime

/// Calls a Clerk instance's Backend API with its secret key (`Authorization: Bearer sk_…`).
/// Blocking (libcurl); thread-safe. Logs name the operation and the outcome, never the key, a
/// user id or a `sub` (docs/hosted-providers.md).
public final class ClerkClient: HostedProviderClient {
    public let provider = HostedProvider.clerk
    private let secretKey: String
    private let http: ProviderHTTP

    /// Largest number of session pages read in one call (ended sessions stay listed): a user
    /// with more sessions than that is tried again later.
    public static let maxSessionPages = 50

    /// - Parameters:
    ///   - secretKey: the instance's secret key (read from `SIWA_CLERK_SECRET_KEY_FILE`).
    ///   - url: the Backend API's base when not `https://api.clerk.com/v1` (`SIWA_CLERK_URL`).
    ///   - clock: for a rate-limit reset (tests give one).
    /// - Throws: an unusable `url`, as a `ConfigurationError` whose `variable` is `url`.
    public init(
        secretKey: String, url: String? = nil, options: ProviderHTTPOptions = ProviderHTTPOptions(), logger: Logger,
        clock: WallClock = .system
    ) throws(ConfigurationError) {
        self.secretKey = secretKey
        http = try ProviderHTTP(provider: .clerk, url: url ?? Clerk.baseURL, options: options, logger: logger, clock: clock)
    }

    // MARK: - HostedProviderClient

    public func pausedUntil() -> Duration { http.pause.value }

    /// One user read of the smallest page: the key must be valid and the address Clerk's.
    public func check() -> ProviderOutcome {
        let (status, answer) = send(.init(operation: "check", method: "GET", path: "/users", query: [("limit", "1")]))
        switch answer {
        case .success: return .done([], status: status ?? 200)
        case .notFound: return .refused(ProviderFailure(status: 404, reason: "http_404", blame: .tenant))
        case .failed(let outcome): return outcome
        }
    }

    public func apply(_ effect: ProviderEffect, sub: String) -> ProviderOutcome {
        var steps = ProviderSteps()
        let found = send(
            .init(
                operation: "find_user", method: "GET", path: "/users",
                query: [("provider", Clerk.appleProvider), ("provider_user_id", sub), ("limit", "10")]))
        let user: ClerkUser
        switch found.answer {
        case .success(let body):
            guard let list = try? JSONParser.parse(body) else {
                return .retryLater(ProviderFailure(status: found.status, reason: "malformed_response"))
            }
            guard let match = Clerk.user(inList: list, sub: sub) else { return .userNotFound(status: found.status ?? 200) }
            user = match
            steps.status = found.status ?? 200
        case .notFound: return .userNotFound(status: 404)
        case .failed(let outcome): return outcome
        }
        return apply(effect, to: user, steps: &steps).reached(steps.actions)
    }

    /// The effect on the user found.
    private func apply(_ effect: ProviderEffect, to user: ClerkUser, steps: inout ProviderSteps) -> ProviderOutcome {
        if let failed = revokeSessions(user.userID, into: &steps) { return failed }
        if effect == .endSessions { return steps.done }
        let userPath = "/users/\(ProviderAnswer.pathSegment(user.userID))"
        if effect == .deleteUser && user.appleOnly {
            return steps.removal(send(.init(operation: "delete_user", method: "DELETE", path: userPath)), done: .deleted) ?? steps.done
        }
        // Unlinking the only way in would leave a user nobody can sign in as: it stays, signed out.
        if user.appleOnly { return steps.done }
        let account = "\(userPath)/external_accounts/\(ProviderAnswer.pathSegment(user.externalAccountID))"
        return steps.removal(send(.init(operation: "delete_external_account", method: "DELETE", path: account)), done: .unlinked)
            ?? steps.done
    }

    // MARK: - Steps

    /// Revokes every session of the user that has not ended (`Clerk.sessionIDs`), a page at a
    /// time. The list is read unfiltered (its `status` filter cannot select `pending`), and a
    /// revoked session stays in it, so the pages follow one another by offset.
    private func revokeSessions(_ userID: String, into steps: inout ProviderSteps) -> ProviderOutcome? {
        for page in 0..<Self.maxSessionPages {
            let listed = send(
                .init(
                    operation: "list_sessions", method: "GET", path: "/sessions",
                    query: [("user_id", userID), ("limit", "\(Clerk.sessionPage)"), ("offset", "\(page * Clerk.sessionPage)")]))
            let ids: [String]
            let count: Int
            switch listed.answer {
            case .success(let body):
                guard let list = (try? JSONParser.parse(body))?.arrayValue else {
                    return .retryLater(ProviderFailure(status: listed.status, reason: "malformed_response"))
                }
                ids = Clerk.sessionIDs(.array(list))
                count = list.count
                steps.status = listed.status ?? steps.status
            case .notFound: return .userNotFound(status: 404)
            case .failed(let outcome): return outcome
            }
            for id in ids {
                let revoked = send(.init(operation: "revoke_session", method: "POST", path: "/sessions/\(ProviderAnswer.pathSegment(id))/revoke"))
                switch revoked.answer {
                case .success: steps.status = revoked.status ?? steps.status
                case .notFound: break  // ended meanwhile
                case .failed(let outcome): return outcome
                }
            }
            if count < Clerk.sessionPage {
                steps.actions.append(.signedOut)
                return nil
            }
        }
        return .retryLater(ProviderFailure(reason: "session_pages_left"))
    }

    private func send(_ request: ProviderHTTP.Request) -> (status: Int?, answer: ProviderAnswer) {
        var request = request
        request.bearer = secretKey
        return http.send(request, code: Clerk.errorCode)
    }
}
