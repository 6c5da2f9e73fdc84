import Foundation
import Logging
import SiwaCore
import SiwaCrypto
import SiwaPostgres
import SiwaRuntime
import Testing

@testable import SiwaApp

/// The Apple refresh tokens Better Auth and Auth.js store in their own account rows (README
/// "Using Supabase Auth / Better Auth / Auth.js"), on the libraries' real schemas
/// (`AuthLibrarySchemas`), the worker as a role with exactly the guide's grants, the fake Apple
/// issuing, revoking and validating the tokens: an in-app deletion revokes the library's token at
/// Apple, reconciliation validates it, an encrypted or absent one is left alone, and a token that
/// came through siwa-notify's own sign-in is never replaced.
@Suite(
    "Tokens the auth libraries store", .serialized,
    .needsDatabase)
struct LibraryTokenTests {
    typealias S = AppleTestSetup

    enum Target: String, CaseIterable, CustomStringConvertible {
        case authjs, authjsPrisma, betterAuth, betterAuthSnake
        var description: String { rawValue }
        /// Two users whose only account is Apple's (`AuthLibraryTests`' fixtures).
        var subs: (String, String) { self == .authjs || self == .authjsPrisma ? ("aj.1", "aj.2") : ("ba.a", "ba.b") }
        var source: String { self == .authjs || self == .authjsPrisma ? "authjs" : "better-auth" }
    }

    /// One library's database (the worker adopting tokens for `S.clientID`) and the fake Apple.
    struct Setup {
        var db: AuthLibraryDatabase
        var fake: FakeApple
        var adoption: LibraryTokenAdoption
        var schema: AuthLibrarySchema
        var target: Target

        /// Sets the library's stored refresh token of `sub` (nil: none), as its sign-in does.
        func setToken(_ sub: String, _ token: String?) throws {
            let i = schema.identities
            _ = try TestDatabase.query(
                db.url,
                #"UPDATE \#(i.table.quoted) SET "\#(i.refreshToken!)" = $2 WHERE "\#(i.provider)" = 'apple' AND "\#(i.subject)" = $1"#,
                [sub, token])
        }

        /// A refresh token the fake Apple issued for `sub`, stored by the library.
        func libraryToken(_ sub: String) throws -> String {
            let token = try fake.issueTokens(for: .init(sub: sub, email: nil, isPrivateEmail: nil), clientID: S.clientID).refreshToken
            try setToken(sub, token)
            return token
        }

        /// One sweep over the library's identities, `pageSize` at a time; how many were adopted.
        func sweep(pageSize: Int = 1) throws -> Int {
            var options = LibraryTokenSweep.Options()
            options.pageSize = pageSize
            options.pagePause = 0
            let sweep = LibraryTokenSweep(
                conninfo: db.workerURL, targets: try db.resolve(), adoption: adoption, options: options, logger: LibraryTokenTests.quiet)
            return try sweep.pass(schema, on: try PostgresConnection(conninfo: db.workerURL))
        }

        func credentials() -> AppleAPICredentials {
            let client = AppleClient(
                configuration: AppleAPIConfiguration(
                    teamID: S.teamID, keyID: S.keyID, privateKeyFile: "-", tokenKeyFile: "-", baseURL: fake.baseURL),
                privateKey: S.teamKey, logger: LibraryTokenTests.quiet)
            return AppleAPICredentials(client: client, vault: adoption.vault, audiences: [S.clientID])
        }

        /// Runs a revoker until `condition` holds (or 20 s); its log goes to `logs`.
        func revoke(logs: LogSink, until condition: () throws -> Bool) throws -> Bool {
            var options = Revoker.Options()
            options.pollInterval = .milliseconds(50)
            let revoker = Revoker(
                conninfo: db.workerURL, apple: credentials(), options: options, logger: TestHarness.logger(into: logs), metrics: Metrics())
            revoker.start()
            defer { revoker.stop(deadline: Deadline(after: .seconds(5))) }
            return try eventually(timeout: 20, condition)
        }

        func scalar(_ sql: String, _ parameters: [String?] = []) throws -> String? { try db.scalar(sql, parameters) }
    }

    static let quiet = Logger(label: "test") { _ in SwiftLogNoOpLogHandler() }

    static func setup(_ target: Target, policy: AccountDeletePolicy = .unlink) throws -> Setup {
        let fake = try S.fake()
        let adoption = LibraryTokenAdoption(vault: TokenVault(keys: [try TokenKey(bytes: SecureRandom.bytes(32))]), clientID: S.clientID)
        let db: AuthLibraryDatabase
        switch target {
        case .authjs: db = try AuthLibraryTests.authjs(policy, prisma: false, tokens: adoption)
        case .authjsPrisma: db = try AuthLibraryTests.authjs(policy, prisma: true, tokens: adoption)
        case .betterAuth: db = try AuthLibraryTests.betterAuth(policy, tokens: adoption)
        case .betterAuthSnake: db = try AuthLibraryTests.betterAuth(policy, snake: true, tokens: adoption)
        }
        let schema = try #require(try db.resolve().schemas.first)
        // As a worker's process starting with this key file would (the tests queue with it directly).
        try StoredTokenKeys.record(adoption.vault, conninfo: db.url)
        return Setup(db: db, fake: fake, adoption: adoption, schema: schema, target: target)
    }

    @Test("an in-app deletion of an Auth.js or Better Auth user revokes the token the library stores at Apple, proven", arguments: Target.allCases)
    func deletionRevokesLibraryToken(target: Target) throws {
        let s = try Self.setup(target)
        defer { s.fake.stop() }
        let (one, two) = target.subs
        let token = try s.libraryToken(one)
        // The other user's library row holds no Apple-shaped token (the fixture's): nothing to revoke.
        _ = try TestDatabase.query(s.db.url, "SELECT siwa.request_deletion($1, NULL), siwa.request_deletion($2, NULL)", [one, two])
        try s.db.apply()
        // Adopted in the deletion's transaction before the identity went, then moved to revocation.
        #expect(try s.scalar("SELECT count(*) FROM siwa.apple_tokens") == "0")
        #expect(try s.scalar("SELECT string_agg(status, ',') FROM siwa.revocations WHERE apple_sub = $1", [one]) == "pending")
        #expect(
            try s.scalar(
                "SELECT ciphertext IS NOT NULL AND position(convert_to($2, 'UTF8') IN ciphertext) = 0 FROM siwa.revocations WHERE apple_sub = $1",
                [one, token]) == "t")
        #expect(try s.scalar("SELECT string_agg(status, ',') FROM siwa.revocations WHERE apple_sub = $1", [two]) == "no_token")
        let i = s.schema.identities
        #expect(try s.scalar(#"SELECT count(*) FROM \#(i.table.quoted) WHERE "\#(i.provider)" = 'apple'"#) == "0")

        let logs = LogSink.capturing()
        let revoked = try s.revoke(logs: logs) {
            try s.scalar("SELECT status || ':' || coalesce(confirmation, '') FROM siwa.revocations WHERE apple_sub = $1", [one]) == "done:confirmed"
        }
        #expect(revoked)
        let calls = s.fake.calls(to: "/auth/revoke")
        #expect(calls.count == 1)
        #expect(calls.first?.form?["token"] == token && calls.first?.form?["client_id"] == S.clientID)
        #expect(try s.scalar("SELECT count(*) FROM siwa.revocations WHERE ciphertext IS NOT NULL") == "0")
        #expect(!logs.lines.contains { $0.contains(token) })
    }

    @Test(
        "reconciliation validates the tokens the library stores: a revoked grant queues consent-revoked, applied to the library; each token adopted once"
    )
    func reconciliationValidatesLibraryTokens() throws {
        for target in [Target.authjs, .betterAuth] {
            let s = try Self.setup(target)
            defer { s.fake.stop() }
            let (one, two) = target.subs
            let gone = try s.libraryToken(one)
            _ = try s.libraryToken(two)
            // Keyset pages of one identity: every Apple identity is seen (Better Auth's fixture
            // has a GitHub account with the same provider id, skipped).
            #expect(try s.sweep() == 2)
            #expect(
                try s.scalar(
                    "SELECT string_agg(source || ':' || (signed_in_at BETWEEN now() - interval '1 minute' AND now())::text || ':' || client_id, ',') FROM siwa.apple_tokens"
                ) == "\(target.source):true:\(S.clientID),\(target.source):true:\(S.clientID)")
            #expect(try s.scalar("SELECT count(*) FROM siwa.library_tokens WHERE length(token_hash) = 32") == "2")
            // The user's report says where the token held came from.
            #expect(
                try s.scalar("SELECT siwa.user_report($1) -> 'tokens_held' -> 0 ->> 'source'", [one]) == target.source)
            s.fake.revokeGrant(gone)  // the user stopped using Apple sign-in; the notification never came
            _ = try TestDatabase.query(s.db.url, "UPDATE siwa.apple_tokens SET next_validation_at = now()")

            let (reconciler, _) = try ReconcileTests.reconciler(s.fake, conninfo: s.db.workerURL, vault: s.adoption.vault)
            reconciler.start()
            let found = try eventually(timeout: 20) {
                try s.scalar("SELECT count(*) FROM siwa.events WHERE sub = $1 AND claims->>'source' = 'reconcile'", [one]) == "1"
                    && s.scalar("SELECT validated_at IS NOT NULL FROM siwa.apple_tokens WHERE apple_sub = $1", [two]) == "t"
            }
            reconciler.stop(deadline: Deadline(after: .seconds(5)))
            #expect(found, "\(target)")
            // The worker applies it to the library: the user's sessions before it end; the other's stay.
            let sessions = s.schema.sessions
            let userOf: (String) throws -> String? = { sub in
                try s.scalar(
                    #"SELECT "\#(s.schema.identities.user)"::text FROM \#(s.schema.identities.table.quoted) WHERE "\#(s.schema.identities.subject)" = $1 AND "\#(s.schema.identities.provider)" = 'apple'"#,
                    [sub])
            }
            let countSessions: (String?) throws -> String? = { user in
                try s.scalar(#"SELECT count(*) FROM \#(sessions.table.quoted) WHERE "\#(sessions.user)"::text = $1"#, [user])
            }
            let (userOne, userTwo) = (try userOf(one), try userOf(two))
            #expect(try countSessions(userOne) == "2" && countSessions(userTwo) == "2")
            try s.db.apply()
            #expect(try s.scalar("SELECT status FROM siwa.app_accounts WHERE apple_sub = $1", [one]) == "consent_revoked")
            #expect(try countSessions(userOne) == "0", "\(target)")
            #expect(try countSessions(userTwo) == "2", "\(target)")

            // Adopted once: the dead token the library still holds is not taken again (no loop of
            // consent-revoked); a new one (the user signed in again) is.
            #expect(try s.sweep(pageSize: 10) == 0)
            #expect(try s.scalar("SELECT count(*) FROM siwa.apple_tokens WHERE apple_sub = $1", [one]) == "0")
            _ = try s.libraryToken(one)
            #expect(try s.sweep(pageSize: 10) == 1)
            #expect(try s.scalar("SELECT count(*) FROM siwa.apple_tokens") == "2")
        }
    }

    @Test("a token the library stores encrypted, or none, is left alone: nothing adopted, nothing sent to Apple", arguments: Target.allCases)
    func encryptedOrAbsentLeftAlone(target: Target) throws {
        let s = try Self.setup(target)
        defer { s.fake.stop() }
        let (one, two) = target.subs
        // Better Auth's `encryptOAuthTokens` writes hex; others base64 or a JWE.
        let encrypted = [Hex.encode(SecureRandom.bytes(48)), "eyJhbGciOiJkaXIiLCJlbmMiOiJBMjU2R0NNIn0..aXY.Y2lwaGVy.dGFn"]
        try s.setToken(one, encrypted[target.rawValue.count % 2])
        try s.setToken(two, nil)
        #expect(try s.sweep() == 0)
        #expect(try s.scalar("SELECT count(*) FROM siwa.apple_tokens") == "0")
        _ = try TestDatabase.query(s.db.url, "SELECT siwa.request_deletion($1, NULL), siwa.request_deletion($2, NULL)", [one, two])
        try s.db.apply()
        #expect(try s.scalar("SELECT string_agg(status, ',' ORDER BY apple_sub) FROM siwa.revocations") == "no_token,no_token")
        // A revoker runs until it has finished a due job queued after these two (another user's
        // real token: a revocation is born with its token): it has claimed whatever was due, and
        // Apple heard of that token only.
        let (signToken, _) = try s.fake.issueTokens(for: .init(sub: "sign.of.a.round"), clientID: S.clientID)
        let sealed = try s.adoption.vault.seal(signToken, sub: "sign.of.a.round", clientID: S.clientID)
        _ = try TestDatabase.query(
            s.db.url, "SELECT siwa.queue_revocation('sign.of.a.round', $1, $2, decode($3, 'hex'))",
            [S.clientID, sealed.keyID, Hex.encode(sealed.ciphertext)])
        let sign = try #require(try s.scalar("SELECT id FROM siwa.revocations WHERE apple_sub = 'sign.of.a.round'"))
        #expect(
            try s.revoke(logs: LogSink.capturing()) { try s.scalar("SELECT status FROM siwa.revocations WHERE id = $1", [sign]) == "done" },
            "the revoker never finished the job queued after them")
        #expect(
            !s.fake.calls.isEmpty && s.fake.calls.allSatisfy { ($0.form?["token"] ?? $0.form?["refresh_token"]) == signToken },
            "only the sign's token went to Apple")
    }

    @Test(
        "an adopted token is dated when adopted: an older consent-revoked arriving late keeps it, a deletion takes it (also one requested before the adoption)"
    )
    func adoptedTokenDated() throws {
        let target = Target.betterAuth
        let s = try Self.setup(target)
        defer { s.fake.stop() }
        let (one, two) = target.subs
        _ = try s.libraryToken(one)
        _ = try s.libraryToken(two)
        // The deletion of `two` is requested before the sweep adopts its token, applied after.
        _ = try TestDatabase.query(s.db.url, "SELECT siwa.request_deletion($1, NULL)", [two])
        #expect(try s.sweep(pageSize: 10) == 2)
        // Apple's consent-revoked of an hour ago (an older grant) arrives now.
        let hourAgo = Int64(Date().timeIntervalSince1970 * 1000) - 3_600_000
        #expect(try s.db.event("consent-revoked", sub: one, at: hourAgo, aud: S.clientID))
        try s.db.apply()
        #expect(try s.scalar("SELECT source FROM siwa.apple_tokens WHERE apple_sub = $1", [one]) == target.source)
        #expect(
            try s.scalar("SELECT status || ':' || (ciphertext IS NOT NULL)::text FROM siwa.revocations WHERE apple_sub = $1", [two])
                == "pending:true")
        // A later in-app deletion revokes the token kept.
        _ = try TestDatabase.query(s.db.url, "SELECT siwa.request_deletion($1, NULL)", [one])
        try s.db.apply()
        #expect(
            try s.scalar("SELECT status || ':' || (ciphertext IS NOT NULL)::text FROM siwa.revocations WHERE apple_sub = $1", [one])
                == "pending:true")
        #expect(try s.scalar("SELECT count(*) FROM siwa.apple_tokens") == "0")
    }

    @Test("a token that came through siwa-notify's sign-in wins over the library's: never replaced, and the one revoked")
    func handOverWins() throws {
        for target in [Target.authjsPrisma, .betterAuthSnake] {
            let s = try Self.setup(target)
            defer { s.fake.stop() }
            let (one, two) = target.subs
            let handedOver = try ReconcileTests.storeToken(one, fake: s.fake, vault: s.adoption.vault, conninfo: s.db.url)
            let library = try s.libraryToken(one)
            #expect(handedOver != library)
            let before = try s.scalar("SELECT encode(ciphertext, 'hex') FROM siwa.apple_tokens WHERE apple_sub = $1", [one])
            #expect(try s.sweep() == 0)
            // The read offers nothing to adopt there (the other user's value is offered, and is
            // not Apple's); a write racing with the sign-in (the token read before it was
            // stored) leaves the sign-in's token in place.
            let c = try PostgresConnection(conninfo: s.db.workerURL)
            let page = try #require(LibraryTokenStatements.page(s.schema))
            #expect(try c.rows(page, ("", 10, S.clientID)).map { "\($0.sub):\($0.token == nil)" } == ["\(one):true", "\(two):false"])
            #expect(try s.adoption.adopt([.init(sub: one, token: library)], from: s.schema, on: c) == 0)
            #expect(
                try s.scalar(
                    "SELECT encode(ciphertext, 'hex') || ':' || coalesce(source, 'sign-in') FROM siwa.apple_tokens WHERE apple_sub = $1", [one])
                    == (before ?? "") + ":sign-in")

            // Adopted first, then a sign-in hands a token over: it replaces the adopted one, and
            // a newer library token does not take the place back.
            _ = try s.libraryToken(two)
            #expect(try s.sweep() == 1)
            let signedIn = try ReconcileTests.storeToken(two, fake: s.fake, vault: s.adoption.vault, conninfo: s.db.url)
            #expect(try s.scalar("SELECT coalesce(source, 'sign-in') FROM siwa.apple_tokens WHERE apple_sub = $1", [two]) == "sign-in")
            #expect(try s.scalar("SELECT siwa.user_report($1) -> 'tokens_held' -> 0 ->> 'source'", [two]) == "sign-in")
            _ = try s.libraryToken(two)
            #expect(try s.sweep() == 0)

            // The deletion revokes the sign-in's tokens, not the library's.
            _ = try TestDatabase.query(s.db.url, "SELECT siwa.request_deletion($1, NULL), siwa.request_deletion($2, NULL)", [one, two])
            try s.db.apply()
            let revoked = try s.revoke(logs: LogSink.capturing()) {
                try s.scalar("SELECT string_agg(status, ',') FROM siwa.revocations") == "done,done"
            }
            #expect(revoked, "\(target)")
            #expect(Set(s.fake.calls(to: "/auth/revoke").compactMap { $0.form?["token"] }) == [handedOver, signedIn])
        }
    }

    @Test("a deletion adopts the token of the user's Apple identity, not of another provider's with the same id", arguments: Target.allCases)
    func deletionFindsAppleIdentity(target: Target) throws {
        let s = try Self.setup(target)
        defer { s.fake.stop() }
        let (one, _) = target.subs
        _ = try s.libraryToken(one)
        // The fixture's GitHub identity with the same provider id (no token) now comes first in the
        // table and in any index on the id: the Apple row is written again after it.
        let i = s.schema.identities
        let apple = #"FROM \#(i.table.quoted) WHERE "\#(i.provider)" = 'apple' AND "\#(i.subject)" = '\#(one)'"#
        _ = try TestDatabase.query(
            s.db.url, "CREATE TEMP TABLE apple_row AS SELECT * \(apple); DELETE \(apple); INSERT INTO \(i.table.quoted) SELECT * FROM apple_row;")
        #expect(try s.scalar(#"SELECT count(*) FROM \#(i.table.quoted) WHERE "\#(i.provider)" <> 'apple' AND "\#(i.subject)" = $1"#, [one]) == "1")
        _ = try TestDatabase.query(s.db.url, "SELECT siwa.request_deletion($1, NULL)", [one])
        try s.db.apply()
        #expect(try s.scalar("SELECT status || ':' || (ciphertext IS NOT NULL) FROM siwa.revocations WHERE apple_sub = $1", [one]) == "pending:true")
        #expect(try s.scalar(#"SELECT count(*) FROM \#(i.table.quoted) WHERE "\#(i.subject)" = $1"#, [one]) == "1")  // GitHub's stays
    }

    @Test("a sign-in's token for another client id does not hold the library's place: both are adopted, both go to revocation")
    func otherClientSignIn() throws {
        for target in [Target.authjs, .betterAuth] {
            let s = try Self.setup(target)
            defer { s.fake.stop() }
            let (one, _) = target.subs
            // The user signed in to the iOS app through siwa-notify (its own client id), and to the
            // web through the library (SIWA_LIBRARY_CLIENT_ID).
            _ = try ReconcileTests.storeToken(one, fake: s.fake, vault: s.adoption.vault, conninfo: s.db.url, clientID: S.otherClientID)
            _ = try s.libraryToken(one)
            #expect(try s.sweep() == 1, "\(target)")
            let stored = "SELECT string_agg(client_id || ':' || coalesce(source, 'sign-in'), ',' ORDER BY client_id) FROM siwa.apple_tokens"
            #expect(try s.scalar(stored) == "\(S.clientID):\(target.source),\(S.otherClientID):sign-in", "\(target)")
            _ = try TestDatabase.query(s.db.url, "SELECT siwa.request_deletion($1, NULL)", [one])
            try s.db.apply()
            #expect(
                try s.scalar("SELECT string_agg(client_id, ',' ORDER BY client_id) FROM siwa.revocations WHERE apple_sub = $1", [one])
                    == "\(S.clientID),\(S.otherClientID)", "\(target)")
        }
    }

    @Test(
        "serve with SIWA_APPLY_TO=authjs and in-app deletion: the library's tokens are adopted, and `delete-user` revokes one; several audiences need SIWA_LIBRARY_CLIENT_ID"
    )
    func application() throws {
        let s = try Self.setup(.authjs)
        defer { s.fake.stop() }
        var libraries = AuthLibraryTests.config(.authjs)
        // The harness accepts two client ids: without SIWA_LIBRARY_CLIENT_ID, one warning, nothing adopted.
        let unset = try DeletionHarness(conninfo: s.db.url, reconcileEvery: 3600, authLibraries: libraries)
        let warned = unset.eventually { unset.logText.contains("SIWA_AUDIENCES names several client ids; set SIWA_LIBRARY_CLIENT_ID") }
        unset.stop()
        #expect(warned)

        libraries.clientID = S.clientID
        // A token the library holds at start: the sweep's first pass adopts it.
        let held = try s.libraryToken("aj.2")
        let harness = try DeletionHarness(conninfo: s.db.url, reconcileEvery: 3600, authLibraries: libraries)
        defer { harness.stop() }
        #expect(harness.eventually { (try? harness.scalar("SELECT source FROM siwa.apple_tokens WHERE apple_sub = 'aj.2'")) == "authjs" })
        // A token stored after the pass (the next is an hour away): the deletion adopts it itself.
        let one = try harness.fake.issueTokens(for: .init(sub: "aj.1", email: nil, isPrivateEmail: nil), clientID: S.clientID).refreshToken
        try s.setToken("aj.1", one)
        _ = try OutboxAdmin.requestDeletion(sub: "aj.1", clientID: nil, conninfo: harness.conninfo)
        let revoked = harness.eventually(20) {
            (try? harness.scalar("SELECT status || ':' || coalesce(confirmation, '') FROM siwa.revocations WHERE apple_sub = 'aj.1'"))
                == "done:confirmed"
        }
        #expect(revoked)
        #expect(harness.fake.calls(to: "/auth/revoke").map { $0.form?["token"] } == [one])
        #expect(try harness.scalar(#"SELECT count(*) FROM accounts WHERE provider = 'apple' AND "providerAccountId" = 'aj.1'"#) == "0")
        #expect(!harness.logText.contains(one) && !harness.logText.contains(held))
    }

    @Test("start-up check: with in-app deletion, the worker's role must read the library's token column")
    func startUpCheck() throws {
        let adoption = LibraryTokenAdoption(vault: TokenVault(keys: [try TokenKey(bytes: SecureRandom.bytes(32))]), clientID: S.clientID)
        let db = try AuthLibraryTests.authjs(.unlink, prisma: false, tokens: adoption)
        #expect(try db.resolve().tokens == adoption)
        _ = try TestDatabase.query(db.url, "REVOKE SELECT (refresh_token) ON accounts FROM \(db.role)")
        do {
            _ = try db.resolve()
            Issue.record("the check passed")
        } catch {
            #expect(
                "\(error)" == "SIWA_APPLY_TO=authjs: no select privilege on accounts (refresh_token) (the grants: docs/auth-libraries.md)")
        }
        // Without in-app deletion the column is not needed.
        #expect(try AuthLibraryCheck.resolve(db.config, conninfo: db.workerURL).tokens == nil)
    }

    @Test(
        "the adoption's reads stay index probes on library tables bulk-loaded after ANALYZE saw them empty", arguments: [Target.authjs, .betterAuth])
    func plans(target: Target) throws {
        let s = try Self.setup(target)
        defer { s.fake.stop() }
        let load: String
        if target == .authjs {
            load = """
                INSERT INTO accounts ("userId", type, provider, "providerAccountId", refresh_token)
                SELECT g + 10, 'oidc', CASE WHEN g % 3 = 0 THEN 'github' ELSE 'apple' END, 'bulk.' || g, 'r' || md5(g::text) || '.0.x.y'
                FROM generate_series(1, 100000) g;
                """
        } else {
            load = """
                INSERT INTO "user" (id, name, email, "emailVerified") SELECT 'u' || g, 'n', g || '@x', true FROM generate_series(1, 100000) g;
                INSERT INTO "account" (id, "accountId", "providerId", "userId", "refreshToken", "updatedAt")
                SELECT 'a' || g, 'bulk.' || g, 'apple', 'u' || g, 'r' || md5(g::text) || '.0.x.y', now() FROM generate_series(1, 100000) g;
                """
        }
        let tables = [s.schema.identities.table, TableName(schema: "siwa", "apple_tokens"), TableName(schema: "siwa", "library_tokens")]
        _ = try TestDatabase.query(
            s.db.url, tables.map { "ALTER TABLE \($0.quoted) SET (autovacuum_enabled = false); ANALYZE \($0.quoted);" }.joined())
        _ = try TestDatabase.query(s.db.url, load)
        // Half the users hold a sign-in's token, the other half an adopted one.
        _ = try TestDatabase.query(
            s.db.url,
            """
            INSERT INTO siwa.apple_tokens (apple_sub, client_id, key_id, ciphertext, source)
            SELECT 'bulk.' || g, $1, 'k', '\\x00', CASE WHEN g % 2 = 0 THEN 'authjs' END FROM generate_series(1, 100000) g
            """, [S.clientID])
        _ = try TestDatabase.query(
            s.db.url,
            """
            INSERT INTO siwa.library_tokens (apple_sub, client_id, source, token_hash)
            SELECT 'bulk.' || g, $1, 'authjs', '\\x00' FROM generate_series(2, 100000, 2) g
            """, [S.clientID])
        let subs = (1...1000).map { "bulk.\($0 * 97)" }
        let forSubs = try #require(LibraryTokenStatements.forSubs(s.schema))
        let page = try #require(LibraryTokenStatements.page(s.schema))
        let c = try PostgresConnection(conninfo: s.db.workerURL)
        try c.transaction(begin: WorkerStatements.beginKeyLookups) { c throws(PostgresError) in
            for (name, sql, parameters) in [
                ("for subs", forSubs.sql, forSubs.bind((subs, S.clientID))), ("page", page.sql, page.bind(("bulk.5", 500, S.clientID))),
            ] {
                let plan = try c.execute("EXPLAIN " + sql, parameters).rows.compactMap { $0.first ?? nil }
                let problems = AuthLibraryTests.wholeTableReads(plan)
                #expect(problems.isEmpty, "\(target) \(name) reads a whole table: \(problems)\n\(plan.joined(separator: "\n"))")
            }
        }
        // A pass reads the whole table in pages and adopts what it holds (one in three is GitHub's).
        let adopted = try s.sweep(pageSize: 5000)
        #expect(adopted > 0)
    }
}
