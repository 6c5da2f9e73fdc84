import SiwaCrypto

/// What logs say instead of a user's `sub`: the first 16 hex digits of its SHA-256.
public enum SubjectHash {
    public static func of(_ sub: String) -> String {
        String(SHA256.hexDigest(sub).prefix(16))
    }
}
