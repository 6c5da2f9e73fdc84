/// The bearer tokens of the API on the admin listener (`SIWA_API_TOKEN_FILE`): one token a line,
/// any of them admits a call (several lines: rotation). Blank lines and lines starting with `#`
/// are skipped. A token is at least 16 characters of visible ASCII (no spaces): a short or
/// garbled line is refused at start rather than admitting guessable tokens.
public struct APITokens: Sendable, Equatable {
    public struct Failure: Error, Sendable, Equatable, CustomStringConvertible {
        /// Stable reason: `empty` (no token), `too_short` (a line under 16 characters),
        /// `invalid_character` (a space or a non-visible-ASCII byte inside a token).
        public var reason: String
        /// 1-based line of the offending token (0 for `empty`). Never the token itself.
        public var line: Int
        public var description: String {
            switch reason {
            case "empty": return "holds no token (one token a line)"
            case "too_short": return "line \(line): a token must be at least \(APITokens.minimumLength) characters"
            default: return "line \(line): a token is visible ASCII without spaces"
            }
        }
    }

    public static let minimumLength = 16
    private let tokens: [[UInt8]]

    /// How many tokens are configured.
    public var count: Int { tokens.count }

    /// Parses the file's contents.
    public init(fileContents: [UInt8]) throws(Failure) {
        var tokens: [[UInt8]] = []
        var lineNumber = 0
        for raw in fileContents.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false) {
            lineNumber += 1
            let line = raw.drop(while: Self.isBlank).reversed().drop(while: Self.isBlank).reversed()
            if line.isEmpty || line.first == UInt8(ascii: "#") { continue }
            guard line.allSatisfy({ (0x21...0x7E).contains($0) }) else { throw Failure(reason: "invalid_character", line: lineNumber) }
            guard line.count >= Self.minimumLength else { throw Failure(reason: "too_short", line: lineNumber) }
            tokens.append(Array(line))
        }
        guard !tokens.isEmpty else { throw Failure(reason: "empty", line: 0) }
        self.tokens = tokens
    }

    /// True when `authorization` is `Bearer <token>` (scheme case-insensitive) for a configured
    /// token. Every configured token is compared in full, in time independent of where the
    /// bytes differ.
    public func admits(authorization: String?) -> Bool {
        guard let authorization else { return false }
        let bytes = Array(authorization.utf8)
        let scheme = Array("bearer ".utf8)
        guard bytes.count > scheme.count,
            zip(bytes.prefix(scheme.count), scheme).allSatisfy({ ($0 | 0x20) == $1 })
        else { return false }
        let presented = Array(bytes.dropFirst(scheme.count).drop(while: { $0 == 0x20 }))
        var admitted = false
        for token in tokens {
            admitted = Self.constantTimeEquals(presented, token) || admitted
        }
        return admitted
    }

    /// Compares every byte position up to the longer length; a length difference counts too.
    static func constantTimeEquals(_ a: [UInt8], _ b: [UInt8]) -> Bool {
        var difference = UInt(bitPattern: a.count ^ b.count)
        let n = max(a.count, b.count)
        for i in 0..<n {
            let x = i < a.count ? a[i] : 0
            let y = i < b.count ? b[i] : 0
            difference |= UInt(x ^ y)
        }
        return difference == 0
    }

    private static func isBlank(_ b: UInt8) -> Bool { b == 0x20 || b == 0x09 || b == 0x0D }
}
