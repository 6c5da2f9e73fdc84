/// Why a client secret cannot be built. `rawValue` is a stable reason code.
public enum ClientSecretError: String, Error, Sendable, CaseIterable, CustomStringConvertible {
    /// Team id, key id or client id is empty.
    case missingIdentifier = "missing_identifier"
    /// The lifetime is not within 1 second ... 180 days.
    case invalidLifetime = "invalid_lifetime"

    public var description: String {
        switch self {
        case .missingIdentifier: return "missing_identifier: team id, key id and client id must be non-empty"
        case .invalidLifetime: return "invalid_lifetime: a client secret lives 1 second to 180 days"
        }
    }
}

/// The unsigned `client_secret` of Apple's `/auth/token` and `/auth/revoke` calls: an ES256 JWT
/// with header `{"alg":"ES256","kid":KEY_ID}` and claims `{"iss":TEAM_ID,"iat":now,
/// "exp":now+lifetime,"aud":"https://appleid.apple.com","sub":CLIENT_ID}`.
///
/// Signing is the caller's (SiwaCrypto's `ECPrivateKey.signES256`): sign `signingInput`, then
/// `assemble(signature:)`.
public struct ClientSecret: Sendable, Equatable {
    /// The `aud` Apple requires.
    public static let audience = "https://appleid.apple.com"
    /// Apple refuses secrets whose `exp` is more than about six months after `iat`: 180 days.
    public static let maxLifetime: Int64 = 180 * 86_400
    /// Default lifetime: 30 days.
    public static let defaultLifetime: Int64 = 30 * 86_400

    public let teamID: String
    public let keyID: String
    /// The client id (`sub`): one of `SIWA_AUDIENCES`.
    public let clientID: String
    /// `iat`, Unix seconds.
    public let issuedAt: Int64
    /// `exp`, Unix seconds.
    public let expiresAt: Int64

    /// - Parameters:
    ///   - now: Unix seconds, becomes `iat`.
    ///   - lifetime: seconds until `exp`, 1 ... `maxLifetime`; default `defaultLifetime` (30 days).
    public init(
        teamID: String, keyID: String, clientID: String, now: Int64,
        lifetime: Int64 = ClientSecret.defaultLifetime
    ) throws(ClientSecretError) {
        guard !teamID.isEmpty, !keyID.isEmpty, !clientID.isEmpty else { throw .missingIdentifier }
        guard lifetime >= 1, lifetime <= Self.maxLifetime else { throw .invalidLifetime }
        let (exp, overflow) = now.addingReportingOverflow(lifetime)
        guard !overflow else { throw .invalidLifetime }
        self.teamID = teamID
        self.keyID = keyID
        self.clientID = clientID
        self.issuedAt = now
        self.expiresAt = exp
    }

    /// The JOSE header.
    public var header: [String: JSONValue] {
        ["alg": .string("ES256"), "kid": .string(keyID)]
    }

    /// The claims.
    public var claims: [String: JSONValue] {
        [
            "iss": .string(teamID), "iat": .number(Double(issuedAt)), "exp": .number(Double(expiresAt)),
            "aud": .string(Self.audience), "sub": .string(clientID),
        ]
    }

    /// ASCII bytes of `base64url(header) "." base64url(claims)`: what ES256 signs.
    public var signingInput: [UInt8] {
        Array(
            (Base64URL.encode(Array(JSONValue.object(header).serialized().utf8)) + "."
                + Base64URL.encode(Array(JSONValue.object(claims).serialized().utf8))).utf8)
    }

    /// The compact JWS: `signingInput "." base64url(signature)` (`signature` in the 64-byte JOSE form).
    public func assemble(signature: [UInt8]) -> String {
        String(decoding: signingInput, as: UTF8.self) + "." + Base64URL.encode(signature)
    }
}

/// When a cached client secret must be replaced: when less than `renewMargin(lifetime)` remains
/// before `exp`, or when the clock reads earlier than its `iat` (the clock was set back: Apple
/// would see a secret from the future).
public struct ClientSecretRenewalPolicy: Sendable, Equatable {
    /// Lifetime of new secrets in seconds. Default 30 days (`ClientSecret.defaultLifetime`).
    public var lifetime: Int64
    /// Upper bound of the renewal margin. Default 1 day.
    public var maxMargin: Int64

    public init(lifetime: Int64 = ClientSecret.defaultLifetime, maxMargin: Int64 = 86_400) {
        self.lifetime = lifetime
        self.maxMargin = maxMargin
    }

    /// Renew this long before `exp`: 10% of the secret's lifetime, at most `maxMargin`, at least 1 second.
    public func renewMargin(issuedAt: Int64, expiresAt: Int64) -> Int64 {
        max(1, min(maxMargin, (expiresAt - issuedAt) / 10))
    }

    /// True when a secret issued at `issuedAt`, expiring at `expiresAt`, must not be used at `now`.
    public func mustRenew(issuedAt: Int64, expiresAt: Int64, now: Int64) -> Bool {
        now < issuedAt || now >= expiresAt - renewMargin(issuedAt: issuedAt, expiresAt: expiresAt)
    }
}

/// Signed client secrets by client id (a value type: the owner keeps it under a lock).
public struct ClientSecretCache: Sendable {
    /// One signed secret.
    public struct Entry: Sendable, Equatable {
        /// The compact JWS. Secret: never log it.
        public var token: String
        public var issuedAt: Int64
        public var expiresAt: Int64

        public init(token: String, issuedAt: Int64, expiresAt: Int64) {
            self.token = token
            self.issuedAt = issuedAt
            self.expiresAt = expiresAt
        }
    }

    public var policy: ClientSecretRenewalPolicy
    private var entries: [String: Entry] = [:]

    public init(policy: ClientSecretRenewalPolicy = ClientSecretRenewalPolicy()) {
        self.policy = policy
    }

    /// The cached secret for `clientID` if it may still be used at `now`.
    public func valid(for clientID: String, now: Int64) -> Entry? {
        guard let entry = entries[clientID],
            !policy.mustRenew(issuedAt: entry.issuedAt, expiresAt: entry.expiresAt, now: now)
        else { return nil }
        return entry
    }

    /// Stores `entry` as the secret of `clientID`.
    public mutating func store(_ entry: Entry, for clientID: String) {
        entries[clientID] = entry
    }

    /// Forgets the secret of `clientID` (e.g. after Apple answered `invalid_client`).
    public mutating func remove(clientID: String) {
        entries[clientID] = nil
    }
}
