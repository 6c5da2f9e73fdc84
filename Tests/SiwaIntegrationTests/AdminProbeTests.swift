import Foundation
import Logging
import SiwaPostgres
import Synchronization
import Testing

@testable import SiwaApp

/// The admin probe reads only what the process's login may read: a receiver's login with
/// `siwa_receiver` alone (the documented minimum without the API) reads none of the gauges'
/// tables, and must not write a "permission denied" into PostgreSQL's log every round, nor lose
/// the durability gauge with an aborted transaction.
@Suite("Admin probe", .needsDatabase)
struct AdminProbeTests {
    /// Readings of `count` consecutive rounds of a probe on `conninfo`, and its log lines.
    static func rounds(_ conninfo: String, count: Int, forwarding: Bool = true, providers: Bool = true) throws -> ([AdminProbe.Reading], [String]) {
        let logs = LogSink.capturing()
        let logger = Logger(label: "probe-test") { LineLogHandler(label: $0, level: .debug, format: .json, sink: logs) }
        let probe = AdminProbe(
            conninfo: conninfo, deadline: .seconds(8), refreshInterval: .milliseconds(50), forwarding: forwarding, providers: providers,
            logger: logger)
        probe.start()
        defer { probe.stop(deadline: .now.adding(.seconds(5))) }
        var readings: [AdminProbe.Reading] = []
        for _ in 0..<count {
            let answered = Mutex<AdminProbe.Reading?>(nil)
            let done = DispatchSemaphore(value: 0)
            probe.probe { reading in
                answered.withLock { $0 = reading }
                done.signal()
            }
            #expect(done.wait(timeout: .now() + 10) == .success, "a round answered within 10 s")
            if let reading = answered.withLock({ $0 }) { readings.append(reading) }
        }
        return (readings, logs.lines)
    }

    @Test("a login with siwa_receiver alone: every round answered, no gauge fails, durability unknown (-1), one notice naming what it skips")
    func receiverOnly() throws {
        let (url, login) = try LeastPrivilegeTests.databaseWithLoginRoles()
        _ = url
        let (readings, lines) = try Self.rounds(login["siwa_receiver"]!, count: 5)
        #expect(readings.count == 5 && readings.allSatisfy(\.answered))
        for reading in readings {
            #expect(reading.failedGroups == [], "a gauge failed, writing an error into the server's log: \(reading.failedGroups)")
            #expect(reading.gauges.first { $0.name == "siwa_database_synchronous_standbys" }?.value == -1)
        }
        let notices = lines.filter { $0.contains("gauges skipped") }
        #expect(notices.count == 1, "\(lines)")
        #expect(notices.first?.contains("siwa.counts") == true)
    }

    @Test("the worker's login reads every gauge; a gauge that fails (its table locked) leaves the others and the round")
    func groupsIsolated() throws {
        let (url, login) = try LeastPrivilegeTests.databaseWithLoginRoles()
        var (readings, lines) = try Self.rounds(login["siwa_worker"]!, count: 2)
        #expect(readings.allSatisfy { $0.answered && $0.failedGroups.isEmpty && $0.backlog != nil }, "\(readings)")
        #expect(readings.last?.gauges.contains { $0.name == "siwa_revocations_dead" } == true)
        #expect(!lines.contains { $0.contains("gauges skipped") })
        // One group's read fails (its table locked past the probe's 1 s lock timeout).
        let locker = try PostgresConnection(conninfo: url)
        try locker.execute("BEGIN")
        try locker.execute("LOCK TABLE siwa.forwards IN ACCESS EXCLUSIVE MODE")
        defer { _ = try? locker.execute("ROLLBACK") }
        (readings, lines) = try Self.rounds(login["siwa_worker"]!, count: 2)
        #expect(readings.allSatisfy { $0.answered && $0.failedGroups == ["forwards"] && $0.backlog != nil }, "\(readings)")
        #expect(readings.last?.gauges.contains { $0.name == "siwa_database_synchronous_standbys" } == true)
        #expect(readings.last?.gauges.contains { $0.name == "siwa_provider_calls_waiting" } == true, "the group after the failed one read")
    }
}
