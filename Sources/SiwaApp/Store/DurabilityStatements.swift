import SiwaCore
import SiwaPostgres

/// What the database promises about a commit (`DatabaseDurability`): read at start, by `status`,
/// by the admin probe (`/metrics`) and by the console.
enum DurabilityStatements {
    /// `pg_stat_replication` shows its states (`state`, `sync_state`) only to members of
    /// `pg_read_all_stats` (as `pg_monitor` is); to others its rows have NULL states, so the counts
    /// are NULL then, not 0.
    static let read = Statement<Void, DatabaseDurability>(
        "durability",
        """
        SELECT pg_catalog.current_setting('synchronous_commit') AS synchronous_commit,
               pg_catalog.current_setting('synchronous_standby_names') AS synchronous_standby_names,
               current_user AS role,
               CASE WHEN pg_catalog.pg_has_role('pg_read_all_stats', 'USAGE') THEN
                 (SELECT pg_catalog.count(*) FROM pg_stat_replication WHERE state = 'streaming' AND sync_state IN ('sync', 'quorum'))
               END AS synchronous_standbys,
               CASE WHEN pg_catalog.pg_has_role('pg_read_all_stats', 'USAGE') THEN
                 (SELECT pg_catalog.count(*) FROM pg_stat_replication WHERE state = 'streaming' AND sync_state IN ('async', 'potential'))
               END AS asynchronous_standbys
        """,
        decode: { row throws(PostgresError) in
            DatabaseDurability(
                synchronousCommit: try row.text("synchronous_commit"),
                synchronousStandbyNames: try row.text("synchronous_standby_names"),
                synchronousStandbys: try row.optionalInt64("synchronous_standbys").map { Int($0) },
                asynchronousStandbys: try row.optionalInt64("asynchronous_standbys").map { Int($0) },
                role: try row.text("role"))
        })
}
