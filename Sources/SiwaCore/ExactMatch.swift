extension Sequence where Element == String {
    /// True when an element has exactly `value`'s UTF-8 bytes: how Apple and PostgreSQL compare
    /// audiences and client ids (Swift's `==` equates canonically equivalent strings, so an `aud`
    /// could pass here and be refused there).
    public func containsExactly(_ value: String) -> Bool {
        contains { $0.utf8.elementsEqual(value.utf8) }
    }
}
