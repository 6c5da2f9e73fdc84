import Foundation
import Logging
import SiwaCore
import SiwaPostgres
import SiwaRuntime
import Synchronization

/// Commits verified notifications to the outbox in batches: the listener threads hand each one
/// over (their connection suspended, holding no thread), writer threads take everything queued —
/// up to `maxBatch` — and insert it with one multi-row statement in one commit, then answer each
/// request. Nothing is answered 200 before its row is committed; a lone request is written at
/// once (no waiting to fill a batch), so batching only happens when requests arrive together.
/// Several writers, each with its own connection, keep several commits in flight: PostgreSQL
/// flushes their commits together, where one connection waits for each flush in turn.
///
/// Every notification carries a deadline (arrival + `SIWA_COMMIT_TIMEOUT`): a deadline thread
/// answers `.timedOut` (503) at that moment to whatever is still queued or stuck in a batch the
/// database does not answer, so a hung database never makes Apple wait longer than the bound.
/// A request that timed out may still be committed later: Apple's retry is then a duplicate.
///
/// The decisions (which batch, what expired, what a failure leads to) are the pure
/// `OutboxQueue` and `InsertPolicy`; this class holds the threads, the lock and the connections.
public final class OutboxWriter: Service, @unchecked Sendable {
    // @unchecked: `state` is only touched with `condition` locked.

    public struct Options: Sendable {
        /// Writer threads, each with its own connection. Default 1: more writers commit smaller
        /// batches and cost more CPU per event than they save in waiting (bench/README.md).
        public var writers: Int = 1
        /// Most rows in one statement. Default 256.
        public var maxBatch: Int = 256
        /// Most notifications waiting; beyond it requests get 503 (back-pressure). Default 20,000.
        public var maxQueue: Int = 20_000
        /// Notifications queued that start a second commit while one is in flight. Default 16.
        public var minExtraBatch: Int = 16
        public init() {}
    }

    public typealias Result = OutboxResult
    public typealias Completion = @Sendable (OutboxResult) -> Void

    final class Item: OutboxQueueItem, Sendable {
        let notification: VerifiedNotification
        let deadline: Deadline
        private let completion: Completion
        private let answered = Atomic<Bool>(false)

        init(notification: VerifiedNotification, deadline: Deadline, completion: @escaping Completion) {
            self.notification = notification
            self.deadline = deadline
            self.completion = completion
        }

        /// Answers once; later calls (the real outcome after a timeout) are ignored.
        func answer(_ result: OutboxResult) {
            if !answered.exchange(true, ordering: .acquiringAndReleasing) { completion(result) }
        }
    }

    public let name = "outbox writer"
    private let pool: PostgresPool
    private let options: Options
    private let logger: Logger
    private let condition = Condition()
    private var state: OutboxQueue<Item>
    /// The writer threads and the deadline thread, once started.
    private let threads = Mutex<[LoopThread]>([])

    public init(conninfo: String, options: Options = Options(), logger: Logger) {
        self.options = options
        self.logger = logger
        state = OutboxQueue(maxBatch: options.maxBatch, maxQueue: options.maxQueue, minExtraBatch: options.minExtraBatch)
        pool = PostgresPool(conninfo: conninfo, size: max(1, options.writers), applicationName: "siwa-notify writer")
    }

    public func start() {
        for i in 0..<max(1, options.writers) {
            spawn("siwa-writer-\(i)") { [self] in loop(writer: i) }
        }
        spawn("siwa-writer-deadlines") { [self] in expireLoop() }
    }

    private func spawn(_ name: String, _ body: @escaping @Sendable () -> Void) {
        let thread = LoopThread(name: name, body)
        threads.withLock { $0.append(thread) }
    }

    /// Writes what is queued (each item still bounded by its deadline), then stops the threads;
    /// what the database has not answered by `deadline` is answered 503.
    public func stop(deadline: Deadline) {
        condition.lock()
        state.stop()
        condition.broadcast()
        condition.unlock()
        if !threads.withLock({ $0 }).allSatisfy({ $0.join(until: deadline) }) {
            logger.warning("writer did not finish its batch within the shutdown budget; its requests were answered 503")
            condition.lock()
            let items = state.abandonAll()
            condition.unlock()
            for item in items { item.answer(.timedOut) }
        }
        pool.close()
    }

    /// Notifications waiting for a writer.
    public var queued: Int {
        condition.lock()
        defer { condition.unlock() }
        return state.queued.count
    }

    /// Open database connections of the writer threads.
    public var openConnections: Int { pool.openConnections }

    /// Queues `notification`; `completion` runs once, on a writer thread after the commit (or
    /// failure), or on the deadline thread at `deadline`. Returns false (and never calls
    /// `completion`) when the queue is full or the writer stopped.
    public func submit(_ notification: VerifiedNotification, deadline: Deadline, completion: @escaping Completion) -> Bool {
        let item = Item(notification: notification, deadline: deadline, completion: completion)
        condition.lock()
        defer { condition.unlock() }
        switch state.submit(item) {
        case .refused:
            return false
        case .queued(let wakeWriter, let wakeTimer):
            // A busy writer takes what has queued when it finishes: no hand-off per request.
            if wakeWriter || wakeTimer { condition.broadcast() }
            return true
        }
    }

    private func loop(writer: Int) {
        condition.lock()
        while true {
            switch state.takeBatch(writer: writer) {
            case .exit:
                condition.unlock()
                return
            case .wait:
                condition.waitLocked()
            case .write(let batch):
                if state.idleWriterWanted { condition.broadcast() }
                condition.unlock()
                write(batch)
                condition.lock()
                state.finished(writer: writer)
            }
        }
    }

    /// The deadline thread: sleeps until the earliest deadline of what is queued or in flight,
    /// then answers `.timedOut` to everything past its deadline.
    private func expireLoop() {
        condition.lock()
        while true {
            let expiry = state.expire(now: .now)
            if !expiry.expired.isEmpty {
                condition.unlock()
                for item in expiry.expired { item.answer(.timedOut) }
                condition.lock()
                continue
            }
            guard let until = expiry.sleepUntil else { break }
            if until == .never {
                condition.waitLocked()
            } else {
                condition.waitLocked(until: until)
            }
        }
        condition.unlock()
    }

    private func write(_ batch: [Item]) {
        let notifications = batch.map(\.notification)
        let plan = InsertPolicy.plan(notifications)
        let unique = plan.unique.map { notifications[$0] }
        let earliest = batch.lazy.map(\.deadline).min() ?? .never
        let results = insert(unique, until: earliest, attempt: 1)
        for (item, result) in zip(batch, InsertPolicy.answers(plan, batchSize: batch.count, uniqueResults: results)) {
            item.answer(result)
        }
    }

    /// Inserts `rows` (no duplicates among them) in one statement, recovering as `InsertPolicy` says.
    private func insert(_ rows: [VerifiedNotification], until deadline: Deadline, attempt: Int) -> [OutboxResult] {
        let error: PostgresError
        do {
            let inserted = try pool.withConnection(timeout: max(.milliseconds(1), deadline.timeLeft)) { c in
                Set(try c.rows(OutboxStatements.insert, rows))
            }
            return InsertPolicy.results(rows, inserted: inserted)
        } catch let e as PostgresError {
            error = e
        } catch {
            return rows.map { _ in OutboxResult(PostgresError(code: .connectionFailed, serverMessage: "\(error)")) }
        }
        switch InsertPolicy.recovery(after: error, rows: rows.count, attempt: attempt) {
        case .retryOnFreshConnection:
            return insert(rows, until: deadline, attempt: attempt + 1)
        case .rowByRow:
            logger.warning("batch insert failed, writing rows one by one", metadata: ["error": "\(error)"])
            return rows.flatMap { insert([$0], until: deadline, attempt: 1) }
        case .fail(let result):
            return rows.map { _ in result }
        }
    }
}
