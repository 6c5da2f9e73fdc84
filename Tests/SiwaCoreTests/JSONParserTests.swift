import Testing

@testable import SiwaCore

@Suite struct JSONParserTests {
    func parse(_ text: String, maxDepth: Int = 32) throws(JSONError) -> JSONValue {
        try JSONParser.parse(text, maxDepth: maxDepth)
    }

    func rejects(_ bytes: [UInt8], maxDepth: Int = 32) -> Bool {
        do {
            _ = try JSONParser.parse(bytes, maxDepth: maxDepth)
            return false
        } catch {
            return true
        }
    }

    func rejects(_ text: String, maxDepth: Int = 32) -> Bool { rejects(Array(text.utf8), maxDepth: maxDepth) }

    // MARK: Valid documents

    @Test func scalars() throws {
        #expect(try parse("null") == .null)
        #expect(try parse("true") == .bool(true))
        #expect(try parse("false") == .bool(false))
        #expect(try parse("0") == .number(0))
        #expect(try parse("-0") == .number(-0.0))
        #expect(try parse("42") == .number(42))
        #expect(try parse("-17") == .number(-17))
        #expect(try parse("3.25") == .number(3.25))
        #expect(try parse("1e3") == .number(1000))
        #expect(try parse("1E+3") == .number(1000))
        #expect(try parse("25e-2") == .number(0.25))
        #expect(try parse("-0.5e1") == .number(-5))
        #expect(try parse("\"hi\"") == .string("hi"))
    }

    @Test func containers() throws {
        #expect(try parse("[]") == .array([]))
        #expect(try parse("{}") == .object([:]))
        #expect(try parse(" [ 1 , \"a\" , null , [ ] , { } ] ") == .array([.number(1), .string("a"), .null, .array([]), .object([:])]))
        let value = try parse(#"{"a":{"b":[true,false]},"c":"d"}"#)
        #expect(value == .object(["a": .object(["b": .array([.bool(true), .bool(false)])]), "c": .string("d")]))
    }

    @Test func whitespaceAroundEverything() throws {
        #expect(try parse(" \t\r\n{ \"a\" \n: \t1 \r}\n ") == .object(["a": .number(1)]))
    }

    @Test func realAppleClaims() throws {
        let text =
            #"{"iss":"https://appleid.apple.com","aud":"de.lunaone.sign-in-with-apple-example","exp":1752658597,"iat":1752572197,"jti":"8sIboCeUBQuZ0M7x91YKZQ","events":"{\"type\":\"consent-revoked\",\"sub\":\"000739.90ab72d5c78444a9bdf1a3fb80ff6660.2105\",\"event_time\":1752572190719}"}"#
        let value = try parse(text)
        #expect(value["exp"]?.int64Value == 1_752_658_597)
        #expect(value["iss"]?.stringValue == "https://appleid.apple.com")
        let events = try parse(try #require(value["events"]?.stringValue))
        #expect(events["event_time"]?.int64Value == 1_752_572_190_719)
        #expect(events["type"] == .string("consent-revoked"))
    }

    // MARK: Strings and escapes

    @Test func simpleEscapes() throws {
        #expect(try parse(#""\"\\\/\b\f\n\r\t""#) == .string("\"\\/\u{8}\u{C}\n\r\t"))
    }

    @Test func unicodeEscapes() throws {
        #expect(try parse(#""\u0041\u00e9\u20AC""#) == .string("Aé€"))
        #expect(try parse(#""\u0001""#) == .string("\u{1}"))
        #expect(try parse(#""\ud83d\ude00""#) == .string("😀"))
        #expect(try parse(#""\uDBFF\uDFFF""#) == .string("\u{10FFFF}"))
        #expect(try parse(#""\uffff""#) == .string("\u{FFFF}"))
    }

    @Test("escapes next to plain runs, multi-byte characters and the string's ends; keys and values reuse no state")
    func escapesBetweenRuns() throws {
        #expect(try parse(#""\"é\n\"x""#) == .string("\"é\n\"x"))
        #expect(try parse(#""\\""#) == .string("\\"))
        #expect(try parse(#""é\u00e9é""#) == .string("ééé"))
        #expect(try parse(#""plain""#) == .string("plain"))
        #expect(try parse("\"\"") == .string(""))
        let object = try parse(#"{"a\"b": "c\\d", "plain": "x", "é": "\"", "k": "tail"}"#)
        #expect(object == .object(["a\"b": .string("c\\d"), "plain": .string("x"), "é": .string("\""), "k": .string("tail")]))
        // The events claim as Apple sends it: a string of JSON, escaped quotes throughout.
        #expect(try parse(#""{\"type\":\"email-enabled\",\"email\":\"a@b.c\"}""#) == .string(#"{"type":"email-enabled","email":"a@b.c"}"#))
    }

    @Test func rawUTF8IsKept() throws {
        #expect(try parse("\"Grüße 😀 €\"") == .string("Grüße 😀 €"))
        // U+007F DEL is not a control character in JSON's sense.
        #expect(try parse("\"\u{7F}\"") == .string("\u{7F}"))
    }

    @Test func rejectsNulEscape() {
        #expect(rejects(#""\u0000""#))
        #expect(rejects(#""a\u0000b""#))
        #expect(rejects(#"{"\u0000":1}"#))
    }

    @Test func rejectsRawControlCharacters() {
        for c: UInt8 in 0..<0x20 {
            #expect(rejects([0x22, c, 0x22]), "control byte \(c)")
        }
    }

    @Test func rejectsLoneAndUnpairedSurrogates() {
        #expect(rejects(#""\ud800""#))
        #expect(rejects(#""\udbff x""#))
        #expect(rejects(#""\udc00""#))
        #expect(rejects(#""\ude00\ud83d""#))  // reversed pair
        #expect(rejects(#""\ud83d\u0041""#))  // high + non-surrogate
        #expect(rejects(#""\ud83d\ud83d""#))  // high + high
        #expect(rejects(#""\ud83d\n""#))  // high + other escape
        #expect(rejects(#""\ud83d"#))  // truncated
    }

    @Test func rejectsBadEscapes() {
        #expect(rejects(#""\x41""#))
        #expect(rejects(#""\'""#))
        #expect(rejects(#""\u12""#))
        #expect(rejects(#""\u12G4""#))
        #expect(rejects(#""\U0041""#))
        #expect(rejects("\"\\"))
        #expect(rejects(#""abc"#))
    }

    @Test func rejectsInvalidUTF8() {
        let cases: [[UInt8]] = [
            [0x22, 0x80, 0x22],  // lone continuation
            [0x22, 0xC0, 0xAF, 0x22],  // overlong '/'
            [0x22, 0xC1, 0xBF, 0x22],  // overlong
            [0x22, 0xE0, 0x80, 0xAF, 0x22],  // overlong 3-byte
            [0x22, 0xF0, 0x80, 0x80, 0xAF, 0x22],  // overlong 4-byte
            [0x22, 0xED, 0xA0, 0x80, 0x22],  // encoded surrogate U+D800
            [0x22, 0xED, 0xBF, 0xBF, 0x22],  // encoded surrogate U+DFFF
            [0x22, 0xF4, 0x90, 0x80, 0x80, 0x22],  // > U+10FFFF
            [0x22, 0xF5, 0x80, 0x80, 0x80, 0x22],
            [0x22, 0xFF, 0x22],
            [0x22, 0xFE, 0x22],
            [0x22, 0xC3, 0x22],  // truncated 2-byte
            [0x22, 0xE2, 0x82, 0x22],  // truncated 3-byte
            [0x22, 0xE2, 0x82],  // truncated at end
            [0x22, 0xC3, 0x41, 0x22],  // bad continuation
            [0x22, 0xF0, 0x9F, 0x98, 0x41, 0x22],  // bad 4th byte
        ]
        for bytes in cases {
            #expect(rejects(bytes), "bytes \(bytes)")
        }
        // Valid boundaries for contrast.
        #expect(!rejects([0x22, 0xED, 0x9F, 0xBF, 0x22]))  // U+D7FF
        #expect(!rejects([0x22, 0xF4, 0x8F, 0xBF, 0xBF, 0x22]))  // U+10FFFF
        #expect(!rejects([0x22, 0xE0, 0xA0, 0x80, 0x22]))  // U+0800
        #expect(!rejects([0x22, 0xC2, 0x80, 0x22]))  // U+0080
    }

    @Test func rejectsNonASCIIOutsideStrings() {
        #expect(rejects([0xEF, 0xBB, 0xBF] + bytes("{}")))  // BOM
        #expect(rejects("[1,\u{A0}2]"))  // NBSP is not whitespace
        #expect(rejects("{\u{3000}}"))
    }

    // MARK: Objects

    @Test func rejectsDuplicateKeys() {
        #expect(rejects(#"{"a":1,"a":2}"#))
        #expect(rejects(#"{"a":1,"a":1}"#))
        #expect(rejects(#"{"a":1,"\u0061":2}"#))  // same key after unescaping
        #expect(rejects(#"{"x":{"a":1,"b":2,"a":3}}"#))
        #expect(!rejects(#"{"a":1,"A":2}"#))
        #expect(!rejects(#"{"a":{"a":1}}"#))
    }

    @Test func duplicateKeyErrorPointsAtSecondKey() {
        #expect(throws: JSONError(offset: 8, message: "duplicate object key")) {
            try JSONParser.parse(#"{"a":1, "a":2}"#)
        }
    }

    @Test func rejectsMalformedObjects() {
        for text in [
            #"{"a"}"#, #"{"a":}"#, #"{a:1}"#, #"{'a':1}"#, #"{"a":1,}"#, #"{,}"#, #"{"a":1"#, "{", #"{"a" 1}"#, #"{1:2}"#, #"{"a":1 "b":2}"#,
        ] {
            #expect(rejects(text), "\(text)")
        }
    }

    @Test func rejectsMalformedArrays() {
        for text in ["[1,]", "[,1]", "[1 2]", "[", "]", "[1,,2]", "[1}"] {
            #expect(rejects(text), "\(text)")
        }
    }

    // MARK: Top level

    @Test func rejectsEmptyAndWhitespaceOnly() {
        #expect(rejects(""))
        #expect(rejects("   \n"))
    }

    @Test func rejectsTrailingGarbage() {
        for text in ["{} x", "{}{}", "[1]]", "1 2", "null,", "true false", "\"a\"\"b\"", "{}\u{0}"] {
            #expect(rejects(text), "\(text)")
        }
        #expect(throws: JSONError(offset: 3, message: "unexpected data after the JSON value")) {
            try JSONParser.parse("{} x")
        }
    }

    @Test func scalarsAtTopLevelAreAllowed() throws {
        #expect(try parse(" 1 ") == .number(1))
        #expect(try parse("\"x\"") == .string("x"))
    }

    @Test func rejectsBadLiterals() {
        for text in ["nul", "nulll", "True", "NULL", "tru", "falsey", "undefined", "NaN", "Infinity", "-Infinity"] {
            #expect(rejects(text), "\(text)")
        }
    }

    // MARK: Numbers

    @Test func rejectsMalformedNumbers() {
        for text in ["01", "-01", "00", "+1", ".5", "1.", "1.e3", "1e", "1e+", "-", "--1", "0x10", "1_000", "1.2.3", "- 1", "1e1.5"] {
            #expect(rejects(text), "\(text)")
        }
    }

    @Test func rejectsNonFiniteNumbers() {
        #expect(rejects("1e309"))
        #expect(rejects("-1e309"))
        #expect(rejects("1" + String(repeating: "0", count: 400)))
        #expect(rejects("[1e99999999999999999999]"))
    }

    @Test func acceptsExtremeFiniteNumbers() throws {
        #expect(try parse("1.7976931348623157e308") == .number(.greatestFiniteMagnitude))
        #expect(try parse("5e-324") == .number(.leastNonzeroMagnitude))
        #expect(try parse("1e-400") == .number(0))  // underflow to zero is finite
        #expect(try parse("123456789012345678901234567890") == .number(1.2345678901234568e29))
        #expect(try parse("9007199254740993") == .number(9_007_199_254_740_992))  // rounds like any double parser
    }

    @Test func integerFastPathMatchesSlowPath() throws {
        for n: Int64 in [0, 1, 9, 10, 999_999_999_999_999, 1_000_000_000_000_000, 1_752_572_190_719, -1_752_572_190_719] {
            #expect(try parse(String(n)) == .number(Double(n)))
        }
    }

    // MARK: Depth

    @Test func depthLimit() throws {
        let ok = String(repeating: "[", count: 32) + String(repeating: "]", count: 32)
        #expect(!rejects(ok))
        let tooDeep = String(repeating: "[", count: 33) + String(repeating: "]", count: 33)
        #expect(rejects(tooDeep))
        let objects = String(repeating: #"{"a":"#, count: 33) + "1" + String(repeating: "}", count: 33)
        #expect(rejects(objects))
        #expect(!rejects(objects, maxDepth: 33))
        #expect(rejects("[[1]]", maxDepth: 1))
        #expect(!rejects("[1]", maxDepth: 1))
        #expect(!rejects("1", maxDepth: 0))
        #expect(rejects("[]", maxDepth: 0))
    }

    @Test func depthIsPerPathNotTotal() {
        let wide = "[" + Array(repeating: "[[1]]", count: 1000).joined(separator: ",") + "]"
        #expect(!rejects(wide, maxDepth: 3))
    }

    @Test func veryDeepInputFailsWithoutCrashing() {
        let deep = String(repeating: "[", count: 100_000)
        #expect(rejects(deep))
    }

    // MARK: Errors

    @Test func errorMessagesNeverEchoInput() {
        let secret = "s3cr3t-token-value"
        let inputs = ["{\"\(secret)\" 1}", "[\"\(secret)\", ]", "\"\(secret)\\q\"", "{\"a\":\"\(secret)\"} \(secret)", "\(secret)"]
        for input in inputs {
            do {
                _ = try JSONParser.parse(input)
                Issue.record("expected failure for \(input)")
            } catch {
                #expect(!error.message.contains(secret))
                #expect(!error.description.contains(secret))
                #expect(error.offset >= 0 && error.offset <= input.utf8.count)
            }
        }
    }

    @Test func errorOffsets() {
        #expect(throws: JSONError(offset: 6, message: "expected ',' or ']'")) { try JSONParser.parse("[1, 2 3]") }
        #expect(throws: JSONError(offset: 0, message: "unexpected end of input")) { try JSONParser.parse("") }
    }

    @Test func parseStringAndBytesAgree() throws {
        let text = #"{"k":["é",1.5,null]}"#
        #expect(try JSONParser.parse(text) == JSONParser.parse(Array(text.utf8)))
    }
}
