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

    func checkRoundTrip(_ bytes: [UInt8]) {
        guard let value = try? JSONParser.parse(bytes) else { return }
        let text = value.serialized()
        #expect(!text.contains("\\u0000"))
        #expect((try? JSONParser.parse(text)) == value)
    }

    @Test func mutatedDocuments() {
        var rng = SplitMix64(state: 42)
        let alphabet = Array(#"{}[]",:\u0123456789.eE+-tfnrl aé"#.utf8) + [0x00, 0x80, 0xC3, 0xED, 0xF4, 0xFF, 0x0A]
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
                checkRoundTrip(bytes)
            }
        }
    }

    @Test func randomBytes() {
        var rng = SplitMix64(state: 7)
        for _ in 0..<5000 {
            let count = Int.random(in: 0..<40, using: &rng)
            let bytes = (0..<count).map { _ in UInt8.random(in: 0...255, using: &rng) }
            checkRoundTrip(bytes)
        }
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
