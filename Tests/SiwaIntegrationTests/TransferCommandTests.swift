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
    .enabled(if: TestDatabase.isAvailable, "needs SIWA_TEST_DATABASE_URL (scripts/test starts one)"))
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

    @Test("429 with Retry-After: the export waits as long as Apple says, then finishes")
    func throttled() throws {
        let teams = try TransferTeams()
        try teams.seedSending(active: 5)
        teams.sending.answerMigration(.normal, first: [.throttled(retryAfter: 1), .throttled(retryAfter: 1)])
        let started = Date()
        let export = try teams.export(["--concurrency", "1"])
        let elapsed = Date().timeIntervalSince(started)
        #expect(export.status == 0, "\(export.stderr)")
        #expect(export.stdout.split(separator: "\n").count == 5)
        #expect(teams.sending.calls(to: "/auth/usermigrationinfo").map(\.status).filter { $0 == 429 }.count == 2)
        #expect(elapsed >= 2, "two Retry-After: 1 in a row take two seconds at least (\(elapsed))")
        #expect(T.answered(teams.sending, by: "sub").values.allSatisfy { $0 == 1 })
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
        let ids = (1...30).map { "t.\($0)" }
        for (i, id) in ids.enumerated() {
            teams.receiving.acceptTransfer(
                transferSub: id, user: .init(sub: "002.n\(i)", email: "n\(i)@privaterelay.appleid.com", isPrivateEmail: true))
        }
        let list = ids.map(TransferList.line).joined(separator: "\n") + "\n"
        teams.receiving.answerMigration(.hang, first: Array(repeating: .normal, count: 12))
        let (process, finish) = try teams.start(
            ["transfer", "import", "--rate", "2000", "--concurrency", "1"], environment: teams.receivingEnvironment, stdin: list)
        let mappedSQL = "SELECT count(*) FROM siwa.transfers WHERE new_sub IS NOT NULL"
        let stuck = try eventually(timeout: 30) {
            let mapped = try T.count(teams.receivingDatabase, mappedSQL)
            return teams.receiving.hungCalls == 1 && mapped == 12
        }
        #expect(stuck)
        kill(process.processIdentifier, SIGKILL)
        #expect(finish().status != 0)
        #expect(try T.count(teams.receivingDatabase, "SELECT count(*) FROM siwa.transfers WHERE new_sub IS NULL") == 18)

        teams.receiving.answerMigration(.normal)
        let resumed = try teams.import(list)
        #expect(resumed.status == 0, "\(resumed.stderr)")
        #expect(resumed.lastLine.contains("18 users mapped this run, 12 already mapped"), "\(resumed.stderr)")
        let asked = T.answered(teams.receiving, by: "transfer_sub")
        #expect(asked.count == 30 && asked.values.allSatisfy { $0 == 1 }, "\(asked)")
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
        let mapped = Dictionary(
            uniqueKeysWithValues: try TestDatabase.query(
                teams.receivingDatabase, "SELECT transfer_sub, new_sub FROM siwa.transfers WHERE direction = 'import'"
            ).rows.map { ($0[0] ?? "", $0[1] ?? "") })
        var forwarded: [String] = []
        for delivery in receiver.deliveries {
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
