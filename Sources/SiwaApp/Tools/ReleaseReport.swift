import SiwaBuildInfo
import SiwaCore
import SiwaPostgres

/// The releases at work on a database: this binary's, the schema's, and each running process's
/// (their heartbeats), with the mix checked against the promise (docs/operations.md "Upgrading").
/// Shown by `status`, `doctor` and the console.
public struct ReleaseReport: Sendable, Codable, Equatable {
    /// This binary's release and commit.
    public var version: String
    public var commit: String
    /// The release that applied the schema, and the oldest it supports (nil: no release
    /// recorded, a database a release before 1.0 migrated).
    public var schemaVersion: String?
    public var schemaOldestSupported: String?
    /// The processes whose heartbeat is recent.
    public var running: [RunningProcess]
    /// Why the running releases are a mix wider than the promise (nil when they are not).
    public var mixProblem: String?

    /// Read as the login of `c` (any of siwa's roles may read the release; the process list
    /// needs `siwa_dashboard` or a process role: without it the list is empty).
    static func read(on c: PostgresConnection) throws(PostgresError) -> ReleaseReport {
        let recorded = try Migrator.recordedRelease(on: c)
        let running = (try? ProcessHeartbeat.running(on: c)) ?? []
        return ReleaseReport(
            version: BuildInfo.version, commit: BuildInfo.commit, schemaVersion: recorded?.version.description,
            schemaOldestSupported: recorded?.oldestSupported.description, running: running,
            mixProblem: ReleaseMix.problem(running: running.map(\.version), schema: recorded))
    }

    public static func read(conninfo: String) throws(PostgresError) -> ReleaseReport {
        try read(on: try PostgresConnection(conninfo: conninfo, applicationName: "siwa-notify status"))
    }

    /// The release lines of `status`'s first table.
    var rows: [[String]] {
        var rows = [
            ["release (this binary)", "\(version) (commit \(commit))"],
            [
                "schema release",
                schemaVersion.map { "\($0) (supports \(schemaOldestSupported ?? "?") and later)" } ?? "none recorded (before 1.0)",
            ],
        ]
        let versions = Dictionary(grouping: running, by: \.version).sorted { $0.key < $1.key }
        rows.append([
            "releases running",
            versions.isEmpty ? "none recorded" : versions.map { "\($0.key) ×\($0.value.count)" }.joined(separator: ", "),
        ])
        if let mixProblem { rows.append(["release mix", "WIDER THAN THE PROMISE: " + mixProblem]) }
        return rows
    }
}
