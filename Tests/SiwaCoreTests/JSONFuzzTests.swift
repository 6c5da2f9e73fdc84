import Testing

@testable import SiwaCore

/// Deterministic smoke fuzzing: the parser must never crash, and whatever it accepts must
/// serialize to text that parses back to the same value.
@Suite struct JSONFuzzTests {
    struct SplitMix64: RandomNumberGenerator {
        var state: UInt64
        mutating func next() -> UInt64 {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
    }

    static let seeds: [String] = [
        #"{"iss":"https://appleid.apple.com","aud":"x","exp":1752658597,"events":"{\"type\":\"consent-revoked\",\"event_time\":1}"}"#,
        #"[1,-2.5e3,true,false,null,"\u00e9\ud83d\ude00",{"a":[{}]}]"#,
        #"{"keys":[{"kty":"RSA","kid":"k","n":"AQAB","e":"AQAB"}]}"#,
    ]

    /// Checks the round trip of what parses; true when `bytes` parsed (a test counts them: a
    /// parser that refused everything would pass every round trip).
    @discardableResult
    func checkRoundTrip(_ bytes: [UInt8]) -> Bool {
        guard let value = try? JSONParser.parse(bytes) else { return false }
        let text = value.serialized()
        #expect(!text.contains("\\u0000"))
        #expect((try? JSONParser.parse(text)) == value)
        return true
    }

    @Test func mutatedDocuments() {
        var rng = SplitMix64(state: 42)
        let alphabet = Array(#"{}[]",:\u0123456789.eE+-tfnrl aé"#.utf8) + [0x00, 0x80, 0xC3, 0xED, 0xF4, 0xFF, 0x0A]
        var parsed = 0
        for seed in Self.seeds {
            let original = Array(seed.utf8)
            for _ in 0..<3000 {
                var bytes = original
                for _ in 0..<Int.random(in: 1...4, using: &rng) {
                    let i = Int.random(in: 0..<max(bytes.count, 1), using: &rng)
                    switch Int.random(in: 0..<3, using: &rng) {
                    case 0 where !bytes.isEmpty: bytes[i] = alphabet.randomElement(using: &rng)!
                    case 1 where !bytes.isEmpty: bytes.remove(at: i)
                    default: bytes.insert(alphabet.randomElement(using: &rng)!, at: min(i, bytes.count))
                    }
                }
                if checkRoundTrip(bytes) { parsed += 1 }
            }
        }
        // Some mutations keep a valid document (a digit for a digit, a space inserted): the
        // round trip must have been checked on them.
        #expect(parsed >= 300, "\(parsed) of 9000 mutated documents parsed")
    }

    /// A document from JSON's grammar with the value it denotes: random whitespace, escapes
    /// (named, `\u` and surrogate pairs), numbers in every form, nesting.
    struct Generator {
        var rng: SplitMix64

        mutating func pick(_ n: Int) -> Int { Int.random(in: 0..<n, using: &rng) }

        mutating func space() -> String { ["", "", " ", "\n", "\t ", "\r\n  "][pick(6)] }

        mutating func number() -> (String, JSONValue) {
            var text = pick(3) == 0 ? "-" : ""
            text += pick(4) == 0 ? "0" : String(Int.random(in: 1...999_999, using: &rng))
            if pick(2) == 0 { text += "." + String(Int.random(in: 0...99_999, using: &rng)) }
            if pick(3) == 0 { text += ["e", "E", "e+", "E-", "e-"][pick(5)] + String(pick(20)) }
            return (text, .number(Double(text)!))
        }

        mutating func string() -> (String, String) {
            var text = "\"", value = ""
            for _ in 0..<pick(8) {
                switch pick(9) {
                case 0: (text, value) = (text + "\\n", value + "\n")
                case 1: (text, value) = (text + "\\\"", value + "\"")
                case 2: (text, value) = (text + "\\\\", value + "\\")
                case 3: (text, value) = (text + "\\/", value + "/")
                case 4: (text, value) = (text + "\\u00e9", value + "\u{e9}")
                case 5: (text, value) = (text + "\\ud83d\\ude00", value + "\u{1F600}")
                case 6: (text, value) = (text + "é€", value + "é€")
                default:
                    let c = String(UnicodeScalar(UInt8(Int.random(in: 0x20...0x7e, using: &rng))))
                    if c == "\"" || c == "\\" { continue }
                    (text, value) = (text + c, value + c)
                }
            }
            return (text + "\"", value)
        }

        mutating func value(depth: Int) -> (String, JSONValue) {
            switch depth >= 4 ? pick(5) : pick(7) {
            case 0: return ("null", .null)
            case 1: return pick(2) == 0 ? ("true", .bool(true)) : ("false", .bool(false))
            case 2: return number()
            case 3, 4:
                let (text, value) = string()
                return (text, .string(value))
            case 5:
                var parts: [String] = [], values: [JSONValue] = []
                for _ in 0..<pick(5) {
                    let (text, value) = value(depth: depth + 1)
                    parts.append(space() + text + space())
                    values.append(value)
                }
                return ("[" + (parts.isEmpty ? space() : parts.joined(separator: ",")) + "]", .array(values))
            default:
                var parts: [String] = [], members: [String: JSONValue] = [:]
                for i in 0..<pick(5) {
                    let (keyText, key) = string()
                    let unique = "k\(i)" + key  // distinct keys: duplicates are refused
                    let (text, value) = value(depth: depth + 1)
                    parts.append(space() + "\"k\(i)" + keyText.dropFirst() + space() + ":" + space() + text + space())
                    members[unique] = value
                }
                return ("{" + (parts.isEmpty ? space() : parts.joined(separator: ",")) + "}", .object(members))
            }
        }

        /// A document whose top level is an array or object (as real payloads are).
        mutating func document() -> (String, JSONValue) {
            while true {
                let (text, value) = value(depth: 0)
                if text.hasSuffix("]") || text.hasSuffix("}") { return (space() + text + space(), value) }
            }
        }
    }

    @Test("grammar-generated documents: the valid ones parse to the value they denote and round-trip; broken ones are refused")
    func grammarDocuments() {
        var generator = Generator(rng: SplitMix64(state: 2026))
        let total = 4000
        var parsed = 0, corrupted = 0
        for _ in 0..<total {
            let (text, value) = generator.document()
            var bytes = Array(text.utf8)
            let corrupt = generator.pick(4) == 0
            if corrupt {
                corrupted += 1
                // Each change breaks the grammar whatever the document.
                let body = Array(text.trimmingSpace.utf8)
                switch generator.pick(4) {
                case 0: bytes = Array(body.dropLast())  // the closing bracket gone
                case 1: bytes = Array(body.dropLast()) + Array(",".utf8) + [body.last!]  // a trailing comma
                case 2: bytes = body + Array(" x".utf8)  // text after the document
                default: bytes = [0xEF, 0xBB, 0xBF] + body  // a byte order mark
                }
            }
            if let parsedValue = try? JSONParser.parse(bytes) {
                parsed += 1
                #expect(!corrupt, "a broken document parsed: \(String(decoding: bytes, as: UTF8.self))")
                #expect(parsedValue == value, "\(text)")
                checkRoundTrip(bytes)
            } else {
                #expect(corrupt, "a valid document was refused: \(text)")
            }
        }
        // The generator exercises the parser's accepting paths, not only its refusals.
        #expect(Double(parsed) >= 0.7 * Double(total), "\(parsed) of \(total) parsed")
        #expect(corrupted > total / 8)
    }

    @Test func randomBytes() {
        var rng = SplitMix64(state: 7)
        var parsed = 0
        for _ in 0..<5000 {
            let count = Int.random(in: 0..<40, using: &rng)
            let bytes = (0..<count).map { _ in UInt8.random(in: 0...255, using: &rng) }
            if checkRoundTrip(bytes) { parsed += 1 }
        }
        // A lone digit (or one in whitespace) is a document: a few of the 5000 parse.
        #expect(parsed > 0, "none of 5000 random byte strings parsed")
    }

    @Test func randomBase64URL() {
        var rng = SplitMix64(state: 99)
        let alphabet = Array("ABCxyz019-_=+/ .".utf8)
        for _ in 0..<5000 {
            let text = String(decoding: (0..<Int.random(in: 0..<12, using: &rng)).map { _ in alphabet.randomElement(using: &rng)! }, as: UTF8.self)
            if let decoded = Base64URL.decode(text) {
                // Strict decoding means the encoding is canonical.
                #expect(Base64URL.encode(decoded) == text)
            }
        }
    }
}

extension String {
    fileprivate var trimmingSpace: String {
        var s = Substring(self)
        while let c = s.first, c == " " || c == "\n" || c == "\t" || c == "\r\n" || c == "\r" { s = s.dropFirst() }
        while let c = s.last, c == " " || c == "\n" || c == "\t" || c == "\r\n" || c == "\r" { s = s.dropLast() }
        return String(s)
    }
}
