/// Why the body of an API call (README "In-app account deletion") was refused; `rawValue` is the reason code of the
/// `400` answer. Never carries what the caller sent.
public enum APIRequestError: String, Error, Sendable, CaseIterable {
    /// Not a JSON object, or an optional member that is not a string.
    case malformedJSON = "malformed_json"
    /// `code` missing or not a non-empty string.
    case missingCode = "missing_code"
    /// `client_id` missing or not one of `SIWA_AUDIENCES` (byte-exact).
    case unknownClientID = "unknown_client_id"
    /// `refresh_token` missing or not a non-empty string.
    case missingRefreshToken = "missing_refresh_token"
    /// `id_token` missing or not a non-empty string.
    case missingIDToken = "missing_id_token"
}

/// The body of `POST /apple/tokens`: `{"code", "client_id", "redirect_uri"?, "nonce"?}`.
public struct CodeExchangeRequest: Sendable, Equatable {
    public var code: String
    public var clientID: String
    public var redirectURI: String?
    public var nonce: String?

    public init(code: String, clientID: String, redirectURI: String? = nil, nonce: String? = nil) {
        self.code = code
        self.clientID = clientID
        self.redirectURI = redirectURI
        self.nonce = nonce
    }

    /// Checks, first failure wins: a JSON object, `code`, `client_id` among `audiences`, then the
    /// optional members are strings. Unknown members are ignored.
    public static func parse(_ body: [UInt8], audiences: [String]) throws(APIRequestError) -> CodeExchangeRequest {
        guard let object = (try? JSONParser.parse(body))?.objectValue else { throw .malformedJSON }
        guard let code = object["code"]?.stringValue, !code.isEmpty else { throw .missingCode }
        guard let clientID = object["client_id"]?.stringValue, audiences.containsExactly(clientID) else {
            throw .unknownClientID
        }
        for optional in ["redirect_uri", "nonce"] {
            if let value = object[optional], value.stringValue == nil { throw .malformedJSON }
        }
        return CodeExchangeRequest(
            code: code, clientID: clientID, redirectURI: object["redirect_uri"]?.stringValue, nonce: object["nonce"]?.stringValue)
    }
}

/// The body of `POST /apple/refresh-tokens`: `{"client_id", "refresh_token", "id_token"}`.
public struct HandOverRequest: Sendable, Equatable {
    public var clientID: String
    public var refreshToken: String
    public var idToken: String

    public init(clientID: String, refreshToken: String, idToken: String) {
        self.clientID = clientID
        self.refreshToken = refreshToken
        self.idToken = idToken
    }

    /// Checks, first failure wins: a JSON object, `client_id` among `audiences`, `refresh_token`,
    /// `id_token`. Unknown members are ignored.
    public static func parse(_ body: [UInt8], audiences: [String]) throws(APIRequestError) -> HandOverRequest {
        guard let object = (try? JSONParser.parse(body))?.objectValue else { throw .malformedJSON }
        guard let clientID = object["client_id"]?.stringValue, audiences.containsExactly(clientID) else {
            throw .unknownClientID
        }
        guard let token = object["refresh_token"]?.stringValue, !token.isEmpty else { throw .missingRefreshToken }
        guard let idToken = object["id_token"]?.stringValue, !idToken.isEmpty else { throw .missingIDToken }
        return HandOverRequest(clientID: clientID, refreshToken: token, idToken: idToken)
    }
}
