import Foundation
import SiwaApp
import SiwaCore
import SiwaDevTools
import SiwaPostgres
import Synchronization
import Testing

/// What the database promises about a commit answered 200 (README "High availability: what a failover keeps"), read on the test
/// cluster (no standby) by a superuser and by a role that may not read the replication states.
@Suite("Database durability", .needsDatabase)
struct DurabilityTests {
    @Test("no standby: 0 synchronous standbys in the reading, /metrics and status; a role without pg_read_all_stats reads unknown")
    func readings() throws {
        let conninfo = try TestDatabase.create()
        let d = try DatabaseDurability.read(conninfo: conninfo)
        #expect(d.synchronousCommit == "on" && d.synchronousStandbys == 0 && d.asynchronousStandbys == 0)
        #expect(d.promise == .thisServer, "\(d)")

        let role = "siwa_durability_" + String(UInt32.random(in: 0...UInt32.max), radix: 16)
        _ = try TestDatabase.query(conninfo, "CREATE ROLE \(role) LOGIN")
        defer { _ = try? TestDatabase.query(conninfo, "DROP ROLE \(role)") }
        let asRole = conninfo.replacingOccurrences(of: "user=postgres", with: "user=\(role)")
        let unknown = try DatabaseDurability.read(conninfo: asRole)
        #expect(unknown.synchronousStandbys == nil && unknown.promise == .unknown)
        #expect(unknown.summary.contains("unknown — grant pg_read_all_stats to \(role)"))
        _ = try TestDatabase.query(conninfo, "GRANT pg_read_all_stats TO \(role)")
        #expect(try DatabaseDurability.read(conninfo: asRole).synchronousStandbys == 0)

        let report = try OutboxAdmin.status(conninfo: conninfo)
        #expect(report.durability == d)
        #expect(OutboxAdmin.render(report).contains("no standby streams"))

        let h = try TestHarness(conninfo: conninfo)
        defer { h.stop() }
        #expect(h.logs.lines.joined(separator: "\n").contains("database durability: synchronous_commit=on, no standby streams"))
        var samples: [ObservabilityTests.Sample] = []
        #expect(
            try eventually {
                samples = try ObservabilityTests.parse(try h.admin("/metrics").body)
                return ObservabilityTests.value(samples, "siwa_database_synchronous_standbys") != nil
            })
        #expect(ObservabilityTests.value(samples, "siwa_database_synchronous_standbys") == 0)
        #expect(ObservabilityTests.value(samples, "siwa_database_asynchronous_standbys") == 0)
    }
}

/// A primary and a synchronous streaming standby of its own (pg_basebackup -R), the standby
/// promoted while notifications arrive; siwa-notify on a libpq multi-host URL with
/// target_session_attrs=read-write.
@Suite(
    "Failover to a synchronous standby", .serialized,
    .enabled(if: TestDatabase.hasServerBinaries, "needs the PostgreSQL server binaries (initdb, pg_ctl, pg_basebackup)"))
struct FailoverTests {
    /// One cluster run by the `postgres` user when we are root (PostgreSQL refuses root).
    struct Cluster {
        let bin: String
        let directory: String
        var data: String { directory + "/data" }
        var socket: String { directory + "/run" }
        var conninfo: String { "host=\(socket) port=5432 user=postgres dbname=postgres" }

        /// Runs a PostgreSQL program; its output goes to `commands.log` (in the failure messages).
        func pg(_ command: [String]) -> Int32 {
            var argv = command
            argv[0] = bin + "/" + argv[0]
            if geteuid() == 0 { argv = ["/usr/sbin/runuser", "-u", "postgres", "--"] + argv }
            let quoted = argv.map { "'" + $0.replacingOccurrences(of: "'", with: "'\\''") + "'" }.joined(separator: " ")
            return PgBouncer.run(["/bin/sh", "-c", quoted + " >>'\(directory)/commands.log' 2>&1"])
        }

        var log: String { (try? String(contentsOfFile: directory + "/commands.log", encoding: .utf8)) ?? "" }

        func start() -> Bool {
            let options = "-c listen_addresses='' -c unix_socket_directories='\(socket)' -c max_connections=100"
            return pg(["pg_ctl", "-D", data, "-l", directory + "/postgres.log", "-o", options, "-w", "-t", "60", "start"]) == 0
        }

        /// A crash: no shutdown checkpoint, connections cut.
        func kill() { _ = pg(["pg_ctl", "-D", data, "-m", "immediate", "-w", "stop"]) }

        static func make(_ name: String, bin: String) throws -> Cluster {
            let directory = NSTemporaryDirectory() + "siwa-failover-\(name)-\(UInt32.random(in: 0...UInt32.max))"
            try FileManager.default.createDirectory(atPath: directory + "/run", withIntermediateDirectories: true)
            if geteuid() == 0 { _ = PgBouncer.run(["/bin/chown", "-R", "postgres:postgres", directory]) }
            return Cluster(bin: bin, directory: directory)
        }
    }

    @Test(
        "promoted while notifications arrive: nothing answered 200 is lost, the receiver accepts again by itself, the worker follows, status shows it"
    )
    func failover() throws {
        // The server's own directory (PATH may hold wrappers of initdb and pg_ctl only).
        let versions = ((try? FileManager.default.contentsOfDirectory(atPath: "/usr/lib/postgresql")) ?? []).compactMap(Int.init).sorted(by: >)
        let bin = try #require(
            (versions.map { "/usr/lib/postgresql/\($0)/bin" } + [EmbeddedPostgres.findBinaries() ?? ""])
                .first { FileManager.default.isExecutableFile(atPath: $0 + "/pg_basebackup") })
        let primary = try Cluster.make("primary", bin: bin), standby = try Cluster.make("standby", bin: bin)
        defer {
            primary.kill()
            standby.kill()
            try? FileManager.default.removeItem(atPath: primary.directory)
            try? FileManager.default.removeItem(atPath: standby.directory)
        }
        try #require(primary.pg(["initdb", "-D", primary.data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-instructions"]) == 0)
        try #require(primary.start())
        _ = try TestDatabase.query(primary.conninfo, "CREATE DATABASE siwa")
        // The copy first: pg_basebackup -R copies postgresql.auto.conf, and its end waits like a
        // commit. Then commits wait for the standby's flush; the copy, once promoted, waits for
        // none (ENGINEERING.md: a copy with the setting would wait for a standby it does not have).
        try #require(
            standby.pg([
                "pg_basebackup", "-D", standby.data, "-R", "-X", "stream", "-c", "fast", "-d", primary.conninfo + " application_name=standby",
            ]) == 0,
            "\(standby.log)")
        _ = try TestDatabase.query(primary.conninfo, "ALTER SYSTEM SET synchronous_standby_names = '*'")
        _ = try TestDatabase.query(primary.conninfo, "SELECT pg_reload_conf()")
        try #require(standby.start())
        #expect(
            try eventually(timeout: 30) {
                try TestDatabase.query(primary.conninfo, "SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'").scalar == "1"
            })

        let url =
            "host=\(primary.socket),\(standby.socket) port=5432,5432 user=postgres dbname=siwa target_session_attrs=read-write connect_timeout=2"
        let h = try TestHarness(conninfo: url)
        defer { h.stop() }
        let before = try DatabaseDurability.read(conninfo: url)
        #expect(before.promise == .standby && before.synchronousStandbys == 1, "\(before)")
        #expect(OutboxAdmin.render(try OutboxAdmin.status(conninfo: url)).contains("1 synchronous standby"))
        #expect(h.logs.lines.joined(separator: "\n").contains("1 synchronous standby: a commit answered 200 survives a failover"))

        // Notifications from four senders, each answer recorded with its time.
        struct Sent: Sendable {
            var sub: String
            var status: Int
            var at: Date
        }
        let sent = Mutex<[Sent]>([])
        let stop = Atomic<Bool>(false)
        let senders = (0..<4).map { thread in
            Thread {
                var n = 0
                while !stop.load(ordering: .relaxed) {
                    n += 1
                    let sub = "000739.failover.\(thread).\(n)"
                    let status = (try? h.post(token: h.token(type: "consent-revoked", sub: sub)).status) ?? 0
                    sent.withLock { $0.append(Sent(sub: sub, status: status, at: Date())) }
                }
            }
        }
        senders.forEach { $0.start() }
        #expect(eventually(timeout: 10) { sent.withLock { $0.filter { $0.status == 200 }.count } >= 20 })

        // The standby stops taking WAL for a second before the primary dies: an asynchronous
        // standby would miss what the primary answered 200 for meanwhile; a synchronous one makes
        // those commits wait (they end as 503 when the primary dies).
        let standbyProcesses = PostgresProcesses(dataDirectory: standby.data)
        #expect(standbyProcesses.freeze() > 0)
        Thread.sleep(forTimeInterval: 1)
        primary.kill()
        standbyProcesses.thaw()
        let promoted = Date()
        #expect(standby.pg(["pg_ctl", "-D", standby.data, "-w", "promote"]) == 0)
        // The receiver accepts again by itself (no restart) within 10 s of the promotion.
        let back = eventually(timeout: 20) { sent.withLock { $0.contains { $0.at > promoted && $0.status == 200 } } }
        let firstAfter = sent.withLock { $0.first { $0.at > promoted && $0.status == 200 }?.at }
        stop.store(true, ordering: .relaxed)
        #expect(eventually(timeout: 60) { !senders.contains(where: { !$0.isFinished }) }, "sender threads still running 60 s after stop")
        #expect(back)
        let recovery = (firstAfter ?? .distantFuture).timeIntervalSince(promoted)
        #expect(recovery < 10, "first 200 after the promotion: \(recovery) s")

        // Nothing answered 200 is lost: every one is on the promoted standby.
        let accepted = sent.withLock { $0.filter { $0.status == 200 }.map(\.sub) }
        let refused = sent.withLock { $0.filter { $0.status != 200 }.map(\.status) }
        #expect(refused.allSatisfy { $0 == 503 || $0 == 0 }, "\(refused)")
        let stored = Set(
            try TestDatabase.query(standby.conninfo + " dbname=siwa", "SELECT sub FROM siwa.events").rows.compactMap { $0[0] })
        let lost = accepted.filter { !stored.contains($0) }
        #expect(lost.isEmpty, "answered 200 but lost: \(lost.count) of \(accepted.count)")
        print(
            "failover: \(accepted.count) accepted, \(refused.count) refused (503), \(lost.count) lost;"
                + " first 200 after the promotion in \(recovery) s")

        // The worker follows the new primary: every event is applied there.
        let applying = Date()
        #expect(try h.waitForWorker(timeout: 30))
        print("failover: the worker applied every event \(Date().timeIntervalSince(applying)) s after the sender stopped")
        #expect(try h.scalar("SELECT count(*) FROM siwa.events WHERE status = 'done'") == String(stored.count))
        // status shows the change: no standby streams any more.
        let after = try OutboxAdmin.status(conninfo: url)
        #expect(after.durability?.promise == .thisServer, "\(String(describing: after.durability))")
    }
}
