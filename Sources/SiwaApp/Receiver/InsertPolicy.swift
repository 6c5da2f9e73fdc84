import SiwaCore
import SiwaPostgres

/// What the outbox writer tells the receiver about one notification: the receiver answers from
/// this alone, without reading database errors.
public enum OutboxResult: Sendable, Equatable {
    /// The row is committed (`accepted`, `ignored`), or the event was already stored (`duplicate`).
    case committed(InsertOutcome)
    /// Not stored for a reason of the moment (the database down, overloaded, a deadlock, a
    /// statement timeout): 503, Apple retries. `detail` is for the operator's log.
    case unavailable(detail: String)
    /// The database refused the row (should not happen): 500. `detail` is for the operator's log.
    case refused(detail: String)
    /// The database did not answer by the deadline (the row may still commit: the retry is then a
    /// duplicate): 503.
    case timedOut

    /// A database failure as the receiver's answer: transient ones are `unavailable`. The detail
    /// names the code, SQLSTATE and the server's first message line (never sent to clients).
    init(_ error: PostgresError) {
        let detail = "\(error): \(error.serverMessage.prefix(200))"
        self = error.isTransient ? .unavailable(detail: detail) : .refused(detail: detail)
    }
}

/// How a batch of notifications is written (no threads, no I/O): copies inside the batch are
/// set aside, the rest goes to the database in one statement; when that fails, what to do next;
/// and what each request of the batch is answered.
struct InsertPolicy {
    /// A batch split into the rows sent to the database and the copies answered after them.
    struct Plan: Equatable {
        /// Indices (in the batch) of the rows to insert, in order.
        var unique: [Int]
        /// Index of a copy -> index of the row it copies (compared as exact bytes, as PostgreSQL
        /// compares them, not with Swift's Unicode-aware `==`).
        var copyOf: [Int: Int]
    }

    /// After a failed insert of some rows.
    enum Recovery: Equatable {
        /// The connection broke: once more on a fresh connection (safe, the insert is idempotent).
        case retryOnFreshConnection
        /// The data of some row was refused: each row alone, so one bad row never fails the others.
        case rowByRow
        /// Answer every row with this failure (a timeout, deadlock or outage is not repeated per row).
        case fail(OutboxResult)
    }

    static func plan(_ batch: [VerifiedNotification]) -> Plan {
        var firstOf: [DedupeKey: Int] = [:]
        var plan = Plan(unique: [], copyOf: [:])
        plan.unique.reserveCapacity(batch.count)
        firstOf.reserveCapacity(batch.count * 2)
        for (i, n) in batch.enumerated() {
            let keys = dedupeKeys(n)
            if let first = keys.lazy.compactMap({ firstOf[$0] }).first {
                plan.copyOf[i] = first
            } else {
                keys.forEach { firstOf[$0] = i }
                plan.unique.append(i)
            }
        }
        return plan
    }

    /// `attempt` is 1 for the first try of these rows.
    static func recovery(after error: PostgresError, rows: Int, attempt: Int) -> Recovery {
        if error.isConnectionProblem && attempt == 1 { return .retryOnFreshConnection }
        if error.isDataError && rows > 1 { return .rowByRow }
        return .fail(OutboxResult(error))
    }

    /// The answer of each inserted row, given the `jti`s the statement returned (a row not
    /// returned was skipped by ON CONFLICT: a duplicate).
    static func results(_ rows: [VerifiedNotification], inserted: Set<String>) -> [OutboxResult] {
        rows.map { n in
            .committed(inserted.contains(n.jti) ? (n.event.type.isKnown ? .accepted : .ignored) : .duplicate)
        }
    }

    /// The answer of every request of the batch: the rows' own results, and for each copy its
    /// row's: `duplicate` once that row is stored, its failure otherwise.
    static func answers(_ plan: Plan, batchSize: Int, uniqueResults: [OutboxResult]) -> [OutboxResult] {
        var out = [OutboxResult](repeating: .timedOut, count: batchSize)
        for (i, result) in zip(plan.unique, uniqueResults) { out[i] = result }
        for (i, first) in plan.copyOf {
            if case .committed = out[first] { out[i] = .committed(.duplicate) } else { out[i] = out[first] }
        }
        return out
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
}
