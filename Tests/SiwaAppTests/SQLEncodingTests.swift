import Testing

@testable import SiwaApp

@Suite("SQL encoding")
struct SQLEncodingTests {
    @Test("array literals: every element quoted, quote and backslash escaped wherever they fall, NULL unquoted")
    func arrayLiterals() {
        #expect(SQLEncoding.array([String?]([])) == "{}")
        #expect(SQLEncoding.array(["a", nil, ""]) == #"{"a",NULL,""}"#)
        #expect(SQLEncoding.array(["\\\"", "\"a\\", "é\"", "\\", "x\"\"y"]) == #"{"\\\"","\"a\\","é\"","\\","x\"\"y"}"#)
        let claims = #"{"events":"{\"type\":\"email-enabled\"}"}"#
        #expect(SQLEncoding.array([claims]) == #"{"{\"events\":\"{\\\"type\\\":\\\"email-enabled\\\"}\"}"}"#)
        #expect(SQLEncoding.array([Int64(-1), nil, 9_223_372_036_854_775_807]) == #"{"-1",NULL,"9223372036854775807"}"#)
        #expect(SQLEncoding.array([true, nil, false]) == #"{"true",NULL,"false"}"#)
    }
}
