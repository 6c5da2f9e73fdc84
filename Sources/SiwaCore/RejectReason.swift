/// Why a request or notification was rejected. `rawValue` is the stable machine-readable code.
public enum RejectReason: String, Error, Sendable, CaseIterable {
    // 400
    /// Body empty, not JSON, or not a JSON object.
    case malformedJSON = "malformed_json"
    /// No `payload` member, or it is not a non-empty string.
    case missingPayload = "missing_payload"
    /// Not exactly three segments, empty header/claims segment, or a segment that is not strict base64url.
    case malformedJWS = "malformed_jws"
    /// The JWS header is not a JSON object.
    case malformedHeader = "malformed_header"
    /// The claims are not a JSON object, or `exp`/`iat` has the wrong JSON type.
    case malformedClaims = "malformed_claims"
    /// `jti` missing, empty, not a string, or longer than 255 characters.
    case missingJTI = "missing_jti"
    /// `events` missing or malformed, or one of its fields has the wrong type or is too long
    /// (`event_time` missing, or not an integral JSON number).
    case malformedEvents = "malformed_events"
    /// `sub` missing, empty, or not a string.
    case missingSub = "missing_sub"
    /// `type` missing, empty, or not a string.
    case missingType = "missing_type"
    /// `event_time` (milliseconds) outside [2019-01-01T00:00:00Z, `iat` + 1 h]: e.g. seconds instead
    /// of milliseconds, zero, negative, or 2^53 and beyond.
    case badEventTime = "bad_event_time"
    // 401
    /// `alg` is not exactly `"RS256"`.
    case unsupportedAlgorithm = "unsupported_alg"
    /// `kid` missing, empty, or not a string.
    case missingKid = "missing_kid"
    /// No known key has this `kid`.
    case unknownKid = "unknown_kid"
    /// The signature does not verify.
    case badSignature = "bad_signature"
    /// `iss` missing, not a string, or not the expected issuer.
    case wrongIssuer = "wrong_issuer"
    /// `aud` missing, not a string, or not one of the configured audiences.
    case wrongAudience = "wrong_audience"
    /// The token expired (beyond the allowed clock skew); a token without `exp` expires at
    /// `iat` + 86,400 s.
    case expired = "expired"
    /// The token was issued in the future (beyond the allowed clock skew).
    case issuedInFuture = "issued_in_future"
    /// The token has no `iat` claim (required).
    case missingIAT = "missing_iat"
    // transport-level
    /// 404: wrong path.
    case notFound = "not_found"
    /// 405: not POST.
    case methodNotAllowed = "method_not_allowed"
    /// 413: body larger than allowed.
    case bodyTooLarge = "body_too_large"
    /// 415: content type is not application/json.
    case unsupportedMediaType = "unsupported_media_type"
    /// 503: the database cannot be reached.
    case databaseUnavailable = "database_unavailable"
    /// 503: Apple's signing keys could not be obtained.
    case keysUnavailable = "keys_unavailable"
    /// 500: unexpected failure.
    case internalError = "internal_error"

    /// The HTTP status code to answer with.
    public var httpStatus: Int {
        switch self {
        case .malformedJSON, .missingPayload, .malformedJWS, .malformedHeader, .malformedClaims,
            .missingJTI, .malformedEvents, .missingSub, .missingType, .badEventTime:
            return 400
        case .unsupportedAlgorithm, .missingKid, .unknownKid, .badSignature, .wrongIssuer,
            .wrongAudience, .expired, .issuedInFuture, .missingIAT:
            return 401
        case .notFound: return 404
        case .methodNotAllowed: return 405
        case .bodyTooLarge: return 413
        case .unsupportedMediaType: return 415
        case .databaseUnavailable, .keysUnavailable: return 503
        case .internalError: return 500
        }
    }

    /// One short human sentence; never contains input data.
    public var summary: String {
        switch self {
        case .malformedJSON: return "The request body is not a JSON object."
        case .missingPayload: return "The body has no non-empty string member \"payload\"."
        case .malformedJWS: return "The payload is not a compact JWS with three base64url segments."
        case .malformedHeader: return "The JWS header is not a JSON object."
        case .malformedClaims: return "The JWS claims are not a JSON object or a claim has the wrong type."
        case .missingJTI: return "The jti claim is missing, empty, not a string or too long."
        case .malformedEvents: return "The events claim is missing or malformed."
        case .missingSub: return "The event has no non-empty string sub."
        case .missingType: return "The event has no non-empty string type."
        case .badEventTime: return "The event_time is not milliseconds between 2019-01-01 and one hour after iat."
        case .unsupportedAlgorithm: return "The JWS algorithm is not RS256."
        case .missingKid: return "The JWS header has no non-empty string kid."
        case .unknownKid: return "No known Apple signing key has this key id."
        case .badSignature: return "The JWS signature is invalid."
        case .wrongIssuer: return "The token issuer is not the expected issuer."
        case .wrongAudience: return "The token audience is not one of the configured audiences."
        case .expired: return "The token has expired."
        case .issuedInFuture: return "The token was issued in the future."
        case .missingIAT: return "The token has no iat claim."
        case .notFound: return "No such endpoint."
        case .methodNotAllowed: return "Only POST is allowed."
        case .bodyTooLarge: return "The request body is too large."
        case .unsupportedMediaType: return "The content type must be application/json."
        case .databaseUnavailable: return "The database is unavailable."
        case .keysUnavailable: return "Apple's signing keys are unavailable."
        case .internalError: return "An internal error occurred."
        }
    }

    /// The JSON response body: `{"error":"<rawValue>"}`.
    public var responseBody: String { "{\"error\":\"\(rawValue)\"}" }
}
