import Testing

@testable import SiwaCore

@Suite struct EventTypeTests {
    @Test func knownTypes() {
        #expect(EventType(rawValue: "email-disabled") == .emailDisabled)
        #expect(EventType(rawValue: "email-enabled") == .emailEnabled)
        #expect(EventType(rawValue: "consent-revoked") == .consentRevoked)
        #expect(EventType(rawValue: "account-delete") == .accountDelete)
        #expect(EventType(rawValue: "account-deleted") == .accountDelete)
    }

    @Test func canonicalSpelling() {
        #expect(EventType.accountDelete.rawValue == "account-delete")
        #expect(EventType(rawValue: "account-deleted").rawValue == "account-delete")
        for raw in ["email-disabled", "email-enabled", "consent-revoked", "account-delete"] {
            #expect(EventType(rawValue: raw).rawValue == raw)
            #expect(EventType(rawValue: raw).isKnown)
        }
    }

    @Test func unknownTypesKeepTheirString() {
        for raw in ["Consent-Revoked", "email_disabled", "account-deletion", "", " consent-revoked"] {
            let type = EventType(rawValue: raw)
            #expect(type == .unknown(raw))
            #expect(type.rawValue == raw)
            #expect(!type.isKnown)
        }
    }
}
