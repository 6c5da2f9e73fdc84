import Testing

@testable import SiwaCore

/// `SIWA_API_TOKEN_FILE`: how the file is read, what is refused (reason and line, never the
/// token), and which `Authorization` headers are admitted.
@Suite struct APITokensTests {
    static let first = "tok-0123456789abcdef"  // 20 characters
    static let second = "Second_Token.with~All!Visible#Ascii"

    static func parse(_ text: String) throws(APITokens.Failure) -> APITokens {
        try APITokens(fileContents: Array(text.utf8))
    }

    /// The failure parsing `text` throws; nil when it parses.
    static func failure(_ text: String) -> APITokens.Failure? {
        do {
            _ = try parse(text)
            return nil
        } catch {
            return error
        }
    }

    @Test("one token a line; blank lines, comments and surrounding blanks skipped; CRLF read")
    func oneTokenALine() throws {
        let tokens = try Self.parse("# API tokens\n\n  \(Self.first)\t\r\n\r\n\t# old one, rotated out: not-a-token\n\(Self.second)\n")
        #expect(tokens.count == 2)
        #expect(tokens.admits(authorization: "Bearer \(Self.first)"))
        #expect(tokens.admits(authorization: "Bearer \(Self.second)"))
        // The comment's words are not tokens, nor is the comment line itself.
        #expect(!tokens.admits(authorization: "Bearer # old one, rotated out: not-a-token"))
        #expect(!tokens.admits(authorization: "Bearer not-a-token"))
        // A `#` inside a token is part of it; the same lines without a final newline parse alike.
        #expect(try Self.parse("\(Self.first)\n\(Self.second)") == tokens)
    }

    @Test("a file with no token is refused as empty (line 0)")
    func noTokenIsEmpty() {
        for text in ["", "\n", "\n\n  \t\r\n", "# only a comment", "#\(Self.first)\n   # \(Self.second)\n"] {
            #expect(Self.failure(text) == APITokens.Failure(reason: "empty", line: 0), "\(text.debugDescription)")
        }
        #expect(Self.failure("")?.description == "holds no token (one token a line)")
    }

    @Test("at least 16 characters: 15 is refused with its line, 16 is a token")
    func tooShort() throws {
        let sixteen = String(repeating: "a", count: APITokens.minimumLength)
        #expect(APITokens.minimumLength == 16)
        #expect(try Self.parse(sixteen).admits(authorization: "Bearer \(sixteen)"))
        let fifteen = "SHORTSECRET1234"
        #expect(fifteen.utf8.count == 15)
        let e = Self.failure("# comment\n\n\(Self.first)\n  \(fifteen)  \n\(Self.second)")
        #expect(e == APITokens.Failure(reason: "too_short", line: 4))
        #expect(e?.description == "line 4: a token must be at least 16 characters")
        #expect(e?.description.contains(fifteen) == false)
    }

    @Test("a space, a control byte or a non-ASCII byte inside a token is refused with its line")
    func invalidCharacters() {
        let bad = [
            "tok-0123 456789abcdef",  // a space inside
            "tok-0123\t456789abcdef",  // a tab inside (blanks are trimmed only at the ends)
            "tok-0123456789abcdef\u{0B}",  // vertical tab: not trimmed, not visible
            "tok-0123456789abcdef\u{7F}",  // DEL
            "tok-0123456789abcd\u{E9}f",  // é: two bytes over 0x7F
            "tok-0123456789abcdef\u{0}",
        ]
        for line in bad {
            let e = Self.failure("\(Self.first)\n\(line)\n")
            #expect(e == APITokens.Failure(reason: "invalid_character", line: 2), "\(line.debugDescription)")
            #expect(e?.description == "line 2: a token is visible ASCII without spaces")
        }
        // Checked before the length: a short line with a space says what is wrong with it.
        #expect(Self.failure("a b") == APITokens.Failure(reason: "invalid_character", line: 1))
        // The first bad line is the one reported.
        #expect(Self.failure("short\nwith space inside it\n") == APITokens.Failure(reason: "too_short", line: 1))
    }

    @Test("several tokens: every one admits (rotation)")
    func severalTokensAllMatch() throws {
        let lines = (0..<5).map { "rotation-token-\($0)-\(String(repeating: "x", count: $0 * 7))" }
        let tokens = try Self.parse(lines.joined(separator: "\n"))
        #expect(tokens.count == 5)
        for line in lines {
            #expect(tokens.admits(authorization: "Bearer \(line)"), "\(line)")
        }
        #expect(!tokens.admits(authorization: "Bearer rotation-token-5-"))
    }

    @Test("the Bearer scheme, case-insensitive; anything else is refused")
    func schemeAndHeaderShape() throws {
        let tokens = try Self.parse(Self.first)
        for header in ["Bearer \(Self.first)", "bearer \(Self.first)", "BEARER \(Self.first)", "Bearer   \(Self.first)"] {
            #expect(tokens.admits(authorization: header), "\(header)")
        }
        let refused: [String?] = [
            nil, "", "Bearer", "Bearer ", Self.first, "Basic \(Self.first)", "Bearer\(Self.first)", "Bearer\t\(Self.first)",
            "Bearer \(Self.first) ", " Bearer \(Self.first)", "Bearer \(Self.first)\n", "Bearer \"\(Self.first)\"",
        ]
        for header in refused {
            #expect(!tokens.admits(authorization: header), "\(String(describing: header))")
        }
    }

    @Test("a wrong token of the same length or of another length is refused, whichever byte differs")
    func wrongTokens() throws {
        let tokens = try Self.parse("\(Self.first)\n\(Self.second)")
        let token = Array(Self.first.utf8)
        // Same length, one byte off, at every position (first, middle, last).
        for i in token.indices {
            var wrong = token
            wrong[i] ^= 0x01
            #expect(!tokens.admits(authorization: "Bearer " + String(decoding: wrong, as: UTF8.self)), "byte \(i)")
        }
        // Other lengths: a prefix, the token and more, the two tokens together.
        for wrong in [String(Self.first.dropLast()), String(Self.first.prefix(1)), Self.first + "0", Self.first + Self.second] {
            #expect(!tokens.admits(authorization: "Bearer \(wrong)"), "\(wrong)")
        }
    }

    @Test("the comparison: equal bytes only; a length difference counts even where the bytes agree")
    func constantTimeEquals() {
        let a: [UInt8] = Array("abcdefghijklmnop".utf8)
        #expect(APITokens.constantTimeEquals(a, a))
        #expect(APITokens.constantTimeEquals([], []))
        #expect(!APITokens.constantTimeEquals(a, Array(a.dropLast()) + [UInt8(ascii: "q")]))
        #expect(!APITokens.constantTimeEquals([UInt8(ascii: "x")] + Array(a.dropFirst()), a))
        // The shorter side is compared as if padded with zero bytes: only the length tells these apart.
        #expect(!APITokens.constantTimeEquals(a, a + [0]))
        #expect(!APITokens.constantTimeEquals(a + [0, 0], a))
        #expect(!APITokens.constantTimeEquals([], [0]))
        #expect(!APITokens.constantTimeEquals(a, []))
    }
}
