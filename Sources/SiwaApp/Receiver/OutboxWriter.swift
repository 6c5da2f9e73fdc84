import Foundation
import Logging
import SiwaCore
import SiwaPostgres
import Synchronization

/// Commits verified notifications to the outbox in batches: the listener threads hand each one
/// over (their connection suspended, holding no thread), writer threads take everything queued —
/// up to `maxBatch` — and insert it with one multi-row statement in one commit, then answer each
/// request. Nothing is answered 200 before its row is committed; a lone request is written at
/// once (no waiting to fill a batch), so batching only happens when requests arrive together.
///
/// Every notification carries a deadline (arrival + `SIWA_COMMIT_TIMEOUT`): a deadline thread
/// answers `.timedOut` (503) at that moment to whatever is still queued or stuck in a batch the
/// database does not answer, so a hung database never makes Apple wait longer than the bound.
/// A request that timed out may still be committed later: Apple's retry is then a duplicate.
public final class OutboxWriter: Service, @unchecked Sendable {
    // @unchecked: `queue`, `inFlight`, `running` and `idleWriters` are only touched with
    // `condition` locked.

    public struct Options: Sendable {
        /// Writer threads, each with its own connection. Default 1: one commit at a time while the
        /// next batch queues (measured faster than 2 or 4 on 2 cores; see bench/README.md).
        public var writers: Int = 1
        /// Most rows in one statement. Default 256.
        public var maxBatch: Int = 256
        /// Most notifications waiting; beyond it requests get 503 (back-pressure). Default 20,000.
        public var maxQueue: Int = 20_000
        public init() {}
    }

    /// What became of one submitted notification.
    public enum Result: Sendable {
        case committed(InsertOutcome)
        case failed(PostgresError)
        /// Not answered by the database before the deadline (it may still commit).
        case timedOut
    }

    public typealias Completion = @Sendable (Result) -> Void

    final class Item: Sendable {
        let notification: VerifiedNotification
        /// `DispatchTime.uptimeNanoseconds` after which the request is answered `.timedOut`.
        let deadline: UInt64
        private let completion: Completion
        private let answered = Atomic<Bool>(false)

        init(notification: VerifiedNotification, deadline: UInt64, completion: @escaping Completion) {
            self.notification = notification
            self.deadline = deadline
            self.completion = completion
        }

        /// Answers once; later calls (the real outcome after a timeout) are ignored.
        func answer(_ result: Result) {
            if !answered.exchange(true, ordering: .acquiringAndReleasing) { completion(result) }
        }
    }

    public let name = "outbox writer"
    private let pool: PostgresPool
    private let options: Options
    private let logger: Logger
    private let condition = NSCondition()
    private var queue: [Item] = []
    private var inFlight: [Int: [Item]] = [:]
    private var running = false
    private var idleWriters = 0
    /// The deadline the deadline thread sleeps until (`.max`: until woken).
    private var sleepingUntil: UInt64 = .max
    private let finished = DispatchGroup()

    public init(conninfo: String, options: Options = Options(), logger: Logger) {
        self.options = options
        self.logger = logger
        pool = PostgresPool(conninfo: conninfo, size: max(1, options.writers), applicationName: "siwa-notify writer")
    }

    public func start() {
        condition.lock()
        running = true
        condition.unlock()
        for i in 0..<max(1, options.writers) {
            spawn("siwa-writer-\(i)") { [self] in loop(writer: i) }
        }
        spawn("siwa-writer-deadlines") { [self] in expireLoop() }
    }

    private func spawn(_ name: String, _ body: @escaping @Sendable () -> Void) {
        finished.enter()
        let thread = Thread { [finished] in
            body()
            finished.leave()
        }
        thread.name = name
        thread.start()
    }

    /// Writes what is queued (each item still bounded by its deadline), then stops the threads;
    /// what the database has not answered by `deadline` is answered 503.
    public func stop(deadline: ShutdownDeadline) {
        stop(timeout: deadline.remaining)
    }

    /// `stop(deadline:)` with a budget in seconds.
    public func stop(timeout: Double) {
        condition.lock()
        running = false
        condition.broadcast()
        condition.unlock()
        if finished.wait(timeout: .now() + timeout) == .timedOut {
            logger.warning("writer did not finish its batch within the shutdown budget; its requests were answered 503")
            expireAll()
        }
        pool.close()
    }

    /// Notifications waiting for a writer.
    public var queued: Int {
        condition.lock()
        defer { condition.unlock() }
        return queue.count
    }

    /// Open database connections of the writer threads.
    public var openConnections: Int { pool.openConnections }

    /// Queues `notification`; `completion` runs once, on a writer thread after the commit (or
    /// failure), or on the deadline thread at `deadline` (`DispatchTime.uptimeNanoseconds`).
    /// Returns false (and never calls `completion`) when the queue is full or the writer stopped.
    public func submit(_ notification: VerifiedNotification, deadline: UInt64, completion: @escaping Completion) -> Bool {
        let item = Item(notification: notification, deadline: deadline, completion: completion)
        condition.lock()
        defer { condition.unlock() }
        guard running, queue.count < options.maxQueue else { return false }
        queue.append(item)
        // Wake a writer only if one is idle: a busy one takes what has queued when it finishes.
        // Wake the deadline thread only if this deadline is earlier than the one it sleeps until
        // (in order of arrival, never: no hand-off per request).
        if idleWriters > 0 || deadline < sleepingUntil { condition.broadcast() }
        return true
    }

    private func loop(writer: Int) {
        while true {
            condition.lock()
            while queue.isEmpty && running {
                idleWriters += 1
                condition.wait()
                idleWriters -= 1
            }
            if queue.isEmpty && !running {
                condition.unlock()
                return
            }
            let take = min(options.maxBatch, queue.count)
            let batch = Array(queue.prefix(take))
            queue.removeFirst(take)
            inFlight[writer] = batch
            condition.unlock()
            write(batch)
            condition.lock()
            inFlight[writer] = nil
            condition.unlock()
        }
    }

    /// The deadline thread: sleeps until the earliest deadline of what is queued or in flight,
    /// then answers `.timedOut` to everything past its deadline.
    private func expireLoop() {
        condition.lock()
        defer { condition.unlock() }
        while running || !queue.isEmpty || !inFlight.isEmpty {
            let now = DispatchTime.now().uptimeNanoseconds
            // Queued items are mostly in deadline order, but one that waited for a key fetch
            // arrives late with an early deadline: look at all of them.
            var expired: [Item] = []
            if queue.contains(where: { $0.deadline <= now }) {
                expired = queue.filter { $0.deadline <= now }
                queue.removeAll { $0.deadline <= now }
            }
            // In a batch the database does not answer: answer each once, and forget it here (the
            // writer still holds it and its late outcome is ignored).
            for (writer, batch) in inFlight where batch.contains(where: { $0.deadline <= now }) {
                expired += batch.filter { $0.deadline <= now }
                inFlight[writer] = batch.filter { $0.deadline > now }
            }
            if !expired.isEmpty {
                condition.unlock()
                for item in expired { item.answer(.timedOut) }
                condition.lock()
                continue
            }
            let earliest = (queue.map(\.deadline) + inFlight.values.flatMap { $0.map(\.deadline) }).min()
            if let earliest {
                sleepingUntil = earliest
                let seconds = Double(earliest - min(earliest, now)) / 1e9 + 0.001
                _ = condition.wait(until: Date().addingTimeInterval(seconds))
            } else if running {
                sleepingUntil = .max
                condition.wait()
            } else {
                return
            }
        }
    }

    /// Shutdown ran out of time: everything not yet answered is answered `.timedOut`.
    private func expireAll() {
        condition.lock()
        let items = queue + inFlight.values.flatMap { $0 }
        queue.removeAll()
        condition.unlock()
        for item in items { item.answer(.timedOut) }
    }

    private func write(_ batch: [Item]) {
        // Duplicates inside one batch, compared as exact bytes (as PostgreSQL compares them, not
        // as Swift's Unicode-aware `==`): the first copy goes to the database; a later copy is a
        // `duplicate` once the first is stored, and shares its failure otherwise.
        var firstOf: [DedupeKey: Int] = [:]
        var unique: [Int] = []
        var copyOf: [Int: Int] = [:]
        for (i, item) in batch.enumerated() {
            let keys = Self.dedupeKeys(item.notification)
            if let first = keys.lazy.compactMap({ firstOf[$0] }).first {
                copyOf[i] = first
            } else {
                keys.forEach { firstOf[$0] = i }
                unique.append(i)
            }
        }
        let results = insert(unique.map { batch[$0].notification })
        var resultOf: [Int: Result] = [:]
        for (i, result) in zip(unique, results) {
            resultOf[i] = result
            batch[i].answer(result)
        }
        for (i, first) in copyOf {
            switch resultOf[first]! {
            case .committed: batch[i].answer(.committed(.duplicate))
            case let other: batch[i].answer(other)
            }
        }
    }

    /// The two dedupe keys of the outbox as bytes: `jti`, and (`aud`, `sub`, `type`, `event_time`).
    /// Exact bytes, hashed as one block (an `[UInt8]` key hashes byte by byte).
    struct DedupeKey: Hashable {
        var bytes: [UInt8]

        func hash(into hasher: inout Hasher) {
            bytes.withUnsafeBytes { hasher.combine(bytes: $0) }
        }
    }

    static func dedupeKeys(_ n: VerifiedNotification) -> [DedupeKey] {
        var jti: [UInt8] = [1]
        jti.append(contentsOf: n.jti.utf8)
        var event: [UInt8] = [2]
        for part in [n.audience, n.event.sub, n.event.type.rawValue] {
            event.append(contentsOf: part.utf8)
            event.append(0)
        }
        event.append(contentsOf: String(n.event.eventTimeMillis).utf8)
        return [DedupeKey(bytes: jti), DedupeKey(bytes: event)]
    }

    /// Inserts `rows` (no duplicates among them) in one statement; when that fails on a bad row
    /// rather than a broken connection, row by row, so one bad row never fails the others.
    private func insert(_ rows: [VerifiedNotification]) -> [Result] {
        do {
            let inserted = try insertRetrying(rows)
            return rows.map { n in
                .committed(inserted.contains(n.jti) ? (n.event.type.isKnown ? .accepted : .ignored) : .duplicate)
            }
        } catch {
            // Row by row only when the data of some row was refused; a timeout, deadlock or
            // outage fails the batch (503, Apple retries) instead of being repeated per row.
            if !error.isDataError || rows.count == 1 {
                return rows.map { _ in .failed(error) }
            }
            logger.warning("batch insert failed, writing rows one by one", metadata: ["error": "\(error)"])
            return rows.flatMap { insert([$0]) }
        }
    }

    /// One retry on a fresh connection when the connection broke: safe, the insert is idempotent.
    private func insertRetrying(_ rows: [VerifiedNotification]) throws(PostgresError) -> Set<String> {
        do {
            return try insertOnce(rows)
        } catch  where error.isConnectionProblem {
            return try insertOnce(rows)
        }
    }

    private func insertOnce(_ rows: [VerifiedNotification]) throws(PostgresError) -> Set<String> {
        do {
            return try pool.withConnection(timeout: 5) { c in
                Set(try c.rows(OutboxStatements.insert, rows))
            }
        } catch let error as PostgresError {
            throw error
        } catch {
            throw PostgresError(code: .connectionFailed, serverMessage: "\(error)")
        }
    }
}
