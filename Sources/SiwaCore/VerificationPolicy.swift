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

    public init(audiences: Set<String>, issuer: String = VerificationPolicy.appleIssuer, clockSkewSeconds: Int64 = 60) {
        self.audiences = audiences
        self.issuer = issuer
        self.clockSkewSeconds = clockSkewSeconds
    }
}
