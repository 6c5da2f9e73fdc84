import Foundation
import Logging
import SiwaBuildInfo
import SiwaCore
import SiwaCrypto
import SiwaPostgres
import SiwaRuntime
import Synchronization

/// Keeps this process's row in `siwa.processes` (its release, commit, role, host and pid) fresh,
/// so `status`, `doctor` and the console list the releases running against the database. The
/// first beat is written as the service starts, on its own thread (a database that hangs never
/// holds up the start); a clean stop deletes the row. A failed beat (a database that
/// a release before 1.0 migrated has no such table, an outage) is logged once and retried at the
/// next beat: it never stops the process. It has a connection of its own (opened at the first
/// beat, statement and lock timeouts as the admin pool's), so a database that hangs holds up the
/// heartbeat alone, never the admin listener's pool.
public final class ProcessHeartbeat: Service {
    public let name = "process heartbeat"
    /// How often the row is refreshed.
    public static let interval: Duration = .seconds(10)
    /// A row whose heartbeat is older than this belongs to a process that is gone.
    public static let liveSeconds = 60

    private let pool: PostgresPool
    private let beat: ReleaseStatements.Heartbeat
    private let logger: Logger
    private let failing = Atomic<Bool>(false)
    private let thread = Mutex<LoopThread?>(nil)
    private let stopping = WakeSignal()
    private let interval: Duration

    init(conninfo: String, role: String, interval: Duration = ProcessHeartbeat.interval, logger: Logger) {
        pool = PostgresPool(conninfo: conninfo, size: 1, applicationName: "siwa-notify heartbeat", transactionBegin: AdminStatements.beginAdmin)
        self.interval = interval
        self.logger = logger
        var random = SystemRandomNumberGenerator()
        beat = ReleaseStatements.Heartbeat(
            id: Hex.encode((0..<12).map { _ in UInt8.random(in: 0...255, using: &random) }), role: role,
            version: BuildInfo.version, commit: BuildInfo.commit, host: ProcessInfo.processInfo.hostName,
            pid: Int(ProcessInfo.processInfo.processIdentifier))
    }

    public func start() {
        let started = LoopThread(name: "siwa-heartbeat") { [self] in
            repeat { beatOnce() } while !stopping.wait(for: interval)
        }
        thread.withLock { $0 = started }
    }

    public func stop(deadline: Deadline) {
        stopping.stop()
        _ = thread.withLock { $0 }?.join(until: deadline)
        _ = try? pool.withConnection(timeout: .seconds(1)) { c in try c.affected(ReleaseStatements.stopped, beat.id) }
        pool.close()
    }

    private func beatOnce() {
        do {
            _ = try pool.withConnection(timeout: .seconds(5)) { c in try c.affected(ReleaseStatements.heartbeat, beat) }
            if failing.exchange(false, ordering: .relaxed) { logger.info("process heartbeat recorded again") }
        } catch {
            if !failing.exchange(true, ordering: .relaxed) {
                logger.warning(
                    "process heartbeat not recorded (status and the console will not list this process until it is)",
                    metadata: ["error": "\(error)"])
            }
        }
    }

    /// The processes whose heartbeat is recent, read as the login of `conninfo`; empty when the
    /// database has no process table (a release before 1.0 migrated it).
    public static func running(conninfo: String) throws(PostgresError) -> [RunningProcess] {
        let c = try PostgresConnection(conninfo: conninfo, applicationName: "siwa-notify status")
        return try running(on: c)
    }

    static func running(on c: PostgresConnection) throws(PostgresError) -> [RunningProcess] {
        guard try c.row(ReleaseStatements.processesExist) == true else { return [] }
        return try c.rows(ReleaseStatements.running, liveSeconds)
    }
}
