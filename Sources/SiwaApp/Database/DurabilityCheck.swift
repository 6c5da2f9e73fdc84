import SiwaCore
import SiwaPostgres

extension DatabaseDurability {
    /// Reads what the database behind `conninfo` promises about a commit (one short connection).
    /// The console's overview calls this (or `read(on:)` with a connection it holds).
    public static func read(conninfo: String) throws -> DatabaseDurability {
        let connection = try PostgresConnection(conninfo: conninfo, connectTimeout: 5, applicationName: "siwa-notify durability")
        return try read(on: connection)
    }

    /// Reads it on a connection the caller holds.
    static func read(on connection: PostgresConnection) throws(PostgresError) -> DatabaseDurability {
        guard let durability = try connection.row(DurabilityStatements.read) else {
            throw PostgresError(code: .unexpectedRow, serverMessage: "durability: no row")
        }
        return durability
    }

    /// The gauges of `/metrics`.
    var gauges: [(name: String, help: String, value: Double)] {
        [
            (
                "siwa_database_synchronous_standbys",
                "Synchronous standbys a commit waits for (0: a failover may lose events answered 200; -1: unknown, grant pg_read_all_stats).",
                metricValue
            ),
            (
                "siwa_database_asynchronous_standbys", "Standbys streaming asynchronously (-1: unknown, grant pg_read_all_stats).",
                asynchronousStandbys.map(Double.init) ?? -1
            ),
        ]
    }
}
