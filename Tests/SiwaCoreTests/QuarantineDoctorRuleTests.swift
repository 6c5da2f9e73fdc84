import Testing

@testable import SiwaCore

/// `doctor` on stored tokens set aside at start.
@Suite struct QuarantineDoctorRuleTests {
    @Test("tokens set aside at start are a MEDIUM finding naming each by hash; none, no finding")
    func quarantined() {
        var facts = DoctorRulesTests.facts()
        facts.quarantinedTokens = []
        #expect(DoctorRules.findings(facts).isEmpty)
        facts.quarantinedTokens = ["sub_hash 0123456789abcdef, client id app, key 0000000a, since 2026-11-28 17:00:00"]
        let found = DoctorRules.findings(facts)
        #expect(found.map(\.code) == ["stored-tokens-quarantined"] && found.first?.severity == .medium)
        #expect(found.first?.message.contains("1 stored refresh token did not open") == true)
        #expect(found.first?.message.contains("0123456789abcdef") == true)
    }
}
