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

    /// True when `siwa.events` exists (the schema was applied before).
    public static func schemaExists(conninfo: String) -> Bool {
        let connection = try? PostgresConnection(conninfo: conninfo, applicationName: "siwa-notify migrate")
        return (try? connection?.execute("SELECT to_regclass('siwa.events') IS NOT NULL").scalar) == "t"
    }
}
