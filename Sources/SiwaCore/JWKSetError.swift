/// The document is not a JWK set. `message` never echoes the input.
public struct JWKSetError: Error, Sendable, CustomStringConvertible {
    public var message: String

    public init(message: String) {
        self.message = message
    }

    public var description: String { "invalid JWK set: \(message)" }
}
