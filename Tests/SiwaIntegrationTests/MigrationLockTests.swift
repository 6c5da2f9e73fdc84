import Foundation
import SiwaPostgres
import Synchronization
import Testing

@testable import SiwaApp

/// A migration during a rolling deploy, with a dashboard transaction left open on a view: the
/// receivers keep answering 200, the migration retries until it gets its locks, a migration with
/// nothing to do takes no lock, and a role that may not migrate takes none before saying so.
@Suite(
    "Migrations never stall the receiver", .serialized,
    .needsDatabase)
struct MigrationLockTests {
    /// A session reading a dashboard view in a transaction it keeps open (AccessShareLock on
    /// `siwa.events` and the view until `commit`).
    final class Dashboard {
        let connection: PostgresConnection
        init(_ conninfo: String) throws {
            connection = try PostgresConnection(conninfo: conninfo, applicationName: "dashboard")
            try connection.execute("BEGIN")
            _ = try connection.execute("SELECT * FROM siwa.backlog")
        }
        func commit() throws { try connection.execute("COMMIT") }
    }

    /// Makes the database look migrated by an earlier release.
    static func forgetVersion(_ conninfo: String) throws {
        _ = try TestDatabase.query(conninfo, "UPDATE siwa.schema_release SET version = '0.9.0', digest = 'sha256:0000000000000000'")
    }

    /// The recorded release and digest, as `Migrator.versionMarker` spells them.
    static func storedVersion(_ conninfo: String) throws -> String? {
        try TestDatabase.query(conninfo, "SELECT version || ' (' || digest || ')' FROM siwa.schema_release").scalar
    }

    @Test(
        "migrate behind an open dashboard transaction: notifications meanwhile all 200, it retries, applies once the dashboard commits; a second migrate is up to date without a lock"
    )
    func migrateBehindADashboard() throws {
        let harness = try TestHarness()
        defer { harness.stop() }
        try Self.forgetVersion(harness.conninfo)
        let dashboard = try Dashboard(harness.conninfo)

        let retries = Mutex<[Migrator.Retry]>([])
        let outcome = Mutex<Result<Migrator.Outcome, PostgresError>?>(nil)
        let conninfo = harness.conninfo
        Thread.detachNewThread {
            let result: Result<Migrator.Outcome, PostgresError>
            do throws(PostgresError) {
                result = .success(try Migrator.migrate(conninfo: conninfo) { retry in retries.withLock { $0.append(retry) } })
            } catch {
                result = .failure(error)
            }
            outcome.withLock { $0 = result }
        }

        // Notifications while the migration waits for siwa.events (and gives up, and waits again).
        var answers: [Int] = []
        let started = Date()
        while retries.withLock({ $0.count }) < 2 || answers.count < 5 {
            #expect(Date().timeIntervalSince(started) < 60, "the migration never retried")
            if Date().timeIntervalSince(started) >= 60 { break }
            let reply = try harness.post(token: harness.token(sub: "000739.migrate.\(answers.count)"))
            answers.append(reply.status)
        }
        #expect(answers.allSatisfy { $0 == 200 }, "\(answers)")
        #expect(outcome.withLock { $0 } == nil, "the migration finished while the dashboard held siwa.events")
        let retried = retries.withLock { $0 }
        #expect(retried.allSatisfy { $0.error.sqlState == "55P03" } && retried.first?.description.contains("retrying in") == true)

        try dashboard.commit()
        #expect(eventually(timeout: 60) { outcome.withLock { $0 } != nil })
        let result = outcome.withLock { $0 }
        #expect((try? result?.get()) == .applied, "\(String(describing: result))")
        #expect(try Self.storedVersion(harness.conninfo) == Migrator.versionMarker)
        #expect(try harness.scalar("SELECT count(*) FROM siwa.events WHERE sub LIKE '000739.migrate.%'") == "\(answers.count)")

        // Nothing changed: up to date at once, with the dashboard open again. Any lock on
        // siwa.events would wait for it and fail (one attempt, no retry).
        let again = try Dashboard(harness.conninfo)
        var once = Migrator.Options()
        once.retryFor = .zero
        #expect(try Migrator.migrate(conninfo: harness.conninfo, options: once) == .upToDate)
        let migrateLocks = try harness.scalar(
            """
            SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
            WHERE a.application_name = 'siwa-notify migrate' AND l.relation IS NOT NULL AND a.datname = current_database()
            """)
        #expect(migrateLocks == "0")
        try again.commit()
    }

    @Test(
        "a worker whose role may not migrate (siwa_worker) takes no lock: with a dashboard holding siwa.events it says not allowed at once and starts"
    )
    func unprivilegedRoleTakesNoLock() throws {
        let owner = try TestDatabase.create()
        let role = "worker_\(UInt32.random(in: 0...UInt32.max))"
        let admin = try TestDatabase.adminURL()
        _ = try TestDatabase.query(admin, "CREATE ROLE \(role) LOGIN IN ROLE siwa_worker")
        let fields = owner.split(separator: " ").filter { !$0.hasPrefix("user=") }
        let asWorker = (fields + ["user=\(role)"]).joined(separator: " ")
        try Self.forgetVersion(owner)  // a newer binary: the version differs
        let dashboard = try Dashboard(owner)
        defer { try? dashboard.commit() }

        var once = Migrator.Options()
        once.retryFor = .zero
        #expect(try Migrator.migrate(conninfo: asWorker, options: once) == .notAllowed(role: role))
        // The owner, by contrast, would wait for the dashboard's lock (one attempt: it gives up).
        #expect { try Migrator.migrate(conninfo: owner, options: once) } throws: { ($0 as? PostgresError)?.sqlState == "55P03" }

        // `work` as siwa_worker: the notice, and the worker runs on the existing schema.
        let worker = try TestHarness(conninfo: asWorker, roles: .work)
        defer { worker.stop() }
        #expect(worker.logs.lines.contains { $0.contains("not allowed to migrate") && $0.contains(role) })
        #expect(try Self.storedVersion(owner) == "0.9.0 (sha256:0000000000000000)")
    }
}
