import Foundation
import Logging
import SiwaCore
import SiwaCrypto
import SiwaFetch
import SiwaRuntime
import Synchronization

/// Why a call to Apple did not succeed, for logs and metrics. Never contains a code, token or secret.
public struct AppleCallFailure: Sendable, Equatable, CustomStringConvertible {
    /// The HTTP status when Apple answered; nil for a network failure or a local one.
    public var status: Int?
    /// A stable reason code: `http_<status>` (429, 5xx, a 4xx without Apple's `error`), `apple_error`
    /// (a 4xx with an `error` other than invalid_grant/invalid_client, in `detail`), `malformed_response`
    /// (a 2xx that is not a token response), `client_secret` (we could not sign one), or a
    /// `FetchError.Code` raw value for a network failure (`timedOut`, `couldNotConnect`, ...).
    public var reason: String
    /// Detail: Apple's `error` value, a fetch or response error code.
    public var detail: String?
    /// A numeric `Retry-After` header (429/503), if any.
    public var retryAfter: Duration?

    public init(status: Int? = nil, reason: String, detail: String? = nil, retryAfter: Duration? = nil) {
        self.status = status
        self.reason = reason
        self.detail = detail
        self.retryAfter = retryAfter
    }

    public var description: String {
        var text = reason
        if let status { text += " (HTTP \(status))" }
        if let detail { text += ": \(detail)" }
        return text
    }
}

/// How one call to Apple's REST API ended.
public enum AppleCallResult<Success: Sendable>: Sendable {
    /// Apple accepted the call.
    case success(Success)
    /// Apple answered `invalid_grant`: the code (or refresh token) is invalid, expired, used or
    /// revoked. Permanent.
    case invalidGrant
    /// Apple answered `invalid_client`: our client authentication (team id, key id, `.p8` key,
    /// client id) is wrong. Permanent until the configuration is fixed.
    case invalidClient
    /// Any other refusal (other 4xx, a local configuration or signing failure). Permanent.
    case rejected(AppleCallFailure)
    /// 429, 5xx, timeout, network error, or a 200 whose body is unusable. Retry with backoff.
    case transient(AppleCallFailure)

    /// True for `.transient`.
    public var isRetryable: Bool {
        if case .transient = self { return true }
        return false
    }
}

/// Calls Apple's `/auth/token` (authorization-code exchange) and `/auth/revoke` (refresh-token
/// revocation) with a cached ES256 `client_secret` per client id.
///
/// Calls block the calling thread (libcurl); use it from worker threads. Thread-safe. Logs name
/// the endpoint, client id, status and outcome, never a code, token or client secret.
public final class AppleClient: Sendable {
    /// Tuning; every field has a default.
    public struct Options: Sendable {
        /// A whole call, connect to last byte. Default 10 s.
        public var timeout: Duration = .seconds(10)
        /// Connecting. Default 5 s.
        public var connectTimeout: Duration = .seconds(5)
        /// Largest response body read. Default 64 KiB.
        public var maxResponseBytes: Int = 64 * 1024
        /// Client-secret lifetime and renewal. Default 30 days, renewed with 1 day left.
        public var secretPolicy = ClientSecretRenewalPolicy()

        public init() {}
    }

    public let configuration: AppleAPIConfiguration
    public let options: Options
    private let privateKey: ECPrivateKey
    private let clock: WallClock
    private let logger: Logger
    private let secrets: Mutex<ClientSecretCache>
    private let minted = Atomic<Int>(0)

    /// - Parameters:
    ///   - privateKey: the key loaded from `configuration.privateKeyFile`.
    ///   - clock: the time of the client secrets; the system's by default (tests inject one).
    public init(
        configuration: AppleAPIConfiguration, privateKey: ECPrivateKey, options: Options = Options(),
        logger: Logger, clock: WallClock = .system
    ) {
        self.configuration = configuration
        self.options = options
        self.privateKey = privateKey
        self.clock = clock
        self.logger = logger
        self.secrets = Mutex(ClientSecretCache(policy: options.secretPolicy))
        Fetcher.initialize()
    }

    /// Client secrets signed so far (a new one per client id when the cached one nears expiry).
    public var secretsMinted: Int { minted.load(ordering: .relaxed) }

    /// The client secret for `clientID`: the cached one while the renewal policy allows, else a
    /// newly signed one (then cached).
    public func clientSecret(for clientID: String) throws -> String {
        let now = clock.unixSeconds
        if let entry = secrets.withLock({ $0.valid(for: clientID, now: now) }) { return entry.token }
        let secret = try ClientSecret(
            teamID: configuration.teamID, keyID: configuration.keyID, clientID: clientID,
            now: now, lifetime: options.secretPolicy.lifetime)
        let token = secret.assemble(signature: try privateKey.signES256(message: secret.signingInput))
        secrets.withLock {
            $0.store(
                ClientSecretCache.Entry(token: token, issuedAt: secret.issuedAt, expiresAt: secret.expiresAt),
                for: clientID)
        }
        minted.add(1, ordering: .relaxed)
        logger.info(
            "apple client secret signed",
            metadata: [
                "client_id": "\(clientID)", "kid": "\(configuration.keyID)", "exp": "\(secret.expiresAt)",
            ])
        return token
    }

    /// `POST /auth/token` with `grant_type=authorization_code`. On success the response is parsed
    /// but its `id_token` is not verified yet: verify it with `IDTokenVerifier` (aud = `clientID`).
    public func exchange(code: String, clientID: String, redirectURI: String? = nil) -> AppleCallResult<AppleTokenResponse> {
        var fields = [("client_id", clientID), ("code", code), ("grant_type", "authorization_code")]
        if let redirectURI { fields.append(("redirect_uri", redirectURI)) }
        return call(path: "/auth/token", clientID: clientID, fields: fields, onSuccess: Self.parseTokenResponse)
    }

    private static func parseTokenResponse(_ body: [UInt8]) -> AppleCallResult<AppleTokenResponse> {
        do {
            return .success(try AppleTokenResponse.parse(body))
        } catch {
            return .transient(AppleCallFailure(status: 200, reason: "malformed_response", detail: error.rawValue))
        }
    }

    /// `POST /auth/token` with `grant_type=refresh_token`: asks Apple whether the grant behind a
    /// refresh token is still alive (`invalid_grant`: revoked or deleted). Apple throttles this to
    /// about once a day per token. An `id_token` in the answer is not verified here.
    public func validate(refreshToken: String, clientID: String) -> AppleCallResult<AppleRefreshResponse> {
        call(
            path: "/auth/token", clientID: clientID,
            fields: [("client_id", clientID), ("grant_type", "refresh_token"), ("refresh_token", refreshToken)],
            onSuccess: Self.parseRefreshResponse)
    }

    private static func parseRefreshResponse(_ body: [UInt8]) -> AppleCallResult<AppleRefreshResponse> {
        do {
            return .success(try AppleRefreshResponse.parse(body))
        } catch {
            return .transient(AppleCallFailure(status: 200, reason: "malformed_response", detail: error.rawValue))
        }
    }

    /// `POST /auth/revoke` of a refresh token. Apple answers 200 also for a token it no longer knows.
    public func revoke(refreshToken: String, clientID: String) -> AppleCallResult<Void> {
        call(
            path: "/auth/revoke", clientID: clientID,
            fields: [("client_id", clientID), ("token", refreshToken), ("token_type_hint", "refresh_token")]
        ) { _ in
            .success(())
        }
    }

    // MARK: - Implementation

    private func call<T: Sendable>(
        path: String, clientID: String, fields: [(String, String)],
        onSuccess: ([UInt8]) -> AppleCallResult<T>
    ) -> AppleCallResult<T> {
        let result = perform(path: path, clientID: clientID, fields: fields, onSuccess: onSuccess)
        var metadata: Logger.Metadata = ["endpoint": "\(path)", "client_id": "\(clientID)"]
        switch result {
        case .success:
            metadata["outcome"] = "success"
            logger.debug("apple call", metadata: metadata)
        case .invalidGrant:
            metadata["outcome"] = "invalid_grant"
            logger.info("apple call refused", metadata: metadata)
        case .invalidClient:
            metadata["outcome"] = "invalid_client"
            logger.error(
                "apple refused our client authentication: check SIWA_TEAM_ID, SIWA_KEY_ID and the .p8 key",
                metadata: metadata)
        case .rejected(let failure):
            metadata["outcome"] = "rejected"
            metadata["reason"] = "\(failure)"
            logger.warning("apple call refused", metadata: metadata)
        case .transient(let failure):
            metadata["outcome"] = "transient"
            metadata["reason"] = "\(failure)"
            logger.warning("apple call failed, will retry", metadata: metadata)
        }
        return result
    }

    private func perform<T: Sendable>(
        path: String, clientID: String, fields: [(String, String)],
        onSuccess: ([UInt8]) -> AppleCallResult<T>
    ) -> AppleCallResult<T> {
        let secret: String
        do {
            secret = try clientSecret(for: clientID)
        } catch {
            return .rejected(AppleCallFailure(reason: "client_secret", detail: "\(error)"))
        }
        let body = FormURLEncoding.encode(fields + [("client_secret", secret)])
        let scheme: FetchScheme = configuration.baseURL.lowercased().hasPrefix("http://") ? .http : .https
        let request = FetchRequest(
            url: configuration.baseURL + path, method: "POST",
            headers: ["Content-Type: \(FormURLEncoding.contentType)", "Accept: application/json"],
            body: Array(body.utf8), connectTimeout: options.connectTimeout, totalTimeout: options.timeout,
            maxResponseBytes: options.maxResponseBytes, allowedSchemes: [scheme])
        let response: FetchResponse
        do {
            response = try Fetcher.perform(request)
        } catch {
            switch error.code {
            case .invalidURL, .schemeNotAllowed, .fileNotFound:
                return .rejected(AppleCallFailure(reason: error.code.rawValue))
            default:
                return .transient(AppleCallFailure(reason: error.code.rawValue, detail: error.description))
            }
        }
        return Self.classify(
            status: response.status, headers: response.headers, body: response.body,
            onSuccess: onSuccess
        ) { self.secrets.withLock { $0.remove(clientID: clientID) } }
    }

    /// Maps Apple's answer to a result (internal for tests).
    static func classify<T: Sendable>(
        status: Int, headers: [String: String], body: [UInt8],
        onSuccess: ([UInt8]) -> AppleCallResult<T>,
        onInvalidClient: () -> Void = {}
    ) -> AppleCallResult<T> {
        let retryAfter = headers["retry-after"].flatMap { Int($0) }.map { Duration.seconds($0) }
        switch status {
        case 200..<300:
            return onSuccess(body)
        case 429, 500..<600:
            return .transient(
                AppleCallFailure(
                    status: status, reason: "http_\(status)",
                    detail: AppleErrorCode.parse(body)?.description, retryAfter: retryAfter))
        case 400..<500:
            switch AppleErrorCode.parse(body) {
            case .invalidGrant?:
                return .invalidGrant
            case .invalidClient?:
                onInvalidClient()
                return .invalidClient
            case let code?:
                return .rejected(AppleCallFailure(status: status, reason: "apple_error", detail: code.description))
            case nil:
                return .rejected(AppleCallFailure(status: status, reason: "http_\(status)"))
            }
        default:
            return .transient(AppleCallFailure(status: status, reason: "http_\(status)"))
        }
    }
}
