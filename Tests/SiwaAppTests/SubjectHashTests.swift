import Testing

@testable import SiwaApp

/// The subject hash that logs print instead of a `sub`, pinned to values computed outside Swift:
///   printf '%s' "$SUB" | openssl dgst -sha256 -r | cut -c1-16
/// (with a UTF-8 locale: `café` is the bytes 63 61 66 c3 a9). Operators join log lines to the
/// dashboard views on it, and old log lines keep their meaning: it must never change.
@Suite("Subject hash")
struct SubjectHashTests {
    @Test("first 16 hex digits of SHA-256 of the sub's UTF-8 bytes, as openssl computes them")
    func pinned() {
        #expect(SubjectHash.of("000739.90ab72d5c78444a9bdf1a3fb80ff6660.2105") == "d6facc57f18650ce")
        #expect(SubjectHash.of("sub.\u{E9}") == "020645cef4762145")
        #expect(SubjectHash.of("caf\u{E9}") == "850f7dc43910ff89")
        #expect(SubjectHash.of("") == "e3b0c44298fc1c14")
    }
}
