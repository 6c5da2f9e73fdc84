/// A JSON syntax error. `message` is generic and never echoes the input.
public struct JSONError: Error, Sendable, Equatable, CustomStringConvertible {
    /// Byte offset into the input where the problem was detected.
    public var offset: Int
    /// A generic description of the problem.
    public var message: String

    public init(offset: Int, message: String) {
        self.offset = offset
        self.message = message
    }

    public var description: String { "JSON error at byte \(offset): \(message)" }
}
