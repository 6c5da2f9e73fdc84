import Testing

@testable import SiwaCore

@Suite struct Base64URLTests {
    // RFC 4648 §10 vectors, unpadded.
    static let vectors: [(String, String)] = [
        ("", ""), ("f", "Zg"), ("fo", "Zm8"), ("foo", "Zm9v"),
        ("foob", "Zm9vYg"), ("fooba", "Zm9vYmE"), ("foobar", "Zm9vYmFy"),
    ]

    @Test func rfc4648Vectors() {
        for (plain, encoded) in Self.vectors {
            #expect(Base64URL.encode(Array(plain.utf8)) == encoded)
            #expect(Base64URL.decode(encoded) == Array(plain.utf8))
        }
    }

    @Test func urlAlphabet() {
        #expect(Base64URL.encode([0xFB, 0xFF, 0xBF]) == "-_-_")
        #expect(Base64URL.decode("-_-_") == [0xFB, 0xFF, 0xBF])
        #expect(Base64URL.encode([0xFF]) == "_w")
    }

    @Test func realAppleHeader() {
        let encoded = "eyJraWQiOiJFNnE4M1JCMTVuIiwiYWxnIjoiUlMyNTYifQ"
        #expect(Base64URL.decode(encoded).map { String(decoding: $0, as: UTF8.self) } == #"{"kid":"E6q83RB15n","alg":"RS256"}"#)
        #expect(Base64URL.encode(Array(#"{"kid":"E6q83RB15n","alg":"RS256"}"#.utf8)) == encoded)
    }

    @Test func roundTripsAllLengthsAndBytes() {
        var data: [UInt8] = []
        for n in 0..<300 {
            #expect(Base64URL.decode(Base64URL.encode(data)) == data, "length \(n)")
            data.append(UInt8(truncatingIfNeeded: n * 131 + 7))
        }
        let all = (0...255).map { UInt8($0) }
        #expect(Base64URL.decode(Base64URL.encode(all)) == all)
    }

    @Test func encodeAcceptsAnySequence() {
        #expect(Base64URL.encode([UInt8]("foo".utf8)[...]) == "Zm9v")
        #expect(Base64URL.encode("foo".utf8) == "Zm9v")
    }

    @Test func decodeAcceptsSubstrings() {
        let s = "xx.Zm9v.yy"
        let part = s.split(separator: ".")[1]
        #expect(Base64URL.decode(part) == Array("foo".utf8))
    }

    @Test func rejectsPadding() {
        #expect(Base64URL.decode("Zg==") == nil)
        #expect(Base64URL.decode("Zm8=") == nil)
        #expect(Base64URL.decode("Zm9v=") == nil)
        #expect(Base64URL.decode("=") == nil)
    }

    @Test func rejectsStandardAlphabet() {
        #expect(Base64URL.decode("+/+/") == nil)
        #expect(Base64URL.decode("ab+c") == nil)
        #expect(Base64URL.decode("ab/c") == nil)
    }

    @Test func rejectsWhitespaceAndOtherCharacters() {
        for text in ["Zm9v ", " Zm9v", "Zm 9v", "Zm9v\n", "Zm\r\n9v", "Zm9v\t", "Zm9.", "Zm9v!", "Zé9v", "Zm9v\u{0}"] {
            #expect(Base64URL.decode(text) == nil, "\(text.debugDescription)")
        }
    }

    @Test func rejectsImpossibleLength() {
        #expect(Base64URL.decode("Z") == nil)
        #expect(Base64URL.decode("Zm9vY") == nil)
        #expect(Base64URL.decode("Zm9vYmFyZ") == nil)
    }

    @Test func rejectsNonZeroTrailingBits() {
        // "Zg" is canonical for "f"; "Zh".."Zv" have non-zero unused bits.
        #expect(Base64URL.decode("Zg") == [0x66])
        for c in "hijklmnopqrstuv" {
            #expect(Base64URL.decode("Z\(c)") == nil, "Z\(c)")
        }
        #expect(Base64URL.decode("Zm8") == Array("fo".utf8))
        #expect(Base64URL.decode("Zm9") == nil)
        #expect(Base64URL.decode("Zm-") == nil)
    }

    @Test func emptyDecodesToEmpty() {
        #expect(Base64URL.decode("") == [])
    }
}
