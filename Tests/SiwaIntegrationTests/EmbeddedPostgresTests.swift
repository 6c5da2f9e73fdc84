import Foundation
import Logging
import SiwaApp
import SiwaPostgres
import Testing

#if canImport(Glibc)
import Glibc
#endif

@Suite("Embedded PostgreSQL", .enabled(if: TestDatabase.hasServerBinaries, "needs the PostgreSQL server binaries (initdb, pg_ctl)"))
struct EmbeddedPostgresTests {
    static let logger = Logger(label: "embedded") { _ in SwiftLogNoOpLogHandler() }

    @Test(
        "as root, a data dir the postgres user cannot reach falls back to a cluster under /var/lib",
        .enabled(if: geteuid() == 0, "only root runs the cluster as another user"))
    func unreachableDataDirectory() throws {
        let privateParent = NSTemporaryDirectory() + "siwa-private-\(UInt32.random(in: 0...UInt32.max))"
        try FileManager.default.createDirectory(
            atPath: privateParent, withIntermediateDirectories: true,
            attributes: [.posixPermissions: 0o700])
        defer { try? FileManager.default.removeItem(atPath: privateParent) }
        let database = try EmbeddedPostgres(dataDirectory: privateParent + "/.siwa", logger: Self.logger)
        #expect(database.clusterDirectory.hasPrefix("/var/lib/siwa-notify/"))
        defer { try? FileManager.default.removeItem(atPath: (database.clusterDirectory as NSString).deletingLastPathComponent) }
        try database.start()
        defer { database.stop() }
        #expect(try PostgresConnection(conninfo: database.conninfo).execute("SELECT 1").scalar == "1")
        // The same data dir finds the same cluster again (e.g. for `status`).
        let again = try EmbeddedPostgres(dataDirectory: privateParent + "/.siwa", logger: Self.logger)
        #expect(again.conninfo == database.conninfo)
    }

    @Test("start adopts a cluster already running; stop stops it")
    func adoptAndStop() throws {
        let dir = NSTemporaryDirectory() + "siwa-embedded-\(UInt32.random(in: 0...UInt32.max))"
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let database = try EmbeddedPostgres(dataDirectory: dir, logger: Self.logger)
        #expect(database.clusterDirectory == URL(fileURLWithPath: dir).standardizedFileURL.path + "/postgres")
        try database.start()
        try database.start()  // already running: adopted, no error
        #expect(try PostgresConnection(conninfo: database.conninfo).execute("SELECT 1").scalar == "1")
        database.stop()
        #expect(throws: PostgresError.self) { try PostgresConnection(conninfo: database.conninfo) }
    }
}
