/// Result of the caller-supplied signature check.
public enum SignatureCheck: Sendable {
    /// A key with the kid exists and the signature verifies.
    case valid
    /// A key with the kid exists but the signature does not verify.
    case invalid
    /// No key with that kid (even after a refresh).
    case unknownKey
    /// The key set could not be obtained.
    case keysUnavailable
}
