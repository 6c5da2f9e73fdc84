import Foundation
import Logging
import SiwaCore
import SiwaPostgres
import Testing

@testable import SiwaApp

/// `SIWA_APPLY_TO` (README "Using Supabase Auth / Better Auth / Auth.js") against each library's own schema (`AuthLibrarySchemas`, with
/// version and source), the worker running as a role with exactly the grants of docs/auth-libraries.md.
@Suite("Auth libraries' own tables", .needsDatabase)
struct AuthLibraryTests {
    static let hour = AuthLibraryDatabase.hour

    static func config(_ kind: AuthLibraryKind, _ policy: AccountDeletePolicy = .unlink) -> AuthLibraryConfiguration {
        AuthLibraryConfiguration(targets: [kind], onAccountDelete: policy)
    }

    // MARK: Supabase

    /// docs/auth-libraries.md: row-level security is on for Supabase's auth tables; the worker's role needs a policy.
    static let supabasePolicies = """
        CREATE POLICY siwa_worker ON auth.identities TO ROLE USING (true);
        CREATE POLICY siwa_worker ON auth.sessions TO ROLE USING (true);
        CREATE POLICY siwa_worker ON auth.refresh_tokens TO ROLE USING (true);
        CREATE POLICY siwa_worker ON auth.users TO ROLE USING (true);
        """

    /// Users: A (Apple only), B (Apple and email), G (Google only, whose provider id happens to be
    /// A's Apple sub). Each has an old session (two hours before `t0`) and a new one (an hour
    /// after), each with a refresh token.
    static func supabase(_ policy: AccountDeletePolicy) throws -> AuthLibraryDatabase {
        let db = try AuthLibraryDatabase(schema: AuthLibrarySchemas.supabase, operatorSQL: supabasePolicies, config: config(.supabase, policy))
        let t = db.t0
        _ = try TestDatabase.query(
            db.url,
            """
            INSERT INTO auth.users (id, email, encrypted_password, created_at) VALUES
              ('00000000-0000-0000-0000-00000000000a', 'a@privaterelay.appleid.com', NULL, now()),
              ('00000000-0000-0000-0000-00000000000b', 'b@example.com', '$2a$10$hash', now()),
              ('00000000-0000-0000-0000-00000000000c', 'g@example.com', NULL, now());
            INSERT INTO auth.identities (provider_id, user_id, identity_data, provider, created_at) VALUES
              ('sb.a', '00000000-0000-0000-0000-00000000000a', '{"sub":"sb.a","email":"a@privaterelay.appleid.com"}', 'apple', now()),
              ('sb.b', '00000000-0000-0000-0000-00000000000b', '{"sub":"sb.b","email":"b@privaterelay.appleid.com"}', 'apple', now()),
              ('00000000-0000-0000-0000-00000000000b', '00000000-0000-0000-0000-00000000000b', '{"email":"b@example.com"}', 'email', now()),
              ('sb.a', '00000000-0000-0000-0000-00000000000c', '{"sub":"sb.a","email":"g@example.com"}', 'google', now());
            INSERT INTO auth.sessions (id, user_id, created_at)
            SELECT ('00000000-0000-0000-0000-0000000001' || u || o)::uuid, ('00000000-0000-0000-0000-00000000000' || u)::uuid,
                   \(db.at(t)) + CASE o WHEN '0' THEN interval '-2 hours' ELSE interval '1 hour' END
            FROM unnest(ARRAY['a', 'b', 'c']) u, unnest(ARRAY['0', '1']) o;
            INSERT INTO auth.refresh_tokens (instance_id, token, user_id, revoked, created_at, session_id)
            SELECT '00000000-0000-0000-0000-000000000000', 'tok-' || s.id, s.user_id::text, false, s.created_at, s.id FROM auth.sessions s;
            """)
        return db
    }

    /// Sessions (and their refresh tokens) of a user, `o` old / `n` new, in order.
    static func supabaseSessions(_ db: AuthLibraryDatabase, _ user: String) throws -> String {
        let rows = try db.rows(
            """
            SELECT CASE WHEN s.id::text LIKE '%0' THEN 'o' ELSE 'n' END || count(r.id)
            FROM auth.sessions s LEFT JOIN auth.refresh_tokens r ON r.session_id = s.id
            WHERE s.user_id = ('00000000-0000-0000-0000-00000000000' || $1)::uuid GROUP BY s.id ORDER BY 1 DESC
            """, [user])
        return rows.compactMap { $0.first ?? nil }.joined(separator: ",")
    }

    @Test("Supabase: consent-revoked ends sessions created at or before it (and their refresh tokens); others and other providers untouched")
    func supabaseConsentRevoked() throws {
        let db = try Self.supabase(.unlink)
        #expect(try db.event("consent-revoked", sub: "sb.a", at: db.t0))
        // An unknown user: siwa.* only.
        #expect(try db.event("consent-revoked", sub: "sb.nobody", at: db.t0))
        try db.apply()
        #expect(try Self.supabaseSessions(db, "a") == "n1")
        #expect(try Self.supabaseSessions(db, "b") == "o1,n1")
        #expect(try db.scalar("SELECT count(*) FROM auth.refresh_tokens") == "5")
        // G's Google identity has A's sub as provider id: not Apple, untouched.
        #expect(try Self.supabaseSessions(db, "c") == "o1,n1")
        #expect(try db.scalar("SELECT count(*) FROM auth.identities") == "4")
        #expect(try db.scalar("SELECT status FROM siwa.accounts WHERE apple_sub = 'sb.nobody'") == "consent_revoked")
        // Older, late: still ends what was created before it (nothing left), the new session stays.
        #expect(try db.event("consent-revoked", sub: "sb.a", at: db.t0 - Self.hour))
        try db.apply()
        #expect(try Self.supabaseSessions(db, "a") == "n1")
    }

    @Test("Supabase: email events are recorded in the Apple identity's identity_data, in event-time order")
    func supabaseEmail() throws {
        let db = try Self.supabase(.unlink)
        #expect(try db.event("email-disabled", sub: "sb.b", at: db.t0, email: "b2@privaterelay.appleid.com", isPrivate: true))
        try db.apply()
        // Late and older: changes nothing.
        #expect(try db.event("email-enabled", sub: "sb.b", at: db.t0 - Self.hour, email: "old@privaterelay.appleid.com", isPrivate: true))
        try db.apply()
        let data = try db.rows(
            """
            SELECT identity_data ->> 'email', identity_data ->> 'is_private_email', identity_data ->> 'email_forwarding', email,
                   identity_data ->> 'sub'
            FROM auth.identities WHERE provider = 'apple' AND provider_id = 'sb.b'
            """)
        #expect(data == [["b2@privaterelay.appleid.com", "true", "false", "b2@privaterelay.appleid.com", "sb.b"]])
        // The email identity of the same user is not touched.
        #expect(try db.scalar("SELECT identity_data::text FROM auth.identities WHERE provider = 'email'") == #"{"email": "b@example.com"}"#)
        #expect(try db.event("email-enabled", sub: "sb.b", at: db.t0 + Self.hour, email: "b2@privaterelay.appleid.com", isPrivate: true))
        try db.apply()
        #expect(try db.scalar("SELECT identity_data ->> 'email_forwarding' FROM auth.identities WHERE provider_id = 'sb.b'") == "true")
        // The same state again (newer: applied): the identity is not rewritten.
        let version = "SELECT xmin::text || '/' || updated_at::text FROM auth.identities WHERE provider_id = 'sb.b'"
        let before = try db.scalar(version)
        #expect(try db.event("email-enabled", sub: "sb.b", at: db.t0 + 2 * Self.hour, email: "b2@privaterelay.appleid.com", isPrivate: true))
        try db.apply()
        #expect(try db.scalar("SELECT count(*) FROM siwa.events WHERE sub = 'sb.b' AND outcome = 'applied'") == "3")
        #expect(try db.scalar(version) == before)
    }

    @Test(
        "Supabase, unlink: account-delete (and an in-app deletion) ends the sessions before it and removes the Apple identity; the user stays; deletion is final"
    )
    func supabaseDeleteUnlink() throws {
        let db = try Self.supabase(.unlink)
        #expect(try db.event("account-delete", sub: "sb.a", at: db.t0))
        // The app deletes B itself (now: after both of B's sessions).
        _ = try TestDatabase.query(db.url, "SELECT siwa.request_deletion('sb.b', NULL)")
        try db.apply()
        #expect(try Self.supabaseSessions(db, "a") == "n1")
        #expect(try Self.supabaseSessions(db, "b") == "")
        #expect(
            try db.scalar("SELECT string_agg(provider || ':' || provider_id, ',' ORDER BY provider) FROM auth.identities")
                == "email:00000000-0000-0000-0000-00000000000b,google:sb.a")
        #expect(try db.scalar("SELECT count(*) FROM auth.users") == "3")
        // Later events for the deleted user: nothing (a session created later survives).
        #expect(try db.event("consent-revoked", sub: "sb.a", at: db.t0 + 3 * Self.hour))
        #expect(try db.event("email-enabled", sub: "sb.a", at: db.t0 + 3 * Self.hour, email: "x@privaterelay.appleid.com"))
        try db.apply()
        #expect(try Self.supabaseSessions(db, "a") == "n1")
        #expect(try Self.supabaseSessions(db, "c") == "o1,n1")
    }

    @Test("Supabase, delete-user: the user goes when Apple was their only identity; a user with another identity stays")
    func supabaseDeleteUser() throws {
        let db = try Self.supabase(.deleteUser)
        #expect(try db.event("account-delete", sub: "sb.a", at: db.t0))
        #expect(try db.event("account-delete", sub: "sb.b", at: db.t0))
        try db.apply()
        #expect(try db.scalar("SELECT string_agg(right(id::text, 1), ',' ORDER BY id) FROM auth.users") == "b,c")
        #expect(try Self.supabaseSessions(db, "a") == "")
        #expect(try Self.supabaseSessions(db, "b") == "n1")
        #expect(try db.scalar("SELECT string_agg(provider, ',' ORDER BY provider) FROM auth.identities") == "email,google")
    }

    // MARK: Better Auth

    static let betterAuthIndex = #"CREATE INDEX ON "account" ("accountId");"#

    /// Users: A (Apple only), B (Apple and a password), C (GitHub). Old and new sessions each.
    static func betterAuth(_ policy: AccountDeletePolicy, snake: Bool = false, tokens: LibraryTokenAdoption? = nil) throws -> AuthLibraryDatabase {
        var config = config(.betterAuth, policy)
        if snake { config.betterAuthTables = ["app.users", "app.sessions", "app.accounts"].compactMap(TableName.parse) }
        let db = try AuthLibraryDatabase(
            schema: snake ? AuthLibrarySchemas.betterAuthSnakePlural : AuthLibrarySchemas.betterAuth,
            operatorSQL: snake ? "CREATE INDEX ON app.accounts (provider_id, account_id);" : betterAuthIndex,
            config: config, tokens: tokens)
        let (user, session, account) = snake ? ("app.users", "app.sessions", "app.accounts") : (#""user""#, #""session""#, #""account""#)
        let c: (String, String) -> String = { camel, s in snake ? s : "\"\(camel)\"" }
        _ = try TestDatabase.query(
            db.url,
            """
            INSERT INTO \(user) (id, name, email, \(c("emailVerified", "email_verified")), \(c("createdAt", "created_at")), \(c("updatedAt", "updated_at")))
            SELECT u, u, u || '@example.com', true, now(), now() FROM unnest(ARRAY['a', 'b', 'c']) u;
            INSERT INTO \(account) (id, \(c("accountId", "account_id")), \(c("providerId", "provider_id")), \(c("userId", "user_id")),
                                    \(c("refreshToken", "refresh_token")), password, \(c("updatedAt", "updated_at"))) VALUES
              ('acc-a', 'ba.a', 'apple', 'a', 'r-apple-a', NULL, now()),
              ('acc-b', 'ba.b', 'apple', 'b', 'r-apple-b', NULL, now()),
              ('acc-b2', 'b', 'credential', 'b', NULL, 'scrypt-hash', now()),
              ('acc-c', 'ba.a', 'github', 'c', NULL, NULL, now());
            INSERT INTO \(session) (id, \(c("expiresAt", "expires_at")), token, \(c("createdAt", "created_at")), \(c("updatedAt", "updated_at")), \(c("userId", "user_id")))
            SELECT u || o, now() + interval '7 days', 'tok-' || u || o,
                   \(db.at(db.t0)) + CASE o WHEN 'o' THEN interval '-2 hours' ELSE interval '1 hour' END, now(), u
            FROM unnest(ARRAY['a', 'b', 'c']) u, unnest(ARRAY['o', 'n']) o;
            """)
        return db
    }

    static func sessionIDs(_ db: AuthLibraryDatabase, _ table: String) throws -> String? {
        try db.scalar("SELECT string_agg(id::text, ',' ORDER BY id) FROM \(table)")
    }

    @Test(
        "Better Auth (camelCase, its own migration; snake_case plural tables, renamed): consent-revoked, account-delete, unknown users, late events",
        arguments: [false, true])
    func betterAuthEffects(snake: Bool) throws {
        let db = try Self.betterAuth(.unlink, snake: snake)
        let (session, account, user) = snake ? ("app.sessions", "app.accounts", "app.users") : (#""session""#, #""account""#, #""user""#)
        #expect(try db.event("consent-revoked", sub: "ba.a", at: db.t0))
        #expect(try db.event("consent-revoked", sub: "ba.unknown", at: db.t0))
        try db.apply()
        #expect(try Self.sessionIDs(db, session) == "an,bn,bo,cn,co")
        #expect(try db.event("account-delete", sub: "ba.b", at: db.t0 + 2 * Self.hour))
        #expect(try db.event("email-disabled", sub: "ba.a", at: db.t0, email: "a@privaterelay.appleid.com"))
        try db.apply()
        #expect(try Self.sessionIDs(db, session) == "an,cn,co")
        #expect(try db.scalar("SELECT string_agg(id, ',' ORDER BY id) FROM \(account)") == "acc-a,acc-b2,acc-c")
        #expect(try db.scalar("SELECT count(*) FROM \(user)") == "3")
        // Deletion is final: a later consent-revoked finds no Apple account.
        #expect(try db.event("consent-revoked", sub: "ba.b", at: db.t0 + 3 * Self.hour))
        try db.apply()
        #expect(try db.scalar("SELECT count(*) FROM \(account)") == "3")
    }

    @Test("Better Auth, delete-user: the user (and by its foreign keys their sessions) goes when Apple was the only account")
    func betterAuthDeleteUser() throws {
        let db = try Self.betterAuth(.deleteUser)
        #expect(try db.event("account-delete", sub: "ba.a", at: db.t0))
        #expect(try db.event("account-delete", sub: "ba.b", at: db.t0))
        try db.apply()
        #expect(try db.scalar(#"SELECT string_agg(id, ',' ORDER BY id) FROM "user""#) == "b,c")
        #expect(try Self.sessionIDs(db, #""session""#) == "bn,cn,co")
        #expect(try db.scalar(#"SELECT string_agg(id, ',' ORDER BY id) FROM "account""#) == "acc-b2,acc-c")
    }

    // MARK: Auth.js

    static let authjsIndexes = [
        false: #"CREATE INDEX ON accounts ("providerAccountId"); CREATE INDEX ON sessions ("userId"); CREATE INDEX ON accounts ("userId");"#,
        true: #"CREATE INDEX ON "Session" ("userId"); CREATE INDEX ON "Account" ("userId");"#,
    ]

    /// Users 1 (Apple only), 2 (Apple and GitHub), 3 (GitHub). Two sessions each.
    static func authjs(_ policy: AccountDeletePolicy, prisma: Bool, tokens: LibraryTokenAdoption? = nil) throws -> AuthLibraryDatabase {
        var config = config(.authjs, policy)
        if prisma { config.authjsTables = nil }
        let db = try AuthLibraryDatabase(
            schema: prisma ? AuthLibrarySchemas.authjsPrisma : AuthLibrarySchemas.authjsPostgres,
            operatorSQL: authjsIndexes[prisma]!, config: config, grant: false, tokens: tokens)
        // Prisma's tables are found by the check (no SIWA_AUTHJS_TABLES): the grants are for them.
        let schema = AuthLibrarySchema.authjs(tables: prisma ? AuthLibrarySchema.authjsPrismaTables : AuthLibrarySchema.authjsPostgresTables)
        for statement in AuthLibraryCheck.grants(schema, policy: policy, tokens: tokens != nil, role: db.role) {
            _ = try TestDatabase.query(db.url, statement)
        }
        let (users, accounts, sessions) = prisma ? (#""User""#, #""Account""#, #""Session""#) : ("users", "accounts", "sessions")
        let id: (Int) -> String = { prisma ? "'\($0)'" : "\($0)" }
        let stamps = prisma ? #", "updatedAt""# : ""
        let now = prisma ? ", now()" : ""
        _ = try TestDatabase.query(
            db.url,
            """
            INSERT INTO \(users) (id, email\(stamps)) VALUES (\(id(1)), 'one@example.com'\(now)), (\(id(2)), 'two@example.com'\(now)), (\(id(3)), 'three@example.com'\(now));
            INSERT INTO \(accounts) ("userId", type, provider, "providerAccountId", refresh_token\(stamps)) VALUES
              (\(id(1)), 'oidc', 'apple', 'aj.1', 'r1'\(now)), (\(id(2)), 'oidc', 'apple', 'aj.2', 'r2'\(now)),
              (\(id(2)), 'oauth', 'github', '222', NULL\(now)), (\(id(3)), 'oauth', 'github', 'aj.1', NULL\(now));
            INSERT INTO \(sessions) ("sessionToken", "userId", expires\(stamps))
            SELECT 'tok-' || u || '-' || k, \(prisma ? "u::text" : "u"), now() + interval '30 days'\(now)
            FROM generate_series(1, 3) u, generate_series(1, 2) k;
            """)
        return db
    }

    static func authjsSessions(_ db: AuthLibraryDatabase, prisma: Bool) throws -> String? {
        try db.scalar(#"SELECT string_agg("userId"::text, ',' ORDER BY "userId") FROM "# + (prisma ? #""Session""# : "sessions"))
    }

    @Test(
        "Auth.js: consent-revoked ends all the user's sessions (no creation time); a late older one does not end later sign-ins; duplicates apply once",
        arguments: [false, true])
    func authjsConsent(prisma: Bool) throws {
        let db = try Self.authjs(.unlink, prisma: prisma)
        let table = prisma ? #""Session""# : "sessions"
        #expect(try db.event("consent-revoked", sub: "aj.1", at: db.t0))
        #expect(try db.event("consent-revoked", sub: "aj.unknown", at: db.t0))
        try db.apply()
        #expect(try Self.authjsSessions(db, prisma: prisma) == "2,2,3,3")
        // The user signs in again; Apple's retry of the same notification is a duplicate (not
        // stored), and an older one arriving late is stale: the new session survives both.
        _ = try TestDatabase.query(
            db.url,
            #"INSERT INTO \#(table) ("sessionToken", "userId", expires\#(prisma ? #", "updatedAt""# : "")) VALUES ('tok-1-new', \#(prisma ? "'1'" : "1"), now() + interval '1 day'\#(prisma ? ", now()" : ""))"#
        )
        #expect(try db.event("consent-revoked", sub: "aj.1", at: db.t0) == false)
        #expect(try db.event("consent-revoked", sub: "aj.1", at: db.t0 - Self.hour))
        try db.apply()
        #expect(try Self.authjsSessions(db, prisma: prisma) == "1,2,2,3,3")
        #expect(try db.scalar("SELECT outcome FROM siwa.events WHERE sub = 'aj.1' ORDER BY event_time LIMIT 1") == "stale")
    }

    @Test(
        "Auth.js: account-delete ends all sessions and unlinks Apple; delete-user removes a user whose only account was Apple's",
        arguments: [false, true])
    func authjsDelete(prisma: Bool) throws {
        for policy in [AccountDeletePolicy.unlink, .deleteUser] {
            let db = try Self.authjs(policy, prisma: prisma)
            let (users, accounts) = prisma ? (#""User""#, #""Account""#) : ("users", "accounts")
            #expect(try db.event("account-delete", sub: "aj.1", at: db.t0))
            #expect(try db.event("account-delete", sub: "aj.2", at: db.t0))
            try db.apply()
            #expect(try Self.authjsSessions(db, prisma: prisma) == "3,3")
            #expect(
                try db.scalar(#"SELECT string_agg(provider || ':' || "providerAccountId", ',' ORDER BY 1) FROM "# + accounts)
                    == "github:222,github:aj.1")
            #expect(try db.scalar("SELECT string_agg(id::text, ',' ORDER BY id) FROM \(users)") == (policy == .unlink ? "1,2,3" : "2,3"))
        }
    }

    // MARK: Plans

    /// Nodes that read a whole table: a sequential scan, or an index scan without an index condition.
    static func wholeTableReads(_ plan: [String]) -> [String] {
        var problems: [String] = []
        for (i, line) in plan.enumerated() {
            if line.contains("Seq Scan") { problems.append(line) }
            guard line.contains("Index Scan") || line.contains("Index Only Scan") else { continue }
            let details = plan[(i + 1)...].prefix { !$0.contains("->") }
            if !details.contains(where: { $0.contains("Index Cond:") }) { problems.append(line + " (no index condition)") }
        }
        return problems
    }

    /// What the planner believes of the library's tables when a batch comes.
    enum Statistics: String, CaseIterable, Sendable {
        /// Bulk-loaded, never analyzed.
        case neverAnalyzed
        /// Analyzed while (nearly) empty, then bulk-loaded.
        case analyzedEmpty
        /// Analyzed after the bulk load.
        case analyzedLoaded
    }

    @Test(
        "each target's statements stay index probes driven by the batch, whatever the statistics of its bulk-loaded tables",
        arguments: [AuthLibraryKind.supabase, .betterAuth, .authjs], Statistics.allCases)
    func plans(kind: AuthLibraryKind, statistics: Statistics) throws {
        let db: AuthLibraryDatabase
        let load: String
        switch kind {
        case .supabase:
            db = try Self.supabase(.deleteUser)
            load = """
                INSERT INTO auth.users (id) SELECT ('00000000-0000-0000-0001-' || lpad(to_hex(g), 12, '0'))::uuid FROM generate_series(1, 100000) g;
                INSERT INTO auth.identities (provider_id, user_id, identity_data, provider)
                SELECT 'bulk.' || g, ('00000000-0000-0000-0001-' || lpad(to_hex(g), 12, '0'))::uuid, '{}', 'apple' FROM generate_series(1, 100000) g;
                INSERT INTO auth.sessions (id, user_id, created_at)
                SELECT ('00000000-0000-0000-0002-' || lpad(to_hex(g), 12, '0'))::uuid, ('00000000-0000-0000-0001-' || lpad(to_hex(g), 12, '0'))::uuid, now()
                FROM generate_series(1, 100000) g;
                INSERT INTO auth.refresh_tokens (token, session_id) SELECT 't' || g, ('00000000-0000-0000-0002-' || lpad(to_hex(g), 12, '0'))::uuid
                FROM generate_series(1, 100000) g;
                """
        case .betterAuth:
            db = try Self.betterAuth(.deleteUser)
            load = """
                INSERT INTO "user" (id, name, email, "emailVerified") SELECT 'u' || g, 'n', g || '@x', true FROM generate_series(1, 100000) g;
                INSERT INTO "account" (id, "accountId", "providerId", "userId", "updatedAt")
                SELECT 'a' || g, 'bulk.' || g, 'apple', 'u' || g, now() FROM generate_series(1, 100000) g;
                INSERT INTO "session" (id, "expiresAt", token, "updatedAt", "userId")
                SELECT 's' || g, now(), 't' || g, now(), 'u' || g FROM generate_series(1, 100000) g;
                """
        case .authjs:
            db = try Self.authjs(.deleteUser, prisma: false)
            load = """
                INSERT INTO users (id) SELECT g + 10 FROM generate_series(1, 100000) g;
                INSERT INTO accounts ("userId", type, provider, "providerAccountId") SELECT g + 10, 'oidc', 'apple', 'bulk.' || g FROM generate_series(1, 100000) g;
                INSERT INTO sessions ("userId", expires, "sessionToken") SELECT g + 10, now(), 't' || g FROM generate_series(1, 100000) g;
                """
        }
        let targets = try db.resolve()
        let schema = try #require(targets.schemas.first)
        let tables = [schema.identities.table, schema.sessions.table, schema.users] + (schema.sessions.refreshTokens.map { [$0.table] } ?? [])
        let analyze = tables.map { "ANALYZE \($0.quoted);" }.joined()
        _ = try TestDatabase.query(db.url, tables.map { "ALTER TABLE \($0.quoted) SET (autovacuum_enabled = false);" }.joined())
        if statistics == .analyzedEmpty { _ = try TestDatabase.query(db.url, analyze) }
        _ = try TestDatabase.query(db.url, load)
        if statistics == .analyzedLoaded { _ = try TestDatabase.query(db.url, analyze) }
        let subs = (1...1000).map { "bulk.\($0 * 97)" }
        let c = try PostgresConnection(conninfo: db.workerURL)
        try c.transaction(begin: WorkerStatements.beginBatch(statementTimeoutSeconds: 30, lockTimeoutSeconds: 5)) { c throws(PostgresError) in
            var statements: [(String, String, [String?])] = [
                (
                    "end", AuthLibraryStatements.endSessions(schema).sql,
                    AuthLibraryStatements.endSessions(schema).bind(subs.map { .init(sub: $0, beforeMillis: 1) })
                ),
                (
                    "unlink", AuthLibraryStatements.unlink(schema, deleteUsers: true).sql,
                    AuthLibraryStatements.unlink(schema, deleteUsers: true).bind(subs)
                ),
                (
                    "unlink only", AuthLibraryStatements.unlink(schema, deleteUsers: false).sql,
                    AuthLibraryStatements.unlink(schema, deleteUsers: false).bind(subs)
                ),
            ]
            if let record = AuthLibraryStatements.recordAddress(schema) {
                statements.append(
                    ("address", record.sql, record.bind(subs.map { .init(sub: $0, email: "e", isPrivateEmail: true, emailForwarding: false) })))
            }
            for (name, sql, parameters) in statements {
                let plan = try c.execute("EXPLAIN " + sql, parameters).rows.compactMap { $0.first ?? nil }
                let problems = Self.wholeTableReads(plan)
                #expect(problems.isEmpty, "\(kind) \(name), \(statistics): reads a whole table: \(problems)\n\(plan.joined(separator: "\n"))")
            }
        }
    }

    // MARK: The start-up check

    @Test("start-up check: a missing column, index, grant or row-level security policy stops the start with one line naming it")
    func startUpCheck() throws {
        let supabase = try Self.supabase(.unlink)
        #expect(try supabase.resolve().schemas == [.supabase])
        _ = try TestDatabase.query(supabase.url, "ALTER TABLE auth.sessions DROP COLUMN created_at CASCADE")
        #expect(try failure(supabase) == "SIWA_APPLY_TO=supabase: missing column auth.sessions.created_at")

        let noPolicy = try AuthLibraryDatabase(schema: AuthLibrarySchemas.supabase, config: Self.config(.supabase))
        let line = try failure(noPolicy)
        #expect(line.contains("row-level security on auth.identities hides its rows"), "\(line)")
        #expect(!line.contains("\n"))

        let better = try Self.betterAuth(.deleteUser)
        // Tables named without a schema are found where the login's own search_path finds them.
        let found = AuthLibrarySchema.betterAuthDefaultTables.map { table -> TableName in
            var t = table
            t.foundIn = "public"
            return t
        }
        #expect(try better.resolve().schemas == [.betterAuth(tables: found, snakeCase: false)])
        _ = try TestDatabase.query(better.url, #"REVOKE DELETE ON "session" FROM \#(better.role)"#)
        #expect(try failure(better) == "SIWA_APPLY_TO=better-auth: no delete privilege on session (the grants: docs/auth-libraries.md)")

        // Better Auth's own schema has no index on "accountId": the check names the one to create.
        let noIndex = try AuthLibraryDatabase(schema: AuthLibrarySchemas.betterAuth, config: Self.config(.betterAuth))
        #expect(try failure(noIndex) == #"SIWA_APPLY_TO=better-auth: no index on account (accountId): CREATE INDEX ON "account" ("accountId")"#)

        let authjs = try Self.authjs(.unlink, prisma: false)
        _ = try TestDatabase.query(authjs.url, #"REVOKE SELECT ("userId") ON sessions FROM \#(authjs.role)"#)
        #expect(try failure(authjs) == "SIWA_APPLY_TO=authjs: no select privilege on sessions (userId) (the grants: docs/auth-libraries.md)")

        let none = try AuthLibraryDatabase(schema: "", config: Self.config(.authjs), grant: false)
        #expect(try failure(none) == "SIWA_APPLY_TO=authjs: missing table accounts; missing table sessions")
    }

    func failure(_ db: AuthLibraryDatabase) throws -> String {
        do {
            _ = try db.resolve()
        } catch let error as AuthLibraryCheck.Failure {
            return error.description
        }
        Issue.record("the check passed")
        return ""
    }

    @Test("serve/work stop at start with the check's line; docs/auth-libraries.md lists every grant each target needs")
    func applicationStopsAndReadmeGrants() throws {
        let db = try AuthLibraryDatabase(schema: AuthLibrarySchemas.betterAuth, config: Self.config(.betterAuth))
        var config = ServerConfiguration()
        config.databaseURL = db.workerURL
        config.authLibraries = Self.config(.betterAuth)
        config.listen = ListenAddress(host: "127.0.0.1", port: 0)
        config.adminListen = ListenAddress(host: "127.0.0.1", port: 0)
        let app = Application(configuration: config, roles: .work, logger: .init(label: "t") { _ in SwiftLogNoOpLogHandler() })
        var line = ""
        do { try app.start() } catch { line = "\(error)" }
        #expect(line.hasPrefix("SIWA_APPLY_TO=better-auth: no index on account"), "\(line)")
        app.shutdown()

        let guide = try String(contentsOf: DocumentationRoot.authLibraries, encoding: .utf8)
        let schemas: [AuthLibrarySchema] = [
            .supabase, .betterAuth(tables: AuthLibrarySchema.betterAuthDefaultTables, snakeCase: false),
            .authjs(tables: AuthLibrarySchema.authjsPostgresTables), .authjs(tables: AuthLibrarySchema.authjsPrismaTables),
        ]
        for schema in schemas {
            for policy in AccountDeletePolicy.allCases {
                for tokens in [false, true] {
                    for grant in AuthLibraryCheck.grants(schema, policy: policy, tokens: tokens) {
                        #expect(guide.contains(grant), "docs/auth-libraries.md lacks \(grant)")
                        // No password, no session or provider token: the worker's role may not
                        // read them. With in-app deletion, the Apple identity's refresh token.
                        let secrets = ["password", "token", "Token", "refresh", "access"]
                        var select = grant.components(separatedBy: "SELECT (").dropFirst().first?.prefix { $0 != ")" } ?? ""
                        if tokens, grant.contains(" ON \(schema.identities.table.quoted) "), let column = schema.identities.refreshToken {
                            #expect(select.hasSuffix(", \"\(column)\""), "\(grant)")
                            select = select.replacingOccurrences(of: ", \"\(column)\"", with: "")[...]
                        }
                        #expect(!secrets.contains { select.contains($0) }, "\(grant)")
                    }
                }
            }
        }
    }
}

enum DocumentationRoot {
    static let authLibraries = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("docs/auth-libraries.md")
}
