import Foundation
import Logging
import SiwaCore
import SiwaPostgres
import Synchronization

/// Applies outbox events. Claims due rows with `FOR UPDATE SKIP LOCKED` in a transaction (so
/// many workers share one queue and a crashed worker leaves nothing stuck: its locks vanish with
/// its connection), applies each under a savepoint, retries failures with backoff and jitter,
/// dead-letters after `RetryPolicy.maxAttempts`. Wakes on `LISTEN siwa_events`, and polls every
/// `pollInterval` seconds besides (retries fall due without a notification).
public final class Worker: Sendable {
    public struct Options: Sendable {
        /// Events claimed per transaction. Default 1000.
        public var batchSize: Int = 1000
        /// Seconds between polls when no notification arrives. Default 1.
        public var pollInterval: Double = 1
        public var retry: RetryPolicy = RetryPolicy()
        /// Done events older than this many days are deleted. Default 30.
        public var retentionDays: Int = 30
        /// Seconds between two pruning passes. Default 600.
        public var pruneInterval: Double = 600
        public init() {}
    }

    private let conninfo: String
    private let options: Options
    private let logger: Logger
    private let metrics: Metrics
    private let stopping = Atomic<Bool>(false)
    private let finished = Mutex<Bool>(false)
    private let done = DispatchSemaphore(value: 0)

    public init(conninfo: String, options: Options = Options(), logger: Logger, metrics: Metrics) {
        self.conninfo = conninfo
        self.options = options
        self.logger = logger
        self.metrics = metrics
    }

    /// Starts the loop on a thread of its own.
    public func start() {
        let thread = Thread { [self] in
            self.loop()
            self.done.signal()
        }
        thread.name = "siwa-worker"
        thread.start()
    }

    /// Asks the loop to stop after the current batch and waits for it (up to `timeout` seconds).
    public func stop(timeout: Double = 30) {
        stopping.store(true, ordering: .relaxed)
        let alreadyDone = finished.withLock { $0 }
        if !alreadyDone { _ = done.wait(timeout: .now() + timeout) }
    }

    private func loop() {
        var work: PostgresConnection?
        var listener: PostgresConnection?
        var backoff = 0.2
        var lastPrune = Date.distantPast
        defer { finished.withLock { $0 = true } }
        while !stopping.load(ordering: .relaxed) {
            do {
                if work == nil || !(work!.isHealthy) {
                    work = try PostgresConnection(conninfo: conninfo, applicationName: "siwa-notify worker") { c throws(PostgresError) in
                        try EventApplier.prepare(c)
                        try BulkApplier.prepare(c)
                    }
                }
                if listener == nil || !(listener!.isHealthy) {
                    listener = try PostgresConnection(conninfo: conninfo, applicationName: "siwa-notify listener") { c throws(PostgresError) in
                        try c.execute("LISTEN siwa_events")
                    }
                    logger.debug("worker listening for new events")
                }
                if Date().timeIntervalSince(lastPrune) >= options.pruneInterval {
                    lastPrune = Date()
                    let pruned = try prune(on: work!)
                    if pruned > 0 {
                        logger.info("pruned done events", metadata: ["events": "\(pruned)", "older_than_days": "\(options.retentionDays)"])
                    }
                }
                let processed = try processBatch(on: work!)
                backoff = 0.2
                if processed < options.batchSize && !stopping.load(ordering: .relaxed) {
                    _ = try listener!.waitForNotifications(timeout: options.pollInterval)
                }
            } catch {
                logger.warning("worker database error, reconnecting", metadata: ["error": "\(error)", "retry_in": "\(backoff)"])
                work = nil
                listener = nil
                sleepInterruptibly(backoff)
                backoff = min(backoff * 2, 5)
            }
        }
        logger.info("worker stopped")
    }

    private func sleepInterruptibly(_ seconds: Double) {
        var left = seconds
        while left > 0 && !stopping.load(ordering: .relaxed) {
            Thread.sleep(forTimeInterval: min(left, 0.05))
            left -= 0.05
        }
    }

    /// Deletes done events older than the retention, 1000 rows per short transaction (no long
    /// locks); pending, failed and dead events are never touched. Returns the number deleted.
    @discardableResult
    public func prune(on connection: PostgresConnection, maxBatches: Int = 100) throws(PostgresError) -> Int {
        var total = 0
        for _ in 0..<maxBatches {
            let deleted = try connection.execute("""
                DELETE FROM siwa.events WHERE id IN (
                    SELECT id FROM siwa.events
                    WHERE status = 'done' AND processed_at < now() - $1::int * interval '1 day'
                    LIMIT 1000 FOR UPDATE SKIP LOCKED)
                """, [String(options.retentionDays)]).affectedRows
            total += deleted
            if deleted < 1000 || stopping.load(ordering: .relaxed) { break }
        }
        return total
    }

    /// Claims and applies one batch in one transaction; returns how many events it handled.
    @discardableResult
    public func processBatch(on connection: PostgresConnection) throws(PostgresError) -> Int {
        var report = BatchReport()
        let count = try connection.transaction { c throws(PostgresError) in
            report = BatchReport()
            let claimed = try EventApplier.claim(limit: options.batchSize, on: c)
            // Accounts are locked in one order by every path (sorted by sub): no deadlocks.
            let bySub: (EventApplier.Claimed, EventApplier.Claimed) -> Bool = {
                ($0.event.sub, $0.event.eventTimeMillis) < ($1.event.sub, $1.event.eventTimeMillis)
            }
            // Fast path: the first event of each sub, all at once. The rest (a second event for a
            // sub in the same batch), or everything when the fast path fails, goes event by event.
            var seen: Set<String> = []
            let first = claimed.filter { seen.insert($0.event.sub).inserted }
            let firstIDs = Set(first.map(\.id))
            var rest = claimed.filter { !firstIDs.contains($0.id) }.sorted(by: bySub)
            if first.count > 1 {
                try c.execute("SAVEPOINT siwa_bulk")
                do throws(PostgresError) {
                    let decisions = try BulkApplier.apply(first, on: c)
                    try c.execute("RELEASE SAVEPOINT siwa_bulk")
                    report.applied += zip(first, decisions).map { ($0, $1) }
                } catch {
                    if !c.isHealthy { throw error }  // broken connection: the whole transaction is gone
                    try c.execute("ROLLBACK TO SAVEPOINT siwa_bulk")
                    logger.debug("bulk apply failed, applying one by one", metadata: ["sqlstate": "\(error.sqlState ?? "")"])
                    rest = claimed.sorted(by: bySub)
                }
            } else {
                rest = claimed
            }
            for item in rest {
                try applyOne(item, on: c, report: &report)
            }
            return claimed.count
        }
        // Counted and logged once committed (a rolled-back batch is applied again later).
        for (item, decision) in report.applied {
            metrics.event(outcome: "applied", type: item.event.type.rawValue)
            logger.info("event applied", metadata: [
                "event_id": "\(item.id)", "type": "\(item.event.type.rawValue)",
                "sub_hash": "\(SubjectHash.of(item.event.sub))", "outcome": "\(decision.outcome.rawValue)",
            ])
        }
        for failure in report.failed {
            metrics.event(outcome: failure.dead ? "dead" : "failed", type: failure.item.event.type.rawValue)
            logger.warning(failure.dead ? "event dead-lettered" : "event failed, will retry", metadata: [
                "event_id": "\(failure.item.id)", "type": "\(failure.item.event.type.rawValue)",
                "attempts": "\(failure.attempts)", "sqlstate": "\(failure.sqlState)",
                "retry_in": "\(failure.dead ? 0 : failure.delay)",
            ])
        }
        return count
    }

    /// What one batch did, reported after its commit.
    struct BatchReport {
        struct Failure {
            var item: EventApplier.Claimed
            var dead: Bool
            var attempts: Int
            var delay: Double
            var sqlState: String
        }

        var applied: [(EventApplier.Claimed, AccountDecision)] = []
        var failed: [Failure] = []
    }

    /// The slow path: one event under its own savepoint; a failure is recorded for retry.
    private func applyOne(_ item: EventApplier.Claimed, on c: PostgresConnection, report: inout BatchReport) throws(PostgresError) {
        try c.execute("SAVEPOINT siwa_event")
        do throws(PostgresError) {
            let decision = try BulkApplier.apply([item], on: c)[0]
            try c.execute("RELEASE SAVEPOINT siwa_event")
            report.applied.append((item, decision))
        } catch {
            if !c.isHealthy { throw error }  // broken connection: the whole transaction is gone
            try c.execute("ROLLBACK TO SAVEPOINT siwa_event")
            let attempts = item.attempts + 1
            let dead = options.retry.isExhausted(attempts: attempts)
            let delay = options.retry.delay(afterAttempts: attempts, jitter: Double.random(in: 0..<1))
            let message = "\(error.sqlState ?? "?????"): \(error.serverMessage)"
            try EventApplier.markFailed(item, status: dead ? "dead" : "failed", error: message,
                                        retryIn: delay, on: c)
            report.failed.append(BatchReport.Failure(item: item, dead: dead, attempts: attempts, delay: delay,
                                                     sqlState: error.sqlState ?? ""))
        }
    }
}
