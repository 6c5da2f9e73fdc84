import Foundation
import Logging
import SiwaCore
import SiwaPostgres

/// Commits verified notifications to the outbox in batches: the listener threads hand each one
/// over (their connection suspended, holding no thread), writer threads take everything queued —
/// up to `maxBatch` — and insert it with one multi-row statement in one commit, then answer each
/// request. Nothing is answered before its row is committed; a lone request is written at once
/// (no waiting to fill a batch), so batching only happens when requests arrive together.
public final class OutboxWriter: @unchecked Sendable {
    // @unchecked: `queue` and `running` are only touched with `condition` locked.

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

    public typealias Completion = @Sendable (Result<EventStore.Outcome, PostgresError>) -> Void

    struct Item {
        var notification: VerifiedNotification
        var completion: Completion
    }

    private let pool: PostgresPool
    private let options: Options
    private let logger: Logger
    private let condition = NSCondition()
    private var queue: [Item] = []
    private var running = false
    private var idleWriters = 0
    private let finished = DispatchGroup()

    public init(conninfo: String, options: Options = Options(), logger: Logger) {
        self.options = options
        self.logger = logger
        pool = PostgresPool(conninfo: conninfo, size: max(1, options.writers), applicationName: "siwa-notify writer") {
            c throws(PostgresError) in try Self.prepare(c)
        }
    }

    public func start() {
        condition.lock()
        running = true
        condition.unlock()
        for i in 0..<max(1, options.writers) {
            finished.enter()
            let thread = Thread { [self] in
                loop()
                finished.leave()
            }
            thread.name = "siwa-writer-\(i)"
            thread.start()
        }
    }

    /// Writes what is queued, then stops the writer threads.
    public func stop() {
        condition.lock()
        running = false
        condition.broadcast()
        condition.unlock()
        finished.wait()
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

    /// Queues `notification`; `completion` runs on a writer thread after the commit (or failure).
    /// Returns false (and never calls `completion`) when the queue is full or the writer stopped.
    public func submit(_ notification: VerifiedNotification, completion: @escaping Completion) -> Bool {
        condition.lock()
        defer { condition.unlock() }
        guard running, queue.count < options.maxQueue else { return false }
        queue.append(Item(notification: notification, completion: completion))
        // Wake a writer only if one is idle: a busy one takes what has queued when it finishes.
        if idleWriters > 0 { condition.signal() }
        return true
    }

    private func loop() {
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
            condition.unlock()
            write(batch)
        }
    }

    private func write(_ batch: [Item]) {
        // Duplicates inside one batch: the first copy goes to the database; a later copy is a
        // `duplicate` once the first is stored, and shares its failure otherwise.
        var firstOf: [String: Int] = [:]
        var unique: [Int] = []
        var copyOf: [Int: Int] = [:]
        for (i, item) in batch.enumerated() {
            let event = item.notification.event
            let keys = ["j:" + item.notification.jti, "e:\(event.sub)\u{1}\(event.type.rawValue)\u{1}\(event.eventTimeMillis)"]
            if let first = keys.lazy.compactMap({ firstOf[$0] }).first {
                copyOf[i] = first
            } else {
                keys.forEach { firstOf[$0] = i }
                unique.append(i)
            }
        }
        let results = insert(unique.map { batch[$0].notification })
        var resultOf: [Int: Result<EventStore.Outcome, PostgresError>] = [:]
        for (i, result) in zip(unique, results) {
            resultOf[i] = result
            batch[i].completion(result)
        }
        for (i, first) in copyOf {
            batch[i].completion(resultOf[first]!.map { _ in .duplicate })
        }
    }

    /// Inserts `rows` (no duplicates among them) in one statement; when that fails on a bad row
    /// rather than a broken connection, row by row, so one bad row never fails the others.
    private func insert(_ rows: [VerifiedNotification]) -> [Result<EventStore.Outcome, PostgresError>] {
        do {
            let inserted = try insertRetrying(rows)
            return rows.map { n in
                .success(inserted.contains(n.jti) ? (n.event.type.isKnown ? .accepted : .ignored) : .duplicate)
            }
        } catch {
            // Row by row only when the data of some row was refused; a timeout, deadlock or
            // outage fails the batch (503, Apple retries) instead of being repeated per row.
            if !error.isDataError || rows.count == 1 {
                return rows.map { _ in .failure(error) }
            }
            logger.warning("batch insert failed, writing rows one by one", metadata: ["error": "\(error)"])
            return rows.flatMap { insert([$0]) }
        }
    }

    /// One retry on a fresh connection when the connection broke: safe, the insert is idempotent.
    private func insertRetrying(_ rows: [VerifiedNotification]) throws(PostgresError) -> Set<String> {
        do {
            return try insertOnce(rows)
        } catch where error.isConnectionProblem {
            return try insertOnce(rows)
        }
    }

    private func insertOnce(_ rows: [VerifiedNotification]) throws(PostgresError) -> Set<String> {
        do {
            return try pool.withConnection(timeout: 5) { c in
                let result = try c.executePrepared(Self.statementName, Self.parameters(rows))
                return Set(result.rows.compactMap { $0.first ?? nil })
            }
        } catch let error as PostgresError {
            throw error
        } catch {
            throw PostgresError(code: .connectionFailed, serverMessage: "\(error)")
        }
    }

    static let statementName = "siwa_insert_events"
    static let statementSQL = """
        INSERT INTO siwa.events (jti, aud, sub, type, event_time, email, is_private_email, status, claims)
        SELECT j, a, s, t, timestamptz 'epoch' + ms * interval '1 millisecond', e, p, st, c::jsonb
        FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bigint[], $6::text[], $7::boolean[],
                    $8::text[], $9::text[]) AS u(j, a, s, t, ms, e, p, st, c)
        ON CONFLICT DO NOTHING
        RETURNING jti
        """

    static func prepare(_ c: PostgresConnection) throws(PostgresError) {
        // A hung statement must not hold every waiting request forever: fail it (503, Apple retries).
        try c.execute("SET statement_timeout = '10s'")
        try c.prepare(statementName, statementSQL)
    }

    /// The nine array parameters (PostgreSQL array literals) of `statementSQL`.
    static func parameters(_ rows: [VerifiedNotification]) -> [String?] {
        [
            arrayLiteral(rows.map { $0.jti }),
            arrayLiteral(rows.map { $0.audience }),
            arrayLiteral(rows.map { $0.event.sub }),
            arrayLiteral(rows.map { $0.event.type.rawValue }),
            arrayLiteral(rows.map { String($0.event.eventTimeMillis) }),
            arrayLiteral(rows.map { $0.event.email }),
            arrayLiteral(rows.map { $0.event.isPrivateEmail.map { $0 ? "true" : "false" } }),
            arrayLiteral(rows.map { $0.event.type.isKnown ? "pending" : "ignored" }),
            arrayLiteral(rows.map { $0.claimsJSON }),
        ]
    }

    /// `{"a","b\"c",NULL}`: every element quoted, `"` and `\` escaped (built on UTF-8 bytes).
    static func arrayLiteral(_ values: [String?]) -> String {
        var out: [UInt8] = [UInt8(ascii: "{")]
        out.reserveCapacity(values.reduce(2) { $0 + ($1?.utf8.count ?? 4) + 3 })
        for (i, value) in values.enumerated() {
            if i > 0 { out.append(UInt8(ascii: ",")) }
            guard let value else {
                out.append(contentsOf: "NULL".utf8)
                continue
            }
            out.append(UInt8(ascii: "\""))
            for byte in value.utf8 {
                if byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") { out.append(UInt8(ascii: "\\")) }
                out.append(byte)
            }
            out.append(UInt8(ascii: "\""))
        }
        out.append(UInt8(ascii: "}"))
        return String(decoding: out, as: UTF8.self)
    }
}
