import SiwaCore
import Testing

/// What each event does to the refresh tokens stored; that a deletion revokes what was held
/// whatever order things land in is played on the database by `TokenOrderTests`.
@Suite struct TokenRulesTests {
    static let a = "com.example.a", b = "com.example.b", sub = "001.u.1"

    @Test func whatEachEventEnds() {
        func effect(_ type: EventType, _ outcome: ApplyOutcome) -> TokenEffect {
            TokenRules.effect(of: AppleEvent(type: type, sub: Self.sub, eventTimeMillis: 50), audience: Self.a, outcome: outcome)
        }
        for outcome in [ApplyOutcome.applied, .stale, .finalDeleted] {
            #expect(effect(.deletionRequested, outcome) == .revoke(atMillis: 50, clientID: Self.a))
            #expect(effect(.accountDelete, outcome) == .erase(atMillis: 50, clientID: nil))
            #expect(effect(.consentRevoked, outcome) == .erase(atMillis: 50, clientID: Self.a))
            #expect(effect(.signIn, outcome) == .none && effect(.emailEnabled, outcome) == .none)
        }
        #expect(effect(.unknown("x"), .ignored) == .none)
    }
}
