import SiwaCore
import SiwaPostgres

/// The start-up check of `SIWA_APPLY_TO` (README "Using Supabase Auth / Better Auth / Auth.js"): each target's tables are found (Better
/// Auth's column style and Auth.js's adapter detected), and the tables, columns, indexes and
/// grants its statements need are there, for the role the worker runs as. A target that lacks
/// one stops the start with one line naming everything missing.
public enum AuthLibraryCheck {
    public struct Failure: Error, CustomStringConvertible, Sendable {
        public var description: String
    }

    /// What the worker's statements need of one table.
    struct TableNeed: Equatable {
        var table: TableName
        var select: [String]
        var update: [String] = []
        /// Some index must start with one of these column sets (any order within a set): the
        /// probes of the batch statements.
        var index: [[String]] = []
    }

    /// `tokens`: in-app deletion is configured, and the library's Apple refresh tokens are adopted
    /// (`LibraryTokenAdoption`): their column is read too.
    static func needs(_ s: AuthLibrarySchema, policy: AccountDeletePolicy, tokens: Bool = false) -> [TableNeed] {
        let i = s.identities, x = s.sessions
        let tokenColumn = tokens ? i.refreshToken.map { [$0] } ?? [] : []
        var needs = [
            TableNeed(
                table: i.table, select: [i.user, i.provider, i.subject] + (i.data.map { [$0] } ?? []) + tokenColumn,
                update: [i.data, i.updatedAt].compactMap { $0 }, index: [[i.subject], [i.provider, i.subject]]),
            TableNeed(table: x.table, select: [x.user] + [x.createdAt, x.refreshTokens == nil ? nil : x.id].compactMap { $0 }, index: [[x.user]]),
        ]
        if let tokens = x.refreshTokens {
            needs.append(TableNeed(table: tokens.table, select: [tokens.session], index: [[tokens.session]]))
        }
        if policy == .deleteUser {
            // The "no other identity" probe, by user.
            needs.append(TableNeed(table: i.table, select: [], index: [[i.user]]))
            needs.append(TableNeed(table: s.users, select: [s.userID]))
        }
        return needs
    }

    /// The grants an operator gives the worker's role for this target (docs/auth-libraries.md, "Privileges on the libraries' tables").
    public static func grants(
        _ s: AuthLibrarySchema, policy: AccountDeletePolicy, tokens: Bool = false, role: String = "siwa_worker"
    ) -> [String] {
        var out: [String] = []
        let needs = needs(s, policy: policy, tokens: tokens)
        for schema in Set(needs.compactMap(\.table.schema)).sorted() {
            out.append(AuthLibraryStatements.grantUsage(onSchema: schema, to: role))
        }
        for need in needs where !need.select.isEmpty {
            out.append(AuthLibraryStatements.grant(on: need.table, select: need.select, update: need.update, to: role))
        }
        return out
    }

    /// Resolves and checks every target of `config` on `c` (the worker's role). `tokens`: in-app
    /// deletion is configured; the libraries' Apple refresh tokens are adopted with it.
    public static func resolve(
        _ config: AuthLibraryConfiguration, conninfo: String, tokens: LibraryTokenAdoption? = nil
    ) throws -> AuthLibraryTargets {
        guard !config.targets.isEmpty else { return .none }
        let c = try PostgresConnection(conninfo: conninfo, applicationName: "siwa-notify start-up check")
        var schemas: [AuthLibrarySchema] = []
        for kind in config.targets {
            let schema: AuthLibrarySchema
            switch kind {
            case .supabase:
                schema = .supabase
            case .betterAuth:
                let tables = try qualified(config.betterAuthTables ?? AuthLibrarySchema.betterAuthDefaultTables, on: c)
                var snake = false
                if let account = try c.row(AuthLibraryStatements.table, tables[2].quoted) {
                    let names = Set(try c.rows(AuthLibraryStatements.columns, account.oid).map(\.name))
                    snake = !names.contains("userId") && names.contains("user_id")
                }
                schema = .betterAuth(tables: tables, snakeCase: snake)
            case .authjs:
                var tables = try qualified(config.authjsTables ?? AuthLibrarySchema.authjsPostgresTables, on: c)
                if config.authjsTables == nil, try c.row(AuthLibraryStatements.table, tables[2].quoted) == nil {
                    let prisma = try qualified(AuthLibrarySchema.authjsPrismaTables, on: c)
                    if try c.row(AuthLibraryStatements.table, prisma[2].quoted) != nil { tables = prisma }
                }
                schema = .authjs(tables: tables)
            }
            let problems = try check(schema, policy: config.onAccountDelete, tokens: tokens != nil, on: c)
            if !problems.isEmpty {
                throw Failure(description: "SIWA_APPLY_TO=\(kind.rawValue): " + problems.joined(separator: "; "))
            }
            schemas.append(schema)
        }
        var targets = AuthLibraryTargets(schemas: schemas, policy: config.onAccountDelete)
        targets.tokens = tokens
        return targets
    }

    /// `tables` with each name given without a schema given the schema where the login's own
    /// search_path finds it (the library's app created it there), so that every statement names
    /// it whole and runs with the pinned search_path. A table not found stays as it was, and the
    /// check then reports it missing.
    static func qualified(_ tables: [TableName], on c: PostgresConnection) throws(PostgresError) -> [TableName] {
        var out: [TableName] = []
        for table in tables {
            guard table.schema == nil else {
                out.append(table)
                continue
            }
            var resolved = table
            resolved.foundIn = try c.transaction { c throws(PostgresError) in
                try c.execute(AuthLibraryStatements.loginSearchPath)
                return try c.row(AuthLibraryStatements.qualify, table.quoted)
            }
            out.append(resolved)
        }
        return out
    }

    /// What is missing for `schema`, one phrase each (empty: ready).
    static func check(
        _ schema: AuthLibrarySchema, policy: AccountDeletePolicy, tokens: Bool = false, on c: PostgresConnection
    ) throws(PostgresError) -> [String] {
        var problems: [String] = []
        let grantsHint = "(the grants: docs/auth-libraries.md)"
        for need in needs(schema, policy: policy, tokens: tokens) {
            guard let facts = try c.row(AuthLibraryStatements.table, need.table.quoted) else {
                let missing = "missing table \(need.table)"
                if !problems.contains(missing) { problems.append(missing) }
                continue
            }
            let columns = Dictionary(try c.rows(AuthLibraryStatements.columns, facts.oid).map { ($0.name, $0) }) { a, _ in a }
            let absent = (need.select + need.update + need.index.flatMap { $0 }).filter { columns[$0] == nil }
            var seen: Set<String> = []
            for name in absent where seen.insert(name).inserted { problems.append("missing column \(need.table).\(name)") }
            if !absent.isEmpty { continue }
            if !facts.schemaUsage { problems.append("no usage privilege on the schema of \(need.table) \(grantsHint)") }
            let noSelect = need.select.filter { columns[$0]?.select != true }
            if !noSelect.isEmpty { problems.append("no select privilege on \(need.table) (\(noSelect.joined(separator: ", "))) \(grantsHint)") }
            let noUpdate = need.update.filter { columns[$0]?.update != true }
            if !noUpdate.isEmpty { problems.append("no update privilege on \(need.table) (\(noUpdate.joined(separator: ", "))) \(grantsHint)") }
            if !need.select.isEmpty && !facts.delete { problems.append("no delete privilege on \(need.table) \(grantsHint)") }
            if facts.rowsHidden {
                problems.append("row-level security on \(need.table) hides its rows from this role (add a policy for it: README)")
            }
            if !need.index.isEmpty {
                let indexes = try c.rows(AuthLibraryStatements.indexes, facts.oid)
                let found = need.index.contains { wanted in
                    indexes.contains { keys in keys.count >= wanted.count && Set(keys.prefix(wanted.count)) == Set(wanted) }
                }
                if !found {
                    let wanted = need.index[0]
                    problems.append(
                        "no index on \(need.table) (\(wanted.joined(separator: ", "))): \(AuthLibraryStatements.createIndex(on: need.table, wanted))")
                }
            }
        }
        var unique: [String] = []
        for p in problems where !unique.contains(p) { unique.append(p) }
        return unique
    }
}
