/// Amazon Cognito's user pool admin API (JSON 1.1 protocol) as pure decisions: its address,
/// how an answer is classified, and how a user signed in with Apple is recognised.
public enum Cognito {
    public static let service = "cognito-idp"
    public static let contentType = "application/x-amz-json-1.1"
    public static let targetPrefix = "AWSCognitoIdentityProviderService."
    /// The provider name Cognito gives Sign in with Apple; its federated users are `<name>_<sub>`.
    public static let appleProvider = "SignInWithApple"

    /// The region's endpoint.
    public static func endpoint(region: String) -> String { "https://cognito-idp.\(region).amazonaws.com/" }

    /// The username Cognito gives the federated user of an Apple `sub`.
    public static func federatedUsername(sub: String) -> String { "\(appleProvider)_\(sub)" }

    /// nil if `url` may be the API's base: `https://` to any host, `http://` to loopback only.
    public static func problem(withURL url: String) -> String? { ForwardingConfiguration.problem(withURL: url) }

    /// The `Host` header and the path of an acceptable base URL (the path `/` when it has none).
    public static func hostAndPath(of url: String) -> (host: String, path: String)? {
        guard problem(withURL: url) == nil else { return nil }
        let rest = url.dropFirst(url.lowercased().hasPrefix("https://") ? 8 : 7)
        let slash = rest.firstIndex(of: "/") ?? rest.endIndex
        let host = String(rest[..<slash])
        let path = String(rest[slash...])
        return (host, path.isEmpty ? "/" : path)
    }

    /// True when `identities` (the attribute's value: a JSON array) holds the Apple identity
    /// `sub`.
    public static func identities(_ value: String, contain sub: String) -> Bool {
        providers(in: value).contains { $0.provider == appleProvider && $0.userID == sub }
    }

    /// The linked identities an `identities` attribute lists (empty when it does not parse).
    public static func providers(in value: String) -> [(provider: String, userID: String)] {
        guard let array = (try? JSONParser.parse(value))?.arrayValue else { return [] }
        return array.compactMap { entry in
            guard let provider = entry["providerName"]?.stringValue, let user = entry["userId"]?.stringValue else { return nil }
            return (provider, user)
        }
    }
}

/// Cognito's answers, classified.
public enum CognitoAnswer {
    static let throttled: Set<String> = ["TooManyRequestsException", "ThrottlingException", "InternalErrorException", "ServiceUnavailable"]
    static let credentialRefused: Set<String> = [
        "UnrecognizedClientException", "InvalidSignatureException", "SignatureDoesNotMatch", "IncompleteSignature",
        "IncompleteSignatureException", "MissingAuthenticationTokenException", "ExpiredTokenException",
        "InvalidClientTokenId",
    ]
    static let permissionRefused: Set<String> = ["AccessDeniedException", "NotAuthorizedException"]

    /// The error type of an answer: the body's `__type` (after a `#` namespace), else the
    /// `x-amzn-ErrorType` header (before a `:`); nil when neither names one.
    public static func errorType(headers: [String: String], body: [UInt8]) -> String? {
        if let type = (try? JSONParser.parse(body))?["__type"]?.stringValue, !type.isEmpty {
            return String(type.split(separator: "#").last ?? Substring(type))
        }
        if let header = headers["x-amzn-errortype"], let name = header.split(separator: ":").first, !name.isEmpty {
            return String(name)
        }
        return nil
    }

    /// The ending of an answer with `status` (headers lowercased) at `now` (Unix seconds, for a
    /// dated `Retry-After`): `.done(body)` for a 2xx. AWS documents no rate-limit headers:
    /// only a `Retry-After` is read.
    public static func classify(status: Int, headers: [String: String], body: [UInt8], now: Double) -> ProviderStep<[UInt8]> {
        if (200..<300).contains(status) { return .done(body, status: status) }
        let retryAfter = headers["retry-after"].flatMap { RetryAfter.wait($0, now: now) }
        let type = errorType(headers: headers, body: body)
        let reason = type ?? "http_\(status)"
        if type == "UserNotFoundException" { return .userNotFound(status: status) }
        if status == 429 || status >= 500 || throttled.contains(reason) {
            return .retryLater(ProviderFailure(status: status, reason: reason, retryAfter: retryAfter))
        }
        let blame: ProviderBlame
        if credentialRefused.contains(reason) {
            blame = .credential
        } else if permissionRefused.contains(reason) || status == 403 {
            blame = .permission
        } else if reason == "ResourceNotFoundException" {
            blame = .tenant
        } else {
            blame = .request
        }
        return .refused(ProviderFailure(status: status, reason: reason, blame: blame))
    }
}
