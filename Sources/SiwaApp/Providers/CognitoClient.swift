import Foundation
import Logging
import SiwaCore
import SiwaCrypto
import SiwaFetch

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
/// SigV4-signed). Each call blocks its thread (libcurl) and ends in a `CognitoResult`; nothing
/// is retried here (the caller's queue does). Logs name the operation and the outcome, never
/// the credential, a username or a `sub`.
public final class CognitoClient: Sendable {
    public struct Options: Sendable {
        /// Seconds for a whole call. Default 10.
        public var timeout: Double = 10
        /// Seconds to connect. Default 5.
        public var connectTimeout: Double = 5
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
    private let clock: @Sendable () -> Int64
    private let logger: Logger

    /// - Parameters:
    ///   - url: the API's base; the region's endpoint when nil (`https://`, or `http://` to a
    ///     loopback host for a local emulator).
    ///   - clock: Unix seconds, for the signature's date (tests give one).
    /// - Throws: an unusable `url`, as a `ConfigurationError` whose `variable` is `url`: the
    ///   caller that read it from a variable names that variable.
    public init(
        region: String, userPoolID: String, credentials: SigV4.Credentials, url: String? = nil, options: Options = Options(),
        logger: Logger, clock: @escaping @Sendable () -> Int64 = { Int64(Date().timeIntervalSince1970) }
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

    // MARK: - Operations

    /// The user an Apple `sub` signs in as: the federated user `SignInWithApple_<sub>`
    /// (AdminGetUser), else a user whose `identities` list that Apple identity (ListUsers pages).
    public func findUser(sub: String) -> CognitoResult<CognitoUser> {
        let federated = Cognito.federatedUsername(sub: sub)
        switch call("AdminGetUser", ["UserPoolId": .string(userPoolID), "Username": .string(federated)]) {
        case .done(let answer):
            let identities = Self.attribute("identities", in: answer?["UserAttributes"]).map(Cognito.providers(in:)) ?? []
            let appleOnly = identities.allSatisfy { $0.provider == Cognito.appleProvider }
            let username = answer?["Username"]?.stringValue ?? federated
            return .done(CognitoUser(username: username, linked: false, appleOnly: appleOnly))
        case .userNotFound:
            return findLinkedUser(sub: sub)
        case .retryLater(let failure):
            return .retryLater(failure)
        case .refused(let failure):
            return .refused(failure)
        }
    }

    private func findLinkedUser(sub: String) -> CognitoResult<CognitoUser> {
        var token: String?
        for _ in 0..<options.maxScanPages {
            var body: [String: JSONValue] = ["UserPoolId": .string(userPoolID), "Limit": .number(60)]
            if let token { body["PaginationToken"] = .string(token) }
            switch call("ListUsers", body) {
            case .done(let answer):
                for user in answer?["Users"]?.arrayValue ?? [] {
                    guard let username = user["Username"]?.stringValue,
                        let identities = Self.attribute("identities", in: user["Attributes"]),
                        Cognito.identities(identities, contain: sub)
                    else { continue }
                    return .done(CognitoUser(username: username, linked: true, appleOnly: false))
                }
                guard let next = answer?["PaginationToken"]?.stringValue, !next.isEmpty else { return .userNotFound }
                token = next
            case .userNotFound:
                return .userNotFound
            case .retryLater(let failure):
                return .retryLater(failure)
            case .refused(let failure):
                return .refused(failure)
            }
        }
        return .refused(CognitoFailure(reason: "linked_user_search_limit", blame: .request))
    }

    /// Ends every session of the user: its refresh tokens stop working (AdminUserGlobalSignOut).
    public func globalSignOut(username: String) -> CognitoResult<Bool> {
        call("AdminUserGlobalSignOut", ["UserPoolId": .string(userPoolID), "Username": .string(username)]).map { _ in true }
    }

    /// Unlinks the Apple identity `sub` from whichever user it signs in as, and stops it
    /// signing in (AdminDisableProviderForUser, by provider and subject: no username needed).
    public func disableAppleProvider(sub: String) -> CognitoResult<Bool> {
        let user: JSONValue = .object([
            "ProviderName": .string(Cognito.appleProvider), "ProviderAttributeName": .string("Cognito_Subject"),
            "ProviderAttributeValue": .string(sub),
        ])
        return call("AdminDisableProviderForUser", ["UserPoolId": .string(userPoolID), "User": user]).map { _ in true }
    }

    /// Deletes the user (AdminDeleteUser). A user already gone is success: the call's purpose holds.
    public func deleteUser(username: String) -> CognitoResult<Bool> {
        switch call("AdminDeleteUser", ["UserPoolId": .string(userPoolID), "Username": .string(username)]) {
        case .done, .userNotFound: return .done(true)
        case .retryLater(let failure): return .retryLater(failure)
        case .refused(let failure): return .refused(failure)
        }
    }

    /// A start-up check: one ListUsers of one user, which needs the credential, the permission
    /// and the pool to be right (`blame` of a refusal says which is not).
    public func check() -> CognitoResult<Bool> {
        call("ListUsers", ["UserPoolId": .string(userPoolID), "Limit": .number(1)]).map { _ in true }
    }

    // MARK: - One call

    /// One signed POST of `operation` with `body`; `.done` carries the parsed answer (nil for
    /// an empty one).
    public func call(_ operation: String, _ body: [String: JSONValue]) -> CognitoResult<JSONValue?> {
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

    private func send(_ operation: String, _ body: [UInt8]) -> CognitoResult<JSONValue?> {
        let headers = [
            ("Host", host), ("Content-Type", Cognito.contentType), ("X-Amz-Target", Cognito.targetPrefix + operation),
        ]
        let signed = SigV4.sign(
            SigV4.Request(method: "POST", path: path, headers: headers, body: body), credentials: credentials,
            region: region, service: Cognito.service, amzDate: SigV4.amzDate(unixSeconds: clock()),
            sha256: SHA256.hash, hmac: HMACSHA256.authenticate)
        let request = FetchRequest(
            url: url, method: "POST", headers: (headers + signed.headers).map { "\($0.0): \($0.1)" }, body: body,
            connectTimeout: .seconds(options.connectTimeout), totalTimeout: .seconds(options.timeout), maxResponseBytes: options.maxResponseBytes,
            allowedSchemes: [scheme])
        let response: FetchResponse
        do {
            response = try Fetcher.perform(request)
        } catch {
            switch error.code {
            case .invalidURL, .schemeNotAllowed, .fileNotFound:
                return .refused(CognitoFailure(reason: error.code.rawValue, blame: .request))
            default:
                return .retryLater(CognitoFailure(reason: error.code.rawValue))
            }
        }
        switch CognitoAnswer.classify(status: response.status, headers: response.headers, body: response.body) {
        case .done(let bytes):
            if bytes.isEmpty { return .done(nil) }
            guard let answer = try? JSONParser.parse(bytes) else {
                return .retryLater(CognitoFailure(status: response.status, reason: "malformed_response"))
            }
            return .done(answer)
        case .userNotFound: return .userNotFound
        case .retryLater(let failure): return .retryLater(failure)
        case .refused(let failure): return .refused(failure)
        }
    }

    /// The value of attribute `name` in a `[{"Name":…,"Value":…}]` list.
    static func attribute(_ name: String, in list: JSONValue?) -> String? {
        list?.arrayValue?.first { $0["Name"]?.stringValue == name }?["Value"]?.stringValue
    }
}
