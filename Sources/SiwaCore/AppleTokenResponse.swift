/// Why a response of Apple's REST API could not be used. `rawValue` is a stable reason code.
public enum AppleResponseError: String, Error, Sendable, CaseIterable, CustomStringConvertible {
    /// The body is not a JSON object.
    case malformedJSON = "malformed_json"
    /// `id_token` is missing or not a non-empty string.
    case missingIDToken = "missing_id_token"
    /// `refresh_token` is missing or not a non-empty string (an authorization-code grant always has one).
    case missingRefreshToken = "missing_refresh_token"
    /// A member has the wrong JSON type (e.g. `expires_in` not an integer).
    case malformedField = "malformed_field"

    public var description: String { "apple response error: \(rawValue)" }
}

/// A successful answer of `POST /auth/token` for `grant_type=authorization_code`. Every token in
/// it is a secret: never log them.
public struct AppleTokenResponse: Sendable, Equatable {
    /// `access_token` (unused by siwa-notify).
    public var accessToken: String?
    /// `token_type`, `Bearer`.
    public var tokenType: String?
    /// `expires_in`: seconds the access token lives.
    public var expiresIn: Int64?
    /// `refresh_token`: what `/auth/revoke` later revokes. Stored encrypted.
    public var refreshToken: String
    /// `id_token`: an RS256 JWT about the user; verify with `IDTokenVerifier`.
    public var idToken: String

    public init(
        accessToken: String? = nil, tokenType: String? = nil, expiresIn: Int64? = nil,
        refreshToken: String, idToken: String
    ) {
        self.accessToken = accessToken
        self.tokenType = tokenType
        self.expiresIn = expiresIn
        self.refreshToken = refreshToken
        self.idToken = idToken
    }

    /// Parses a 200 body. Unknown members are ignored. Throws `.malformedJSON`, `.missingIDToken`,
    /// `.missingRefreshToken` or `.malformedField`.
    public static func parse(_ body: [UInt8]) throws(AppleResponseError) -> AppleTokenResponse {
        guard let object = (try? JSONParser.parse(body))?.objectValue else { throw .malformedJSON }
        func optionalString(_ name: String) throws(AppleResponseError) -> String? {
            guard let value = object[name], value != .null else { return nil }
            guard let s = value.stringValue else { throw .malformedField }
            return s
        }
        guard let idToken = object["id_token"]?.stringValue, !idToken.isEmpty else { throw .missingIDToken }
        guard let refreshToken = object["refresh_token"]?.stringValue, !refreshToken.isEmpty else {
            throw .missingRefreshToken
        }
        var expiresIn: Int64?
        if let value = object["expires_in"], value != .null {
            guard let n = value.int64Value else { throw .malformedField }
            expiresIn = n
        }
        return AppleTokenResponse(
            accessToken: try optionalString("access_token"),
            tokenType: try optionalString("token_type"),
            expiresIn: expiresIn, refreshToken: refreshToken, idToken: idToken)
    }
}

/// A successful answer of `POST /auth/token` for `grant_type=refresh_token` (validating a refresh
/// token): an access token and, in Apple's example, an `id_token`; never a new refresh token.
public struct AppleRefreshResponse: Sendable, Equatable {
    /// `id_token`, when Apple sends one: it must name the same `sub` as the token's owner.
    public var idToken: String?

    public init(idToken: String? = nil) {
        self.idToken = idToken
    }

    /// Parses a 200 body: a JSON object with an `access_token`; `id_token` optional. Throws
    /// `.malformedJSON` or `.malformedField`.
    public static func parse(_ body: [UInt8]) throws(AppleResponseError) -> AppleRefreshResponse {
        guard let object = (try? JSONParser.parse(body))?.objectValue else { throw .malformedJSON }
        guard let access = object["access_token"]?.stringValue, !access.isEmpty else { throw .malformedField }
        var idToken: String?
        if let value = object["id_token"], value != .null {
            guard let s = value.stringValue, !s.isEmpty else { throw .malformedField }
            idToken = s
        }
        return AppleRefreshResponse(idToken: idToken)
    }
}

/// The `error` of Apple's error answer `{"error":"invalid_grant"}` (RFC 6749 §5.2).
public enum AppleErrorCode: Sendable, Equatable, CustomStringConvertible {
    /// The code or refresh token is invalid, expired, already used or revoked.
    case invalidGrant
    /// Client authentication failed: a bad `client_secret` (signature, claims, key) or unknown `client_id`.
    case invalidClient
    /// A parameter is missing or malformed.
    case invalidRequest
    /// The client may not use this grant type.
    case unauthorizedClient
    /// Unknown `grant_type`.
    case unsupportedGrantType
    /// Any other `error` value, as sent (truncated to 64 characters).
    case other(String)

    /// The wire value.
    public var description: String {
        switch self {
        case .invalidGrant: return "invalid_grant"
        case .invalidClient: return "invalid_client"
        case .invalidRequest: return "invalid_request"
        case .unauthorizedClient: return "unauthorized_client"
        case .unsupportedGrantType: return "unsupported_grant_type"
        case .other(let s): return s
        }
    }

    public init(_ wire: String) {
        switch wire {
        case "invalid_grant": self = .invalidGrant
        case "invalid_client": self = .invalidClient
        case "invalid_request": self = .invalidRequest
        case "unauthorized_client": self = .unauthorizedClient
        case "unsupported_grant_type": self = .unsupportedGrantType
        default:
            var t = String.UnicodeScalarView()
            t.append(contentsOf: wire.unicodeScalars.prefix(64))
            self = .other(String(t))
        }
    }

    /// The `error` member of an error body; nil when the body is not a JSON object with a
    /// non-empty string `error`.
    public static func parse(_ body: [UInt8]) -> AppleErrorCode? {
        guard let error = (try? JSONParser.parse(body))?["error"]?.stringValue, !error.isEmpty else { return nil }
        return AppleErrorCode(error)
    }
}
