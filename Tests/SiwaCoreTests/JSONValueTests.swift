import Testing

@testable import SiwaCore

@Suite struct JSONValueTests {
    @Test func accessors() {
        let object: JSONValue = .object(["a": .string("x"), "n": .number(3)])
        #expect(object.objectValue?.count == 2)
        #expect(object["a"] == .string("x"))
        #expect(object["missing"] == nil)
        #expect(JSONValue.string("x")["a"] == nil)
        #expect(JSONValue.array([.null])["a"] == nil)
        #expect(JSONValue.string("x").stringValue == "x")
        #expect(JSONValue.number(1).stringValue == nil)
        #expect(JSONValue.string("1").objectValue == nil)
        #expect(JSONValue.bool(true).boolValue == true)
        #expect(JSONValue.array([.null]).arrayValue == [.null])
    }

    @Test func int64Value() {
        #expect(JSONValue.number(0).int64Value == 0)
        #expect(JSONValue.number(-0.0).int64Value == 0)
        #expect(JSONValue.number(1_752_572_190_719).int64Value == 1_752_572_190_719)
        #expect(JSONValue.number(9_007_199_254_740_992).int64Value == 9_007_199_254_740_992)
        #expect(JSONValue.number(-9_007_199_254_740_992).int64Value == -9_007_199_254_740_992)
        #expect(JSONValue.number(9_007_199_254_740_994).int64Value == nil)
        #expect(JSONValue.number(1e300).int64Value == nil)
        #expect(JSONValue.number(1.5).int64Value == nil)
        #expect(JSONValue.number(-0.5).int64Value == nil)
        #expect(JSONValue.number(.nan).int64Value == nil)
        #expect(JSONValue.number(.infinity).int64Value == nil)
        #expect(JSONValue.string("1").int64Value == nil)
        #expect(JSONValue.bool(true).int64Value == nil)
    }

    @Test func serializesCompactWithSortedKeys() {
        let value: JSONValue = .object(["b": .number(1), "a": .array([.null, .bool(true), .bool(false)]), "c": .object([:])])
        #expect(value.serialized() == #"{"a":[null,true,false],"b":1,"c":{}}"#)
    }

    @Test func keysSortByUTF8Bytes() {
        let value: JSONValue = .object(["é": .null, "z": .null, "Z": .null, "aa": .null, "a": .null])
        #expect(value.serialized() == #"{"Z":null,"a":null,"aa":null,"z":null,"é":null}"#)
    }

    @Test func serializesNumbers() {
        #expect(JSONValue.number(0).serialized() == "0")
        #expect(JSONValue.number(-0.0).serialized() == "0")
        #expect(JSONValue.number(1_752_572_190_719).serialized() == "1752572190719")
        #expect(JSONValue.number(-42).serialized() == "-42")
        #expect(JSONValue.number(0.1).serialized() == "0.1")
        #expect(JSONValue.number(1e100).serialized() == "1e+100")
        #expect(JSONValue.number(.nan).serialized() == "null")
        #expect(JSONValue.number(.infinity).serialized() == "null")
    }

    @Test func escapesStrings() {
        #expect(JSONValue.string("a\"b\\c/d").serialized() == #""a\"b\\c/d""#)
        #expect(JSONValue.string("\n\t\r\u{8}\u{C}\u{1}\u{1F}").serialized() == #""\u000a\u0009\u000d\u0008\u000c\u0001\u001f""#)
        #expect(JSONValue.string("é😀\u{7F}").serialized() == "\"é😀\u{7F}\"")
    }

    @Test func neverEmitsNul() {
        let s = JSONValue.string("a\u{0}b").serialized()
        #expect(!s.contains("\\u0000"))
        #expect(!s.utf8.contains(0))
        #expect(s == #""a\ufffdb""#)
    }

    @Test func roundTrips() throws {
        let texts = [
            #"{"iss":"https://appleid.apple.com","aud":"x","exp":1752658597,"events":"{\"type\":\"consent-revoked\"}"}"#,
            #"[1.5,-2,1e-7,5e-324,1.7976931348623157e308,123456789012345678901234567890,"\u0001\"\\"]"#,
            #"{"nested":{"deep":[[[{"k":"ü"}]]]},"empty":"","t":true}"#,
        ]
        for text in texts {
            let value = try JSONParser.parse(text)
            let again = try JSONParser.parse(value.serialized())
            #expect(again == value, "\(text)")
            #expect(again.serialized() == value.serialized())
        }
    }

    @Test func quoted() {
        #expect(JSONValue.quoted("a\"b") == #""a\"b""#)
    }

    @Test("Apple's flags: a boolean or the strings true/false; anything else is no flag; absent or null is nil, else malformed")
    func appleFlags() throws {
        #expect(JSONValue.bool(true).appleFlag == true)
        #expect(JSONValue.string("false").appleFlag == false)
        for other: JSONValue in [.string("TRUE"), .string("1"), .number(1), .null, .array([]), .object([:])] {
            #expect(other.appleFlag == nil)
        }
        #expect(try IDTokenVerifier.flag(nil) == nil)
        #expect(try IDTokenVerifier.flag(.null) == nil)
        #expect(try IDTokenVerifier.flag(.string("true")) == true)
        #expect(throws: IDTokenError.malformedClaims) { try IDTokenVerifier.flag(.string("yes")) }
    }
}
