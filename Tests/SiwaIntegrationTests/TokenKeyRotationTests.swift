import Foundation
import Logging
import SiwaCore
import SiwaCrypto
import SiwaPostgres
import Testing

@testable import SiwaApp

/// `SIWA_TOKEN_KEY_FILE` rotation end to end: the start-up check of the stored tokens' keys,
/// `siwa-notify rekey` (the real binary), and dropping the old key afterwards.
@Suite(
    "Token key rotation: start-up check and rekey", .serialized,
    .needsDatabase)
struct TokenKeyRotationTests {
    typealias S = AppleTestSetup

    /// A database with the schema, a `.p8` and two token key files (old: 64 hex and a newline,
    /// mode 0600; new: 32 raw bytes, mode 0640) in a temporary directory.
    final class Setup {
        let conninfo: String
        let directory: String
        let privateKeyFile: String
        let oldFile: String
        let newFile: String
        let old: TokenKey
        let new: TokenKey

        init() throws {
            conninfo = try TestDatabase.create()
            try Migrator.migrate(conninfo: conninfo)
            directory = NSTemporaryDirectory() + "siwa-rekey-\(UInt64.random(in: 0...UInt64.max))"
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            privateKeyFile = directory + "/AuthKey.p8"
            try Self.write(Data(S.teamKey.pkcs8PEM().utf8), privateKeyFile, mode: 0o600)
            let oldRaw = SecureRandom.bytes(32)
            var newRaw = SecureRandom.bytes(32)
            newRaw[0] = 0  // not text
            old = try TokenKey(bytes: oldRaw)
            new = try TokenKey(bytes: newRaw)
            oldFile = directory + "/token-1.key"
            newFile = directory + "/token-2.key"
            try Self.write(Data((SHA256.hex(oldRaw) + "\n").utf8), oldFile, mode: 0o600)
            try Self.write(Data(newRaw), newFile, mode: 0o640)
        }

        static func write(_ data: Data, _ path: String, mode: Int) throws {
            #expect(FileManager.default.createFile(atPath: path, contents: data))
            try FileManager.default.setAttributes([.posixPermissions: mode], ofItemAtPath: path)
        }

        deinit { try? FileManager.default.removeItem(atPath: directory) }

        /// Stores `count` refresh tokens encrypted with `key`; returns their subs.
        @discardableResult
        func storeTokens(_ count: Int, key: TokenKey, prefix: String) throws -> [String] {
            let vault = TokenVault(keys: [key])
            return try (0..<count).map { i in
                let sub = "000739.\(prefix).\(i)"
                let sealed = try vault.seal("r.token.\(prefix).\(i)", sub: sub, clientID: S.clientID)
                _ = try TestDatabase.query(
                    conninfo, "INSERT INTO siwa.apple_tokens (apple_sub, client_id, key_id, ciphertext) VALUES ($1, $2, $3, $4::bytea)",
                    [sub, S.clientID, sealed.keyID, SQLEncoding.bytea(sealed.ciphertext)])
                return sub
            }
        }

        /// Queues `count` revocations whose tokens (encrypted with `key`) wait in `siwa.revocations`
        /// (not due for a day: no revoker touches them), and one done revocation (no token left).
        @discardableResult
        func queueRevocations(_ count: Int, key: TokenKey, prefix: String, status: String = "pending") throws -> [String] {
            let vault = TokenVault(keys: [key])
            _ = try TestDatabase.query(
                conninfo, "INSERT INTO siwa.revocations (apple_sub, client_id, reason, status) VALUES ($1, $2, 'in-app-deletion', 'done')",
                ["000739.\(prefix).done", S.clientID])
            return try (0..<count).map { i in
                let sub = "000739.\(prefix).\(i)"
                let sealed = try vault.seal("r.waiting.\(prefix).\(i)", sub: sub, clientID: S.clientID)
                _ = try TestDatabase.query(
                    conninfo,
                    """
                    INSERT INTO siwa.revocations (apple_sub, client_id, key_id, ciphertext, reason, status, next_attempt_at)
                    VALUES ($1, $2, $3, $4::bytea, 'in-app-deletion', $5, now() + interval '1 day')
                    """, [sub, S.clientID, sealed.keyID, SQLEncoding.bytea(sealed.ciphertext), status])
                return sub
            }
        }

        func keyIDs() throws -> [String: String] {
            let rows = try TestDatabase.query(conninfo, "SELECT key_id, count(*) FROM siwa.apple_tokens GROUP BY key_id").rows
            return Dictionary(uniqueKeysWithValues: rows.map { ($0[0] ?? "", $0[1] ?? "") })
        }

        /// A worker-only process configured with `tokenKeyFiles`, logging into `logs`.
        func application(_ tokenKeyFiles: String, logs: LogSink) -> Application {
            var config = ServerConfiguration()
            config.databaseURL = conninfo
            config.audiences = [S.clientID]
            config.adminListen = ListenAddress(host: "127.0.0.1", port: 0)
            config.listen = ListenAddress(host: "127.0.0.1", port: 0)
            config.appleAPI = AppleAPIConfiguration(
                teamID: S.teamID, keyID: S.keyID, privateKeyFile: privateKeyFile, tokenKeyFile: tokenKeyFiles,
                baseURL: "http://127.0.0.1:9")
            return Application(configuration: config, roles: .work, logger: TestHarness.logger(into: logs))
        }

        func environment(_ tokenKeyFiles: String) -> [String: String] {
            [
                "SIWA_DATABASE_URL": conninfo, "SIWA_TEAM_ID": S.teamID, "SIWA_KEY_ID": S.keyID,
                "SIWA_PRIVATE_KEY_FILE": privateKeyFile, "SIWA_TOKEN_KEY_FILE": tokenKeyFiles,
                "SIWA_APPLE_URL": "http://127.0.0.1:9", "SIWA_AUDIENCES": S.clientID,
            ]
        }
    }

    @Test(
        "a stored token whose key is not configured stops the start with one line naming SIWA_TOKEN_KEY_FILE; one that does not open is set aside, once"
    )
    func startUpCheck() throws {
        let setup = try Setup()
        try setup.storeTokens(3, key: setup.old, prefix: "check")
        // The new key alone: the three tokens under the old one cannot be revoked.
        let missing = try OperatorCommandTests.run(["work"], environment: setup.environment(setup.newFile))
        #expect(missing.status != 0)
        let lines = missing.output.split(separator: "\n").filter { $0.contains("cannot start") }
        #expect(lines.count == 1, "\(missing.output)")
        let line = String(lines.first ?? "")
        #expect(line.contains("SIWA_TOKEN_KEY_FILE") && line.contains(setup.old.id) && line.contains("3 stored refresh tokens"), "\(line)")

        // Both keys: the start goes on.
        let logs = LogSink.capturing()
        let both = setup.application("\(setup.newFile),\(setup.oldFile)", logs: logs)
        try both.start()
        both.shutdown()
        #expect(logs.lines.contains { $0.contains("stored refresh tokens open with the configured keys") && $0.contains("\(setup.old.id)=3") })

        // A token that does not open with its (configured) key: a wrong file under the right id
        // cannot be made, so the ciphertext is damaged instead.
        _ = try TestDatabase.query(
            setup.conninfo, "UPDATE siwa.apple_tokens SET ciphertext = overlay(ciphertext PLACING '\\xff'::bytea FROM 20) WHERE apple_sub = $1",
            ["000739.check.0"])
        // The start goes on: that token is set aside (logged once, by its hash), the others still open.
        for round in 1...2 {
            let logs = LogSink.capturing()
            let damaged = setup.application(setup.oldFile, logs: logs)
            try damaged.start()
            damaged.shutdown()
            let setAside = logs.lines.filter { $0.contains("does not open with its key: set aside") }
            #expect(setAside.count == (round == 1 ? 1 : 0), "round \(round): \(setAside)")
            #expect(setAside.allSatisfy { $0.contains(SubjectHash.of("000739.check.0")) && !$0.contains("000739.check.0") })
            #expect(logs.lines.contains { $0.contains("stored refresh tokens open with the configured keys") })
        }
        #expect(
            try TestDatabase.query(
                setup.conninfo, "SELECT string_agg(apple_sub, ',' ORDER BY apple_sub) FROM siwa.apple_tokens WHERE quarantined_at IS NOT NULL"
            ).scalar == "000739.check.0")
        // Counted for /metrics, listed by doctor, by the user's hash only.
        let c = try PostgresConnection(conninfo: setup.conninfo)
        #expect(try c.row(TokenKeyStatements.quarantinedCount) == 1)
        let listed = try Doctor.quarantinedTokens(conninfo: setup.conninfo)
        #expect(listed.count == 1 && listed[0].contains(SubjectHash.of("000739.check.0")) && !listed[0].contains("000739.check.0"), "\(listed)")

        // Every token of the key damaged: each set aside once; a later start finds none left to try.
        _ = try TestDatabase.query(
            setup.conninfo,
            "UPDATE siwa.apple_tokens SET ciphertext = overlay(ciphertext PLACING '\\xff'::bytea FROM 20) WHERE quarantined_at IS NULL")
        for round in 1...2 {
            let logs = LogSink.capturing()
            let app = setup.application(setup.oldFile, logs: logs)
            try app.start()
            app.shutdown()
            #expect(logs.lines.filter { $0.contains("does not open with its key: set aside") }.count == (round == 1 ? 2 : 0), "round \(round)")
        }
        #expect(try c.row(TokenKeyStatements.quarantinedCount) == 3)
    }

    @Test("rekey moves every token from the old key to the new one; a second run rekeys 0; then the old key can be dropped")
    func rekeyThenDropTheOldKey() throws {
        let setup = try Setup()
        let subs = try setup.storeTokens(5, key: setup.old, prefix: "rekey")
        let rotating = setup.environment("\(setup.newFile),\(setup.oldFile)")
        let first = try OperatorCommandTests.run(["rekey"], environment: rotating)
        #expect(first.status == 0, "\(first.output)")
        #expect(first.output == "rekeyed 5 tokens; 0 already current\n")
        #expect(try setup.keyIDs() == [setup.new.id: "5"])
        // Each token opens with the new key alone, and is the same token.
        let newOnly = TokenVault(keys: [setup.new])
        for (i, sub) in subs.enumerated() {
            let result = try TestDatabase.query(
                setup.conninfo, "SELECT key_id, ciphertext FROM siwa.apple_tokens WHERE apple_sub = $1", [sub])
            let stored = DeletionStatements.StoredToken(
                keyID: result.rows[0][0] ?? "", ciphertext: SQLEncoding.bytes(fromBytea: result.rows[0][1] ?? "") ?? [])
            #expect(try newOnly.open(stored, sub: sub, clientID: S.clientID) == "r.token.rekey.\(i)")
        }
        let second = try OperatorCommandTests.run(["rekey"], environment: rotating)
        #expect(second.status == 0, "\(second.output)")
        #expect(second.output == "rekeyed 0 tokens; 5 already current\n")

        // Several batches, and tokens already current skipped (a run that was killed half way).
        try setup.storeTokens(3, key: setup.old, prefix: "late")
        let report = try StoredTokenKeys.rekey(TokenVault(keys: [setup.new, setup.old]), conninfo: setup.conninfo, batchSize: 2)
        #expect(report == StoredTokenKeys.RekeyReport(rekeyed: 3, alreadyCurrent: 5, remaining: 0))

        // The old key dropped: the start succeeds; the new key file (mode 0640) is named once.
        let logs = LogSink.capturing()
        let app = setup.application(setup.newFile, logs: logs)
        try app.start()
        app.shutdown()
        let warnings = logs.lines.filter { $0.contains("key file readable by group or others") }
        #expect(warnings.count == 1, "\(warnings)")
        #expect(warnings.first?.contains(setup.newFile) == true && warnings.first?.contains("SIWA_TOKEN_KEY_FILE") == true)
        #expect(!logs.lines.contains { $0.contains("readable by group") && $0.contains(setup.privateKeyFile) })

        // Without the file that encrypted a token, rekey stops with one line.
        try setup.storeTokens(1, key: setup.old, prefix: "orphan")
        let orphan = try OperatorCommandTests.run(["rekey"], environment: setup.environment(setup.newFile))
        #expect(orphan.status != 0)
        #expect(orphan.output.split(separator: "\n").count == 1, "\(orphan.output)")
        #expect(orphan.output.contains("rekey failed: token_key_unknown") && orphan.output.contains(setup.old.id), "\(orphan.output)")
    }

    @Test("tokens waiting in siwa.revocations are covered: the start-up check counts and opens them, rekey moves them to the new key")
    func revocationsAreCovered() throws {
        let setup = try Setup()
        try setup.storeTokens(1, key: setup.old, prefix: "stored")
        let waiting =
            try setup.queueRevocations(2, key: setup.old, prefix: "waiting")
            + setup.queueRevocations(1, key: setup.old, prefix: "dead", status: "dead")

        // The new key alone: four tokens (one stored, three waiting) cannot be opened.
        let missing = setup.application(setup.newFile, logs: LogSink.capturing())
        #expect {
            try missing.start()
        } throws: { error in
            "\(error)".contains(setup.old.id) && "\(error)".contains("4 stored refresh tokens")
        }
        missing.shutdown()

        // A waiting token that does not open with its key is set aside: dead, with the reason; the start goes on.
        _ = try TestDatabase.query(
            setup.conninfo, "UPDATE siwa.revocations SET ciphertext = overlay(ciphertext PLACING '\\xff'::bytea FROM 20) WHERE apple_sub = $1",
            [waiting[0]])
        let damaged = setup.application("\(setup.newFile),\(setup.oldFile)", logs: LogSink.capturing())
        try damaged.start()
        damaged.shutdown()
        #expect(
            try TestDatabase.query(setup.conninfo, "SELECT status || ' ' || last_error FROM siwa.revocations WHERE apple_sub = $1", [waiting[0]])
                .scalar?.hasPrefix("dead token_undecryptable") == true)
        _ = try TestDatabase.query(setup.conninfo, "DELETE FROM siwa.revocations WHERE apple_sub = $1", [waiting[0]])

        // rekey moves the stored token and the two waiting ones; each opens with the new key alone.
        let report = try StoredTokenKeys.rekey(TokenVault(keys: [setup.new, setup.old]), conninfo: setup.conninfo, batchSize: 1)
        #expect(report == StoredTokenKeys.RekeyReport(rekeyed: 3, alreadyCurrent: 0, remaining: 0))
        let newOnly = TokenVault(keys: [setup.new])
        for sub in waiting.dropFirst() {
            let row = try TestDatabase.query(
                setup.conninfo, "SELECT key_id, ciphertext FROM siwa.revocations WHERE apple_sub = $1", [sub]
            ).rows[0]
            let stored = DeletionStatements.StoredToken(keyID: row[0] ?? "", ciphertext: SQLEncoding.bytes(fromBytea: row[1] ?? "") ?? [])
            #expect(stored.keyID == setup.new.id)
            #expect(try newOnly.open(stored, sub: sub, clientID: S.clientID).hasPrefix("r.waiting."))
        }
        #expect(try TestDatabase.query(setup.conninfo, "SELECT count(*) FROM siwa.revocations WHERE ciphertext IS NULL").scalar == "2")

        // The old key dropped: the start checks both tables and goes on.
        let logs = LogSink.capturing()
        let app = setup.application(setup.newFile, logs: logs)
        try app.start()
        app.shutdown()
        #expect(logs.lines.contains { $0.contains("stored refresh tokens open with the configured keys") && $0.contains("\(setup.new.id)=3") })
    }

    @Test("a .p8 readable by the group or by others: one warning line naming the file and SIWA_PRIVATE_KEY_FILE; mode 600: none")
    func readablePrivateKeyWarns() throws {
        let setup = try Setup()
        /// The warning lines of one start, with the .p8 at `mode` (the token key file at 600).
        func warnings(p8 mode: Int) throws -> [String] {
            try FileManager.default.setAttributes([.posixPermissions: mode], ofItemAtPath: setup.privateKeyFile)
            let logs = LogSink.capturing()
            let app = setup.application(setup.oldFile, logs: logs)
            try app.start()
            app.shutdown()
            return logs.lines.filter { $0.contains("key file readable by group or others") }
        }
        for mode in [0o640, 0o604] {
            let lines = try warnings(p8: mode)
            #expect(lines.count == 1, "mode \(String(mode, radix: 8)): \(lines)")
            #expect(lines.first?.contains(setup.privateKeyFile) == true && lines.first?.contains("SIWA_PRIVATE_KEY_FILE") == true)
            #expect(lines.first?.contains(String(mode, radix: 8)) == true, "the mode is named")
        }
        #expect(try warnings(p8: 0o600).isEmpty)
    }
}
