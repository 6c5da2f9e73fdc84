import Foundation
import Logging
import SiwaCore
import SiwaFetch
import SiwaRuntime
import Synchronization

/// Apple's user-migration API for an app transfer between teams (TN3159): an access token from
/// `POST /auth/token` (`grant_type=client_credentials`, `scope=user.migration`), cached for its
/// lifetime and renewed before it expires, then `POST /auth/usermigrationinfo` with it as the
/// Bearer token and the `client_secret` of `AppleClient`. A 401 (the token expired or was
/// refused) renews the token once and retries.
///
/// Blocking (libcurl); thread-safe. Logs never carry a token, `sub` or email.
public final class AppleMigrationClient: Sendable {
    public let client: AppleClient
    private let clock: WallClock
    private let tokens = Mutex<[String: BearerTokenCache]>([:])
    private let issued = Atomic<Int>(0)
    private let fetching = NSLock()

    public init(client: AppleClient, clock: WallClock = .system) {
        self.client = client
        self.clock = clock
    }

    /// Access tokens obtained so far.
    public var accessTokensObtained: Int { issued.load(ordering: .relaxed) }

    /// Sending team: the transfer identifier of `sub` for the recipient team `target`.
    public func transferSub(sub: String, target: String, clientID: String) -> AppleCallResult<String> {
        migrationInfo(clientID: clientID, fields: [("sub", sub), ("target", target)], onSuccess: Self.parsed(AppleTransferSub.parse))
    }

    /// Receiving team: the user's `sub` in this team and email, for a transfer identifier.
    public func migratedUser(transferSub: String, clientID: String) -> AppleCallResult<AppleMigratedUser> {
        migrationInfo(clientID: clientID, fields: [("transfer_sub", transferSub)], onSuccess: Self.parsed(AppleMigratedUser.parse))
    }

    /// The cached access token for `clientID`, or a new one (one call at a time: threads that
    /// need a token together wait for the same one).
    public func accessToken(clientID: String) -> AppleCallResult<String> {
        if let token = tokens.withLock({ $0[clientID]?.valid(now: clock.sinceEpoch) }) { return .success(token) }
        fetching.lock()
        defer { fetching.unlock() }
        let now = clock.sinceEpoch
        if let token = tokens.withLock({ $0[clientID]?.valid(now: now) }) { return .success(token) }
        let result: AppleCallResult<AppleAccessToken> = post(
            path: "/auth/token", clientID: clientID,
            fields: [("client_id", clientID), ("grant_type", "client_credentials"), ("scope", "user.migration")],
            bearer: nil, onSuccess: Self.parsed(AppleAccessToken.parse)
        ).result
        switch result {
        case .success(let token):
            tokens.withLock { caches in
                var cache = caches[clientID] ?? BearerTokenCache()
                cache.store(token.token, now: now, lifetime: .seconds(token.expiresIn))
                caches[clientID] = cache
            }
            issued.add(1, ordering: .relaxed)
            return .success(token.token)
        case .invalidGrant: return .invalidGrant
        case .invalidClient: return .invalidClient
        case .rejected(let failure): return .rejected(failure)
        case .transient(let failure): return .transient(failure)
        }
    }

    /// A 2xx body parsed by `parse`; a body it refuses is transient (`malformed_response`).
    private static func parsed<T: Sendable>(
        _ parse: @escaping ([UInt8]) throws(AppleResponseError) -> T
    ) -> ([UInt8]) -> AppleCallResult<T> {
        { body in
            do throws(AppleResponseError) {
                return .success(try parse(body))
            } catch {
                return .transient(AppleCallFailure(status: 200, reason: "malformed_response", detail: error.rawValue))
            }
        }
    }

    private func migrationInfo<T: Sendable>(
        clientID: String, fields: [(String, String)], onSuccess: ([UInt8]) -> AppleCallResult<T>
    ) -> AppleCallResult<T> {
        for attempt in 0..<2 {
            let token: String
            switch accessToken(clientID: clientID) {
            case .success(let t): token = t
            case .invalidGrant: return .rejected(AppleCallFailure(reason: "access_token", detail: "invalid_grant"))
            case .invalidClient: return .invalidClient
            case .rejected(let failure): return .rejected(failure)
            case .transient(let failure): return .transient(failure)
            }
            let (status, result) = post(
                path: "/auth/usermigrationinfo", clientID: clientID, fields: [("client_id", clientID)] + fields,
                bearer: token, onSuccess: onSuccess)
            if status == 401 {
                tokens.withLock { $0[clientID]?.invalidate() }
                if attempt == 0 { continue }
                return .rejected(AppleCallFailure(status: 401, reason: "http_401", detail: "access token refused"))
            }
            return result
        }
        return .rejected(AppleCallFailure(status: 401, reason: "http_401"))
    }

    private func post<T: Sendable>(
        path: String, clientID: String, fields: [(String, String)], bearer: String?,
        onSuccess: ([UInt8]) -> AppleCallResult<T>
    ) -> (status: Int?, result: AppleCallResult<T>) {
        let secret: String
        do {
            secret = try client.clientSecret(for: clientID)
        } catch {
            return (nil, .rejected(AppleCallFailure(reason: "client_secret", detail: "\(error)")))
        }
        let body = FormURLEncoding.encode(fields + [("client_secret", secret)])
        let options = client.options
        let baseURL = client.configuration.baseURL
        let scheme: FetchScheme = baseURL.lowercased().hasPrefix("http://") ? .http : .https
        var headers = ["Content-Type: \(FormURLEncoding.contentType)", "Accept: application/json"]
        if let bearer { headers.append("Authorization: Bearer \(bearer)") }
        let response: FetchResponse
        do {
            response = try Fetcher.perform(
                FetchRequest(
                    url: baseURL + path, method: "POST", headers: headers, body: Array(body.utf8),
                    connectTimeout: options.connectTimeout, totalTimeout: options.timeout,
                    maxResponseBytes: options.maxResponseBytes, allowedSchemes: [scheme]))
        } catch {
            switch error.code {
            case .invalidURL, .schemeNotAllowed, .fileNotFound:
                return (nil, .rejected(AppleCallFailure(reason: error.code.rawValue)))
            default:
                return (nil, .transient(AppleCallFailure(reason: error.code.rawValue, detail: error.description)))
            }
        }
        return (
            response.status,
            AppleClient.classify(status: response.status, headers: response.headers, body: response.body, onSuccess: onSuccess)
        )
    }
}
