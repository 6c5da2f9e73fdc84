/// Why an `id_token` was refused. `rawValue` is a stable reason code.
public enum IDTokenError: String, Error, Sendable, CaseIterable, CustomStringConvertible {
    /// Not a compact JWS (three base64url segments, JSON header and claims) or a `crit` header.
    case malformedToken = "malformed_token"
    /// `alg` is not `RS256`.
    case unsupportedAlgorithm = "unsupported_algorithm"
    /// No non-empty string `kid` in the header.
    case missingKid = "missing_kid"
    /// No key with that `kid`.
    case unknownKid = "unknown_kid"
    /// The key set could not be obtained.
    case keysUnavailable = "keys_unavailable"
    /// The signature does not verify.
    case badSignature = "bad_signature"
    /// `iss` is not `https://appleid.apple.com`.
    case wrongIssuer = "wrong_issuer"
    /// `aud` is not the client id the code was exchanged for.
    case wrongAudience = "wrong_audience"
    /// `exp` is missing or not an integer.
    case missingExpiry = "missing_exp"
    /// `exp` has passed (beyond the clock skew).
    case expired = "expired"
    /// `iat` is missing or not an integer.
    case missingIssuedAt = "missing_iat"
    /// `iat` is in the future (beyond the clock skew).
    case issuedInFuture = "issued_in_future"
    /// A nonce was expected and `nonce` is missing or different.
    case nonceMismatch = "nonce_mismatch"
    /// `sub` is missing, empty or too long.
    case missingSub = "missing_sub"
    /// `email`, `is_private_email` or `email_verified` has the wrong type or is too long.
    case malformedClaims = "malformed_claims"
    /// `iat` is older than the caller allows (a handed-over id_token must be fresh).
    case tooOld = "issued_too_long_ago"

    public var description: String { "id_token refused: \(rawValue)" }
}

/// What a verified `id_token` says about the user.
public struct IDTokenClaims: Sendable, Equatable {
    /// `sub`: the user's stable identifier for the team.
    public var sub: String
    /// `aud`: the client id.
    public var audience: String
    public var email: String?
    /// `is_private_email` (a string `"true"`/`"false"` or a boolean on the wire).
    public var isPrivateEmail: Bool?
    /// `email_verified` (a string or a boolean on the wire).
    public var emailVerified: Bool?
    /// `iat`, Unix seconds.
    public var issuedAt: Int64
    /// `exp`, Unix seconds.
    public var expiresAt: Int64
    /// `auth_time`, Unix seconds, when present: when the user signed in.
    public var authTime: Int64?
    /// `transfer_sub`, for up to 60 days after the app moved to this team from another.
    public var transferSub: String?

    /// When the user signed in: `auth_time`, else `iat` (the sign-in's time as an event).
    public var signedInAt: Int64 { authTime ?? issuedAt }

    public init(
        sub: String, audience: String, email: String? = nil, isPrivateEmail: Bool? = nil,
        emailVerified: Bool? = nil, issuedAt: Int64, expiresAt: Int64, authTime: Int64? = nil, transferSub: String? = nil
    ) {
        self.authTime = authTime
        self.transferSub = transferSub
        self.sub = sub
        self.audience = audience
        self.email = email
        self.isPrivateEmail = isPrivateEmail
        self.emailVerified = emailVerified
        self.issuedAt = issuedAt
        self.expiresAt = expiresAt
    }
}

/// Verifies the `id_token` Apple returns from `/auth/token`.
///
/// Checks, first failure wins: the `SignedJWS` prelude shared with `NotificationVerifier`
/// (structure, `alg` == RS256, `kid`, signature, no `crit`, `iss`), then `aud` == the client id
/// (byte-exact) and one the key may sign for (`keyAudiences`), `exp` (required, with skew), `iat` (required, not in
/// the future beyond skew), `nonce` (when one is expected), `sub`, then the e-mail claims.
public struct IDTokenVerifier: Sendable {
    /// The expected `iss`. Default `https://appleid.apple.com`.
    public var issuer: String
    /// Allowed clock difference in seconds for `exp` and `iat`. Default 60.
    public var clockSkewSeconds: Int64
    /// Keys trusted for some client ids only, by `kid` (`VerificationPolicy.keyAudiences`: the
    /// `--dev` key signs for the dev audience only): a token signed with one of them for another
    /// client id is refused `wrong_audience`. Default none.
    public var keyAudiences: [String: Set<String>]

    public init(
        issuer: String = VerificationPolicy.appleIssuer, clockSkewSeconds: Int64 = 60, keyAudiences: [String: Set<String>] = [:]
    ) {
        self.issuer = issuer
        self.clockSkewSeconds = clockSkewSeconds
        self.keyAudiences = keyAudiences
    }

    /// - Parameters:
    ///   - clientID: the client id the code was exchanged for (the expected `aud`).
    ///   - nonce: the nonce of the original authorization request, if the app used one.
    ///   - now: Unix seconds.
    ///   - maxAgeSeconds: when set, `iat` older than this is refused (`tooOld`).
    public func verify(
        token: String, clientID: String, nonce: String?, now: Int64, maxAgeSeconds: Int64? = nil,
        checkSignature: (_ kid: String, _ signingInput: [UInt8], _ signature: [UInt8]) -> SignatureCheck
    ) throws(IDTokenError) -> IDTokenClaims {
        let jws: CompactJWS
        let kid: String
        do {
            let signed = try SignedJWS.verify(token: token, issuer: issuer, checkSignature: checkSignature)
            (jws, kid) = (signed.jws, signed.kid)
        } catch {
            switch error {
            case .structure, .crit: throw .malformedToken
            case .algorithm: throw .unsupportedAlgorithm
            case .missingKid: throw .missingKid
            case .signature(_, .invalid): throw .badSignature
            case .signature(_, .unknownKey): throw .unknownKid
            case .signature(_, .keysUnavailable), .signature(_, .valid): throw .keysUnavailable
            case .issuer: throw .wrongIssuer
            }
        }
        let claims = jws.claims
        guard let aud = claims["aud"]?.stringValue, aud.utf8.elementsEqual(clientID.utf8) else { throw .wrongAudience }
        guard VerificationPolicy.key(kid, maySignFor: aud, in: keyAudiences) else { throw .wrongAudience }
        guard let exp = claims["exp"]?.int64Value else { throw .missingExpiry }
        guard now <= TokenLimits.saturatingAdd(exp, clockSkewSeconds) else { throw .expired }
        guard let iat = claims["iat"]?.int64Value else { throw .missingIssuedAt }
        guard iat <= TokenLimits.saturatingAdd(now, clockSkewSeconds) else { throw .issuedInFuture }
        if let maxAgeSeconds {
            guard TokenLimits.saturatingAdd(iat, maxAgeSeconds) >= now else { throw .tooOld }
        }
        if let nonce {
            guard let got = claims["nonce"]?.stringValue, got.utf8.elementsEqual(nonce.utf8) else { throw .nonceMismatch }
        }
        guard let sub = claims["sub"]?.stringValue, !sub.isEmpty,
            sub.unicodeScalars.count <= TokenLimits.maxSubLength
        else { throw .missingSub }

        var email: String?
        if let value = claims["email"], value != .null {
            guard let s = value.stringValue, s.unicodeScalars.count <= TokenLimits.maxEmailLength else {
                throw .malformedClaims
            }
            email = s
        }
        var authTime: Int64?
        if let value = claims["auth_time"], value != .null {
            guard let t = value.int64Value else { throw .malformedClaims }
            authTime = t
        }
        var transferSub: String?
        if let value = claims["transfer_sub"], value != .null {
            guard let t = value.stringValue, !t.isEmpty, t.unicodeScalars.count <= TokenLimits.maxSubLength else {
                throw .malformedClaims
            }
            transferSub = t
        }
        return IDTokenClaims(
            sub: sub, audience: aud, email: email,
            isPrivateEmail: try Self.flag(claims["is_private_email"]),
            emailVerified: try Self.flag(claims["email_verified"]),
            issuedAt: iat, expiresAt: exp, authTime: authTime, transferSub: transferSub)
    }

    /// An optional Apple flag (`is_private_email`, `email_verified`): absent or `null` is nil, a
    /// boolean or `"true"`/`"false"` is its value, anything else is malformed.
    public static func flag(_ value: JSONValue?) throws(IDTokenError) -> Bool? {
        guard let value, value != .null else { return nil }
        guard let flag = value.appleFlag else { throw .malformedClaims }
        return flag
    }
}
