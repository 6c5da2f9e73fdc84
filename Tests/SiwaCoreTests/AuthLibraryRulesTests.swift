import SiwaCore
import Testing

@Suite("Auth libraries: configuration and rules")
struct AuthLibraryRulesTests {
    func load(_ env: [String: String]) throws(ConfigurationError) -> ServerConfiguration {
        try ServerConfiguration.load(environment: env.merging(["SIWA_AUDIENCES": "com.example.app"]) { a, _ in a })
    }

    @Test("SIWA_APPLY_TO: none by default; a list, deduplicated, in a fixed order; a bad value names the variable")
    func applyTo() throws {
        #expect(try load([:]).authLibraries == AuthLibraryConfiguration())
        let config = try load(["SIWA_APPLY_TO": " authjs, supabase ,Better-Auth,supabase"]).authLibraries
        #expect(config.targets == [.supabase, .betterAuth, .authjs])
        #expect(config.onAccountDelete == .unlink)
        #expect(
            throws: ConfigurationError(
                variable: "SIWA_APPLY_TO", problem: "\"okta\" is not one of supabase, better-auth, authjs, firebase, auth0, clerk, cognito")
        ) {
            try load(["SIWA_APPLY_TO": "supabase,okta"])
        }
    }

    @Test("SIWA_ON_ACCOUNT_DELETE: unlink or delete-user; SIWA_*_TABLES: three names or schema.names")
    func policyAndTables() throws {
        #expect(try load(["SIWA_ON_ACCOUNT_DELETE": "delete-user"]).authLibraries.onAccountDelete == .deleteUser)
        #expect(throws: ConfigurationError.self) { try load(["SIWA_ON_ACCOUNT_DELETE": "delete"]) }
        do {
            _ = try load(["SIWA_ON_ACCOUNT_DELETE": "drop"])
        } catch {
            #expect(error.description == "SIWA_ON_ACCOUNT_DELETE: must be unlink or delete-user")
        }
        let tables = try load(["SIWA_BETTER_AUTH_TABLES": "app.users, sessions,Accounts"]).authLibraries.betterAuthTables
        #expect(tables == [TableName(schema: "app", "users"), TableName("sessions"), TableName("Accounts")])
        #expect(tables?[2].quoted == #""Accounts""#)
        for bad in ["users,sessions", "users,sessions,accounts,x", #"users,sessions,"acc""#, "a.b.c,d,e", "1users,s,a", "users,,accounts"] {
            #expect(throws: ConfigurationError.self, "\(bad)") { try load(["SIWA_AUTHJS_TABLES": bad]) }
        }
        let names = ["SIWA_APPLY_TO", "SIWA_ON_ACCOUNT_DELETE", "SIWA_BETTER_AUTH_TABLES", "SIWA_AUTHJS_TABLES", "SIWA_LIBRARY_CLIENT_ID"]
        #expect(AuthLibraryConfiguration.variables == names)
        #expect(Set(names).isSubset(of: ServerConfiguration.variables), "each is a known variable (docs, unknown-variable warning)")
    }

    let t: Int64 = 1_750_000_000_000

    func effect(
        _ type: EventType, outcome: ApplyOutcome, revoke: SessionRevocation = .none, status: AccountStatus = .active,
        policy: AccountDeletePolicy = .unlink, createdAt: Bool = true, records: Bool = true
    ) -> AuthLibraryEffect {
        var state = AccountState(status: status)
        state.email = "r@privaterelay.appleid.com"
        state.isPrivateEmail = true
        state.emailForwarding = false
        let decision = AccountDecision(newState: state, accountChanged: true, revokeSessions: revoke, revokeReason: nil, outcome: outcome)
        return AuthLibraryRules.effect(
            of: AppleEvent(type: type, sub: "s", eventTimeMillis: t), decision: decision, policy: policy,
            sessionsHaveCreationTime: createdAt, recordsAddress: records)
    }

    @Test("sessions end with siwa's revocations: at or before the event; all (and only when applied) without creation times")
    func sessions() {
        #expect(effect(.consentRevoked, outcome: .applied, revoke: .createdAtOrBefore(t)).sessions == .createdAtOrBefore(t))
        #expect(effect(.consentRevoked, outcome: .stale, revoke: .createdAtOrBefore(t)).sessions == .createdAtOrBefore(t))
        #expect(effect(.accountDelete, outcome: .applied, revoke: .all, status: .deleted).sessions == .createdAtOrBefore(t))
        #expect(effect(.consentRevoked, outcome: .applied, revoke: .createdAtOrBefore(t), createdAt: false).sessions == .all)
        #expect(effect(.consentRevoked, outcome: .stale, revoke: .createdAtOrBefore(t), createdAt: false).sessions == .keep)
        #expect(effect(.emailDisabled, outcome: .applied).sessions == .keep)
        #expect(effect(.signIn, outcome: .applied).isNone)
        #expect(effect(.unknown("x"), outcome: .ignored).isNone)
    }

    @Test("a deletion that took effect unlinks Apple (and deletes the user with delete-user); a stale or final one does not")
    func deletion() {
        let applied = effect(.accountDelete, outcome: .applied, revoke: .all, status: .deleted)
        #expect(applied.unlinkApple && !applied.deleteUserIfOnlyApple)
        let inApp = effect(.deletionRequested, outcome: .applied, revoke: .all, status: .deleted, policy: .deleteUser)
        #expect(inApp.unlinkApple && inApp.deleteUserIfOnlyApple)
        #expect(!effect(.accountDelete, outcome: .stale, revoke: .createdAtOrBefore(t)).unlinkApple)
        #expect(!effect(.accountDelete, outcome: .finalDeleted, revoke: .all, status: .deleted).unlinkApple)
        #expect(!effect(.consentRevoked, outcome: .applied, revoke: .createdAtOrBefore(t), status: .consentRevoked).unlinkApple)
    }

    @Test("an email event that took effect records the decided address, where the library keeps provider data")
    func address() {
        let expected = AuthLibraryEffect.Address(email: "r@privaterelay.appleid.com", isPrivateEmail: true, emailForwarding: false)
        #expect(effect(.emailDisabled, outcome: .applied).address == expected)
        #expect(effect(.emailEnabled, outcome: .stale).address == nil)
        #expect(effect(.emailEnabled, outcome: .finalDeleted, status: .deleted).address == nil)
        #expect(effect(.emailEnabled, outcome: .applied, records: false).address == nil)
    }
}
