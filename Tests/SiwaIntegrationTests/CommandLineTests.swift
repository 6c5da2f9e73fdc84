import Foundation
import SiwaApp
import SiwaDevTools
import SiwaFetch
import SiwaPostgres
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The real binary: `serve --dev` with its embedded database, and `simulate`.
@Suite("Command line", .serialized, .enabled(if: TestDatabase.hasServerBinaries, "needs the PostgreSQL server binaries (initdb, pg_ctl)"))
struct CommandLineTests {
    static var binary: String { ServerProcess.binary }

    static func freePort() -> UInt16 { ServerProcess.freePort() }

    static func run(_ arguments: [String], environment: [String: String]) throws -> (status: Int32, output: String) {
        try OperatorCommandTests.run(arguments, environment: environment)
    }

    @Test("serve --dev + simulate consent-revoked revokes the user's older sessions within a second")
    func serveAndSimulate() throws {
        let dir = NSTemporaryDirectory() + "siwa-cli-\(UInt32.random(in: 0...UInt32.max))"
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let port = Self.freePort()
        let env = [
            "SIWA_DATA_DIR": dir, "SIWA_LISTEN": "127.0.0.1:\(port)",
            "SIWA_ADMIN_LISTEN": "127.0.0.1:\(Self.freePort())", "SIWA_DATABASE_URL": "",
            "SIWA_AUDIENCES": "com.example.real",
        ]
        let server = Process()
        server.executableURL = URL(fileURLWithPath: Self.binary)
        server.arguments = ["serve", "--dev"]
        server.environment = ProcessInfo.processInfo.environment.merging(env) { _, new in new }
            .filter { $0.key != "SIWA_DATABASE_URL" }
        let log = dir + ".log"
        _ = FileManager.default.createFile(atPath: log, contents: nil)
        defer { try? FileManager.default.removeItem(atPath: log) }
        server.standardError = FileHandle(forWritingAtPath: log)
        server.standardOutput = FileHandle.nullDevice
        try server.run()
        defer {
            if server.isRunning {
                server.terminate()
                server.waitUntilExit()
            }
        }
        let conninfo = "host=\(dir)/postgres/run port=5432 user=postgres dbname=postgres"
        let up = eventually(timeout: 60) {
            (try? TestDatabase.query(conninfo, "SELECT count(*) FROM siwa.sessions")) != nil
                && ((try? String(contentsOfFile: log, encoding: .utf8)) ?? "").contains("worker started")
        }
        #expect(up, "serve --dev did not come up: \((try? String(contentsOfFile: log, encoding: .utf8)) ?? "")")
        let logText = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
        #expect(logText.contains("DEVELOPMENT MODE"))

        let sub = "000739.cli.0001"
        let before = try TestDatabase.query(
            conninfo,
            """
            INSERT INTO siwa.sessions (apple_sub, created_at) VALUES ($1, now() - interval '1 hour') RETURNING id
            """, [sub]
        ).scalar
        let simulated = try Self.run(["simulate", "--type", "consent-revoked", "--sub", sub], environment: env)
        #expect(simulated.status == 0, "\(simulated.output)")
        #expect(simulated.output.contains("200"))
        let started = Date()
        let revoked = eventually(timeout: 1) {
            (try? TestDatabase.query(conninfo, "SELECT revoked_at IS NOT NULL FROM siwa.sessions WHERE id = $1", [before]).scalar) == "t"
        }
        #expect(revoked, "session not revoked within 1 s")
        #expect(Date().timeIntervalSince(started) <= 1.0)

        // The dev key is trusted for the dev audience only: signed for a real audience, refused.
        let signer = NotificationSigner(key: try DevKey.loadOrCreate(dataDirectory: dir), kid: DevKey.kid)
        let forged = try signer.sign(
            claims: NotificationSigner.claims(audience: "com.example.real", type: "account-delete", sub: "000739.cli.0002"))
        let refused = try Fetcher.perform(
            FetchRequest(
                url: "http://127.0.0.1:\(port)/apple/notifications", method: "POST", headers: ["Content-Type: application/json"],
                body: Array(NotificationSigner.body(token: forged).utf8), allowedSchemes: [.http]))
        #expect(refused.status == 401)
        #expect(String(decoding: refused.body, as: UTF8.self) == #"{"error":"wrong_audience"}"#)
        #expect(try TestDatabase.query(conninfo, "SELECT count(*) FROM siwa.events WHERE aud = 'com.example.real'").scalar == "0")

        // SIGTERM: graceful stop, embedded database stopped.
        server.terminate()
        server.waitUntilExit()
        #expect(server.terminationStatus == 0)
        let finalLog = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
        #expect(finalLog.contains("embedded PostgreSQL stopped"))
        #expect(!finalLog.contains(sub), "logs must not contain the raw sub")
    }

    @Test("a bad configuration stops the program with one line naming the variable")
    func badConfiguration() throws {
        let result = try Self.run(["serve"], environment: ["SIWA_MAX_BODY": "lots", "SIWA_AUDIENCES": "com.example.app"])
        #expect(result.status != 0)
        #expect(result.output.contains("SIWA_MAX_BODY"))
        #expect(result.output.split(separator: "\n").count == 1, "\(result.output)")
        let missing = try Self.run(["serve"], environment: ["SIWA_AUDIENCES": ""])
        #expect(missing.status != 0)
        #expect(missing.output.contains("SIWA_AUDIENCES"))
        for proxies in [["SIWA_TRUSTED_PROXIES": "10.0.0.0/40"], [:]] {
            let flag = proxies.isEmpty ? ["--trusted-proxies", "proxy.internal"] : []
            let bad = try Self.run(["serve"] + flag, environment: proxies.merging(["SIWA_AUDIENCES": "com.example.app"]) { a, _ in a })
            #expect(bad.status != 0 && bad.output.contains("SIWA_TRUSTED_PROXIES"), "\(bad.output)")
            #expect(bad.output.split(separator: "\n").count == 1, "\(bad.output)")
        }
    }

    @Test("serve --dev with SIWA_DATABASE_URL (environment or flag) exits non-zero with one line naming it")
    func devRefusesExternalDatabase() throws {
        let url = "postgresql://siwa@db.invalid/siwa"
        let fromEnvironment = try Self.run(["serve", "--dev"], environment: ["SIWA_DATABASE_URL": url])
        let fromFlag = try Self.run(["serve", "--dev", "--database-url", url], environment: ["SIWA_DATABASE_URL": ""])
        for result in [fromEnvironment, fromFlag] {
            #expect(result.status != 0)
            #expect(result.output.contains("SIWA_DATABASE_URL"), "\(result.output)")
            #expect(result.output.split(separator: "\n").count == 1, "\(result.output)")
        }
    }

    @Test("--help works on every command")
    func help() throws {
        for command in [
            [], ["serve"], ["receive"], ["work"], ["migrate"], ["simulate"], ["inspect"], ["replay"], ["status"], ["rekey"],
            ["delete-user"], ["revoke"], ["user-report"], ["operator"], ["operator", "add"], ["operator", "list"], ["operator", "remove"],
        ] {
            let result = try Self.run(command + ["--help"], environment: [:])
            #expect(result.status == 0, "\(command)")
            #expect(result.output.contains("USAGE"), "\(command)")
        }
    }
}
