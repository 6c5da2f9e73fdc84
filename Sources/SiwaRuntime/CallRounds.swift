import SiwaClock
import SiwaCore
import Synchronization

/// The lease -> call -> record engine the revoker, the forward sender, the reconciler and
/// transfer run (a pure state machine, like `OutboxQueue`: no I/O, no clock read, `now` passed
/// in). A loop round asks it how many items to claim (`claimLimit`: the free call slots, at
/// most a batch, none once stopping), tells it what it claimed (started at once, or `queue`d
/// for their time: a slot in a shared pace, a retry's backoff) and what the executor refused,
/// hands it the answers the calls produced, and records what `takeAnswers` gives; an answer not
/// recorded yet (its row locked by another session, or held to be recorded with later ones)
/// goes back with `keep`. `next` says whether to run again at once or wait for a wake, the next
/// queued item's time or the poll; stopping, the loop finishes once `mayFinish` (every call
/// answered and recorded, or the grace over).
public struct CallRounds<Item, Answer> {
    /// When a round may claim more.
    public enum Refill: Sendable {
        /// As call slots free up (the revoker, the forward sender, transfer).
        case freeSlots
        /// A whole batch, once every item claimed is answered (the reconciler: a claim takes
        /// its slots from a pace shared by every process, so it claims a span of them at once).
        case whenEmpty
    }

    /// Calls running at most.
    public let callsInFlight: Int
    /// Items claimed at most in one round.
    public let batchSize: Int
    /// Longest wait between two rounds when nothing wakes the loop (retries falling due).
    public let poll: Duration
    public let refill: Refill
    /// Spaces the starts of the calls (none: each starts at its time); `hold` stops them all
    /// for a while (Apple's `Retry-After`).
    private var pacer: RatePacer?

    /// Claimed items whose call has not answered yet.
    public private(set) var inFlight = 0
    /// Claimed items whose call may not start before their time, soonest first.
    private var queued: [(item: Item, at: Deadline)] = []
    private var answers: [(Item, Answer)] = []
    /// Set by `stop`: when the loop stops waiting for calls in flight.
    public private(set) var finishBy: Deadline?

    /// `pace`: calls a second at most, spread evenly (none: no pace of its own).
    public init(callsInFlight: Int, batchSize: Int = .max, poll: Duration, refill: Refill = .freeSlots, pace: Double? = nil) {
        self.callsInFlight = max(1, callsInFlight)
        self.batchSize = max(1, batchSize)
        self.poll = poll
        self.refill = refill
        self.pacer = pace.map { RatePacer(perSecond: $0) }
    }

    /// Items claimed and not answered: in flight or queued.
    public var held: Int { inFlight + queued.count }

    /// What a round may claim: the free call slots, at most a batch (`.whenEmpty`: a batch once
    /// nothing is held); none once stopping.
    public var claimLimit: Int {
        guard finishBy == nil else { return 0 }
        switch refill {
        case .freeSlots: return max(0, min(callsInFlight - held, batchSize))
        case .whenEmpty: return held == 0 ? batchSize : 0
        }
    }

    /// `count` items were claimed and handed to the executor.
    public mutating func claimed(_ count: Int) { inFlight += count }

    /// `count` claimed items were not started (the executor is stopping): their leases run out
    /// and whoever runs next claims them again.
    public mutating func notStarted(_ count: Int) { inFlight = max(0, inFlight - count) }

    /// Claimed items whose calls start at their time, not before (`takeDue`). Once stopping
    /// nothing is queued: whoever runs next claims them again.
    public mutating func queue(_ items: [(Item, Deadline)]) {
        guard finishBy == nil, !items.isEmpty else { return }
        queued += items.map { (item: $0.0, at: $0.1) }
        queued.sort { $0.at < $1.at }  // stable: equal times keep their order
    }

    /// The queued items to start now, soonest first: those whose time has come, as many as
    /// call slots are free, each at the pace. Start them all (`start` counts them in flight).
    public mutating func takeDue(at now: Deadline) -> [Item] {
        var due: [Item] = []
        while inFlight + due.count < callsInFlight, let first = queued.first, first.at <= now {
            if pacer != nil {
                guard pacer!.slot(now: now) <= now else { break }
                _ = pacer!.reserve(now: now)
            }
            due.append(queued.removeFirst().item)
        }
        return due
    }

    /// When the soonest queued item may start (nil: none queued).
    public var nextQueued: Deadline? { queued.first?.at }

    /// Forgets the queued items, not started (the loop lost its connection: their leases run
    /// out, and a pace's slots missed meanwhile are not made up in a burst).
    public mutating func dropQueued() { queued.removeAll() }

    /// No call starts before `deadline` (Apple throttles: the whole pace waits, not one call).
    public mutating func hold(until deadline: Deadline) {
        pacer?.hold(until: deadline)
    }

    /// Calls that answered since the last round.
    public mutating func answered(_ new: [(Item, Answer)]) {
        inFlight = max(0, inFlight - new.count)
        answers += new
    }

    public var hasAnswers: Bool { !answers.isEmpty }

    /// The answers to record now (the engine forgets them until `keep` gives some back).
    public mutating func takeAnswers() -> [(Item, Answer)] {
        defer { answers = [] }
        return answers
    }

    /// Answers not recorded (a lock timeout, a lost connection, held for a group commit):
    /// recorded first on a later round.
    public mutating func keep(_ unrecorded: [(Item, Answer)]) {
        answers = unrecorded + answers
    }

    /// Stops claiming and drops the queued items (not started: whoever runs next claims them
    /// again); calls in flight are waited for until `now + grace`.
    public mutating func stop(at now: Deadline, grace: Duration) {
        stop(finishingBy: now.adding(grace))
    }

    /// `stop`, waiting for the calls in flight until `deadline` (`.never`: until each answers).
    public mutating func stop(finishingBy deadline: Deadline) {
        if finishBy == nil { finishBy = deadline }
        queued.removeAll()
    }

    public var isStopping: Bool { finishBy != nil }

    /// Stopping, and nothing is left to wait for: every call answered and recorded, or the grace over.
    public func mayFinish(at now: Deadline) -> Bool {
        guard let finishBy else { return false }
        return (inFlight == 0 && answers.isEmpty) || finishBy.hasPassed(at: now)
    }

    /// What the loop does after a round that claimed `claimed` items when it could claim `limit`:
    /// run again at once (a full batch with slots still free: more may be due), or wait for a
    /// wake (an answer, new work, stop), the next queued item's start or the poll; stopping, for
    /// the end of the grace (nothing to wait for once `mayFinish`).
    public func next(claimed: Int, limit: Int, at now: Deadline) -> LoopNext {
        if mayFinish(at: now) { return .wait(until: now) }
        if let finishBy { return .wait(until: finishBy) }
        if claimed > 0 && claimed == limit && claimLimit > 0 { return .again }
        var until = now.adding(poll)
        if inFlight < callsInFlight, let first = queued.first {
            let paced = pacer?.slot(now: now) ?? now
            until = min(until, max(first.at, paced))
        }
        return .wait(until: until)
    }
}

/// Where the calls leave their answers for the loop's next round (or for `finish`, which waits
/// on it).
public final class CallInbox<Item: Sendable, Answer: Sendable>: @unchecked Sendable {
    // @unchecked: `answers` is only touched with `condition` locked.
    private let condition = Condition()
    private var answers: [(Item, Answer)] = []

    public init() {}

    public func put(_ item: Item, _ answer: Answer) {
        condition.withLock {
            answers.append((item, answer))
            condition.broadcast()
        }
    }

    public func take() -> [(Item, Answer)] {
        condition.withLock {
            defer { answers = [] }
            return answers
        }
    }

    /// Waits until an answer is waiting or `deadline` on `clock`.
    public func wait(until deadline: Deadline, clock: any MonotonicClock) {
        condition.withLock {
            while answers.isEmpty && clock.now < deadline { clock.wait(on: condition, until: deadline) }
        }
    }
}

extension CallRounds where Item: Sendable, Answer: Sendable {
    /// Takes the answers the calls left in `inbox` since the last round.
    public mutating func collect(_ inbox: CallInbox<Item, Answer>) { answered(inbox.take()) }

    /// The stop path of a call loop: stops claiming (`stop`), then records the answers as they
    /// come (`record`; what it `keep`s, e.g. a row locked, is tried again after the poll) until
    /// every call has answered and been recorded, or the grace is over. A call still out then is
    /// abandoned and an answer not recorded dropped: their leases run out and whoever runs next
    /// claims them again. Returns how many were left so; rethrows what `record` threw (nothing
    /// more is recorded then).
    @discardableResult
    public mutating func finish<Local>(
        grace: Duration, clock: any MonotonicClock, executor: CallExecutor<Local>, inbox: CallInbox<Item, Answer>,
        record: (inout CallRounds) throws -> Void
    ) rethrows -> Int {
        stop(at: clock.now, grace: grace)
        defer { executor.drain(until: clock.now) }  // refuses new calls; its threads end once idle
        while true {
            collect(inbox)
            if hasAnswers { try record(&self) }
            let now = clock.now
            if mayFinish(at: now) { return inFlight + answers.count }
            let end = finishBy ?? now
            inbox.wait(until: hasAnswers ? min(end, now.adding(poll)) : end, clock: clock)
        }
    }

    /// Starts the queued items due at `now` (`takeDue`), like `start`.
    public mutating func startDue<Local>(
        at now: Deadline, on executor: CallExecutor<Local>, answersTo inbox: CallInbox<Item, Answer>, waking: WakeSignal,
        call: @escaping @Sendable (Item, inout Local) -> Answer
    ) {
        start(takeDue(at: now), on: executor, answersTo: inbox, waking: waking, call: call)
    }

    /// Counts `items` as claimed and starts one call each on `executor`; each answer goes to
    /// `inbox` and wakes the loop (`waking`). An item the executor refuses (stopping) is not
    /// started: its lease runs out and whoever runs next claims it again.
    public mutating func start<Local>(
        _ items: [Item], on executor: CallExecutor<Local>, answersTo inbox: CallInbox<Item, Answer>, waking: WakeSignal,
        call: @escaping @Sendable (Item, inout Local) -> Answer
    ) {
        claimed(items.count)
        for item in items {
            // The answer is put once the executor's slot is free: a loop that counts it answered
            // may start the next call at once (before, the executor could still refuse it).
            let started = executor.submit({ (local: inout Local) in call(item, &local) }) { answer in
                inbox.put(item, answer)
                waking.wake()
            }
            if !started { notStarted(1) }
        }
    }
}
