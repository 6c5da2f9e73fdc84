import Foundation
import SiwaBuildInfo
import SiwaDevTools
import Testing

/// The promise end to end (docs/operations.md "Upgrading"): the previous release's binary, built
/// from the commit CHANGELOG.md records for it (cached under `.build-releases/`), serves and works
/// under load, every process connecting as the owner; this release migrates and starts beside it;
/// an old process restarts (a node drain) and must not put its schema back; the old ones stop.
/// Then the binaries roll back: the old release runs on the new schema. Every notification is
/// answered 200, stored and applied once, no process exits with an error, and the schema is this
/// release's all along after its migration.
@Suite("Rolling upgrade and rollback from the previous release", .serialized, .needsDatabase)
struct RollingUpgradeTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// The release the promise is tested from, and its binary.
    enum PreviousRelease {
        static let version = BuildInfo.previousRelease

        /// The commit CHANGELOG.md records for `version` ("Commit: <hash>" under its heading).
        static func commit() throws -> String {
            let changelog = try String(contentsOf: root.appendingPathComponent("CHANGELOG.md"), encoding: .utf8)
            let entry = try #require(changelog.components(separatedBy: "\n## [\(version)]").dropFirst().first, "no entry for \(version)")
            let line = try #require(entry.split(separator: "\n").first { $0.hasPrefix("Commit: ") }, "no Commit: line for \(version)")
            return String(line.dropFirst("Commit: ".count))
        }

        /// Its binary, built once from `git archive` of its commit (a debug build, ~4 min on two
        /// cores) and kept under `.build-releases/v<version>/` beside the commit it came from.
        static func binary() throws -> String {
            let commit = try commit()
            let dir = root.appendingPathComponent(".build-releases/v\(version)").path
            let binary = dir + "/siwa-notify"
            if FileManager.default.isExecutableFile(atPath: binary),
                (try? String(contentsOfFile: dir + "/commit", encoding: .utf8)) == commit
            {
                return binary
            }
            let script = """
                set -e
                rm -rf '\(dir)/src' '\(dir)/siwa-notify' '\(dir)/commit' && mkdir -p '\(dir)/src'
                git -C '\(root.path)' archive '\(commit)' | tar -x -C '\(dir)/src'
                cd '\(dir)/src'
                swift build --product siwa-notify --scratch-path ../build > ../build.log 2>&1 || { tail -20 ../build.log; exit 1; }
                cp "$(swift build --show-bin-path --scratch-path ../build)/siwa-notify" ../siwa-notify
                printf '%s' '\(commit)' > ../commit
                """
            let process = Process()
            process.executableURL = URL(fileURLWithPath: "/bin/bash")
            process.arguments = ["-c", script]
            let output = Pipe()
            process.standardOutput = output
            process.standardError = output
            try process.run()
            let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            process.waitUntilExit()
            try #require(process.terminationStatus == 0, "building \(version) from \(commit) failed:\n\(text)")
            return binary
        }
    }

    /// One deployment: the database, the key set and the audience every process shares.
    struct Deployment {
        let url: String
        let signer = NotificationSigner(key: TestHarness.sharedKey, kid: "rolling-key")
        let jwks: String

        init() throws {
            url = try TestDatabase.createEmpty()
            jwks = NSTemporaryDirectory() + "siwa-rolling-\(UInt32.random(in: 0...UInt32.max)).json"
            try signer.jwks.write(toFile: jwks, atomically: true, encoding: .utf8)
        }

        func environment(listen: UInt16?) -> [String: String] {
            var env = [
                "SIWA_DATABASE_URL": url, "SIWA_AUDIENCES": TestHarness.audience, "SIWA_JWKS_URL": "file://" + jwks,
                "SIWA_ADMIN_LISTEN": "127.0.0.1:\(ServerProcess.freePort())", "SIWA_LOG_FORMAT": "text",
            ]
            if let listen { env["SIWA_LISTEN"] = "127.0.0.1:\(listen)" }
            return env
        }

        /// `command` of `binary`, started and waited for until it says it runs.
        func start(_ command: String, binary: String) throws -> (process: ServerProcess, port: UInt16?) {
            let port = command == "work" ? nil : ServerProcess.freePort()
            let process = try ServerProcess([command], environment: environment(listen: port), binary: binary)
            let ready = process.waitForLog(command == "work" ? "worker started" : "receiving notifications", timeout: 60)
            try #require(ready, "\(command) of \(binary) did not start:\n\(process.log)")
            return (process, port)
        }

        /// `count` consent revocations of distinct users, signed now.
        func tokens(_ prefix: String, count: Int) throws -> [(jti: String, token: String)] {
            try (0..<count).map { i in
                let jti = "\(prefix)-\(i)"
                let claims = NotificationSigner.claims(
                    audience: TestHarness.audience, type: "consent-revoked", sub: "000739.\(prefix).\(i)", eventTimeMillis: nil,
                    email: nil, isPrivateEmail: nil, jti: jti)
                return (jti, try signer.sign(claims: claims))
            }
        }

        func scalar(_ sql: String) throws -> String? { try TestDatabase.query(url, sql).scalar }
    }

    /// Sends `tokens` to `port` from two threads in the background, a few hundred a second.
    static func load(_ tokens: [(jti: String, token: String)], port: UInt16) -> (sender: LoadSender, done: DispatchGroup) {
        let sender = LoadSender(url: "http://127.0.0.1:\(port)\("/apple/notifications")", tokens: tokens)
        let done = DispatchGroup()
        done.enter()
        Thread.detachNewThread {
            sender.run(threads: 2, pause: 0.005)
            done.leave()
        }
        return (sender, done)
    }

    @Test("previous release under load, this release migrates and starts beside it, an old process restarts, the old ones stop; then a rollback")
    func rollingUpgradeAndRollback() throws {
        let old = try PreviousRelease.binary()
        let new = ServerProcess.binary
        let d = try Deployment()
        let started = Date()

        // The previous release alone: its migrate, then serve, receive and work, under load.
        let oldMigrate = try ServerProcess(["migrate"], environment: d.environment(listen: nil), binary: old)
        #expect(eventually(timeout: 60) { !oldMigrate.process.isRunning } && oldMigrate.process.terminationStatus == 0, "\(oldMigrate.log)")
        var oldServe = try d.start("serve", binary: old)
        let oldReceive = try d.start("receive", binary: old)
        let oldWork = try d.start("work", binary: old)
        var loads = [
            Self.load(try d.tokens("old-serve", count: 400), port: oldServe.port!),
            Self.load(try d.tokens("old-receive", count: 400), port: oldReceive.port!),
        ]

        // This release migrates while the old processes answer, and starts beside them.
        let migrate = try OperatorCommandTests.run(["migrate"], environment: d.environment(listen: nil))
        #expect(migrate.status == 0 && migrate.output.contains("schema applied"), "\(migrate.output)")
        let newSchema = try SchemaDump.normalized(conninfo: d.url)
        #expect(try d.scalar("SELECT version FROM siwa.schema_release") == BuildInfo.version)
        let newServe = try d.start("serve", binary: new)
        let newReceive = try d.start("receive", binary: new)
        let newWork = try d.start("work", binary: new)
        loads.append(Self.load(try d.tokens("new-serve", count: 400), port: newServe.port!))
        loads.append(Self.load(try d.tokens("new-receive", count: 400), port: newReceive.port!))

        // A node drains: the old serve restarts (it migrates at start, as the owner) and must
        // leave the new schema alone (its load finished first: a drained node takes no traffic).
        loads[0].done.wait()
        #expect(oldServe.process.terminate() == 0, "\(oldServe.process.log)")
        oldServe = try d.start("serve", binary: old)
        // 0.9.0 finds its own marker ("schema up to date"), a later release the newer schema
        // ("running on it without applying"): either way, nothing applied.
        #expect(!oldServe.process.log.contains("schema applied"), "\(oldServe.process.log)")
        #expect(try SchemaDump.normalized(conninfo: d.url) == newSchema, "the restarted previous release re-applied its schema")
        loads.append(Self.load(try d.tokens("old-serve-again", count: 300), port: oldServe.port!))

        // The old processes stop.
        for load in loads { load.done.wait() }
        for p in [oldServe.process, oldReceive.process, oldWork.process] { #expect(p.terminate() == 0, "\(p.log)") }

        // The rollback of the binaries: the previous release's serve and work on the new schema
        // (the new processes stop), under load.
        #expect(newReceive.process.terminate() == 0 && newWork.process.terminate() == 0)
        let back = try d.start("serve", binary: old)
        #expect(!back.process.log.contains("schema applied"), "\(back.process.log)")
        let backWork = try d.start("work", binary: old)
        let rollback = Self.load(try d.tokens("rolled-back", count: 300), port: back.port!)
        rollback.done.wait()
        #expect(newServe.process.terminate() == 0, "\(newServe.process.log)")

        // Every notification answered 200, stored once, applied once; the schema is this release's.
        let all = loads + [rollback]
        let total = all.reduce(0) { $0 + $1.sender.tokens.count }
        let refused = all.flatMap(\.sender.unanswered).map(\.jti)
        #expect(refused.isEmpty, "not answered 200: \(refused.prefix(10)) (\(refused.count))")
        #expect(try d.scalar("SELECT count(*) FROM siwa.events WHERE type = 'consent-revoked'") == "\(total)")
        let applied = eventually(timeout: 60) {
            (try? d.scalar("SELECT count(*) FROM siwa.events WHERE type = 'consent-revoked' AND status = 'done'")) == "\(total)"
        }
        let statuses = try d.scalar("SELECT string_agg(status || ':' || n, ',') FROM (SELECT status, count(*) AS n FROM siwa.events GROUP BY 1) s")
        #expect(applied, "\(statuses ?? "")")
        #expect(try d.scalar("SELECT count(*) FROM siwa.app_accounts WHERE status = 'consent_revoked'") == "\(total)")
        #expect(try SchemaDump.normalized(conninfo: d.url) == newSchema)
        #expect(try SchemaDump.normalized(conninfo: try TestDatabase.create()) == newSchema, "the schema is not a fresh install's")
        for p in [back.process, backWork.process] { #expect(p.terminate() == 0, "\(p.log)") }
        print("rolling upgrade and rollback: \(total) notifications, \(Int(Date().timeIntervalSince(started))) s")
    }
}
