import Foundation
import SiwaCore
import SiwaCrypto
import SiwaPostgres
import SiwaTestSupport
import Testing

@testable import SiwaApp

/// No login can make siwa-notify run code it planted (CONTRACT §6). A role that may create in a
/// writable `public` (PostgreSQL 14 and earlier by default) plants a shadow of every built-in
/// function and operator siwa-notify's SQL calls (`scripts/sql-calls`, so a new call is covered
/// by construction), for every argument type that could fit a call better than the built-in
/// does; then every path runs against that database. A shadow that runs counts itself in
/// `public.planted_hits` (a sequence: no rollback undoes it) and names the statement in the
/// server log ("planted … ran").
@Suite("Planted functions never run", .serialized, .needsDatabase)
struct PlantedFunctionTests {
    typealias S = AppleTestSetup
    typealias H = DeletionHarness

    static let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    /// `scripts/sql-calls <mode>`'s lines, space-separated.
    static func sqlCalls(_ mode: String) throws -> String {
        let process = Process()
        let pipe = Pipe()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", repository.appendingPathComponent("scripts/sql-calls").path, mode]
        process.standardOutput = pipe
        try process.run()
        let output = pipe.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        #expect(process.terminationStatus == 0)
        return String(decoding: output, as: UTF8.self).split(separator: "\n").joined(separator: " ")
    }

    /// Makes `public` writable by every role and plants the shadows there, as a role that is no
    /// superuser (the dashboard login of the report).
    static func plant(_ conninfo: String) throws {
        let functions = try sqlCalls("--names"), operators = try sqlCalls("--operators")
        #expect(functions.contains("convert_to") && functions.contains("to_timestamp") && operators.contains("->>"))
        let fixture = try String(
            contentsOf: repository.appendingPathComponent("Tests/SiwaIntegrationTests/Fixtures/plant-shadows.sql"), encoding: .utf8)
        let connection = try PostgresConnection(conninfo: conninfo)
        try connection.execute(
            """
            GRANT CREATE ON SCHEMA public TO PUBLIC;
            DO $$ BEGIN CREATE ROLE siwa_planter NOLOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$;
            """)
        try connection.execute("SET ROLE siwa_planter")
        try connection.execute("SELECT pg_catalog.set_config('plant.functions', $1, false)", [functions])
        try connection.execute("SELECT pg_catalog.set_config('plant.operators', $1, false)", [operators])
        try connection.execute(fixture)
        try connection.execute("RESET ROLE")
    }

    /// How many times a planted shadow ran.
    static func hits(_ conninfo: String) throws -> Int {
        let row = try TestDatabase.query(conninfo, "SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM public.planted_hits")
        return Int(row.rows.first?[0] ?? "") ?? -1
    }

    /// The test's own reads, on a connection whose search_path leaves `public` out (so that they
    /// never count as a hit themselves).
    static func guarded(_ conninfo: String) -> String { conninfo + " options='-csearch_path=pg_catalog,pg_temp'" }

    static func value(_ conninfo: String, _ sql: String, _ parameters: [String?] = []) throws -> String? {
        try TestDatabase.query(guarded(conninfo), sql, parameters).rows.first?[0] ?? nil
    }

    @Test("every function of schema siwa pins its search_path, but the two inlined ones (their names qualified)")
    func everyFunctionPinned() throws {
        let conninfo = try TestDatabase.create()
        let unpinned = try TestDatabase.query(
            conninfo,
            """
            SELECT p.proname FROM pg_proc p WHERE p.pronamespace = 'siwa'::regnamespace
            AND NOT coalesce('search_path=pg_catalog, pg_temp' = ANY (p.proconfig), false) ORDER BY 1
            """
        ).rows.compactMap { $0[0] }
        #expect(unpinned == ["mask_email", "subject_hash"])
    }

    @Test("the two unpinned functions are inlined where they are called (no call per row, no grant needed)")
    func unpinnedFunctionsInlined() throws {
        let conninfo = try TestDatabase.create()
        let plan = try TestDatabase.query(
            conninfo, "EXPLAIN (VERBOSE) SELECT siwa.subject_hash(apple_sub), siwa.mask_email(email) FROM siwa.accounts"
        ).rows.compactMap { $0[0] }.joined(separator: "\n")
        #expect(plan.contains("sha256") && plan.contains("strpos"), "\(plan)")
        #expect(!plan.contains("subject_hash") && !plan.contains("mask_email"), "\(plan)")
    }

    @Test("the shadows work: a call that needs an implicit cast runs the planted one")
    func shadowsWork() throws {
        let conninfo = try TestDatabase.createEmpty()
        try Self.plant(conninfo)
        _ = try TestDatabase.query(conninfo, "SELECT to_timestamp(1::bigint), convert_to('x', 'UTF8')")
        #expect(try Self.hits(conninfo) >= 2)
    }

    @Test(
        "receive, worker, sign-in, hand-over, deletion, revoker, reconciliation, forwarding, console, status, user-report, views: nothing planted runs"
    )
    func nothingPlantedRuns() throws {
        let conninfo = try TestDatabase.createEmpty()
        try Self.plant(conninfo)  // before the schema: views and defaults bind only what migrate sees
        #expect(try Self.hits(conninfo) == 0)
        let hooks = try WebhookReceiver(secrets: ["whsec_" + Data(SecureRandom.bytes(24)).base64EncodedString()])
        defer { hooks.stop() }
        let h = try H(conninfo: conninfo, reconcileEvery: 2, forwardURL: hooks.url)
        defer { h.stop() }
        #expect(h.logs.lines.contains { $0.contains("schema public is writable") }, "migrate warns about the writable public")

        // Sign-in through a code, and a hand-over.
        let signedIn = "001.planted.signin", handedOver = "001.planted.handover", notified = "001.planted.notified"
        _ = try h.signIn(sub: signedIn, email: "s@privaterelay.appleid.com")
        let pair = try h.fake.issueTokens(for: .init(sub: handedOver, email: "h@example.com"), clientID: S.clientID)
        let handover = try h.api(
            TokenExchange.handoverPath,
            json: JSONValue.object([
                "client_id": .string(S.clientID), "refresh_token": .string(pair.refreshToken), "id_token": .string(pair.idToken),
            ]).serialized())
        #expect(handover.status == 200, "\(handover.body)")

        // Every type of notification, applied by the worker and forwarded.
        for (i, type) in ["email-disabled", "email-enabled", "consent-revoked", "a-type-apple-adds-later", "account-delete"].enumerated() {
            let reply = try h.notify(
                type: type, sub: notified, email: type.hasPrefix("email") ? "n@privaterelay.appleid.com" : nil,
                eventTimeMillis: Int64(Date().timeIntervalSince1970 * 1000) - 60_000 + Int64(i) * 1000)
            #expect(reply.status == 200, "\(type): \(reply.body)")
        }
        #expect(
            try eventually(timeout: 20) {
                try Self.value(conninfo, "SELECT count(*) FROM siwa.events WHERE sub = $1 AND status IN ('done', 'ignored')", [notified]) == "5"
            }, "every notification applied")

        // In-app deletion of the signed-in user: applied locally, its token revoked at Apple.
        #expect(try OutboxAdmin.requestDeletion(sub: signedIn, clientID: nil, conninfo: conninfo) == 1, "one deletion queued")
        #expect(
            try eventually(timeout: 20) {
                try Self.value(conninfo, "SELECT status FROM siwa.revocations WHERE apple_sub = $1", [signedIn]) == "done"
            }, "the revocation at Apple done")

        // Reconciliation: the handed-over grant is gone at Apple.
        h.fake.revokeGrant(pair.refreshToken)
        _ = try TestDatabase.query(
            Self.guarded(conninfo), "UPDATE siwa.apple_tokens SET next_validation_at = now() WHERE apple_sub = $1", [handedOver])
        #expect(
            try eventually(timeout: 20) {
                try Self.value(conninfo, "SELECT status FROM siwa.accounts WHERE apple_sub = $1", [handedOver]) == "consent_revoked"
            }, "the reconciler's consent-revoked applied")
        #expect(eventually(timeout: 20) { !hooks.deliveries.isEmpty }, "forwards sent")

        // The console: a named operator added, signed in, every page.
        var console = ConsoleTests.client(h)
        #expect(try console.signIn("alice", try ConsoleTests.add(h)).status == 303)
        let eventID = try Self.value(conninfo, "SELECT max(id) FROM siwa.events") ?? "0"
        for path in [
            "/console", "/console/events", "/console/events/\(eventID)", "/console/failures", "/console/sync", "/console/audit",
            "/console/users?q=\(notified)", "/console/events?q=\(notified)",
        ] {
            let page = try console.get(path)
            #expect(page.status == 200, "\(path): \(page.status)")
        }
        #expect(try console.post("/console/users/reveal", [("csrf", try console.csrf()), ("sub", notified)]).status == 200)

        // status, user-report, the admin listener.
        _ = try OutboxAdmin.status(conninfo: conninfo, inAppDeletion: true, forwarding: true)
        #expect(try UserReport.json(sub: notified, conninfo: conninfo) != nil)
        #expect(try UserReport.json(sub: signedIn, conninfo: conninfo) != nil)
        for path in ["/metrics", "/readyz"] { #expect(try h.admin(path).status == 200, "\(path)") }

        // The dashboards: every view siwa_dashboard may read, read as that role with the default
        // search_path ("$user", public).
        let views = try TestDatabase.query(
            Self.guarded(conninfo),
            """
            SELECT c.relname FROM pg_class c WHERE c.relnamespace = 'siwa'::regnamespace AND c.relkind = 'v'
            AND has_table_privilege('siwa_dashboard', c.oid, 'SELECT') ORDER BY 1
            """
        ).rows.compactMap { $0[0] }
        #expect(views.count >= 4)
        let reader = try PostgresConnection(conninfo: conninfo)
        try reader.execute("SET ROLE siwa_dashboard")
        for view in views { _ = try reader.execute("SELECT * FROM siwa.\(view)") }
        _ = try reader.execute("SELECT siwa.subject_hash('001.x')")

        #expect(try Self.hits(conninfo) == 0, "a planted shadow ran: the server log names the statement (\"planted … ran\")")
    }

    /// How many of the statements bound a planted operator on `session`: it ran (a hit), or the
    /// literal was read as the planted operand's type (`'source'` is no jsonb: 22P02). Each runs
    /// on a fresh due event, in a transaction rolled back.
    static func planted(_ statements: [String], _ session: PostgresConnection, _ conninfo: String) throws -> Int {
        var bound = 0
        for sql in statements {
            _ = try TestDatabase.query(
                guarded(conninfo),
                """
                INSERT INTO siwa.events (jti, aud, sub, type, event_time, status, next_attempt_at, claims)
                VALUES ('unpinned-' || pg_catalog.gen_random_uuid(), 'com.example.a', '001.unpinned', 'consent-revoked',
                        pg_catalog.now() - interval '1 minute', 'pending', pg_catalog.now() - interval '1 minute', '{"source": "apple"}')
                """)
            let before = try hits(conninfo)
            try session.execute("BEGIN")
            var failure: PostgresError?
            do {
                let result = try session.execute(sql, sql.contains("$1") ? WorkerStatements.claim.bind(10) : [])
                #expect(result.rows.count >= 1, "\(sql.prefix(40))")
            } catch {
                failure = error
            }
            try session.execute("ROLLBACK")
            if let failure {
                guard failure.sqlState == "22P02", failure.serverMessage.contains("type json") else { throw failure }
                bound += 1
            } else if try hits(conninfo) > before {
                bound += 1
            }
        }
        return bound
    }

    /// The pin is the first defence; the statements' exact types are the second, for a session
    /// whose pin is lost (a pooler resetting it, a path that forgot it): on the default
    /// search_path, an operand left `unknown` or `integer` would bind a planted exact match. The same
    /// statements without their casts are the positive control.
    @Test("without the pin, the claim's and the event times' exact types still bind pg_catalog's operators")
    func exactTypesHoldUnpinned() throws {
        let conninfo = try TestDatabase.create()
        try Self.plant(conninfo)
        let claim = WorkerStatements.claim.sql, millis = "SELECT \(SQLEncoding.millis("pg_catalog.now()"))"
        let uncast = [
            claim.replacingOccurrences(of: "'source'::text", with: "'source'"),
            millis.replacingOccurrences(of: "::numeric * 1000::numeric", with: " * 1000"),
        ]
        #expect(uncast[0] != claim && uncast[1] != millis, "the casts are where this test looks for them")
        let session = try PostgresConnection(conninfo: conninfo, pinsSearchPath: false)
        // PostgreSQL's default: pg_catalog is searched first, so only a planted operator that fits
        // better than the built-in one can bind.
        try session.execute("SET search_path = \"$user\", public")
        #expect(try Self.planted(uncast, session, conninfo) == 2, "the positive control: without their casts both statements bind a planted operator")
        #expect(
            try Self.planted([claim, millis], session, conninfo) == 0,
            "a planted operator bound: the server log names the statement (\"planted … ran\")")
    }

    @Test("transfer export and import: nothing planted runs")
    func transfersRunNothingPlanted() throws {
        let teams = try TransferTeams()
        try teams.seedSending(active: 3, revoked: 1, deleted: 1)
        try Self.plant(teams.sendingDatabase)
        try Self.plant(teams.receivingDatabase)
        let exported = try teams.export()
        #expect(exported.status == 0, "\(exported.stderr)")
        let imported = try teams.import(exported.stdout)
        #expect(imported.status == 0, "\(imported.stderr)")
        #expect(try Self.value(teams.receivingDatabase, "SELECT count(*) FROM siwa.transfers WHERE new_sub IS NOT NULL") == "4")
        #expect(try Self.hits(teams.sendingDatabase) == 0)
        #expect(try Self.hits(teams.receivingDatabase) == 0)
    }

    @Test(
        "the auth libraries' targets (Supabase, Better Auth, Auth.js), adopted library tokens, delete-user: nothing planted runs",
        arguments: ["supabase", "better-auth", "authjs"])
    func authLibrariesRunNothingPlanted(_ target: String) throws {
        let adoption = LibraryTokenAdoption(vault: TokenVault(keys: [try TokenKey(bytes: SecureRandom.bytes(32))]), clientID: S.clientID)
        let db: AuthLibraryDatabase
        let (apple, both): (String, String)
        switch target {
        case "supabase":
            db = try AuthLibraryTests.supabase(.deleteUser)
            (apple, both) = ("sb.a", "sb.b")
        case "better-auth":
            db = try AuthLibraryTests.betterAuth(.deleteUser, tokens: adoption)
            (apple, both) = ("ba.a", "ba.b")
        default:
            db = try AuthLibraryTests.authjs(.deleteUser, prisma: false, tokens: adoption)
            (apple, both) = ("aj.1", "aj.2")
        }
        try Self.plant(db.url)
        let t = db.t0, hour = AuthLibraryDatabase.hour
        #expect(try db.event("email-disabled", sub: apple, at: t, email: "a@privaterelay.appleid.com", isPrivate: true))
        #expect(try db.event("email-enabled", sub: apple, at: t + 1, email: "a@privaterelay.appleid.com", isPrivate: true))
        #expect(try db.event("consent-revoked", sub: both, at: t))
        #expect(try db.event("account-delete", sub: apple, at: t + hour))
        #expect(try db.event("account-delete", sub: both, at: t + hour))
        #expect(try db.event("consent-revoked", sub: "nobody.known", at: t))
        try db.apply()
        #expect(try db.scalar("SELECT count(*) FROM siwa.events WHERE status = 'done'") == "6")
        #expect(try Self.hits(db.url) == 0, "a planted shadow ran: the server log names the statement (\"planted … ran\")")
    }

    @Test("the provider calls: queued, leased, retried, recorded, replayed, status and user-report: nothing planted runs")
    func providerCallsRunNothingPlanted() throws {
        let conninfo = try TestDatabase.createEmpty()
        try Self.plant(conninfo)
        let fixture = try ClerkFixture()
        defer { fixture.stop() }
        let apple = ProviderCallTests.apple, linked = ProviderCallTests.linked, unknown = ProviderCallTests.unknown
        try fixture.addAppleUser(sub: apple)
        try fixture.addLinkedUser(sub: linked)
        let h = try TestHarness(conninfo: conninfo) { config, options in
            fixture.configure(&config)
            options.providers.pollInterval = .milliseconds(100)
            options.providers.schedule = ProviderCallSchedule(
                retryFor: .seconds(3600), backoff: RetryPolicy(maxAttempts: .max, baseDelay: .milliseconds(200), maxDelay: .milliseconds(400)))
        }
        defer { h.stop() }
        // Retried while the provider is down, then done; an unlink; a user it does not know.
        fixture.down()
        let t = Int64(Date().timeIntervalSince1970 * 1000) - 60_000
        for (type, sub, at) in [("consent-revoked", apple, t), ("account-delete", linked, t), ("consent-revoked", unknown, t)] {
            #expect(try h.post(token: try h.token(type: type, sub: sub, eventTimeMillis: at)).status == 200)
        }
        #expect(
            try eventually(timeout: 20) {
                try Self.value(conninfo, "SELECT count(*) = 3 AND bool_and(attempts >= 2) FROM siwa.provider_calls") == "t"
            }, "every call tried while the provider is down")
        _ = try TestDatabase.query(Self.guarded(conninfo), "UPDATE siwa.provider_calls SET state = 'dead' WHERE apple_sub = $1", [unknown])
        fixture.up()
        #expect(try OutboxAdmin.replayProviderCalls(target: "clerk", conninfo: conninfo) == 1)
        #expect(
            try eventually(timeout: 20) {
                try Self.value(conninfo, "SELECT count(*) FROM siwa.provider_calls WHERE state = 'pending'") == "0"
            }, "every provider call finished")
        let states = try Self.value(conninfo, "SELECT string_agg(effect || ':' || state, ',' ORDER BY apple_sub) FROM siwa.provider_calls")
        #expect(states == "end_sessions:user_unknown,end_sessions:done,unlink:done", "\(states ?? "")")
        _ = try OutboxAdmin.status(conninfo: conninfo)
        #expect(try UserReport.json(sub: linked, conninfo: conninfo) != nil)
        #expect(try h.admin("/metrics").status == 200)
        #expect(try Self.hits(conninfo) == 0, "a planted shadow ran: the server log names the statement (\"planted … ran\")")
    }
}
