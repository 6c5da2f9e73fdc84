import Logging
import SiwaPostgres
import SiwaRuntime

/// Deletes done and ignored events older than the retention (`SIWA_RETENTION_DAYS`), 1000 rows
/// per short transaction (no long locks, key lookups only); pending, failed and dead events are
/// never touched.
public enum Retention {
    /// One pruning pass; returns how many events it deleted.
    @discardableResult
    public static func prune(
        on connection: PostgresConnection, olderThanDays days: Int, maxBatches: Int = 100,
        stopping: StopSignal? = nil
    ) throws(PostgresError) -> Int {
        var total = 0
        for _ in 0..<maxBatches {
            let deleted = try connection.transaction(begin: WorkerStatements.beginKeyLookups) { c throws(PostgresError) in
                try c.affected(WorkerStatements.prune, days)
            }
            total += deleted
            if deleted < 1000 || stopping?.isStopped == true { break }
        }
        return total
    }

    /// Drops queue rows whose event needs no work (`WorkerStatements.dropStaleQueueRows`);
    /// returns how many.
    @discardableResult
    public static func dropStaleQueueRows(on connection: PostgresConnection) throws(PostgresError) -> Int {
        try connection.transaction(begin: WorkerStatements.beginKeyLookups) { c throws(PostgresError) in
            try c.affected(WorkerStatements.dropStaleQueueRows, ())
        }
    }

    /// Deletes up to 1000 delivered forwards older than `days`; returns how many.
    static func pruneForwards(on connection: PostgresConnection, olderThanDays days: Int) throws(PostgresError) -> Int {
        try connection.transaction(begin: WorkerStatements.beginKeyLookups) { c throws(PostgresError) in
            try c.affected(ForwardStatements.prune, days)
        }
    }

    /// The periodic service: a pass every `interval` seconds.
    public static func service(conninfo: String, days: Int, interval: Double, logger: Logger) -> PeriodicTask {
        PeriodicTask(name: "retention", interval: interval) { stopping in
            do {
                let connection = try PostgresConnection(conninfo: conninfo, applicationName: "siwa-notify retention")
                let pruned = try prune(on: connection, olderThanDays: days, stopping: stopping)
                // Delivered forwards follow the events' retention.
                var batches = 0
                while batches < 100, !stopping.isStopped, try pruneForwards(on: connection, olderThanDays: days) == 1000 {
                    batches += 1
                }
                if pruned > 0 {
                    logger.info("pruned old events", metadata: ["events": "\(pruned)", "older_than_days": "\(days)"])
                }
                let stale = try dropStaleQueueRows(on: connection)
                if stale > 0 {
                    logger.warning("dropped queue rows without an event to work on", metadata: ["rows": "\(stale)"])
                }
            } catch {
                logger.warning("pruning failed; will try again", metadata: ["error": "\(error)"])
            }
        }
    }
}
