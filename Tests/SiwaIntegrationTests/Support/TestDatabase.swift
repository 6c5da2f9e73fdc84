import Foundation
import Logging
import SiwaApp
import SiwaPostgres
import Testing

/// The PostgreSQL cluster started by `scripts/test` (SIWA_TEST_DATABASE_URL); every test gets a
/// fresh database of its own, migrated with the embedded schema.
enum TestDatabase {
    struct Missing: Error, CustomStringConvertible {
        var description: String {
            "SIWA_TEST_DATABASE_URL is not set: run the suite with ./scripts/test (it starts a private PostgreSQL)"
        }
    }

    /// True when `SIWA_TEST_DATABASE_URL` is set: suites that need the shared cluster are
    /// enabled on it (`.needsDatabase`) instead of failing. Also true
    /// when the database is required (`isRequired`): the suites then run and fail with `Missing`.
    static var isAvailable: Bool {
        !(ProcessInfo.processInfo.environment["SIWA_TEST_DATABASE_URL"] ?? "").isEmpty || isRequired
    }

    /// True under CI (`CI` set, not `false`/`0`) or with `SIWA_REQUIRE_DATABASE` set: a plain
    /// `swift test` there must not pass by skipping every database test.
    static var isRequired: Bool { requirement(ProcessInfo.processInfo.environment) }

    static func requirement(_ environment: [String: String]) -> Bool {
        ["CI", "SIWA_REQUIRE_DATABASE"].contains { name in
            guard let value = environment[name]?.lowercased() else { return false }
            return !["", "0", "false", "no"].contains(value)
        }
    }

    /// True when the PostgreSQL server binaries (`initdb`, `pg_ctl`) are installed: suites that
    /// start an embedded cluster of their own need only these (required like the database).
    static var hasServerBinaries: Bool {
        EmbeddedPostgres.findBinaries() != nil || isRequired
    }

    /// Runs `body` with a private embedded PostgreSQL in a temporary directory of its own, started,
    /// which the test may stop and start (a database down); stopped and removed afterwards.
    static func withEmbedded(_ prefix: String, _ body: (EmbeddedPostgres) throws -> Void) throws {
        let dir = NSTemporaryDirectory() + "siwa-\(prefix)-\(UInt32.random(in: 0...UInt32.max))"
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let database = try EmbeddedPostgres(dataDirectory: dir, logger: Logger(label: prefix) { _ in SwiftLogNoOpLogHandler() })
        try database.start()
        defer { database.stop() }
        try body(database)
    }

    static func adminURL() throws -> String {
        guard let url = ProcessInfo.processInfo.environment["SIWA_TEST_DATABASE_URL"], !url.isEmpty else {
            throw Missing()
        }
        return url
    }

    /// Creates and migrates a new database; returns its conninfo.
    static func create() throws -> String {
        let url = try createEmpty()
        try Migrator.migrate(conninfo: url)
        return url
    }

    /// Creates a new database without the schema; returns its conninfo.
    static func createEmpty() throws -> String {
        let admin = try adminURL()
        let name = "siwa_test_" + String(UInt64.random(in: 0...UInt64.max), radix: 16)
        let connection = try PostgresConnection(conninfo: admin)
        try connection.execute("CREATE DATABASE \(name)")
        return admin + " dbname=\(name)"
    }

    /// Runs `sql` as another client of the database would (an app, psql): with the login's own
    /// search_path, where siwa-notify's connections pin theirs.
    static func query(_ conninfo: String, _ sql: String, _ parameters: [String?] = []) throws -> PostgresResult {
        let connection = try PostgresConnection(conninfo: conninfo, pinsSearchPath: false)
        return try connection.execute(sql, parameters)
    }
}

/// Polls `condition` until it holds or `timeout` seconds pass.
func eventually(timeout: Double = 10, _ condition: () throws -> Bool) rethrows -> Bool {
    let deadline = Date().addingTimeInterval(timeout)
    while Date() < deadline {
        if try condition() { return true }
        Thread.sleep(forTimeInterval: 0.02)
    }
    return try condition()
}

/// Returns once the wall clock has turned to its next whole second: an id_token's `auth_time`
/// (one-second precision) taken from then on is later than all that happened before the call.
func untilNextSecond() {
    let now = Date().timeIntervalSince1970
    Thread.sleep(until: Date(timeIntervalSince1970: now.rounded(.down) + 1.001))
}

extension Trait where Self == ConditionTrait {
    /// The gate of a suite that needs the shared cluster (`TestDatabase.isAvailable`): skipped
    /// without it on a developer's machine, run (and failed) where the database is required.
    static var needsDatabase: Self {
        .enabled(if: TestDatabase.isAvailable, "needs SIWA_TEST_DATABASE_URL (scripts/test starts one)")
    }
}
