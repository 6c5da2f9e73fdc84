import Testing

@testable import SiwaCore

@Suite struct EventRulesTests {
    let sub = Fixture.sub

    func event(_ type: EventType, _ t: Int64, email: String? = nil, isPrivateEmail: Bool? = nil) -> AppleEvent {
        AppleEvent(type: type, sub: sub, eventTimeMillis: t, email: email, isPrivateEmail: isPrivateEmail)
    }

    /// Applies events in order starting from an unknown account; returns all decisions.
    func run(_ events: [AppleEvent]) -> [AccountDecision] {
        var state: AccountState?
        var decisions: [AccountDecision] = []
        for e in events {
            let d = EventRules.apply(e, to: state)
            if d.accountChanged { state = d.newState }
            decisions.append(d)
        }
        return decisions
    }

    // MARK: Unknown sub

    @Test func newAccountDefaults() {
        #expect(AccountState.new == AccountState(status: .active))
        #expect(AccountState.new.email == nil && AccountState.new.lastEventTime == nil && AccountState.new.emailForwarding == nil)
    }

    @Test func knownEventOnUnknownSubCreatesRow() {
        for type in [EventType.emailDisabled, .emailEnabled, .consentRevoked, .accountDelete] {
            let d = EventRules.apply(event(type, 1000), to: nil)
            #expect(d.accountChanged, "\(type)")
            #expect(d.outcome == .applied)
            #expect(d.newState.lastEventTime == 1000)
        }
    }

    @Test func unknownTypeOnUnknownSubDoesNothing() {
        let d = EventRules.apply(event(.unknown("future"), 1000), to: nil)
        #expect(d == AccountDecision(newState: .new, accountChanged: false, revokeSessions: .none, revokeReason: nil, outcome: .ignored))
    }

    @Test func unknownTypeOnExistingAccountDoesNothing() {
        let current = AccountState(status: .consentRevoked, email: "a@b", lastEventTime: 5, statusEventTime: 5)
        let d = EventRules.apply(event(.unknown("future"), 1000), to: current)
        #expect(d == AccountDecision(newState: current, accountChanged: false, revokeSessions: .none, revokeReason: nil, outcome: .ignored))
    }

    // MARK: Email events

    @Test func emailDisabledOnNewAccount() {
        let d = EventRules.apply(event(.emailDisabled, 1000, email: "x@privaterelay.appleid.com", isPrivateEmail: true), to: nil)
        #expect(
            d.newState
                == AccountState(
                    status: .active, email: "x@privaterelay.appleid.com", isPrivateEmail: true,
                    emailForwarding: false, lastEventTime: 1000, emailEventTime: 1000))
        #expect(d.revokeSessions == .none)
        #expect(d.revokeReason == nil)
        #expect(d.outcome == .applied)
        #expect(d.accountChanged)
    }

    @Test func emailEnabledKeepsOldEmailWhenAbsent() {
        let current = AccountState(
            status: .active, email: "old@x", isPrivateEmail: true, emailForwarding: false, lastEventTime: 10, emailEventTime: 10)
        let d = EventRules.apply(event(.emailEnabled, 20), to: current)
        #expect(
            d.newState
                == AccountState(status: .active, email: "old@x", isPrivateEmail: true, emailForwarding: true, lastEventTime: 20, emailEventTime: 20))
        #expect(d.accountChanged)
        #expect(d.outcome == .applied)
    }

    @Test func emailEventReplacesEmailWhenPresent() {
        let current = AccountState(status: .active, email: "old@x", isPrivateEmail: true, emailForwarding: true, emailEventTime: 10)
        let d = EventRules.apply(event(.emailDisabled, 20, email: "new@x", isPrivateEmail: false), to: current)
        #expect(d.newState.email == "new@x")
        #expect(d.newState.isPrivateEmail == false)
        #expect(d.newState.emailForwarding == false)
    }

    @Test func olderEmailEnabledNeverReenablesAfterNewerDisabled() {
        let ds = run([event(.emailDisabled, 2000), event(.emailEnabled, 1000)])
        #expect(ds[1].outcome == .stale)
        #expect(!ds[1].accountChanged)
        #expect(ds[1].newState.emailForwarding == false)
        #expect(ds[1].newState.emailEventTime == 2000)
        #expect(ds[1].revokeSessions == .none)
    }

    @Test func olderEmailDisabledNeverDisablesAfterNewerEnabled() {
        let current = AccountState(status: .active, email: "a@x", emailForwarding: true, lastEventTime: 2000, emailEventTime: 2000)
        let d = EventRules.apply(event(.emailDisabled, 1999, email: "other@x"), to: current)
        #expect(d == AccountDecision(newState: current, accountChanged: false, revokeSessions: .none, revokeReason: nil, outcome: .stale))
    }

    @Test func emailEventWithEqualTimeApplies() {
        let current = AccountState(status: .active, emailForwarding: true, lastEventTime: 2000, emailEventTime: 2000)
        let d = EventRules.apply(event(.emailDisabled, 2000), to: current)
        #expect(d.outcome == .applied)
        #expect(d.newState.emailForwarding == false)
        #expect(d.accountChanged)
    }

    @Test func emailEventOrderIndependentOfStatusTime() {
        // A newer status event does not make an older (but newest-so-far) email event stale.
        let current = AccountState(status: .consentRevoked, lastEventTime: 5000, statusEventTime: 5000)
        let d = EventRules.apply(event(.emailDisabled, 1000), to: current)
        #expect(d.outcome == .applied)
        #expect(d.newState.status == .consentRevoked)
        #expect(d.newState.emailForwarding == false)
        #expect(d.newState.emailEventTime == 1000)
        #expect(d.newState.lastEventTime == 5000)  // max, not the event time
    }

    // MARK: Consent revoked

    @Test func consentRevokedOnNewAccount() {
        let d = EventRules.apply(event(.consentRevoked, 3000), to: nil)
        #expect(
            d
                == AccountDecision(
                    newState: AccountState(status: .consentRevoked, lastEventTime: 3000, statusEventTime: 3000),
                    accountChanged: true, revokeSessions: .createdAtOrBefore(3000), revokeReason: "consent-revoked", outcome: .applied))
    }

    @Test func consentRevokedKeepsEmailData() {
        let current = AccountState(status: .active, email: "a@x", isPrivateEmail: true, emailForwarding: true, lastEventTime: 10, emailEventTime: 10)
        let d = EventRules.apply(event(.consentRevoked, 20), to: current)
        #expect(
            d.newState
                == AccountState(
                    status: .consentRevoked, email: "a@x", isPrivateEmail: true, emailForwarding: true,
                    lastEventTime: 20, emailEventTime: 10, statusEventTime: 20))
    }

    @Test func lateConsentRevokedStillRevokesButIsStale() {
        let current = AccountState(status: .consentRevoked, lastEventTime: 5000, statusEventTime: 5000)
        let d = EventRules.apply(event(.consentRevoked, 4000), to: current)
        #expect(
            d
                == AccountDecision(
                    newState: current, accountChanged: false, revokeSessions: .createdAtOrBefore(4000),
                    revokeReason: "consent-revoked", outcome: .stale))
    }

    @Test func repeatedConsentRevokedWithSameTimeIsApplied() {
        let current = AccountState(status: .consentRevoked, lastEventTime: 5000, statusEventTime: 5000)
        let d = EventRules.apply(event(.consentRevoked, 5000), to: current)
        #expect(d.outcome == .applied)
        #expect(!d.accountChanged)  // nothing to write
        #expect(d.revokeSessions == .createdAtOrBefore(5000))
    }

    @Test func newerConsentRevokedAdvancesTimes() {
        let current = AccountState(status: .consentRevoked, lastEventTime: 5000, statusEventTime: 5000)
        let d = EventRules.apply(event(.consentRevoked, 6000), to: current)
        #expect(d.outcome == .applied)
        #expect(d.accountChanged)
        #expect(d.newState.statusEventTime == 6000)
        #expect(d.newState.lastEventTime == 6000)
    }

    @Test func consentRevokedRevocationUsesEventTimeNotNow() {
        let d = EventRules.apply(event(.consentRevoked, 1_752_572_190_719), to: .new)
        #expect(d.revokeSessions == .createdAtOrBefore(1_752_572_190_719))
        #expect(d.accountChanged)
    }

    // MARK: Account delete

    @Test func accountDeleteClearsEverythingAndRevokesAll() {
        let current = AccountState(
            status: .active, email: "a@x", isPrivateEmail: true, emailForwarding: true,
            lastEventTime: 10, emailEventTime: 10)
        let d = EventRules.apply(event(.accountDelete, 50), to: current)
        #expect(
            d
                == AccountDecision(
                    newState: AccountState(status: .deleted, lastEventTime: 50, emailEventTime: 10, statusEventTime: 50),
                    accountChanged: true, revokeSessions: .all, revokeReason: "account-delete", outcome: .applied))
    }

    @Test func lateAccountDeleteStillApplies() {
        let current = AccountState(
            status: .consentRevoked, email: "a@x", emailForwarding: false,
            lastEventTime: 9000, emailEventTime: 9000, statusEventTime: 8000)
        let d = EventRules.apply(event(.accountDelete, 1000), to: current)
        #expect(d.outcome == .applied)
        #expect(d.accountChanged)
        #expect(d.revokeSessions == .all)
        #expect(d.revokeReason == "account-delete")
        // statusEventTime is the deletion's own time: a sign-in between 1000 and 8000 comes back.
        #expect(d.newState == AccountState(status: .deleted, lastEventTime: 9000, emailEventTime: 9000, statusEventTime: 1000))
    }

    @Test func accountDeleteOnUnknownSub() {
        let d = EventRules.apply(event(.accountDelete, 7), to: nil)
        #expect(d.newState == AccountState(status: .deleted, lastEventTime: 7, statusEventTime: 7))
        #expect(d.accountChanged)
        #expect(d.revokeSessions == .all)
    }

    // MARK: Deleted is final

    @Test func deletedIsFinalForEveryType() {
        let deleted = AccountState(status: .deleted, lastEventTime: 100, statusEventTime: 100)
        for type in [EventType.emailDisabled, .emailEnabled, .consentRevoked, .accountDelete, .unknown("x")] {
            for t: Int64 in [50, 100, 200] {
                let d = EventRules.apply(event(type, t, email: "back@x", isPrivateEmail: false), to: deleted)
                if type == .accountDelete && t > 100 {
                    // Deleted again, later: the deletion time moves (a sign-in must be newer than it).
                    var later = deleted
                    later.statusEventTime = t
                    later.lastEventTime = t
                    #expect(
                        d
                            == AccountDecision(
                                newState: later, accountChanged: true, revokeSessions: .all, revokeReason: "account-delete", outcome: .finalDeleted))
                    continue
                }
                #expect(
                    d == AccountDecision(newState: deleted, accountChanged: false, revokeSessions: .none, revokeReason: nil, outcome: .finalDeleted),
                    "\(type) at \(t)")
            }
        }
    }

    // MARK: Sequences, including out of order

    @Test func inOrderLifecycle() {
        let ds = run([
            event(.emailEnabled, 100, email: "r@privaterelay.appleid.com", isPrivateEmail: true),
            event(.emailDisabled, 200),
            event(.consentRevoked, 300),
            event(.accountDelete, 400),
            event(.emailEnabled, 500),
        ])
        #expect(ds.map(\.outcome) == [.applied, .applied, .applied, .applied, .finalDeleted])
        #expect(ds[1].newState.email == "r@privaterelay.appleid.com")
        #expect(ds[2].revokeSessions == .createdAtOrBefore(300))
        #expect(ds[3].revokeSessions == .all)
        #expect(ds[4].newState.status == .deleted)
        #expect(ds[4].newState.email == nil)
    }

    @Test func deleteArrivingBeforeOlderEvents() {
        let ds = run([event(.accountDelete, 400), event(.consentRevoked, 300), event(.emailEnabled, 100)])
        #expect(ds.map(\.outcome) == [.applied, .finalDeleted, .finalDeleted])
        #expect(ds[1].revokeSessions == .none)
    }

    @Test func consentRevokedOutOfOrder() {
        let ds = run([event(.consentRevoked, 300), event(.consentRevoked, 200)])
        #expect(ds.map(\.outcome) == [.applied, .stale])
        #expect(ds[1].revokeSessions == .createdAtOrBefore(200))
        #expect(ds[1].newState.statusEventTime == 300)
    }

    @Test func emailEventsOutOfOrderEndInNewestState() {
        // Whatever order the same set of email events arrives in, the final forwarding flag is the newest one's.
        let events = [event(.emailEnabled, 100), event(.emailDisabled, 300), event(.emailEnabled, 200)]
        let orders = [[0, 1, 2], [0, 2, 1], [1, 0, 2], [1, 2, 0], [2, 0, 1], [2, 1, 0]]
        for order in orders {
            var state: AccountState?
            for i in order {
                let d = EventRules.apply(events[i], to: state)
                if d.accountChanged { state = d.newState }
            }
            #expect(state?.emailForwarding == false, "order \(order)")
            #expect(state?.emailEventTime == 300, "order \(order)")
            #expect(state?.lastEventTime == 300, "order \(order)")
        }
    }

    @Test func lastEventTimeIsMax() {
        let ds = run([event(.consentRevoked, 500), event(.emailEnabled, 100)])
        #expect(ds[1].outcome == .applied)
        #expect(ds[1].newState.lastEventTime == 500)
    }
}
