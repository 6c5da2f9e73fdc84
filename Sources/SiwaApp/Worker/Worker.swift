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
        /// Seconds one statement of a batch (the operator hook included) may run. Default 30.
        public var statementTimeout: Int = 30
        /// Seconds a batch waits for a row lock. Default 5.
        public var lockTimeout: Int = 5
        public init() {}
    }

    private let conninfo: String
    private let options: Options
    private let logger: Logger
    private let metrics: Metrics
    private let stopping = StopSignal()
    private let finished = StopSignal()

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
            self.finished.stop()
        }
        thread.name = "siwa-worker"
        thread.start()
    }

    /// Asks the loop to stop after the current batch and waits for it (up to `timeout` seconds).
    public func stop(timeout: Double = 30) {
        stopping.stop()
        _ = finished.wait(timeout)
    }

    private func loop() {
        var work: PostgresConnection?
        var listener: PostgresConnection?
        var backoff = 0.2
        var lastPrune = Date.distantPast
        while !stopping.isStopped {
            do {
                if work == nil || !(work!.isHealthy) {
                    work = try PostgresConnection(conninfo: conninfo, applicationName: "siwa-notify worker")
                }
                if listener == nil || !(listener!.isHealthy) {
                    listener = try PostgresConnection(conninfo: conninfo, applicationName: "siwa-notify listener") { c throws(PostgresError) in
                        try c.listen(WorkerStatements.channel)
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
                if processed < options.batchSize && !stopping.isStopped {
                    _ = try listener!.waitForNotifications(timeout: options.pollInterval)
                }
            } catch {
                logger.warning("worker database error, reconnecting", metadata: ["error": "\(error)", "retry_in": "\(backoff)"])
                work = nil
                listener = nil
                _ = stopping.wait(backoff)
                backoff = min(backoff * 2, 5)
            }
        }
        logger.info("worker stopped")
    }

    /// Deletes done and ignored events older than the retention, 1000 rows per short
    /// transaction (no long locks); pending, failed and dead events are never touched. Returns
    /// the number deleted.
    @discardableResult
    public func prune(on connection: PostgresConnection, maxBatches: Int = 100) throws(PostgresError) -> Int {
        var total = 0
        for _ in 0..<maxBatches {
            let deleted = try connection.affected(WorkerStatements.prune, options.retentionDays)
            total += deleted
            if deleted < 1000 || stopping.isStopped { break }
        }
        return total
    }

    /// Claims and applies one batch in one transaction; returns how many events it handled.
    @discardableResult
    public func processBatch(on connection: PostgresConnection) throws(PostgresError) -> Int {
        var report = BatchReport()
        let begin = WorkerStatements.beginBatch(statementTimeoutSeconds: options.statementTimeout,
                                                lockTimeoutSeconds: options.lockTimeout)
        let count = try connection.transaction(begin: begin) { c throws(PostgresError) in
            report = BatchReport()
            let claimed = try c.rows(WorkerStatements.claim, options.batchSize)
            // Accounts are locked in one order by every path (sorted by sub): no deadlocks.
            let bySub: (ClaimedEvent, ClaimedEvent) -> Bool = {
                if $0.event.sub != $1.event.sub { return $0.event.sub.utf8.lexicographicallyPrecedes($1.event.sub.utf8) }
                return $0.event.eventTimeMillis < $1.event.eventTimeMillis
            }
            // Fast path: the first event of each sub, all at once. The rest (a second event for a
            // sub in the same batch), or everything when the fast path fails, goes event by event.
            var seen: Set<String> = []
            let first = claimed.filter { seen.insert($0.event.sub).inserted }
            let firstIDs = Set(first.map(\.id))
            var rest = claimed.filter { !firstIDs.contains($0.id) }.sorted(by: bySub)
            if first.count > 1 {
                do throws(PostgresError) {
                    let decisions = try c.withSavepoint("siwa_batch") { c throws(PostgresError) in
                        try BatchApplier.apply(first, on: c)
                    }
                    report.applied += zip(first, decisions).map { ($0, $1) }
                } catch {
                    if !c.isHealthy { throw error }  // broken connection: the whole transaction is gone
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
            var item: ClaimedEvent
            var dead: Bool
            var attempts: Int
            var delay: Double
            var sqlState: String
        }

        var applied: [(ClaimedEvent, AccountDecision)] = []
        var failed: [Failure] = []
    }

    /// The slow path: one event under its own savepoint; a failure is recorded for retry.
    private func applyOne(_ item: ClaimedEvent, on c: PostgresConnection, report: inout BatchReport) throws(PostgresError) {
        do throws(PostgresError) {
            let decision = try c.withSavepoint("siwa_event") { c throws(PostgresError) in
                try BatchApplier.apply([item], on: c)[0]
            }
            report.applied.append((item, decision))
        } catch {
            if !c.isHealthy { throw error }  // broken connection: the whole transaction is gone
            let attempts = item.attempts + 1
            let dead = options.retry.isExhausted(attempts: attempts)
            let delay = options.retry.delay(afterAttempts: attempts, jitter: Double.random(in: 0..<1))
            let message = "\(error.sqlState ?? "?????"): \(error.serverMessage)"
            try c.affected(WorkerStatements.markFailed, .init(id: item.id, status: dead ? .dead : .failed, error: message,
                                                               retryInSeconds: delay))
            report.failed.append(BatchReport.Failure(item: item, dead: dead, attempts: attempts, delay: delay,
                                                     sqlState: error.sqlState ?? ""))
        }
    }
}
