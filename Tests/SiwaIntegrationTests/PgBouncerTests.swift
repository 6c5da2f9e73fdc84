import Foundation
import SiwaApp
import SiwaCore
import SiwaDevTools
import SiwaPostgres
import Testing

/// siwa-notify behind PgBouncer, end to end with the real binary. In transaction pooling a client
/// gets a possibly different server connection for every transaction: named prepared statements,
/// session `SET`s and `LISTEN` do not survive between transactions, so the service must use none
/// of them (or not depend on them) — the worker finds new events by polling.
@Suite(
    "Behind PgBouncer", .serialized, .enabled(if: PgBouncer.isInstalled, "pgbouncer is not installed (scripts/setup installs it)"),
    .needsDatabase)
struct PgBouncerTests {
    static let signer = NotificationSigner(key: TestHarness.sharedKey, kid: "test-key-1")

    /// Log lines that mean the pooler broke something.
    static let poolerFailures = [
        "prepared statement", "does not exist", "already exists", "database error",
        "unsupported startup parameter", "\"level\":\"error\"", "\"level\":\"critical\"",
    ]

    /// Lines of a process log that name one of `poolerFailures` (libpq NOTICEs excluded: they are
    /// not failures, though "already exists, skipping" from migrate means its session
    /// `SET client_min_messages` did not reach the server that ran the schema).
    static func failures(in log: String) -> [Substring] {
        log.split(separator: "\n").filter { line in
            !line.hasPrefix("NOTICE:") && poolerFailures.contains { line.contains($0) }
        }
    }

    struct Setup {
        let dbname: String
        let direct: String
        let bouncer: PgBouncer
        let jwks: String

        /// A new, empty database (not migrated) and a PgBouncer in `poolMode` in front of the test server.
        init(poolMode: String) throws {
            let admin = try TestDatabase.adminURL()
            dbname = "siwa_bouncer_" + String(UInt64.random(in: 0...UInt64.max), radix: 16)
            _ = try PostgresConnection(conninfo: admin).execute("CREATE DATABASE \(dbname)")
            direct = admin + " dbname=\(dbname)"
            // Transaction pooling: 2 server connections shared by every client (what the pooler
            // is for). Session pooling holds a server per client: room for all of them.
            bouncer = try PgBouncer(upstream: admin, poolMode: poolMode, poolSize: poolMode == "session" ? 40 : 2)
            jwks = NSTemporaryDirectory() + "siwa-bouncer-jwks-\(UInt32.random(in: 0...UInt32.max)).json"
            try PgBouncerTests.signer.jwks.write(toFile: jwks, atomically: true, encoding: .utf8)
        }

        var pooled: String { bouncer.conninfo(dbname: dbname) }

        func start(_ command: String) throws -> (ServerProcess, String) {
            let port = ServerProcess.freePort()
            let process = try ServerProcess(
                [command],
                environment: [
                    "SIWA_DATABASE_URL": pooled, "SIWA_AUDIENCES": TestHarness.audience, "SIWA_JWKS_URL": "file://" + jwks,
                    "SIWA_LISTEN": "127.0.0.1:\(port)", "SIWA_ADMIN_LISTEN": "127.0.0.1:\(ServerProcess.freePort())",
                    "SIWA_LOG_LEVEL": "info",
                ])
            return (process, "http://127.0.0.1:\(port)/apple/notifications")
        }

        /// Runs `siwa-notify migrate` through PgBouncer; returns its exit status and log.
        func migrate() throws -> (Int32, String) {
            let migrate = try ServerProcess(["migrate"], environment: ["SIWA_DATABASE_URL": pooled])
            let exited = eventually(timeout: 60) { !migrate.process.isRunning }
            if !exited { migrate.kill9() }
            migrate.process.waitUntilExit()
            return (migrate.process.terminationStatus, migrate.log)
        }

        func count(_ sql: String) throws -> Int {
            Int(try TestDatabase.query(direct, sql).scalar ?? "-1") ?? -1
        }

        func stop() {
            bouncer.stop()
            try? FileManager.default.removeItem(atPath: jwks)
        }
    }

    /// Posts `n` notifications for new subs `prefix.i`; returns the codes answered.
    static func post(_ n: Int, prefix: String, to url: String) throws -> [String] {
        try (0..<n).map { i in
            let claims = NotificationSigner.claims(audience: TestHarness.audience, type: "consent-revoked", sub: "\(prefix).\(i)")
            let response = try NotificationSigner.post(body: NotificationSigner.body(token: try signer.sign(claims: claims)), to: url)
            let value = try? JSONParser.parse(String(decoding: response.body, as: UTF8.self))
            return "\(response.status) \(value?["status"]?.stringValue ?? value?["error"]?.stringValue ?? "-")"
        }
    }

    @Test(
        "serve through PgBouncer: migrate, 200s, the worker applies every event within seconds, no prepared-statement errors",
        arguments: ["transaction", "session"])
    func serve(poolMode: String) throws {
        let setup = try Setup(poolMode: poolMode)
        defer { setup.stop() }
        // migrate through the pooler (one transaction, advisory xact lock), twice like two deploys.
        for run in 1...2 {
            let (status, log) = try setup.migrate()
            #expect(status == 0, "migrate run \(run) through PgBouncer (\(poolMode)) failed: \(log.suffix(600))")
        }
        #expect(try TestDatabase.query(setup.direct, "SELECT to_regclass('siwa.events') IS NOT NULL").scalar == "t")
        _ = try TestDatabase.query(setup.direct, RetryAndHookTests.hookLog)

        let (server, url) = try setup.start("serve")
        defer { server.terminate() }
        #expect(server.waitForLog("worker started"), "\(server.log.suffix(800))")
        // Two rounds: the second arrives while the worker is idle (waiting for a notification
        // that a transaction pooler never delivers).
        var total = 0
        for round in 0..<2 {
            let codes = try Self.post(20, prefix: "bouncer.\(poolMode).\(round)", to: url)
            #expect(codes.allSatisfy { $0 == "200 accepted" }, "round \(round): \(Set(codes))")
            total += 20
            let applied = eventually(timeout: 10) {
                (try? setup.count("SELECT count(*) FROM siwa.events WHERE status = 'done'")) == total
            }
            #expect(applied, "round \(round): \((try? setup.count("SELECT count(*) FROM siwa.events WHERE status = 'done'")) ?? -1) of \(total) done")
        }
        #expect(try setup.count("SELECT count(*) FROM siwa.events") == total)
        #expect(try setup.count("SELECT count(*) FROM siwa.accounts WHERE status = 'consent_revoked'") == total)
        #expect(try setup.count("SELECT count(*) FROM public.hook_log") == total)
        #expect(try setup.count("SELECT count(DISTINCT event_id) FROM public.hook_log") == total)
        #expect(try setup.count("SELECT count(*) FROM siwa.events WHERE attempts <> 1") == 0)
        #expect(server.terminate() == 0)
        let bad = Self.failures(in: server.log)
        #expect(bad.isEmpty, "\(bad.prefix(5).joined(separator: "\n"))")

        if poolMode == "transaction" {
            // Nothing of siwa-notify's session state is left on the pooled server connections
            // for the next client: no named prepared statements, no session SETs.
            for _ in 0..<4 {
                let probe = try PostgresConnection(conninfo: setup.pooled)
                #expect(try probe.execute("SELECT count(*) FROM pg_prepared_statements").scalar == "0")
                #expect(try probe.execute("SHOW statement_timeout").scalar == "0")
                #expect(try probe.execute("SHOW lock_timeout").scalar == "0")
            }
        }
    }

    @Test("receive and two work processes through PgBouncer in transaction pooling: all accepted, all applied once")
    func receiveAndWork() throws {
        let setup = try Setup(poolMode: "transaction")
        defer { setup.stop() }
        // The schema goes on directly here (migrate through the pooler is the test above).
        try Migrator.migrate(conninfo: setup.direct)
        _ = try TestDatabase.query(setup.direct, RetryAndHookTests.hookLog)

        let (receiver, url) = try setup.start("receive")
        defer { receiver.terminate() }
        let workers = try (0..<2).map { _ in try setup.start("work").0 }
        defer { workers.forEach { $0.terminate() } }
        #expect(receiver.waitForLog("admin listener up"), "\(receiver.log.suffix(800))")
        for worker in workers { #expect(worker.waitForLog("worker started"), "\(worker.log.suffix(800))") }

        let n = 40
        let codes = try Self.post(n, prefix: "bouncer.split", to: url)
        #expect(codes.allSatisfy { $0 == "200 accepted" }, "\(Set(codes))")
        let applied = eventually(timeout: 15) {
            (try? setup.count("SELECT count(*) FROM siwa.events WHERE status = 'done'")) == n
        }
        #expect(applied, "\((try? setup.count("SELECT count(*) FROM siwa.events WHERE status = 'done'")) ?? -1) of \(n) done")
        #expect(try setup.count("SELECT count(*) FROM public.hook_log") == n)
        #expect(try setup.count("SELECT count(DISTINCT event_id) FROM public.hook_log") == n)
        #expect(try setup.count("SELECT count(*) FROM siwa.accounts WHERE status = 'consent_revoked'") == n)
        #expect(receiver.terminate() == 0)
        for worker in workers { #expect(worker.terminate() == 0) }
        for process in [receiver] + workers {
            let bad = Self.failures(in: process.log)
            #expect(bad.isEmpty, "\(bad.prefix(5).joined(separator: "\n"))")
        }
    }
}
