/// A notification whose signature and claims passed every check.
public struct VerifiedNotification: Sendable, Equatable {
    public var jti: String
    public var issuer: String
    public var audience: String
    /// `iat` in seconds, if present.
    public var issuedAt: Int64?
    /// `exp` in seconds, if present.
    public var expiresAt: Int64?
    public var event: AppleEvent
    /// The verified claims as signed (the decoded JWS payload; re-serialized with
    /// `JSONValue.serialized()` only when the token was built in code), for a `jsonb` column.
    public var claimsJSON: String

    public init(jti: String, issuer: String, audience: String, issuedAt: Int64?, expiresAt: Int64?, event: AppleEvent, claimsJSON: String) {
        self.jti = jti
        self.issuer = issuer
        self.audience = audience
        self.issuedAt = issuedAt
        self.expiresAt = expiresAt
        self.event = event
        self.claimsJSON = claimsJSON
    }
}
