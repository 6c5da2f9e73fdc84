import Foundation
import SiwaApp
import SiwaCore
import SiwaDevTools
import SiwaPostgres
import SiwaTestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// `transfer export` and `transfer import` through the real binary, between two databases and two
/// fake Apple teams: the whole transfer, throttling, Apple down, a kill midway.
@Suite(
    "App transfer between teams", .serialized,
    .needsDatabase)
struct TransferCommandTests {
    typealias T = TransferTeams

    @Test("a full transfer: export on one team, import on the other; deleted users stay behind; no sub or email leaves")
    func fullTransfer() throws {
        let teams = try TransferTeams()
        try teams.seedSending(active: 20, revoked: 2, deleted: 3)
        teams.sending.addUser(.init(sub: "001.a1", email: "ann@example.com", isPrivateEmail: false))
        teams.sending.revokeUser(sub: "001.a2")  // revoked at Apple before the transfer: invalid_request

        let export = try teams.export()
        #expect(export.status == 0, "\(export.stderr)")
        #expect(export.lastLine.contains("21 transfer identifiers") && export.lastLine.contains("1 invalid_request"), "\(export.stderr)")
        let lines = export.stdout.split(separator: "\n")
        #expect(lines.count == 21)
        #expect(try lines.allSatisfy { try TransferList.parse(line: $0) != nil })
        // Transfer identifiers only: no sub, no email.
        let subs = try T.column(teams.sendingDatabase, "SELECT apple_sub FROM siwa.accounts").compactMap { $0 }
        #expect(subs.count == 25)
        #expect(!subs.contains { export.stdout.contains($0) } && !export.stdout.contains("@"))
        // Deleted users never asked about; one access token for the whole run.
        let asked = T.answered(teams.sending, by: "sub")
        #expect(asked.count == 21 && asked.values.allSatisfy { $0 == 1 } && !asked.keys.contains { $0.hasPrefix("001.d") })
        #expect(teams.sending.accessTokensIssued == 1)
        #expect(try T.count(teams.sendingDatabase, "SELECT count(*) FROM siwa.transfers WHERE direction = 'export'") == 21)

        let imported = try teams.import(export.stdout)
        #expect(imported.status == 0, "\(imported.stderr)")
        #expect(imported.lastLine.contains("21 users mapped this run"), "\(imported.stderr)")
        #expect(try T.count(teams.receivingDatabase, "SELECT count(*) FROM siwa.accounts WHERE status = 'active' AND email IS NOT NULL") == 21)
        // Each user has the app account of the app transferred (the client id of the import).
        #expect(
            try T.count(
                teams.receivingDatabase,
                """
                SELECT count(*) FROM siwa.app_accounts p JOIN siwa.accounts a USING (apple_sub)
                WHERE p.aud = '\(T.S.clientID)' AND p.status = 'active' AND p.email = a.email
                """) == 21)
        #expect(try T.count(teams.receivingDatabase, "SELECT count(*) FROM siwa.forwards") == 0)  // forwarding is off
        #expect(
            try T.column(teams.receivingDatabase, "SELECT email FROM siwa.accounts WHERE email NOT LIKE '%privaterelay%'")
                == ["ann@example.com"])
        // The re-keying join the README shows: old sub (sending) -> new sub (receiving), via transfer_sub.
        let mapped = try TestDatabase.query(
            teams.receivingDatabase, "SELECT transfer_sub, new_sub FROM siwa.transfers WHERE direction = 'import' AND migrated_at IS NOT NULL")
        let newSubs = Dictionary(uniqueKeysWithValues: mapped.rows.map { ($0[0]!, $0[1]!) })
        for row in try TestDatabase.query(teams.sendingDatabase, "SELECT sub, transfer_sub FROM siwa.transfers").rows {
            #expect(newSubs[row[1]!] == DevApple.transferredSub(sub: row[0]!, team: T.receivingTeamID))
        }

        // Idempotent: a second import asks Apple nothing; a second export neither, and lists the same.
        let before = teams.receiving.calls(to: "/auth/usermigrationinfo").count
        let again = try teams.import(export.stdout)
        #expect(again.status == 0 && again.lastLine.contains("0 users mapped this run, 21 already mapped"), "\(again.stderr)")
        #expect(teams.receiving.calls(to: "/auth/usermigrationinfo").count == before)
        let exportAgain = try teams.export()
        #expect(exportAgain.status == 0 && exportAgain.stdout == export.stdout)
        #expect(T.answered(teams.sending, by: "sub").values.allSatisfy { $0 == 1 })

        // status on the receiving side: mapped, unmapped, days left.
        let status = try teams.run(["status", "--json"], environment: teams.receivingEnvironment)
        #expect(status.status == 0, "\(status.stderr)")
        let report = try JSONParser.parse(Array(status.stdout.utf8))
        #expect(report["transfers"]?["mapped"]?.int64Value == 21 && report["transfers"]?["unmapped"]?.int64Value == 0)
        #expect(report["transfers"]?["daysLeft"]?.int64Value == 60)
        let table = try teams.run(["status"], environment: teams.receivingEnvironment)
        let daysLeft = table.stdout.split(separator: "\n").first { $0.hasPrefix("transfer: days left (of 60)") }
        #expect(daysLeft?.split(separator: " ").last == "60", "\(table.stdout)")
    }

    @Test("import respects a deletion in the receiving team: a user already deleted there gets no active app account, only the mapping")
    func importKeepsADeletedUserDeleted() throws {
        let teams = try TransferTeams()
        try teams.seedSending(active: 3)
        let export = try teams.export()
        #expect(export.status == 0, "\(export.stderr)")
        // User 001.a2 already signed in to this team's own app and deleted the account here.
        let deleted = DevApple.transferredSub(sub: "001.a2", team: T.receivingTeamID)
        _ = try TestDatabase.query(
            teams.receivingDatabase,
            "INSERT INTO siwa.accounts (apple_sub, status, status_event_time, deleted_at) VALUES ($1, 'deleted', now(), now())", [deleted])
        let imported = try teams.import(export.stdout)
        #expect(imported.status == 0, "\(imported.stderr)")
        #expect(try T.column(teams.receivingDatabase, "SELECT status FROM siwa.accounts WHERE apple_sub = '\(deleted)'") == ["deleted"])
        #expect(
            try T.count(teams.receivingDatabase, "SELECT count(*) FROM siwa.app_accounts WHERE apple_sub = '\(deleted)' AND status <> 'deleted'")
                == 0,
            "a user deleted in this team came back active through the import")
        #expect(try T.count(teams.receivingDatabase, "SELECT count(*) FROM siwa.accounts WHERE apple_sub = '\(deleted)' AND email IS NOT NULL") == 0)
        #expect(try T.count(teams.receivingDatabase, "SELECT count(*) FROM siwa.app_accounts WHERE status = 'active'") == 2)
        #expect(try T.count(teams.receivingDatabase, "SELECT count(*) FROM siwa.transfers WHERE new_sub = '\(deleted)'") == 1)
    }

    /// The `/auth/usermigrationinfo` calls of `fake`, in the order they came.
    static func migrationCalls(_ fake: FakeApple) -> [FakeApple.Call] {
        fake.calls(to: "/auth/usermigrationinfo").sorted { $0.at < $1.at }
    }

    /// Seconds between the 429 and the next call (nil without a 429 followed by a call).
    static func waitAfterThrottle(_ fake: FakeApple) -> Double? {
        let calls = migrationCalls(fake)
        guard let i = calls.firstIndex(where: { $0.status == 429 }), i + 1 < calls.count else { return nil }
        return calls[i + 1].at - calls[i].at
    }

    @Test("429 with Retry-After: 3: the export asks nothing for 3 s (its own backoff would be 0.5-1 s), then finishes")
    func throttled() throws {
        let teams = try TransferTeams()
        try teams.seedSending(active: 5)
        teams.sending.answerMigration(.normal, first: [.throttled(retryAfter: 3)])
        let export = try teams.export(["--concurrency", "1"])
        #expect(export.status == 0, "\(export.stderr)")
        #expect(export.stdout.split(separator: "\n").count == 5)
        #expect(Self.migrationCalls(teams.sending).filter { $0.status == 429 }.count == 1)
        let waited = try #require(Self.waitAfterThrottle(teams.sending))
        #expect(waited >= 2.9, "the next call came \(waited) s after the 429")
        #expect(T.answered(teams.sending, by: "sub").values.allSatisfy { $0 == 1 })
    }

    /// Runs a transfer command (one call at a time) until Apple holds a call and `recorded`
    /// counts `count` in `database`, then kills it with SIGKILL; returns how it ended.
    static func killWhenStuck(
        _ teams: TransferTeams, _ arguments: [String], environment: [String: String], stdin: String = "", fake: FakeApple,
        database: String, recorded: String, count: Int
    ) throws -> TransferTeams.Run {
        let (process, finish) = try teams.start(
            arguments + ["--rate", "2000", "--concurrency", "1"], environment: environment, stdin: stdin)
        let stuck = try eventually(timeout: 30) {
            let done = try T.count(database, recorded)
            return fake.hungCalls == 1 && done == count
        }
        #expect(stuck)
        kill(process.processIdentifier, SIGKILL)
        return finish()
    }

    @Test("an export killed -9 midway resumes: nothing Apple answered is asked again")
    func exportKilledMidway() throws {
        let teams = try TransferTeams()
        try teams.seedSending(active: 30)
        teams.sending.answerMigration(.hang, first: Array(repeating: .normal, count: 12))
        let exportedSQL = "SELECT count(*) FROM siwa.transfers WHERE direction = 'export'"
        let killed = try Self.killWhenStuck(
            teams, ["transfer", "export", "--to-team", T.receivingTeamID], environment: teams.sendingEnvironment,
            fake: teams.sending, database: teams.sendingDatabase, recorded: exportedSQL, count: 12)
        #expect(killed.status != 0 && killed.stdout.isEmpty)
        #expect(try T.count(teams.sendingDatabase, exportedSQL) == 12)

        teams.sending.answerMigration(.normal)
        let resumed = try teams.export()
        #expect(resumed.status == 0, "\(resumed.stderr)")
        #expect(resumed.stdout.split(separator: "\n").count == 30)
        #expect(resumed.lastLine.contains("30 transfer identifiers") && resumed.lastLine.contains("(18 new this run)"), "\(resumed.stderr)")
        // 12 answered before the kill, 18 after, the hung one among them: each sub answered once.
        let asked = T.answered(teams.sending, by: "sub")
        #expect(asked.count == 30 && asked.values.allSatisfy { $0 == 1 }, "\(asked)")
        #expect(Self.migrationCalls(teams.sending).filter { $0.status == 200 }.count == 30)
    }

    @Test("Apple down: the export stops with one clear line, keeps what it got, and a rerun resumes")
    func appleDown() throws {
        let teams = try TransferTeams()
        try teams.seedSending(active: 12)
        teams.sending.answerMigration(.status(503, #"{"error":"temporarily_unavailable"}"#), first: Array(repeating: .normal, count: 5))
        let failed = try teams.export(["--apple-attempts", "2", "--concurrency", "1"])
        #expect(failed.status != 0)
        #expect(failed.stdout.isEmpty)
        #expect(
            failed.lastLine.hasPrefix("Error: transfer export failed: Apple kept failing (http_503")
                && failed.lastLine.hasSuffix("(rerun to resume)"), "\(failed.stderr)")
        #expect(try T.count(teams.sendingDatabase, "SELECT count(*) FROM siwa.transfers") == 5)

        teams.sending.answerMigration(.normal)
        let resumed = try teams.export()
        #expect(resumed.status == 0, "\(resumed.stderr)")
        #expect(resumed.stdout.split(separator: "\n").count == 12)
        let asked = T.answered(teams.sending, by: "sub")
        #expect(asked.count == 12 && asked.values.allSatisfy { $0 == 1 }, "nothing Apple answered is asked again: \(asked)")
    }

    @Test("an import killed midway resumes: nothing Apple answered is asked again")
    func killedMidway() throws {
        let teams = try TransferTeams()
        let (_, list) = Self.identifiers(teams, 30)
        teams.receiving.answerMigration(.hang, first: Array(repeating: .normal, count: 12))
        let killed = try Self.killWhenStuck(
            teams, ["transfer", "import"], environment: teams.receivingEnvironment, stdin: list, fake: teams.receiving,
            database: teams.receivingDatabase, recorded: "SELECT count(*) FROM siwa.transfers WHERE new_sub IS NOT NULL", count: 12)
        #expect(killed.status != 0)
        #expect(try T.count(teams.receivingDatabase, "SELECT count(*) FROM siwa.transfers WHERE new_sub IS NULL") == 18)

        try Self.resumeImport(teams, list, left: 18, done: 12)
        #expect(try T.count(teams.receivingDatabase, "SELECT count(*) FROM siwa.accounts WHERE status = 'active'") == 30)
    }

    /// `count` transfer identifiers `t.<i>` the receiving fake resolves to users `002.n<i>`, and
    /// their list as `transfer export` writes it.
    static func identifiers(_ teams: TransferTeams, _ count: Int) -> (ids: [String], list: String) {
        let ids = (1...count).map { "t.\($0)" }
        for (i, id) in ids.enumerated() {
            teams.receiving.acceptTransfer(
                transferSub: id, user: .init(sub: "002.n\(i)", email: "n\(i)@privaterelay.appleid.com", isPrivateEmail: true))
        }
        return (ids, ids.map(TransferList.line).joined(separator: "\n") + "\n")
    }

    /// Reruns the import of `list` with Apple back to normal: it maps `left` users, finds `done`
    /// already mapped, and in all Apple answered each identifier once.
    static func resumeImport(_ teams: TransferTeams, _ list: String, left: Int, done: Int) throws {
        teams.receiving.answerMigration(.normal)
        let resumed = try teams.import(list)
        #expect(resumed.status == 0, "\(resumed.stderr)")
        #expect(resumed.lastLine.contains("\(left) users mapped this run, \(done) already mapped"), "\(resumed.stderr)")
        let asked = T.answered(teams.receiving, by: "transfer_sub")
        #expect(asked.count == left + done && asked.values.allSatisfy { $0 == 1 }, "each identifier answered once: \(asked)")
    }

    @Test("an import throttled (429, Retry-After: 4) asks nothing for 4 s (its own backoff would be 0.5-1 s), then finishes")
    func importThrottled() throws {
        let teams = try TransferTeams()
        let (_, list) = Self.identifiers(teams, 10)
        teams.receiving.answerMigration(.normal, first: [.normal, .throttled(retryAfter: 4)])
        let started = Date()
        let imported = try teams.import(list, ["--concurrency", "1"])
        let elapsed = Date().timeIntervalSince(started)
        #expect(imported.status == 0, "\(imported.stderr)")
        #expect(imported.lastLine.contains("10 users mapped this run"), "\(imported.stderr)")
        let waited = try #require(Self.waitAfterThrottle(teams.receiving))
        #expect(waited >= 3.9, "the next call came \(waited) s after the 429")
        #expect(elapsed >= 4)
        let asked = T.answered(teams.receiving, by: "transfer_sub")
        #expect(asked.count == 10 && asked.values.allSatisfy { $0 == 1 }, "\(asked)")
        #expect(Self.migrationCalls(teams.receiving).count == 11)  // 10 answered, 1 throttled
    }

    @Test("an import with Apple down stops with one clear line and exit 1, keeps what it got; a rerun asks only the rest")
    func importAppleDown() throws {
        let teams = try TransferTeams()
        let (_, list) = Self.identifiers(teams, 12)
        teams.receiving.answerMigration(.status(503, #"{"error":"temporarily_unavailable"}"#), first: Array(repeating: .normal, count: 5))
        let failed = try teams.import(list, ["--apple-attempts", "2", "--concurrency", "1"])
        #expect(failed.status == 1)
        #expect(
            failed.lastLine.hasPrefix("Error: transfer import failed: Apple kept failing (http_503")
                && failed.lastLine.hasSuffix("(rerun to resume)"), "\(failed.stderr)")
        #expect(failed.stderr.split(separator: "\n").filter { $0.contains("Error") }.count == 1, "\(failed.stderr)")
        #expect(try T.count(teams.receivingDatabase, "SELECT count(*) FROM siwa.transfers WHERE new_sub IS NOT NULL") == 5)
        #expect(try T.count(teams.receivingDatabase, "SELECT count(*) FROM siwa.transfers WHERE new_sub IS NULL") == 7)

        try Self.resumeImport(teams, list, left: 7, done: 5)
        #expect(try T.count(teams.receivingDatabase, "SELECT count(*) FROM siwa.app_accounts WHERE status = 'active'") == 12)
    }

    @Test("import reads a FILE argument, '-' (stdin), and says so in one line when the file cannot be read")
    func importFromFileAndStdin() throws {
        let teams = try TransferTeams()
        let (ids, list) = Self.identifiers(teams, 6)
        let file = teams.directory + "/first-half.jsonl"
        try TransferTeams.write(ids.prefix(3).map(TransferList.line).joined(separator: "\n") + "\n", to: file)
        let fromFile = try teams.run(
            ["transfer", "import", file, "--rate", "2000"], environment: teams.receivingEnvironment, stdin: list)
        #expect(fromFile.status == 0, "\(fromFile.stderr)")
        #expect(fromFile.lastLine.contains("3 users mapped this run, 0 already mapped, 3 identifiers read"), "\(fromFile.stderr)")
        let fromStdin = try teams.import(list, ["-"])
        #expect(fromStdin.status == 0, "\(fromStdin.stderr)")
        #expect(fromStdin.lastLine.contains("3 users mapped this run, 3 already mapped, 6 identifiers read"), "\(fromStdin.stderr)")
        #expect(T.answered(teams.receiving, by: "transfer_sub").count == 6)
        let missing = try teams.run(["transfer", "import", teams.directory + "/nope.jsonl"], environment: teams.receivingEnvironment)
        #expect(missing.status != 0 && missing.stderr.split(separator: "\n").count == 1 && missing.lastLine.contains("cannot read"))
    }

    @Test("with forwarding on, each user imported is forwarded once as user-migrated (new sub, aud, transfer_sub), signed")
    func importForwardsEachUser() throws {
        let teams = try TransferTeams()
        let (ids, list) = Self.identifiers(teams, 5)
        let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
        let receiver = try WebhookReceiver(secrets: [secret])
        defer { receiver.stop() }
        let secretFile = teams.directory + "/forward-secrets"
        try TransferTeams.write(secret + "\n", to: secretFile)
        var environment = teams.receivingEnvironment
        environment["SIWA_FORWARD_URL"] = receiver.url
        environment["SIWA_FORWARD_SECRET_FILE"] = secretFile

        let imported = try teams.run(["transfer", "import", "--rate", "2000"], environment: environment, stdin: list)
        #expect(imported.status == 0, "\(imported.stderr)")
        #expect(imported.lastLine.contains("5 users mapped this run") && imported.lastLine.hasSuffix("; 5 user-migrated forwards queued"))
        let queued = try TestDatabase.query(
            teams.receivingDatabase,
            """
            SELECT f.type, f.source, f.aud, f.sub = t.new_sub, f.event_time = t.migrated_at, f.id = 'msg_transfer_' || t.id
            FROM siwa.forwards f JOIN siwa.transfers t ON t.transfer_sub = f.transfer_sub
            """)
        #expect(queued.rows.count == 5)
        #expect(queued.rows.allSatisfy { $0 == ["user-migrated", "transfer", T.S.clientID, "t", "t", "t"] }, "\(queued.rows)")
        // Idempotent: a rerun maps nothing and queues nothing.
        let again = try teams.run(["transfer", "import", "--rate", "2000"], environment: environment, stdin: list)
        #expect(again.lastLine.hasSuffix("0 users mapped this run, 5 already mapped, 5 identifiers read; 0 user-migrated forwards queued"))
        #expect(try T.count(teams.receivingDatabase, "SELECT count(*) FROM siwa.forwards") == 5)

        // A `work` process sends them.
        environment["SIWA_JWKS_URL"] = teams.receiving.jwksURL
        environment["SIWA_RECONCILE_EVERY"] = "0"
        environment["SIWA_DATA_DIR"] = teams.directory
        let work = try ServerProcess(["work"], environment: environment)
        defer { _ = work.terminate() }
        #expect(eventually(timeout: 30) { receiver.deliveries.count >= 5 }, "\(work.log)")
        #expect(
            eventually(timeout: 30) {
                (try? T.count(teams.receivingDatabase, "SELECT count(*) FROM siwa.forwards WHERE status = 'delivered'")) == 5
            })
        let deliveries = try ForwardingTests.deliveriesAfterALaterOne(teams.receivingDatabase, receiver, aud: T.S.clientID)
        #expect(deliveries.count == 5, "each forwarded once")
        let mapped = Dictionary(
            uniqueKeysWithValues: try TestDatabase.query(
                teams.receivingDatabase, "SELECT transfer_sub, new_sub FROM siwa.transfers WHERE direction = 'import'"
            ).rows.map { ($0[0] ?? "", $0[1] ?? "") })
        var forwarded: [String] = []
        for delivery in deliveries {
            #expect(delivery.verifiedByEveryKey && delivery.id?.hasPrefix("msg_transfer_") == true)
            let json = try #require(delivery.json)
            let data = try #require(json["data"])
            #expect(json["type"]?.stringValue == "user-migrated")
            #expect(data["source"]?.stringValue == "transfer" && data["aud"]?.stringValue == T.S.clientID)
            let transferSub = try #require(data["transfer_sub"]?.stringValue)
            #expect(data["sub"]?.stringValue == mapped[transferSub] && data["email"] == nil)
            #expect(data["event_time"]?.int64Value != nil)
            forwarded.append(transferSub)
        }
        #expect(forwarded.sorted() == ids.sorted())
    }

    @Test("a sign-in whose id_token carries transfer_sub maps that user, as the API's least-privilege role")
    func mapOnSignIn() throws {
        let conninfo = try TestDatabase.create()
        _ = try TestDatabase.query(
            conninfo, "INSERT INTO siwa.transfers (direction, team_id, client_id, transfer_sub) VALUES ('import', 'T', 'c', 't.1')")
        let connection = try PostgresConnection(conninfo: conninfo)
        _ = try connection.execute("SET ROLE siwa_api")
        #expect(try connection.mapTransferOnSignIn(transferSub: "t.1", newSub: "002.a", teamID: "T", clientID: "c"))
        #expect(try !connection.mapTransferOnSignIn(transferSub: "t.1", newSub: "002.other", teamID: "T", clientID: "c"))
        #expect(try connection.mapTransferOnSignIn(transferSub: "t.2", newSub: "002.b", teamID: "T", clientID: "c"))
        let rows = try TestDatabase.query(
            conninfo, "SELECT transfer_sub, new_sub, migrated_at IS NOT NULL FROM siwa.transfers ORDER BY transfer_sub")
        #expect(rows.rows == [["t.1", "002.a", "t"], ["t.2", "002.b", "t"]])
        #expect(try TestDatabase.query(conninfo, "SELECT count(*) FROM siwa.forwards").scalar == "0", "forwarding off: nothing queued")

        // Forwarding on: a user mapped now is queued as `user-migrated` (once); one mapped already is not.
        #expect(try connection.mapTransferOnSignIn(transferSub: "t.3", newSub: "002.c", teamID: "T", clientID: "c", forward: true))
        #expect(try !connection.mapTransferOnSignIn(transferSub: "t.3", newSub: "002.c", teamID: "T", clientID: "c", forward: true))
        #expect(try !connection.mapTransferOnSignIn(transferSub: "t.1", newSub: "002.a", teamID: "T", clientID: "c", forward: true))
        let forwards = try TestDatabase.query(
            conninfo,
            """
            SELECT f.id = 'msg_transfer_' || t.id, f.sub, f.aud, f.type, f.source, f.transfer_sub, f.event_time = t.migrated_at, f.status
            FROM siwa.forwards f JOIN siwa.transfers t ON t.transfer_sub = f.transfer_sub
            """)
        #expect(forwards.rows == [["t", "002.c", "c", "user-migrated", "transfer", "t.3", "t", "pending"]])
    }

    @Test("both commands: --help, and one clear line without the configuration")
    func helpAndConfiguration() throws {
        let teams = try TransferTeams()
        for command in ["export", "import"] {
            let help = try teams.run(["transfer", command, "--help"], environment: [:])
            #expect(help.status == 0 && help.stdout.contains("--client-id"))
            var environment = teams.sendingEnvironment
            environment["SIWA_TEAM_ID"] = nil
            environment["SIWA_KEY_ID"] = nil
            environment["SIWA_PRIVATE_KEY_FILE"] = nil
            environment["SIWA_TOKEN_KEY_FILE"] = nil
            let arguments = command == "export" ? ["transfer", "export", "--to-team", "X"] : ["transfer", "import"]
            let bare = try teams.run(arguments, environment: environment)
            #expect(bare.status != 0 && bare.stderr.split(separator: "\n").count == 1, "\(bare.stderr)")
        }
        let garbage = try teams.import("t.1\n{\"transfer_sub\":\"t.2\",\"sub\":\"001.x\"}\n")
        #expect(garbage.status != 0 && garbage.lastLine.contains("line 2: unexpected_member"), "\(garbage.stderr)")
    }
}
