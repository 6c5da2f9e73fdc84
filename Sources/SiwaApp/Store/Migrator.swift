import SiwaPostgres

/// Applies the embedded copy of `schema.sql` (idempotent; serialized by an advisory lock).
public enum Migrator {
    /// The schema this binary carries.
    public static var schemaSQL: String { String(decoding: PackageResources.schema_sql, as: UTF8.self) }

    public static func migrate(conninfo: String) throws(PostgresError) {
        let connection = try PostgresConnection(conninfo: conninfo, applicationName: "siwa-notify migrate")
        try connection.affected(OperatorStatements.quietNotices, ())
        try connection.execute(schemaSQL)
    }

    /// True when `siwa.events` exists (the schema was applied before).
    public static func schemaExists(conninfo: String) -> Bool {
        guard let connection = try? PostgresConnection(conninfo: conninfo, applicationName: "siwa-notify migrate") else { return false }
        return (try? connection.row(OperatorStatements.schemaExists)) == true
    }
}
