import SiwaPostgres

/// Applies the embedded copy of `schema.sql` (idempotent; serialized by an advisory lock).
public enum Migrator {
    /// The schema this binary carries.
    public static var schemaSQL: String { String(decoding: PackageResources.schema_sql, as: UTF8.self) }

    public static func migrate(conninfo: String) throws(PostgresError) {
        let connection = try PostgresConnection(conninfo: conninfo, applicationName: "siwa-notify migrate")
        try connection.execute("SET client_min_messages = warning")
        try connection.execute(schemaSQL)
    }
}
