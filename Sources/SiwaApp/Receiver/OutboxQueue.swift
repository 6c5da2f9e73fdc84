import SiwaCore

/// Something waiting in the outbox queue: it must be answered by `deadline`.
protocol OutboxQueueItem {
    var deadline: Deadline { get }
}

/// The outbox writer's queue as a pure state machine (no threads, no clock, no I/O): the
/// `OutboxWriter` feeds it what happens — a submission, a writer free for work, a batch written,
/// the deadline timer, stop — with the time read from the monotonic clock, and carries out what
/// it answers. Guarantees:
/// - a writer takes everything queued, up to `maxBatch`, in arrival order: batching only happens
///   when requests arrive together, and a lone request is written at once;
/// - adaptive batches: while another writer's commit is in flight, a writer takes a batch only
///   once `minExtraBatch` are queued (the busy writer takes fewer when it finishes): a trickle is
///   written by one writer in batches as large as one commit lets queue, and a second commit
///   goes in flight only when the queue grows faster than one writer commits;
/// - every item leaves exactly once: in a batch (`takeBatch`), or expired (`expire`, also out of
///   a batch in flight that the database does not answer), or abandoned (`abandonAll`);
/// - the deadline timer is woken only by a submission whose deadline is earlier than the one it
///   sleeps until (in order of arrival: never), so there is no hand-off per request.
struct OutboxQueue<Item: OutboxQueueItem> {
    /// What a submission asks of the writer.
    enum Submitted: Equatable {
        /// Not queued (stopped or full): answer 503 now.
        case refused
        /// Queued; wake an idle writer and/or the deadline timer.
        case queued(wakeWriter: Bool, wakeTimer: Bool)
    }

    /// What a writer free for work does next.
    enum Next {
        /// Insert these, then call `finished(writer:)`.
        case write([Item])
        /// Nothing queued: wait to be woken (the writer counts as idle until `takeBatch` again).
        case wait
        /// Stopped and nothing left: the writer thread ends.
        case exit
    }

    /// What the deadline timer does next.
    struct Expiry {
        /// Answer these `.timedOut` (they have left the queue and the batches in flight).
        var expired: [Item]
        /// Sleep until this moment (`never`: until woken); nil: stopped and empty, the timer ends.
        var sleepUntil: Deadline?
    }

    let maxBatch: Int
    let maxQueue: Int
    /// Queued items that make a writer start a batch while another writer's is in flight.
    let minExtraBatch: Int
    private(set) var queued: [Item] = []
    /// The batch each writer is writing (its items not yet expired).
    private(set) var inFlight: [Int: [Item]] = [:]
    private(set) var running = true
    /// Writers told to `.wait` that have not asked again.
    private(set) var idleWriters: Set<Int> = []
    /// The moment the deadline timer sleeps until.
    private(set) var timerAt: Deadline = .never

    init(maxBatch: Int, maxQueue: Int, minExtraBatch: Int = 1) {
        self.maxBatch = max(1, maxBatch)
        self.maxQueue = max(1, maxQueue)
        self.minExtraBatch = max(1, minExtraBatch)
    }

    /// Whether a free writer starts a batch now.
    private var batchReady: Bool {
        !queued.isEmpty && (inFlight.isEmpty || queued.count >= minExtraBatch)
    }

    mutating func submit(_ item: Item) -> Submitted {
        guard running, queued.count < maxQueue else { return .refused }
        queued.append(item)
        return .queued(wakeWriter: !idleWriters.isEmpty && batchReady, wakeTimer: item.deadline < timerAt)
    }

    /// `writer` is free: it takes a batch, waits, or ends. A writer told to `.wait` must call this
    /// again once woken.
    mutating func takeBatch(writer: Int) -> Next {
        idleWriters.remove(writer)
        guard batchReady || (!running && !queued.isEmpty) else {
            if !running && queued.isEmpty { return .exit }
            idleWriters.insert(writer)
            return .wait
        }
        let take = min(maxBatch, queued.count)
        let batch = Array(queued.prefix(take))
        queued.removeFirst(take)
        inFlight[writer] = batch
        return .write(batch)
    }

    /// `writer` has answered its batch (it asks `takeBatch` next).
    mutating func finished(writer: Int) {
        inFlight[writer] = nil
    }

    /// After a writer took its batch: more is ready than it took, and a writer is idle to take it.
    var idleWriterWanted: Bool { !idleWriters.isEmpty && batchReady }

    /// The deadline timer woke at `now`: what is past its deadline leaves, and when to wake next.
    mutating func expire(now: Deadline) -> Expiry {
        var expired: [Item] = []
        // Queued items are mostly in deadline order, but one that waited for a key fetch arrives
        // late with an early deadline: look at all of them.
        if queued.contains(where: { $0.deadline.hasPassed(at: now) }) {
            expired = queued.filter { $0.deadline.hasPassed(at: now) }
            queued.removeAll { $0.deadline.hasPassed(at: now) }
        }
        // In a batch the database does not answer: answered here once, and forgotten (the writer
        // still holds it and its late outcome is ignored).
        for (writer, batch) in inFlight where batch.contains(where: { $0.deadline.hasPassed(at: now) }) {
            expired += batch.filter { $0.deadline.hasPassed(at: now) }
            inFlight[writer] = batch.filter { !$0.deadline.hasPassed(at: now) }
        }
        let earliest = (queued.lazy.map(\.deadline) + inFlight.values.lazy.flatMap { $0.map(\.deadline) }).min()
        if let earliest {
            timerAt = earliest
        } else if running {
            timerAt = .never
        } else {
            return Expiry(expired: expired, sleepUntil: nil)
        }
        return Expiry(expired: expired, sleepUntil: timerAt)
    }

    /// Stop taking submissions; writers write what is queued, then exit.
    mutating func stop() {
        running = false
    }

    /// Shutdown ran out of time: everything queued or in flight leaves, to be answered `.timedOut`.
    mutating func abandonAll() -> [Item] {
        let items = queued + inFlight.values.flatMap { $0 }
        queued.removeAll()
        inFlight.removeAll()
        return items
    }
}
