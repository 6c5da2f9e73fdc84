/// Firebase Authentication's admin API (Identity Toolkit v1, project-scoped) as pure decisions:
/// its addresses, the request bodies, how an answer is classified, which user an Apple `sub`
/// signs in as, and the service-account credential with its RS256 assertion.
public enum Firebase {
    /// The provider id Firebase gives Sign in with Apple.
    public static let appleProvider = "apple.com"
    public static let defaultURL = "https://identitytoolkit.googleapis.com/"
    /// The discovery document's scope for the `projects.accounts` methods.
    public static let scope = "https://www.googleapis.com/auth/cloud-platform"
    public static let jwtBearerGrant = "urn:ietf:params:oauth:grant-type:jwt-bearer"
    /// The bearer the Firebase Admin SDKs send to the Auth emulator, which accepts it as an admin.
    public static let emulatorBearer = "owner"
    /// Google refuses an assertion that lives longer than an hour.
    public static let assertionLifetime: Int64 = 3600
    /// The local id the start-up check looks up: a lookup that finds nobody still needs the
    /// credential, the role and the project to be right, and changes nothing.
    public static let checkLocalID = "siwa-notify-start-check"

    /// nil if `url` may be the API's base or the token endpoint: `https://` to any host,
    /// `http://` to loopback only, no query or fragment.
    public static func problem(withURL url: String) -> String? {
        if let problem = ForwardingConfiguration.problem(withURL: url) { return problem }
        if url.contains("?") || url.contains("#") { return "must not have a query or fragment" }
        return nil
    }

    /// nil if `id` may be a project id in a path: Google's ids (letters, digits, `-`), with the
    /// `.` and `:` of the older domain-scoped ones.
    public static func problem(withProjectID id: String) -> String? {
        guard !id.isEmpty, id.utf8.count <= 100 else { return "must be 1 to 100 characters" }
        let allowed = id.utf8.allSatisfy { byte in
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: ":"), UInt8(ascii: "_"):
                return true
            default:
                return false
            }
        }
        return allowed ? nil : "may hold only letters, digits, '-', '_', '.' and ':'"
    }

    /// The address of `accounts:<operation>` of `project` under the base `url`.
    public static func accountsURL(base url: String, project: String, operation: String) -> String {
        (url.hasSuffix("/") ? url : url + "/") + "v1/projects/\(project)/accounts:\(operation)"
    }

    // MARK: - Request bodies

    /// `accounts:lookup` of the user whose federated id at `apple.com` is `sub`.
    public static func lookupBody(sub: String) -> JSONValue {
        .object(["federatedUserId": .array([.object(["providerId": .string(appleProvider), "rawId": .string(sub)])])])
    }

    /// `accounts:lookup` by local id.
    public static func lookupBody(localID: String) -> JSONValue {
        .object(["localId": .array([.string(localID)])])
    }

    /// `accounts:update` that revokes the user's refresh tokens (`validSince` = `now`, in
    /// seconds: an int64, a string in JSON), and with `unlink` unlinks the Apple identity.
    public static func updateBody(localID: String, now: Int64, unlink: Bool) -> JSONValue {
        var body: [String: JSONValue] = ["localId": .string(localID), "validSince": .string(String(now))]
        if unlink { body["deleteProvider"] = .array([.string(appleProvider)]) }
        return .object(body)
    }

    /// `accounts:delete` of the user.
    public static func deleteBody(localID: String) -> JSONValue {
        .object(["localId": .string(localID)])
    }
}

/// A Firebase user an Apple `sub` signs in as, as `accounts:lookup` describes it.
public struct FirebaseUser: Sendable, Equatable {
    public var localID: String
    /// The provider ids linked to the user (`apple.com`, `password`, `google.com`, `phone`…).
    public var providers: [String]
    /// The user has a password (a `passwordHash`), a phone number, or signs in with custom
    /// tokens: ways in that no `providerUserInfo` entry may show.
    public var otherWayIn: Bool

    public init(localID: String, providers: [String], otherWayIn: Bool) {
        self.localID = localID
        self.providers = providers
        self.otherWayIn = otherWayIn
    }

    /// Apple is the user's only way in: deleting the user takes nothing else away.
    public var appleOnly: Bool { !otherWayIn && providers.allSatisfy { $0 == Firebase.appleProvider } }

    /// The user of a `GetAccountInfoResponse` linked to the Apple identity `sub`; nil when the
    /// answer lists none (Firebase answers a lookup that matches nobody with no `users`).
    public static func from(lookup answer: JSONValue, sub: String) -> FirebaseUser? {
        for user in answer["users"]?.arrayValue ?? [] {
            let infos = user["providerUserInfo"]?.arrayValue ?? []
            let apple = infos.contains { $0["providerId"]?.stringValue == Firebase.appleProvider && $0["rawId"]?.stringValue == sub }
            guard apple, let localID = user["localId"]?.stringValue, !localID.isEmpty else { continue }
            let other =
                user["passwordHash"]?.stringValue != nil || user["phoneNumber"]?.stringValue != nil
                || user["customAuth"] == .bool(true)
            return FirebaseUser(localID: localID, providers: infos.compactMap { $0["providerId"]?.stringValue }, otherWayIn: other)
        }
        return nil
    }
}

/// An answer of the Identity Toolkit API or of the token endpoint, classified.
public enum FirebaseAnswer: Sendable, Equatable {
    /// A 2xx, with its body.
    case done([UInt8])
    /// `USER_NOT_FOUND`.
    case userNotFound(status: Int)
    /// Throttled, a quota, a 5xx: the same call later, not before `retryAfter`.
    case retryLater(ProviderFailure)
    /// A 401: the access token was refused. A new one may be accepted.
    case tokenRefused(ProviderFailure)
    /// Permanent until someone fixes what `blame` says.
    case refused(ProviderFailure)

    static let throttled: Set<String> = [
        "QUOTA_EXCEEDED", "TOO_MANY_ATTEMPTS_TRY_LATER", "RESOURCE_EXHAUSTED", "INTERNAL_ERROR", "UNAVAILABLE",
        "DEADLINE_EXCEEDED",
    ]
    static let permissionRefused: Set<String> = ["PERMISSION_DENIED", "INSUFFICIENT_PERMISSION"]
    static let projectRefused: Set<String> = ["CONFIGURATION_NOT_FOUND", "PROJECT_NOT_FOUND", "NOT_FOUND"]
    static let tokenCodes: Set<String> = ["UNAUTHENTICATED", "INVALID_ID_TOKEN", "TOKEN_EXPIRED", "CREDENTIAL_TOO_OLD_LOGIN_AGAIN"]

    /// The error code of a Google API error (`{"error":{"code":…,"message":…,"status":…}}`):
    /// the message up to a `:` when that is a code (`USER_NOT_FOUND`, `PERMISSION_DENIED : …`, as
    /// the Admin SDKs read it), else the `status` (`PERMISSION_DENIED`). Never the rest of the
    /// message, which can quote a user.
    public static func errorCode(body: [UInt8]) -> String? {
        guard let error = (try? JSONParser.parse(body))?["error"] else { return nil }
        if let message = error["message"]?.stringValue {
            let head = ServerConfiguration.trim(String(message.split(separator: ":", maxSplits: 1, omittingEmptySubsequences: false).first ?? ""))
            if isCode(head) { return head }
        }
        if let status = error["status"]?.stringValue, isCode(status) { return status }
        return nil
    }

    /// An OAuth 2.0 token endpoint's `error` (`invalid_grant`).
    public static func tokenErrorCode(body: [UInt8]) -> String? {
        guard let code = (try? JSONParser.parse(body))?["error"]?.stringValue else { return nil }
        return isCode(code.uppercased()) ? code : nil
    }

    /// `A-Z`, digits and `_`, starting with a letter, at most 64 characters.
    static func isCode(_ text: String) -> Bool {
        guard let first = text.utf8.first, (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(first), text.utf8.count <= 64 else { return false }
        return text.utf8.allSatisfy {
            (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains($0) || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) || $0 == UInt8(ascii: "_")
        }
    }

    /// What an answer says of the rate limit: `Retry-After`, else the `retryDelay` of the
    /// `google.rpc.RetryInfo` detail Google APIs put in an error (`"30s"`, `"1.500s"`).
    public static func rateLimit(headers: [String: String], body: [UInt8], now: Double) -> ProviderRateLimit {
        var limit = ProviderRateLimit(headers: headers, now: now)
        if limit.retryAfter == nil { limit.retryAfter = retryDelay(body: body) }
        return limit
    }

    /// The `retryDelay` of an error's `google.rpc.RetryInfo` detail; nil when there is none or
    /// it is not a protobuf JSON duration.
    public static func retryDelay(body: [UInt8]) -> Duration? {
        guard let details = (try? JSONParser.parse(body))?["error"]?["details"]?.arrayValue,
            let delay = details.first(where: { $0["@type"]?.stringValue == "type.googleapis.com/google.rpc.RetryInfo" })?["retryDelay"]?
                .stringValue,
            delay.hasSuffix("s"), let seconds = Double(delay.dropLast()), seconds.isFinite, seconds >= 0,
            delay.utf8.allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) || $0 == UInt8(ascii: ".") || $0 == UInt8(ascii: "s") })
        else { return nil }
        return .milliseconds(Int64(min(seconds, Double(RetryAfter.longestSaid)) * 1000))
    }

    /// The ending of an Identity Toolkit answer with `status` (headers lowercased) at `now` (Unix
    /// seconds, for a dated `Retry-After`).
    public static func classify(status: Int, headers: [String: String], body: [UInt8], now: Double) -> FirebaseAnswer {
        if (200..<300).contains(status) { return .done(body) }
        let code = errorCode(body: body)
        let reason = code ?? "http_\(status)"
        if code == "USER_NOT_FOUND" { return .userNotFound(status: status) }
        if status == 429 || status >= 500 || throttled.contains(reason) {
            let wait = rateLimit(headers: headers, body: body, now: now).callWait(status: status)
            return .retryLater(ProviderFailure(status: status, reason: reason, retryAfter: wait))
        }
        if status == 401 || tokenCodes.contains(reason) {
            return .tokenRefused(ProviderFailure(status: status, reason: reason, blame: .credential))
        }
        let blame: ProviderBlame
        if permissionRefused.contains(reason) || status == 403 {
            blame = .permission
        } else if projectRefused.contains(reason) || status == 404 {
            blame = .tenant
        } else {
            blame = .request
        }
        return .refused(ProviderFailure(status: status, reason: reason, blame: blame))
    }

    /// The ending of a token endpoint's answer: a refused assertion is the credential's fault
    /// (an unknown or deleted key, a disabled service account); no new token will change it.
    public static func classifyToken(status: Int, headers: [String: String], body: [UInt8], now: Double) -> FirebaseAnswer {
        if (200..<300).contains(status) { return .done(body) }
        let code = tokenErrorCode(body: body)
        let reason = code ?? "http_\(status)"
        if status == 429 || status >= 500 {
            let wait = ProviderRateLimit(headers: headers, now: now).callWait(status: status)
            return .retryLater(ProviderFailure(status: status, reason: reason, retryAfter: wait))
        }
        let blame: ProviderBlame
        switch reason {
        case "invalid_grant", "invalid_client", "unauthorized_client": blame = .credential
        case "access_denied", "invalid_scope": blame = .permission
        default: blame = status == 401 ? .credential : .request
        }
        return .refused(ProviderFailure(status: status, reason: reason, blame: blame))
    }
}

/// An access token from the token endpoint: `{"access_token":…,"expires_in":…}`.
public struct FirebaseAccessToken: Sendable, Equatable {
    public var token: String
    public var expiresIn: Int64

    public init(token: String, expiresIn: Int64) {
        self.token = token
        self.expiresIn = expiresIn
    }

    public init?(answer body: [UInt8]) {
        guard let answer = try? JSONParser.parse(body), let token = answer["access_token"]?.stringValue, !token.isEmpty,
            let seconds = answer["expires_in"]?.int64Value, seconds >= 1, seconds <= 86_400
        else { return nil }
        self.token = token
        self.expiresIn = seconds
    }
}

/// Why a service-account file cannot be used. `reason` is a stable code; the description names
/// the field at fault, never its value (the file holds a private key).
public struct FirebaseCredentialError: Error, Sendable, Equatable, CustomStringConvertible {
    public var reason: String
    public var problem: String

    public init(reason: String, problem: String) {
        self.reason = reason
        self.problem = problem
    }

    public var description: String { problem }
}

/// The parts of a Google service-account JSON key file that the assertion needs.
public struct FirebaseServiceAccount: Sendable, Equatable {
    public var clientEmail: String
    /// The PEM private key. Secret: never log it.
    public var privateKeyPEM: String
    public var privateKeyID: String?
    public var tokenURI: String
    public var projectID: String?

    public init(clientEmail: String, privateKeyPEM: String, privateKeyID: String? = nil, tokenURI: String, projectID: String? = nil) {
        self.clientEmail = clientEmail
        self.privateKeyPEM = privateKeyPEM
        self.privateKeyID = privateKeyID
        self.tokenURI = tokenURI
        self.projectID = projectID
    }

    /// Parses a key file as the Google Cloud console downloads it.
    public static func parse(_ bytes: [UInt8]) throws(FirebaseCredentialError) -> FirebaseServiceAccount {
        guard let parsed = try? JSONParser.parse(bytes), case .object(let fields) = parsed else {
            throw FirebaseCredentialError(reason: "not_json", problem: "is not a JSON object (a service-account key file)")
        }
        if let type = fields["type"] {
            guard type.stringValue == "service_account" else {
                throw FirebaseCredentialError(
                    reason: "not_service_account", problem: "is not a service-account key (its \"type\" is not \"service_account\")")
            }
        }
        func string(_ name: String, required: Bool = true) throws(FirebaseCredentialError) -> String? {
            guard let value = fields[name] else {
                if required { throw FirebaseCredentialError(reason: "missing_field", problem: "has no \"\(name)\"") }
                return nil
            }
            guard let text = value.stringValue, !text.isEmpty else {
                throw FirebaseCredentialError(reason: "invalid_field", problem: "has a \"\(name)\" that is not a non-empty string")
            }
            return text
        }
        guard let email = try string("client_email"), let key = try string("private_key"), let tokenURI = try string("token_uri") else {
            throw FirebaseCredentialError(reason: "missing_field", problem: "lacks a required field")
        }
        guard email.contains("@"), !email.utf8.contains(where: { $0 <= 0x20 }) else {
            throw FirebaseCredentialError(reason: "invalid_field", problem: "has a \"client_email\" that is not an address")
        }
        guard key.contains("-----BEGIN") else {
            throw FirebaseCredentialError(reason: "invalid_private_key", problem: "has a \"private_key\" that is not a PEM key")
        }
        if let problem = Firebase.problem(withURL: tokenURI) {
            throw FirebaseCredentialError(reason: "invalid_field", problem: "has a \"token_uri\" that \(problem)")
        }
        return FirebaseServiceAccount(
            clientEmail: email, privateKeyPEM: key, privateKeyID: try string("private_key_id", required: false), tokenURI: tokenURI,
            projectID: try string("project_id", required: false))
    }

    /// The unsigned assertion (RFC 7523) exchanged at `tokenURI` for an access token: header
    /// `{"alg":"RS256","typ":"JWT","kid":…}`, claims `iss` = `sub` = the service account,
    /// `scope`, `aud` = `tokenURI`, `iat` = `now`, `exp` an hour later. Sign `signingInput`
    /// with RS256, then `assemble(signingInput:signature:)`.
    public func assertionSigningInput(now: Int64) -> [UInt8] {
        var header: [String: JSONValue] = ["alg": .string("RS256"), "typ": .string("JWT")]
        if let privateKeyID { header["kid"] = .string(privateKeyID) }
        let claims: [String: JSONValue] = [
            "iss": .string(clientEmail), "sub": .string(clientEmail), "scope": .string(Firebase.scope), "aud": .string(tokenURI),
            "iat": .number(Double(now)), "exp": .number(Double(now + Firebase.assertionLifetime)),
        ]
        return Array(
            (Base64URL.encode(Array(JSONValue.object(header).serialized().utf8)) + "."
                + Base64URL.encode(Array(JSONValue.object(claims).serialized().utf8))).utf8)
    }

    /// The compact JWS of a signed input.
    public static func assemble(signingInput: [UInt8], signature: [UInt8]) -> String {
        String(decoding: signingInput, as: UTF8.self) + "." + Base64URL.encode(signature)
    }

    /// The token request's form body.
    public static func tokenRequestBody(assertion: String) -> String {
        FormURLEncoding.encode([("grant_type", Firebase.jwtBearerGrant), ("assertion", assertion)])
    }
}
