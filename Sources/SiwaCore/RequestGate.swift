/// The pure routing rules of the public listener, applied before the body is read.
public struct RequestGate: Sendable {
    /// The only path served (exact match).
    public var path: String
    /// Largest accepted body, in bytes.
    public var maxBody: Int

    public init(path: String, maxBody: Int) {
        self.path = path
        self.maxBody = maxBody
    }

    /// nil = go on reading the body. Otherwise the first failing rule, in order: path (exact) →
    /// `.notFound`; method (POST only) → `.methodNotAllowed`; content type (absent is accepted,
    /// otherwise the media type before any `;`, trimmed, must be `application/json`,
    /// case-insensitive) → `.unsupportedMediaType`; `contentLength > maxBody` → `.bodyTooLarge`.
    public func check(method: String, path: String, contentType: String?, contentLength: Int?) -> RejectReason? {
        guard path == self.path else { return .notFound }
        guard method == "POST" else { return .methodNotAllowed }
        if let contentType, !Self.isJSONMediaType(contentType) { return .unsupportedMediaType }
        if let contentLength, contentLength > maxBody { return .bodyTooLarge }
        return nil
    }

    public static func isJSONMediaType(_ value: String) -> Bool {
        let mediaType = value.utf8.prefix(while: { $0 != UInt8(ascii: ";") })
        let trimmed = mediaType.drop(while: isSpace).reversed().drop(while: isSpace).reversed()
        let expected = Array("application/json".utf8)
        guard trimmed.count == expected.count else { return false }
        return zip(trimmed, expected).allSatisfy { asciiLower($0) == $1 }
    }

    private static func isSpace(_ b: UInt8) -> Bool { b == 0x20 || b == 0x09 }
    private static func asciiLower(_ b: UInt8) -> UInt8 { (0x41...0x5A).contains(b) ? b + 0x20 : b }
}
