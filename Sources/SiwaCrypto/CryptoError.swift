/// Failure from a SiwaCrypto operation. Never carries key material: the
/// description is derived from `code` alone.
public struct CryptoError: Error, Sendable, Equatable, CustomStringConvertible {
    public enum Code: String, Sendable {
        case invalidKey
        case keyTooSmall
        case keyTooLarge
        case invalidPEM
        case keyGenerationFailed
        case signingFailed
    }

    public var code: Code
    /// "crypto error: <code>".
    public var description: String

    public init(code: Code) {
        self.code = code
        self.description = "crypto error: \(code.rawValue)"
    }
}
