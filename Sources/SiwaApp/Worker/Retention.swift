import Logging
import SiwaCore
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
        stopping: WakeSignal? = nil
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

    /// The retention service: a `ConnectedLoop` that runs a pass every `interval` (the first
    /// one interval after the start) and waits until the next one; a failed pass is logged and
    /// tried again at the next. Stopping also ends a long pass between its batches.
    /// Deletes up to 1000 finished provider calls older than `days`; returns how many.
    static func pruneProviderCalls(on connection: PostgresConnection, olderThanDays days: Int) throws(PostgresError) -> Int {
        try connection.transaction(begin: WorkerStatements.beginKeyLookups) { c throws(PostgresError) in
            try c.affected(ProviderCallStatements.prune, days)
        }
    }

    public static func service(
        conninfo: String, days: Int, interval: Duration, logger: Logger, clock: any MonotonicClock = SystemClock.shared
    ) -> any Service {
        let stopping = WakeSignal(clock: clock)
        let loop = ConnectedLoop<PostgresConnection, Deadline>(
            name: "retention", threadName: "siwa-retention", wakeups: WakeSignal(clock: clock),
            body: .init(
                connect: { try PostgresConnection(conninfo: conninfo, applicationName: "siwa-notify retention") },
                makeState: { clock.now.adding(interval) },
                round: { connection, nextPass in
                    if !nextPass.hasPassed(at: clock.now) { return .pause(until: nextPass) }
                    do {
                        try pass(on: connection, days: days, logger: logger, stopping: stopping)
                    } catch {
                        logger.warning("pruning failed; will try again", metadata: ["error": "\(error)"])
                    }
                    nextPass = clock.now.adding(interval)
                    return .pause(until: nextPass)
                },
                failed: { error, _, _ in logger.debug("retention connection failed, reconnecting", metadata: ["error": "\(error)"]) }))
        return ClosureService(
            loop.name, start: { loop.start() },
            prepareToStop: {
                stopping.stop()
                loop.prepareToStop()
            },
            stop: { deadline in
                stopping.stop()
                loop.stop(until: deadline)
            })
    }

    /// One retention pass: old events, then delivered forwards and finished provider calls (they
    /// follow the events' retention), then queue rows without work.
    private static func pass(on connection: PostgresConnection, days: Int, logger: Logger, stopping: WakeSignal) throws(PostgresError) {
        let pruned = try prune(on: connection, olderThanDays: days, stopping: stopping)
        var batches = 0
        while batches < 100, !stopping.isStopped, try pruneForwards(on: connection, olderThanDays: days) == 1000 {
            batches += 1
        }
        batches = 0
        while batches < 100, !stopping.isStopped, try pruneProviderCalls(on: connection, olderThanDays: days) == 1000 {
            batches += 1
        }
        if pruned > 0 {
            logger.info("pruned old events", metadata: ["events": "\(pruned)", "older_than_days": "\(days)"])
        }
        let stale = try dropStaleQueueRows(on: connection)
        if stale > 0 {
            logger.warning("dropped queue rows without an event to work on", metadata: ["rows": "\(stale)"])
        }
    }
}
