/// What a notification must satisfy besides a valid signature.
public struct VerificationPolicy: Sendable {
    /// Apple's issuer, `https://appleid.apple.com`.
    public static let appleIssuer = "https://appleid.apple.com"
    /// Required `iss`.
    public var issuer: String
    /// Accepted `aud` values (the app's client ids).
    public var audiences: Set<String>
    /// Tolerance for `exp` and `iat`, in seconds.
    public var clockSkewSeconds: Int64
    /// Keys trusted for some audiences only, by `kid`: a token signed with one of them whose
    /// `aud` is not in its set is refused `wrong_audience` (the `--dev` key signs for the dev
    /// audience only). Keys not listed are trusted for every accepted audience.
    public var keyAudiences: [String: Set<String>]

    public init(
        audiences: Set<String>, issuer: String = VerificationPolicy.appleIssuer, clockSkewSeconds: Int64 = 60,
        keyAudiences: [String: Set<String>] = [:]
    ) {
        self.audiences = audiences
        self.issuer = issuer
        self.clockSkewSeconds = clockSkewSeconds
        self.keyAudiences = keyAudiences
    }

    /// The per-key audience rule of `keyAudiences` (shared by notifications and id_tokens): true
    /// when the key `kid` may sign for `audience` (byte-exact), i.e. it is not listed or lists it.
    public static func key(_ kid: String, maySignFor audience: String, in keyAudiences: [String: Set<String>]) -> Bool {
        guard let allowed = keyAudiences[kid] else { return true }
        return allowed.containsExactly(audience)
    }
}
