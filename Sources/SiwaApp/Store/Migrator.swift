import SiwaCrypto
import SiwaPostgres

/// Applies the embedded copy of `schema.sql` (idempotent; serialized by an advisory lock), and
/// records which version it applied (`COMMENT ON SCHEMA siwa`): a process that finds its own
/// version there skips the DDL, so restarting workers never takes table locks.
public enum Migrator {
    /// The schema this binary carries.
    public static var schemaSQL: String { String(decoding: PackageResources.schema_sql, as: UTF8.self) }

    /// `siwa-notify schema sha256:<first 16 hex digits of schema.sql's SHA-256>`.
    public static var versionMarker: String { "siwa-notify schema sha256:" + SHA256.hexDigest(schemaSQL).prefix(16) }

    /// Applies the schema unless this version is already there (`force`: apply anyway).
    public static func migrate(conninfo: String, force: Bool = false) throws(PostgresError) {
        let connection = try PostgresConnection(conninfo: conninfo, applicationName: "siwa-notify migrate")
        if !force, try connection.row(OperatorStatements.schemaVersion) == .some(versionMarker) { return }
        try connection.execute(schemaSQL)
        try connection.execute(OperatorStatements.recordSchemaVersion(versionMarker))
    }

    /// True when `siwa.events` exists (the schema was applied before).
    public static func schemaExists(conninfo: String) -> Bool {
        guard let connection = try? PostgresConnection(conninfo: conninfo, applicationName: "siwa-notify migrate") else { return false }
        return (try? connection.row(OperatorStatements.schemaExists)) == true
    }
}
