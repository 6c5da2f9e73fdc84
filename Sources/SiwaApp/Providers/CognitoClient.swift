import Foundation
import Logging
import SiwaCore
import SiwaCrypto
import SiwaFetch
import SiwaRuntime

/// A user of the pool that an Apple `sub` signs in as.
public struct CognitoUser: Sendable, Equatable {
    public var username: String
    /// A native (or other) user the Apple identity was linked to, rather than the federated
    /// user Cognito created at the first Apple sign-in.
    public var linked: Bool
    /// Apple is the user's only way in: a federated Apple user with no other identity linked.
    public var appleOnly: Bool

    public init(username: String, linked: Bool, appleOnly: Bool) {
        self.username = username
        self.linked = linked
        self.appleOnly = appleOnly
    }
}

/// Calls a Cognito user pool's admin API (`AWSCognitoIdentityProviderService.*`, JSON 1.1,
/// SigV4-signed). Each call blocks its thread (libcurl) and ends in a `ProviderStep`; nothing
/// is retried here (the caller's queue does). Logs name the operation and the outcome, never
/// the credential, a username or a `sub`.
public final class CognitoClient: HostedProviderClient {
    public struct Options: Sendable {
        /// A whole call. Default 10 s.
        public var timeout: Duration = .seconds(10)
        /// Connecting. Default 5 s.
        public var connectTimeout: Duration = .seconds(5)
        /// Largest answer read. Default 1 MiB (a ListUsers page of 60 users is far less).
        public var maxResponseBytes: Int = 1 << 20
        /// ListUsers pages (60 users each) read to find a native user linked to an Apple
        /// identity: Cognito cannot filter on linked identities, so that search reads the pool.
        /// Default 50 (3,000 users); past it the search is refused, never reported as no user.
        public var maxScanPages: Int = 50

        public init() {}
    }

    public let region: String
    public let userPoolID: String
    public let url: String
    public let options: Options
    private let credentials: SigV4.Credentials
    private let host: String
    private let path: String
    private let scheme: FetchScheme
    private let clock: WallClock
    private let logger: Logger
    private let pause = ProviderPause()

    /// - Parameters:
    ///   - url: the API's base; the region's endpoint when nil (`https://`, or `http://` to a
    ///     loopback host for a local emulator).
    ///   - clock: for the signature's date (tests give one).
    /// - Throws: an unusable `url`, as a `ConfigurationError` whose `variable` is `url`: the
    ///   caller that read it from a variable names that variable.
    public init(
        region: String, userPoolID: String, credentials: SigV4.Credentials, url: String? = nil, options: Options = Options(),
        logger: Logger, clock: WallClock = .system
    ) throws(ConfigurationError) {
        let base = url ?? Cognito.endpoint(region: region)
        if let problem = Cognito.problem(withURL: base) { throw ConfigurationError(variable: "url", problem: problem) }
        guard let (host, path) = Cognito.hostAndPath(of: base) else {
            throw ConfigurationError(variable: "url", problem: "has no usable host")
        }
        self.region = region
        self.userPoolID = userPoolID
        self.url = base
        self.options = options
        self.credentials = credentials
        self.host = host
        self.path = path
        self.scheme = base.lowercased().hasPrefix("http://") ? .http : .https
        self.clock = clock
        self.logger = logger
        Fetcher.initialize()
    }

    // MARK: - The provider's effects

    public var provider: HostedProvider { .cognito }

    /// Applies `effect` to the user `sub` signs in as: a global sign-out; then, for `unlink`,
    /// the Apple identity disabled; for `deleteUser`, the user deleted when Apple is its only
    /// way in (else as `unlink`). Each step is idempotent at Cognito: a call sent again after
    /// its answer was lost does the same.
    public func apply(_ effect: ProviderEffect, sub: String) -> ProviderOutcome {
        findUser(sub: sub).then { user, _ in
            if effect == .deleteUser && user.appleOnly && !user.linked {
                return deleteUser(username: user.username).then { existed, status in .done([existed ? .deleted : .alreadyDone], status: status) }
                    .reached([])
            }
            return globalSignOut(username: user.username).then { _, status in
                guard effect != .endSessions else { return .done([.signedOut], status: status) }
                switch disableAppleProvider(sub: sub) {
                // No user holds that identity any more: unlinked already.
                case .userNotFound(let status): return .done([.signedOut, .alreadyDone], status: status)
                case let step: return step.then { _, status in .done([.signedOut, .unlinked], status: status) }.reached([.signedOut])
                }
            }.reached([])
        }
    }

    // MARK: - Operations

    /// The user an Apple `sub` signs in as: the federated user `SignInWithApple_<sub>`
    /// (AdminGetUser), else a user whose `identities` list that Apple identity (ListUsers pages).
    public func findUser(sub: String) -> ProviderStep<CognitoUser> {
        let federated = Cognito.federatedUsername(sub: sub)
        switch call("AdminGetUser", ["UserPoolId": .string(userPoolID), "Username": .string(federated)]) {
        case .done(let answer, let status):
            let identities = Self.attribute("identities", in: answer?["UserAttributes"]).map(Cognito.providers(in:)) ?? []
            let appleOnly = identities.allSatisfy { $0.provider == Cognito.appleProvider }
            let username = answer?["Username"]?.stringValue ?? federated
            return .done(CognitoUser(username: username, linked: false, appleOnly: appleOnly), status: status)
        case .userNotFound:
            return findLinkedUser(sub: sub)
        case let other:
            return other.map { _ in CognitoUser(username: "", linked: false, appleOnly: false) }
        }
    }

    private func findLinkedUser(sub: String) -> ProviderStep<CognitoUser> {
        var token: String?
        for _ in 0..<options.maxScanPages {
            var body: [String: JSONValue] = ["UserPoolId": .string(userPoolID), "Limit": .number(60)]
            if let token { body["PaginationToken"] = .string(token) }
            switch call("ListUsers", body) {
            case .done(let answer, let status):
                for user in answer?["Users"]?.arrayValue ?? [] {
                    guard let username = user["Username"]?.stringValue,
                        let identities = Self.attribute("identities", in: user["Attributes"]),
                        Cognito.identities(identities, contain: sub)
                    else { continue }
                    return .done(CognitoUser(username: username, linked: true, appleOnly: false), status: status)
                }
                guard let next = answer?["PaginationToken"]?.stringValue, !next.isEmpty else { return .userNotFound(status: status) }
                token = next
            case let other:
                return other.map { _ in CognitoUser(username: "", linked: false, appleOnly: false) }
            }
        }
        return .refused(ProviderFailure(reason: "linked_user_search_limit", blame: .request))
    }

    /// Ends every session of the user: its refresh tokens stop working (AdminUserGlobalSignOut).
    public func globalSignOut(username: String) -> ProviderStep<Bool> {
        call("AdminUserGlobalSignOut", ["UserPoolId": .string(userPoolID), "Username": .string(username)]).map { _ in true }
    }

    /// Unlinks the Apple identity `sub` from whichever user it signs in as, and stops it
    /// signing in (AdminDisableProviderForUser, by provider and subject: no username needed).
    public func disableAppleProvider(sub: String) -> ProviderStep<Bool> {
        let user: JSONValue = .object([
            "ProviderName": .string(Cognito.appleProvider), "ProviderAttributeName": .string("Cognito_Subject"),
            "ProviderAttributeValue": .string(sub),
        ])
        return call("AdminDisableProviderForUser", ["UserPoolId": .string(userPoolID), "User": user]).map { _ in true }
    }

    /// Deletes the user (AdminDeleteUser): `true` when it was deleted now, `false` when it was
    /// already gone (success all the same: the call's purpose holds).
    public func deleteUser(username: String) -> ProviderStep<Bool> {
        switch call("AdminDeleteUser", ["UserPoolId": .string(userPoolID), "Username": .string(username)]) {
        case .done(_, let status): return .done(true, status: status)
        case .userNotFound(let status): return .done(false, status: status)
        case let other: return other.map { _ in false }
        }
    }

    public func pausedUntil() -> Duration { pause.value }

    /// The start-up check: one ListUsers of one user, which needs the credential, the permission
    /// and the pool to be right (`blame` of a refusal says which is not).
    public func check() -> ProviderOutcome {
        call("ListUsers", ["UserPoolId": .string(userPoolID), "Limit": .number(1)]).then { _, status in .done([], status: status) }
    }

    // MARK: - One call

    /// One signed POST of `operation` with `body`; `.done` carries the parsed answer (nil for
    /// an empty one).
    public func call(_ operation: String, _ body: [String: JSONValue]) -> ProviderStep<JSONValue?> {
        let result = send(operation, Array(JSONValue.object(body).serialized().utf8))
        var metadata: Logger.Metadata = ["operation": "\(operation)"]
        switch result {
        case .done:
            metadata["outcome"] = "done"
            logger.debug("cognito call", metadata: metadata)
        case .userNotFound:
            metadata["outcome"] = "user_not_found"
            logger.info("cognito call", metadata: metadata)
        case .retryLater(let failure):
            metadata["outcome"] = "retry_later"
            metadata["reason"] = "\(failure)"
            logger.warning("cognito call failed, will retry", metadata: metadata)
        case .refused(let failure):
            metadata["outcome"] = "refused"
            metadata["reason"] = "\(failure)"
            logger.error("cognito refused the call", metadata: metadata)
        }
        return result
    }

    private func send(_ operation: String, _ body: [UInt8]) -> ProviderStep<JSONValue?> {
        let headers = [
            ("Host", host), ("Content-Type", Cognito.contentType), ("X-Amz-Target", Cognito.targetPrefix + operation),
        ]
        let signed = SigV4.sign(
            SigV4.Request(method: "POST", path: path, headers: headers, body: body), credentials: credentials,
            region: region, service: Cognito.service, amzDate: SigV4.amzDate(unixSeconds: clock.unixSeconds),
            sha256: SHA256.hash, hmac: HMACSHA256.authenticate)
        let request = FetchRequest(
            url: url, method: "POST", headers: (headers + signed.headers).map { "\($0.0): \($0.1)" }, body: body,
            connectTimeout: options.connectTimeout, totalTimeout: options.timeout, maxResponseBytes: options.maxResponseBytes,
            allowedSchemes: [scheme])
        let response: FetchResponse
        do {
            response = try Fetcher.perform(request)
        } catch {
            switch error.code {
            case .invalidURL, .schemeNotAllowed, .fileNotFound:
                return .refused(ProviderFailure(reason: error.code.rawValue, blame: .request))
            default:
                return .retryLater(ProviderFailure(reason: error.code.rawValue))
            }
        }
        let now = clock.sinceEpoch.inSeconds
        pause.note(ProviderRateLimit(headers: response.headers, now: now), status: response.status, now: now)
        switch CognitoAnswer.classify(status: response.status, headers: response.headers, body: response.body, now: now) {
        case .done(let bytes, let status):
            if bytes.isEmpty { return .done(nil, status: status) }
            guard let answer = try? JSONParser.parse(bytes) else {
                return .retryLater(ProviderFailure(status: response.status, reason: "malformed_response"))
            }
            return .done(answer, status: status)
        case let other: return other.map { _ in nil }
        }
    }

    /// The value of attribute `name` in a `[{"Name":…,"Value":…}]` list.
    static func attribute(_ name: String, in list: JSONValue?) -> String? {
        list?.arrayValue?.first { $0["Name"]?.stringValue == name }?["Value"]?.stringValue
    }
}
