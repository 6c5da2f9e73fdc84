import Foundation
import Logging
import SiwaBuildInfo
import SiwaCore
import SiwaCrypto
import SiwaPostgres
import Testing

@testable import SiwaApp

/// The schema's recorded release and the promise (docs/operations.md "Upgrading"): a process
/// never applies its schema over a newer release's; it runs on one that supports it and stops
/// on one that does not; release 0.9.0, which compares a comment with its own hash, finds the
/// newer schema "up to date".
@Suite("Releases: the recorded schema release and the compatibility promise", .serialized, .needsDatabase)
struct ReleaseUpgradeTests {
    static let fixtures = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Fixtures/schemas")

    /// What release 0.9.0's `Migrator.migrate` compares the comment on schema `siwa` with (its
    /// `versionMarker`): "siwa-notify schema sha256:" and 16 hex digits of its own schema.sql.
    static func marker090() throws -> String {
        let text = try String(contentsOf: fixtures.appendingPathComponent("schema-v0.9.0.sql"), encoding: .utf8)
        return "siwa-notify schema sha256:" + SHA256.hexDigest(text).prefix(16)
    }

    static func comment(_ url: String) throws -> String? {
        try TestDatabase.query(url, "SELECT obj_description(to_regnamespace('siwa'), 'pg_namespace')").scalar
    }

    static func record(_ url: String, version: String, oldest: String) throws {
        _ = try TestDatabase.query(url, "UPDATE siwa.schema_release SET version = $1, oldest_supported = $2", [version, oldest])
    }

    @Test("a migration records this release, its predecessor as the oldest supported, the digest, and 0.9.0's own marker")
    func recordsTheRelease() throws {
        let url = try TestDatabase.create()
        let row = try TestDatabase.query(url, "SELECT version, oldest_supported, digest FROM siwa.schema_release")
        #expect(row.rows.count == 1)
        #expect(row.rows.first == [BuildInfo.version, BuildInfo.previousRelease, Migrator.digest])
        #expect(try Migrator.recordedRelease(conninfo: url) == Migrator.recorded)
        // Release 0.9.0 re-applies its schema unless this comment equals its marker: it must.
        #expect(try Self.comment(url) == Self.marker090())
        #expect(Migrator.legacyMarker == (try Self.marker090()))
        #expect(try Migrator.migrate(conninfo: url) == .upToDate)
    }

    @Test("a 0.9.0 database is upgraded: no recorded release means older")
    func upgradesUnrecorded() throws {
        let url = try TestDatabase.createEmpty()
        let c = try PostgresConnection(conninfo: url)
        try c.execute(try String(contentsOf: Self.fixtures.appendingPathComponent("schema-v0.9.0.sql"), encoding: .utf8))
        try c.execute("COMMENT ON SCHEMA siwa IS '\(try Self.marker090())'")
        #expect(try Migrator.recordedRelease(conninfo: url) == nil)
        #expect(try Migrator.migrate(conninfo: url) == .applied)
        #expect(try Migrator.recordedRelease(conninfo: url) == Migrator.recorded)
    }

    @Test("a newer release's schema that supports this one: nothing applied, even with --force; an older one's is replaced")
    func neverOlderOverNewer() throws {
        let url = try TestDatabase.create()
        // A mark only a re-application would undo: an index of the schema dropped.
        _ = try TestDatabase.query(url, "DROP INDEX siwa.events_unknown_type_idx")
        let absent = "SELECT to_regclass('siwa.events_unknown_type_idx') IS NULL"
        try Self.record(url, version: "99.0.0", oldest: BuildInfo.version)
        let newer = RecordedSchema(version: SemanticVersion(99, 0, 0), oldestSupported: Migrator.release, digest: Migrator.digest)
        #expect(try Migrator.migrate(conninfo: url) == .newer(newer))
        #expect(try Migrator.migrate(conninfo: url, force: true) == .newer(newer))
        #expect(try TestDatabase.query(url, absent).scalar == "t")
        #expect(try TestDatabase.query(url, "SELECT version FROM siwa.schema_release").scalar == "99.0.0")

        try Self.record(url, version: "0.9.0", oldest: "0.8.0")
        #expect(try Migrator.migrate(conninfo: url) == .applied)
        #expect(try TestDatabase.query(url, absent).scalar == "f")
    }

    @Test("a newer release's schema that no longer supports this one: the start stops with one line naming both releases")
    func refusesOutsideThePromise() throws {
        let url = try TestDatabase.create()
        try Self.record(url, version: "99.0.0", oldest: "98.0.0")
        let outcome = try Migrator.migrate(conninfo: url)
        guard case .refused(let recorded) = outcome else {
            Issue.record("expected refused, got \(outcome)")
            return
        }
        #expect(recorded.version == SemanticVersion(99, 0, 0))
        var started: TestHarness?
        #expect {
            started = try TestHarness(conninfo: url, roles: .work)
        } throws: { error in
            let line = "\(error)"
            return line.contains("99.0.0") && line.contains(BuildInfo.version) && line.contains("98.0.0 or later") && !line.contains("\n")
        }
        started?.stop()
    }

    @Test("a migration that finds another release recorded since it read the release rolls back (its re-check after the lock)")
    func recheckAfterTheLock() throws {
        let url = try TestDatabase.create()
        let stale = MigrationStatements.applying(Migrator.schemaSQL, lockTimeoutMilliseconds: 2000, recording: Migrator.recording(expected: nil))!
        let c = try PostgresConnection(conninfo: url)
        #expect { try c.execute(stale) } throws: { ($0 as? PostgresError)?.sqlState == ReleaseStatements.changedState }
        _ = try? c.execute("ROLLBACK")
        let current = MigrationStatements.applying(
            Migrator.schemaSQL, lockTimeoutMilliseconds: 2000, recording: Migrator.recording(expected: Migrator.recorded))!
        try c.execute(current)
    }

    @Test("receive as a siwa_receiver login and work as a siwa_worker login read the release and keep their heartbeat rows")
    func heartbeatsAsTheirRoles() throws {
        let owner = try TestDatabase.create()
        let admin = try TestDatabase.adminURL()
        func login(_ group: String) throws -> String {
            let role = "\(group)_\(UInt32.random(in: 0...UInt32.max))"
            _ = try TestDatabase.query(admin, "CREATE ROLE \(role) LOGIN IN ROLE \(group)")
            return (owner.split(separator: " ").filter { !$0.hasPrefix("user=") } + ["user=\(role)"]).joined(separator: " ")
        }
        let receiver = try TestHarness(conninfo: try login("siwa_receiver"), roles: .receive)
        defer { receiver.stop() }
        let worker = try TestHarness(conninfo: try login("siwa_worker"), roles: .work)
        defer { worker.stop() }
        #expect(eventually { (try? ProcessHeartbeat.running(conninfo: owner).count) == 2 })
        let running = try ProcessHeartbeat.running(conninfo: owner)
        #expect(running.map(\.role).sorted() == ["receive", "work"], "\(running)")
        #expect(!receiver.logs.lines.contains { $0.contains("heartbeat not recorded") })
        #expect(!worker.logs.lines.contains { $0.contains("heartbeat not recorded") })
    }

    @Test("serve records its release: the start-up line, the metric, a heartbeat row its clean stop removes")
    func heartbeatRows() throws {
        let harness = try TestHarness()
        #expect(eventually { (try? ProcessHeartbeat.running(conninfo: harness.conninfo).count) == 1 })
        let running = try ProcessHeartbeat.running(conninfo: harness.conninfo)
        #expect(running.first?.role == "serve" && running.first?.version == BuildInfo.version && running.first?.commit == BuildInfo.commit)
        #expect(harness.logs.lines.contains { $0.contains("siwa-notify starting") && $0.contains(BuildInfo.version) })
        let metrics = try harness.admin("/metrics")
        #expect(metrics.body.contains("siwa_build_info{version=\"\(BuildInfo.version)\",commit=\"\(BuildInfo.commit)\"} 1"))
        harness.stop()
        #expect(try ProcessHeartbeat.running(conninfo: harness.conninfo).isEmpty, "a clean stop removes its row")
    }
}

/// The release as an operator sees it: `--version`, `--help`, `status`, `doctor --json`, and a
/// misspelt variable named at start with its closest known name.
@Suite("Releases: the version on the command line", .serialized, .needsDatabase)
struct ReleaseCommandLineTests {
    static let line = "siwa-notify \(BuildInfo.version) (commit \(BuildInfo.commit))"

    @Test("--version and --help name the release and the commit (known in a git checkout)")
    func version() throws {
        let v = try OperatorCommandTests.run(["--version"])
        #expect(v.status == 0 && v.output == Self.line + "\n", "\(v.output)")
        // Built from a git checkout, the commit is known (a scratch copy without .git says "unknown").
        let checkout = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent(".git")
        if FileManager.default.fileExists(atPath: checkout.path) {
            #expect(BuildInfo.commit != "unknown" && BuildInfo.commit.count >= 12, "\(BuildInfo.commit)")
        }
        #expect(try OperatorCommandTests.run(["--help"]).output.contains(Self.line))
    }

    @Test("status and doctor --json show this release, the schema's and the releases running")
    func statusAndDoctor() throws {
        let harness = try TestHarness()
        defer { harness.stop() }
        #expect(eventually { (try? ProcessHeartbeat.running(conninfo: harness.conninfo).count) == 1 })
        let env = ["SIWA_DATABASE_URL": harness.conninfo]
        let status = try OperatorCommandTests.run(["status"], environment: env)
        #expect(status.status == 0, "\(status.output)")
        #expect(status.output.contains("release (this binary)") && status.output.contains("\(BuildInfo.version) (commit \(BuildInfo.commit))"))
        #expect(status.output.contains("releases running") && status.output.contains("\(BuildInfo.version) ×1"), "\(status.output)")
        let json = try OperatorCommandTests.runApart(["status", "--json"], environment: env, errors: Pipe())
        let report = try JSONDecoder().decode(OutboxAdmin.Report.self, from: Data(json.output.utf8))
        #expect(report.releases?.schemaVersion == BuildInfo.version && report.releases?.running.map(\.role) == ["serve"])
        let doctor = try OperatorCommandTests.runApart(["doctor", "--json"], environment: env, errors: Pipe())
        let found = try JSONDecoder().decode(DoctorReport.self, from: Data(doctor.output.utf8))
        #expect(found.version == BuildInfo.version && found.commit == BuildInfo.commit)

        // Three releases side by side: wider than the promise, in status and doctor.
        _ = try harness.query(
            """
            INSERT INTO siwa.processes (id, role, version, commit, host, pid)
            VALUES ('a', 'work', '0.9.9', 'x', 'h', 1), ('b', 'work', '0.9.8', 'x', 'h', 2)
            """)
        #expect(try OperatorCommandTests.run(["status"], environment: env).output.contains("WIDER THAN THE PROMISE"))
        let wide = try JSONDecoder().decode(
            DoctorReport.self, from: Data(try OperatorCommandTests.runApart(["doctor", "--json"], environment: env, errors: Pipe()).output.utf8))
        #expect(wide.findings.contains { $0.code == "release-mix" && $0.message.contains("0.9.8") })
    }

    @Test("a misspelt SIWA_ variable: one warning at start naming the closest known name; doctor reports it")
    func unknownVariable() throws {
        let url = try TestDatabase.create()
        let env = ["SIWA_DATABASE_URL": url, "SIWA_RETENTON_DAYS": "7", "SIWA_ADMIN_LISTEN": "127.0.0.1:\(ServerProcess.freePort())"]
        let worker = try ServerProcess(["work"], environment: env)
        #expect(worker.waitForLog("worker started"))
        let log = try String(contentsOfFile: worker.logPath, encoding: .utf8)
        _ = worker.terminate()
        let warnings = log.split(separator: "\n").filter { $0.contains("unknown configuration variable") }
        #expect(warnings.count == 1 && warnings.first?.contains("SIWA_RETENTON_DAYS (did you mean SIWA_RETENTION_DAYS?)") == true, "\(log)")
        #expect(log.contains("siwa-notify starting") && log.contains(BuildInfo.version))
        let doctor = try OperatorCommandTests.runApart(["doctor", "--json", "--process", "work"], environment: env, errors: Pipe())
        let report = try JSONDecoder().decode(DoctorReport.self, from: Data(doctor.output.utf8))
        #expect(report.findings.contains { $0.code == "unknown-variable" && $0.message.contains("SIWA_RETENTION_DAYS") })
    }
}
