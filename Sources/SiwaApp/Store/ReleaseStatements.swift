import SiwaCore
import SiwaPostgres

/// The schema's recorded release and the processes' heartbeats (schema.sql "Releases").
enum ReleaseStatements {
    /// True when `siwa.schema_release` exists (a release that records its version migrated).
    static let recordedExists = Statement<Void, Bool>(
        "schema_release_exists", "SELECT pg_catalog.to_regclass('siwa.schema_release') IS NOT NULL AS present",
        decode: { row throws(PostgresError) in try row.bool("present") })

    /// The recorded release (no row before the first migration that records one).
    static let recorded = Statement<Void, RecordedSchema>(
        "schema_release", "SELECT version, oldest_supported, digest FROM siwa.schema_release",
        decode: { row throws(PostgresError) in
            let version = try row.text("version"), oldest = try row.text("oldest_supported")
            guard let v = SemanticVersion(version), let o = SemanticVersion(oldest) else {
                throw PostgresError(code: .queryFailed, serverMessage: "siwa.schema_release holds \(version) / \(oldest): not semantic versions")
            }
            return RecordedSchema(version: v, oldestSupported: o, digest: try row.text("digest"))
        })

    /// The statements a migration appends right before its `COMMIT;` (after the advisory lock, so
    /// no other migration runs meanwhile): stop if another release recorded itself since this
    /// one read `expected` (nil: none was recorded), record this release, and keep the comment
    /// release 0.9.0 reads (`legacyMarker`) at its own value, so that a 0.9.0 process, which
    /// re-applies its schema whenever the comment is not its marker, finds it "up to date".
    static func recording(_ release: RecordedSchema, expected: SemanticVersion?, legacyMarker: String) -> [String] {
        let expectedLiteral = expected.map { literal($0.description) } ?? "NULL"
        return [
            "DO $$ BEGIN IF (SELECT version FROM siwa.schema_release) IS DISTINCT FROM \(expectedLiteral) THEN "
                + "RAISE EXCEPTION 'another release recorded itself during this migration' USING ERRCODE = '\(changedState)'; "
                + "END IF; END $$;",
            "INSERT INTO siwa.schema_release (id, version, oldest_supported, digest, applied_at) VALUES (true, "
                + [release.version.description, release.oldestSupported.description, release.digest].map(literal)
                .joined(separator: ", ")
                + ", pg_catalog.now()) ON CONFLICT (id) DO UPDATE SET version = EXCLUDED.version, "
                + "oldest_supported = EXCLUDED.oldest_supported, digest = EXCLUDED.digest, applied_at = EXCLUDED.applied_at;",
            "COMMENT ON SCHEMA siwa IS \(literal(legacyMarker));",
        ]
    }

    /// A quoted SQL string literal (the values are this binary's constants and validated versions).
    private static func literal(_ text: String) -> String { "'" + text.replacingOccurrences(of: "'", with: "''") + "'" }

    /// The SQLSTATE of `recording`'s check: the migration re-reads the recorded release and decides again.
    static let changedState = "SWR01"

    /// A process's heartbeat: its row, created or refreshed; rows of processes gone for a day
    /// (killed without a clean stop) are removed on the way.
    struct Heartbeat: Sendable {
        var id: String
        var role: String
        var version: String
        var commit: String
        var host: String
        var pid: Int
    }

    static let heartbeat = Statement<Heartbeat, Void>(
        "process_heartbeat",
        """
        WITH gone AS (DELETE FROM siwa.processes WHERE heartbeat_at < pg_catalog.now() - interval '1 day' AND id <> $1)
        INSERT INTO siwa.processes (id, role, version, commit, host, pid, started_at, heartbeat_at)
        VALUES ($1, $2, $3, $4, $5, $6::integer, pg_catalog.now(), pg_catalog.now())
        ON CONFLICT (id) DO UPDATE SET heartbeat_at = pg_catalog.now()
        """,
        bind: { [$0.id, $0.role, $0.version, $0.commit, $0.host, String($0.pid)] })

    /// A clean stop removes its own row.
    static let stopped = Statement<String, Void>("process_stopped", "DELETE FROM siwa.processes WHERE id = $1", bind: { [$0] })

    /// The processes whose heartbeat is younger than `$1` seconds.
    static let running = Statement<Int, RunningProcess>(
        "processes_running",
        """
        SELECT role, version, commit, host, pid,
               extract(epoch FROM pg_catalog.now() - heartbeat_at)::float8 AS age
        FROM siwa.processes WHERE heartbeat_at > pg_catalog.now() - pg_catalog.make_interval(secs => $1::integer)
        ORDER BY version, role, host, pid
        """,
        bind: { [String($0)] },
        decode: { row throws(PostgresError) in
            RunningProcess(
                role: try row.text("role"), version: try row.text("version"), commit: try row.text("commit"),
                host: try row.text("host"), pid: try row.int("pid"), heartbeatAgeSeconds: try row.double("age"))
        })

    /// True when `siwa.processes` exists (not on a database a release before 1.0 migrated).
    static let processesExist = Statement<Void, Bool>(
        "processes_exist", "SELECT pg_catalog.to_regclass('siwa.processes') IS NOT NULL AS present",
        decode: { row throws(PostgresError) in try row.bool("present") })
}

/// One running process, as `status`, `doctor` and the console list them.
public struct RunningProcess: Sendable, Equatable, Codable {
    public var role: String
    public var version: String
    public var commit: String
    public var host: String
    public var pid: Int
    public var heartbeatAgeSeconds: Double
}
