import SiwaCore
import Testing

@Suite("Exact matching of audiences and client ids")
struct ExactMatchTests {
    @Test("bytes, not canonical equivalence: a decomposed é is another client id")
    func bytesNotCanonicalEquivalence() {
        let configured = ["com.example.caf\u{E9}", "com.example.b"]
        #expect(configured.containsExactly("com.example.caf\u{E9}"))
        #expect(configured.containsExactly("com.example.b"))
        #expect("com.example.cafe\u{301}" == "com.example.caf\u{E9}")  // what Swift's == says
        #expect(!configured.containsExactly("com.example.cafe\u{301}"))
        #expect(!configured.containsExactly("com.example.B"))
        #expect(![String]().containsExactly(""))
    }
}
