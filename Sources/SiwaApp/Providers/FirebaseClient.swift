import Foundation
import Logging
import SiwaCore
import SiwaCrypto
import SiwaFetch
import SiwaRuntime
import Synchronization

/// A service-account key, parsed and its private key loaded: what signs the assertions.
public struct FirebaseCredential: Sendable {
    public let account: FirebaseServiceAccount
    let key: RSAPrivateKey

    /// - Throws: what is wrong with the file, naming the field, never its value.
    public init(json: [UInt8]) throws(FirebaseCredentialError) {
        account = try FirebaseServiceAccount.parse(json)
        do {
            key = try RSAPrivateKey(pem: account.privateKeyPEM)
        } catch {
            throw FirebaseCredentialError(
                reason: "invalid_private_key", problem: "has a \"private_key\" that is not an unencrypted RSA private key in PEM")
        }
    }

    /// Reads and parses the key file at `path`.
    public init(path: String) throws(FirebaseCredentialError) {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw FirebaseCredentialError(reason: "unreadable", problem: "cannot be read")
        }
        try self.init(json: Array(data))
    }

    /// A signed assertion for `now`.
    func assertion(now: Int64) throws(CryptoError) -> String {
        let input = account.assertionSigningInput(now: now)
        return FirebaseServiceAccount.assemble(signingInput: input, signature: try key.signRS256(input))
    }
}

/// Calls the Identity Toolkit v1 API of a Firebase project (`/v1/projects/{id}/accounts:…`),
/// authorized by an access token that a service account's RS256 assertion obtains from its
/// `token_uri`, cached until shortly before it expires. With no credential (the Auth
/// emulator's base URL) it sends the emulator's admin bearer, as the Admin SDKs do. Each call
/// blocks its thread (libcurl); nothing is retried here (the caller's queue does). Logs name
/// the operation and the outcome, never a token, a `sub` or a user id.
public final class FirebaseClient: HostedProviderClient {
    public struct Options: Sendable {
        /// A whole call. Default 10 s.
        public var timeout: Duration = .seconds(10)
        /// Connecting. Default 5 s.
        public var connectTimeout: Duration = .seconds(5)
        /// Largest answer read. Default 1 MiB (a lookup of one user is far less).
        public var maxResponseBytes: Int = 1 << 20
        /// An access token is renewed this long before it expires (at most a tenth of its
        /// lifetime). Default 5 min.
        public var tokenMargin: Duration = .seconds(300)

        public init() {}
    }

    public var provider: HostedProvider { .firebase }
    public let projectID: String
    public let url: String
    public let options: Options
    private let credential: FirebaseCredential?
    private let tokenURL: String?
    private let clock: WallClock
    private let logger: Logger
    private let tokens: Mutex<BearerTokenCache>
    private let fetching = Mutex<Void>(())
    private let issued = Atomic<Int>(0)
    private let pause = ProviderPause()

    /// - Parameters:
    ///   - credential: the service account; nil only for the Auth emulator (`url` given).
    ///   - url: the API's base (`https://identitytoolkit.googleapis.com/` when nil; an
    ///     emulator's `http://127.0.0.1:9099/identitytoolkit.googleapis.com/`).
    ///   - tokenURL: where assertions are exchanged, instead of the credential's `token_uri`
    ///     (which stays their audience).
    ///   - clock: the assertion's `iat`, `validSince`, the token's expiry.
    /// - Throws: a `ConfigurationError` whose `variable` is `projectID`, `url`, `tokenURL` or
    ///   `credential`: the caller that read it from a variable names that variable.
    public init(
        projectID: String, credential: FirebaseCredential?, url: String? = nil, tokenURL: String? = nil, options: Options = Options(),
        logger: Logger, clock: WallClock = .system
    ) throws(ConfigurationError) {
        if let problem = Firebase.problem(withProjectID: projectID) { throw ConfigurationError(variable: "projectID", problem: problem) }
        let base = url ?? Firebase.defaultURL
        if let problem = Firebase.problem(withURL: base) { throw ConfigurationError(variable: "url", problem: problem) }
        if let tokenURL, let problem = Firebase.problem(withURL: tokenURL) {
            throw ConfigurationError(variable: "tokenURL", problem: problem)
        }
        if credential == nil && url == nil {
            throw ConfigurationError(variable: "credential", problem: "is required unless the base URL is an emulator's")
        }
        self.projectID = projectID
        self.url = base
        self.options = options
        self.credential = credential
        self.tokenURL = tokenURL
        self.clock = clock
        self.logger = logger
        self.tokens = Mutex(BearerTokenCache(margin: options.tokenMargin))
        Fetcher.initialize()
    }

    /// Access tokens obtained so far.
    public var accessTokensObtained: Int { issued.load(ordering: .relaxed) }

    // MARK: - HostedProviderClient

    public func pausedUntil() -> Duration { pause.value }

    /// One lookup of a local id nobody has, with a new access token: it needs the credential,
    /// the role and the project to be right, and changes nothing.
    public func check() -> ProviderOutcome {
        tokens.withLock { $0.invalidate() }
        switch call("lookup", Firebase.lookupBody(localID: Firebase.checkLocalID)) {
        case .done(_, let status), .userNotFound(let status): return .done([], status: status)
        case .tokenRefused(let failure), .refused(let failure): return .refused(failure)
        case .retryLater(let failure): return .retryLater(failure)
        }
    }

    public func apply(_ effect: ProviderEffect, sub: String) -> ProviderOutcome {
        let user: FirebaseUser
        switch findUser(sub: sub) {
        case .done(let found?, _): user = found
        case .done(nil, let status): return .userNotFound(status: status)
        case let other: return ending(other)
        }
        if effect == .deleteUser && user.appleOnly {
            switch call("delete", Firebase.deleteBody(localID: user.localID)) {
            case .done(_, let status): return .done([.deleted], status: status)
            // Gone since the lookup: what the call was for holds.
            case .userNotFound(let status): return .done([.alreadyDone], status: status)
            case let other: return ending(other).reached([])
            }
        }
        let unlink = effect != .endSessions
        switch call("update", Firebase.updateBody(localID: user.localID, now: clock.unixSeconds, unlink: unlink)) {
        case .done(_, let status): return .done(unlink ? [.signedOut, .unlinked] : [.signedOut], status: status)
        case let other: return ending(other).reached([])
        }
    }

    /// The outcome of a call that did not apply the effect. A refused access token was dropped:
    /// the call is tried again later with a new one; the emulator's fixed bearer cannot be
    /// renewed.
    private func ending<Value>(_ result: FirebaseCallResult<Value>) -> ProviderOutcome {
        switch result {
        case .done(_, let status): return .done([], status: status)
        case .userNotFound(let status): return .userNotFound(status: status)
        case .retryLater(let failure): return .retryLater(failure)
        case .tokenRefused(let failure):
            guard credential != nil else { return .refused(failure) }
            return .retryLater(ProviderFailure(status: failure.status, reason: failure.reason))
        case .refused(let failure): return .refused(failure)
        }
    }

    // MARK: - Operations

    /// The user whose `apple.com` federated id is `sub` (`.done(nil, …)` when there is none).
    public func findUser(sub: String) -> FirebaseCallResult<FirebaseUser?> {
        switch call("lookup", Firebase.lookupBody(sub: sub)) {
        case .done(let answer, let status):
            return .done(answer.flatMap { FirebaseUser.from(lookup: $0, sub: sub) }, status: status)
        case .userNotFound(let status): return .userNotFound(status: status)
        case .retryLater(let failure): return .retryLater(failure)
        case .tokenRefused(let failure): return .tokenRefused(failure)
        case .refused(let failure): return .refused(failure)
        }
    }

    /// One POST of `accounts:<operation>` with `body`; `.done` carries the parsed answer (nil
    /// for an empty one). A 401 drops the cached access token.
    public func call(_ operation: String, _ body: JSONValue) -> FirebaseCallResult<JSONValue?> {
        let result = send(operation, Array(body.serialized().utf8))
        let (outcome, level, failure): (String, Logger.Level, ProviderFailure?) =
            switch result {
            case .done: ("done", .debug, nil)
            case .userNotFound: ("user_not_found", .info, nil)
            case .retryLater(let failure): ("retry_later", .warning, failure)
            case .tokenRefused(let failure): ("token_refused", .warning, failure)
            case .refused(let failure): ("refused", .error, failure)
            }
        if case .tokenRefused = result { tokens.withLock { $0.invalidate() } }
        var metadata: Logger.Metadata = ["operation": "\(operation)", "outcome": "\(outcome)"]
        if let failure { metadata["reason"] = "\(failure)" }
        logger.log(level: level, "firebase call", metadata: metadata)
        return result
    }

    private func send(_ operation: String, _ body: [UInt8]) -> FirebaseCallResult<JSONValue?> {
        let bearer: String
        switch accessToken() {
        case .success(let token): bearer = token
        case .failure(let failure): return failure.result()
        }
        let target = Firebase.accountsURL(base: url, project: projectID, operation: operation)
        let response: FetchResponse
        switch perform(target, headers: ["Authorization: Bearer \(bearer)", "Content-Type: application/json"], body: body) {
        case .success(let answer): response = answer
        case .failure(let failure): return failure.result()
        }
        let now = clock.sinceEpoch.inSeconds
        pause.note(
            FirebaseAnswer.rateLimit(headers: response.headers, body: response.body, now: now), status: response.status, now: now)
        switch FirebaseAnswer.classify(status: response.status, headers: response.headers, body: response.body, now: now) {
        case .done(let bytes):
            if bytes.isEmpty { return .done(nil, status: response.status) }
            guard let answer = try? JSONParser.parse(bytes) else {
                return .retryLater(ProviderFailure(status: response.status, reason: "malformed_response"))
            }
            return .done(answer, status: response.status)
        case .userNotFound(let status): return .userNotFound(status: status)
        case .retryLater(let failure): return .retryLater(failure)
        case .tokenRefused(let failure): return .tokenRefused(failure)
        case .refused(let failure): return .refused(failure)
        }
    }

    /// The cached access token, or a new one (one exchange at a time: threads that need a token
    /// together wait for the same one). The emulator's bearer without a credential.
    func accessToken() -> Result<String, FirebaseStop> {
        guard let credential else { return .success(Firebase.emulatorBearer) }
        if let token = tokens.withLock({ $0.valid(now: clock.sinceEpoch) }) { return .success(token) }
        return fetching.withLock { _ in
            let now = clock.unixSeconds
            if let token = tokens.withLock({ $0.valid(now: .seconds(now)) }) { return .success(token) }
            let result = exchange(credential, now: now)
            switch result {
            case .success(let token):
                tokens.withLock { $0.store(token.token, now: .seconds(now), lifetime: .seconds(token.expiresIn)) }
                issued.add(1, ordering: .relaxed)
            case .failure(let stop):
                logger.error("firebase token exchange failed", metadata: ["reason": "\(stop.failure)", "later": "\(!stop.permanent)"])
            }
            return result.map(\.token)
        }
    }

    /// A new access token for a signed assertion.
    private func exchange(_ credential: FirebaseCredential, now: Int64) -> Result<FirebaseAccessToken, FirebaseStop> {
        let assertion: String
        do {
            assertion = try credential.assertion(now: now)
        } catch {
            return .failure(FirebaseStop(ProviderFailure(reason: "assertion_signing_failed", blame: .credential), permanent: true))
        }
        let body = Array(FirebaseServiceAccount.tokenRequestBody(assertion: assertion).utf8)
        let response: FetchResponse
        switch perform(tokenURL ?? credential.account.tokenURI, headers: ["Content-Type: \(FormURLEncoding.contentType)"], body: body) {
        case .success(let answer): response = answer
        case .failure(let stop): return .failure(stop)
        }
        switch FirebaseAnswer.classifyToken(status: response.status, headers: response.headers, body: response.body, now: Double(now)) {
        case .done(let bytes):
            guard let token = FirebaseAccessToken(answer: bytes) else {
                return .failure(FirebaseStop(ProviderFailure(status: response.status, reason: "malformed_token_response"), permanent: false))
            }
            return .success(token)
        case .retryLater(let failure): return .failure(FirebaseStop(failure, permanent: false))
        case .tokenRefused(let failure), .refused(let failure): return .failure(FirebaseStop(failure, permanent: true))
        case .userNotFound(let status):
            return .failure(FirebaseStop(ProviderFailure(status: status, reason: "http_\(status)", blame: .request), permanent: true))
        }
    }

    /// One POST; a network failure already classified.
    private func perform(_ target: String, headers: [String], body: [UInt8]) -> Result<FetchResponse, FirebaseStop> {
        let request = FetchRequest(
            url: target, method: "POST", headers: headers, body: body, connectTimeout: options.connectTimeout,
            totalTimeout: options.timeout, maxResponseBytes: options.maxResponseBytes,
            allowedSchemes: [target.lowercased().hasPrefix("http://") ? .http : .https])
        do {
            return .success(try Fetcher.perform(request))
        } catch {
            switch error.code {
            case .invalidURL, .schemeNotAllowed, .fileNotFound:
                return .failure(FirebaseStop(ProviderFailure(reason: error.code.rawValue, blame: .request), permanent: true))
            default:
                return .failure(FirebaseStop(ProviderFailure(reason: error.code.rawValue), permanent: false))
            }
        }
    }
}

/// A call that ended before the API answered it: at the network or the token endpoint.
struct FirebaseStop: Error {
    var failure: ProviderFailure
    var permanent: Bool

    init(_ failure: ProviderFailure, permanent: Bool) {
        self.failure = failure
        self.permanent = permanent
    }

    func result<Value>() -> FirebaseCallResult<Value> { permanent ? .refused(failure) : .retryLater(failure) }
}

/// How one Firebase call ended.
public enum FirebaseCallResult<Value: Sendable & Equatable>: Sendable, Equatable {
    /// A 2xx; `status` is its HTTP status.
    case done(Value, status: Int)
    /// `USER_NOT_FOUND`.
    case userNotFound(status: Int)
    /// Throttled, a quota, a 5xx or the network: later, not before `retryAfter`.
    case retryLater(ProviderFailure)
    /// The access token was refused (401); it was dropped.
    case tokenRefused(ProviderFailure)
    /// Permanent until someone fixes what `blame` says.
    case refused(ProviderFailure)
}
