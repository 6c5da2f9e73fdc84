import Foundation
import SiwaApp
import SiwaCore
import SiwaCrypto
import SiwaDevTools
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// `status`, `replay`, `inspect`, `migrate` and graceful shutdown, through the real binary.
@Suite(
    "Operator commands and graceful shutdown", .serialized,
    .needsDatabase)
struct OperatorCommandTests {
    /// Runs `siwa-notify <arguments>` to its end. A command still running after `timeout` seconds
    /// (e.g. a `serve` that should have refused to start) is killed: status -1 and a line saying so.
    static func run(
        _ arguments: [String], environment: [String: String] = [:], stdin: String? = nil, timeout: Double = 120
    ) throws -> (status: Int32, output: String) {
        let result = try runApart(arguments, environment: environment, stdin: stdin, timeout: timeout, errors: nil)
        return (result.status, result.output)
    }

    /// `run` with stderr apart from stdout (`errors`: the pipe stderr goes to; nil: with stdout).
    static func runApart(
        _ arguments: [String], environment: [String: String] = [:], stdin: String? = nil, timeout: Double = 120, errors: Pipe?
    ) throws -> (status: Int32, output: String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: ServerProcess.binary)
        process.arguments = arguments
        process.environment = ProcessInfo.processInfo.environment.merging(environment) { _, new in new }
        let output = Pipe()
        process.standardOutput = output
        process.standardError = errors ?? output
        let input = Pipe()
        process.standardInput = input
        try process.run()
        if let stdin { input.fileHandleForWriting.write(Data(stdin.utf8)) }
        try input.fileHandleForWriting.close()
        // SIGKILL (a `serve` would take SIGTERM as a graceful stop and exit 0); never once the
        // child is reaped (its pid may be reused).
        let killed = NSLock()
        nonisolated(unsafe) var fired = false
        nonisolated(unsafe) var exited = false
        let pid = process.processIdentifier
        let watchdog = DispatchWorkItem {
            killed.withLock {
                if !exited {
                    fired = true
                    kill(pid, SIGKILL)
                }
            }
        }
        DispatchQueue.global().asyncAfter(deadline: .now() + timeout, execute: watchdog)
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        killed.withLock { exited = true }
        watchdog.cancel()
        let text = String(decoding: data, as: UTF8.self)
        if killed.withLock({ fired }) {
            return (-1, text + "\n[test: still running after \(timeout) s, killed]")
        }
        return (process.terminationStatus, text)
    }

    @Test("migrate, status (table and JSON) and replay against a database")
    func statusAndReplay() throws {
        let admin = try TestDatabase.adminURL()
        let name = "siwa_cli_" + String(UInt32.random(in: 0...UInt32.max), radix: 16)
        _ = try TestDatabase.query(admin, "CREATE DATABASE \(name)")
        let url = admin + " dbname=\(name)"
        let env = ["SIWA_DATABASE_URL": url]
        let migrated = try Self.run(["migrate"], environment: env)
        #expect(migrated.status == 0, "\(migrated.output)")
        #expect(migrated.output.hasPrefix("schema applied"), "\(migrated.output)")
        let again = try Self.run(["migrate"], environment: env)
        #expect(again.status == 0 && again.output.hasPrefix("schema up to date"), "\(again.output)")
        _ = try TestDatabase.query(
            url,
            """
            INSERT INTO siwa.events (jti, aud, sub, type, event_time, status, attempts, last_error, claims)
            SELECT 'd' || g, 'a', 's' || g, CASE WHEN g = 1 THEN 'email-enabled' ELSE 'consent-revoked' END, now(),
                   'dead', 12, 'P0001: boom', '{}' FROM generate_series(1, 3) g;
            INSERT INTO siwa.events (jti, aud, sub, type, event_time, status, claims)
            VALUES ('p1', 'a', 'sp', 'email-disabled', now(), 'pending', '{}');
            """)
        let table = try Self.run(["status"], environment: env)
        #expect(table.status == 0, "\(table.output)")
        #expect(table.output.contains("dead letters"))
        #expect(table.output.contains("consent-revoked"))
        let json = try Self.run(["status", "--json"], environment: env)
        let report = try JSONDecoder().decode(OutboxAdmin.Report.self, from: Data(json.output.utf8))
        #expect(report.dead == 3)
        #expect(report.pending == 1)
        #expect(report.recent.count == 4)

        let none = try Self.run(["replay"], environment: env)
        #expect(none.status != 0)
        let byType = try Self.run(["replay", "--type", "email-enabled"], environment: env)
        #expect(byType.output.contains("requeued 1 dead event"), "\(byType.output)")
        let all = try Self.run(["replay", "--all"], environment: env)
        #expect(all.output.contains("requeued 2 dead events"), "\(all.output)")
        #expect(try TestDatabase.query(url, "SELECT count(*) FROM siwa.events WHERE status = 'pending' AND attempts = 0").scalar == "4")
    }

    @Test("inspect: check by check, offline with --jwks, from an argument or stdin; exit 1 when rejected")
    func inspect() throws {
        let signer = NotificationSigner(key: TestHarness.sharedKey, kid: "test-key-1")
        let jwks = NSTemporaryDirectory() + "siwa-inspect-\(UInt32.random(in: 0...UInt32.max)).json"
        try signer.jwks.write(toFile: jwks, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: jwks) }
        let env = ["SIWA_AUDIENCES": TestHarness.audience]
        let token = try signer.sign(claims: NotificationSigner.claims(audience: TestHarness.audience, type: "consent-revoked", sub: "s"))
        let ok = try Self.run(["inspect", token, "--jwks", jwks], environment: env)
        #expect(ok.status == 0, "\(ok.output)")
        for step in ["structure", "header", "key", "signature", "issuer", "audience", "expiry", "issued-at", "jti", "events"] {
            #expect(ok.output.contains("PASS  \(step)"), "\(step): \(ok.output)")
        }
        #expect(ok.output.contains("=> accepted"))
        let body = NotificationSigner.body(token: token)
        let fromStdin = try Self.run(["inspect", "-", "--jwks", jwks], environment: env, stdin: body)
        #expect(fromStdin.status == 0, "\(fromStdin.output)")
        let wrongAudience = try Self.run(["inspect", token, "--jwks", jwks], environment: ["SIWA_AUDIENCES": "com.other"])
        #expect(wrongAudience.status == 1)
        #expect(wrongAudience.output.contains("FAIL  audience"))
        #expect(wrongAudience.output.contains("wrong_audience"))
        let forged = try Self.run(["inspect", String(token.dropLast(4)) + "AAAA", "--jwks", jwks], environment: env)
        #expect(forged.status == 1)
        #expect(forged.output.contains("bad_signature"))
    }

    @Test("SIGTERM under load: the load interrupted, every answered request committed, exit 0")
    func gracefulShutdownUnderLoad() throws {
        let env = try CrashSafetyTests.Environment()
        let (server, url) = try env.start("serve")
        #expect(server.waitForLog("worker started"))
        let tokens = try CrashSafetyTests.tokens(3000, prefix: "term")
        let sender = LoadSender(url: url, tokens: tokens)
        let pid = server.process.processIdentifier
        Thread.detachNewThread {
            // Under load first (a positive sign, not a pause): 50 requests answered 200.
            _ = eventually(timeout: 60) { sender.accepted.count >= 50 }
            kill(pid, SIGTERM)
        }
        sender.run(threads: 4)
        let status = server.terminate()
        #expect(status == 0)
        let accepted = sender.accepted
        #expect(accepted.count >= 50)
        // The stop interrupted the load: requests after it were refused or found no listener.
        let refused = sender.outcomes.withLock { $0.values.filter { $0.status != 200 }.count }
        #expect(accepted.count < tokens.count && refused > 0, "\(accepted.count) accepted, \(refused) refused")
        let list = "{" + accepted.sorted().joined(separator: ",") + "}"
        #expect(
            try TestDatabase.query(env.conninfo, "SELECT count(*) FROM siwa.events WHERE jti = ANY($1::text[])", [list]).scalar
                == String(accepted.count))
        #expect(server.log.contains("shutting down"))
        #expect(server.log.contains("worker stopped"))
        // Nothing is left half-claimed: every stored event is pending or done.
        #expect(try env.count("SELECT count(*) FROM siwa.events WHERE status NOT IN ('pending', 'done')") == 0)
        print("SIGTERM under load: \(accepted.count) answered 200, all committed")
    }
}
