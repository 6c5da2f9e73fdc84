import SiwaCore
import SiwaPostgres

/// Applies a batch's decisions to the auth libraries' own tables, in the batch's transaction
/// (after `siwa.*`): at most three statements per target, each for the whole batch (two more
/// adopt the library's Apple refresh tokens of users deleted in-app: `LibraryTokenAdoption`). An event
/// for a user the library does not know matches no identity and changes nothing there.
enum AuthLibraryApplier {
    static func apply(
        _ targets: AuthLibraryTargets, events: [ClaimedEvent], decisions: [AccountDecision], on c: PostgresConnection
    ) throws(PostgresError) {
        for schema in targets.schemas {
            var endings: [AuthLibraryStatements.Ending] = []
            var unlinks: [String] = []
            var addresses: [AuthLibraryStatements.Address] = []
            var deletedInApp: [String] = []
            for (item, decision) in zip(events, decisions) {
                let effect = schema.effect(of: item.event, decision: decision, policy: targets.policy)
                let sub = item.event.sub
                switch effect.sessions {
                case .keep: break
                case .all: endings.append(.init(sub: sub, beforeMillis: nil))
                case .createdAtOrBefore(let ms): endings.append(.init(sub: sub, beforeMillis: ms))
                }
                if effect.unlinkApple {
                    unlinks.append(sub)
                    if case .revoke = TokenRules.effect(of: item.event, audience: item.audience, outcome: decision.outcome) {
                        deletedInApp.append(sub)
                    }
                }
                if let a = effect.address {
                    addresses.append(.init(sub: sub, email: a.email, isPrivateEmail: a.isPrivateEmail, emailForwarding: a.emailForwarding))
                }
            }
            let statements = AuthLibraryStatements.self
            // Sessions first: they are found through the identity that the unlink removes.
            if !endings.isEmpty { try c.affected(statements.endSessions(schema), endings) }
            if !addresses.isEmpty, let record = statements.recordAddress(schema) { try c.affected(record, addresses) }
            // An in-app deletion revokes the token the library holds too: adopted before the
            // identity that holds it goes, the deletion then takes it with siwa's own.
            if let tokens = targets.tokens { try tokens.adoptForDeletion(deletedInApp, from: schema, on: c) }
            if !unlinks.isEmpty { try c.affected(statements.unlink(schema, deleteUsers: targets.policy == .deleteUser), unlinks) }
        }
    }
}
