import SiwaCore
import Synchronization

/// The lease -> call -> record engine the revoker and the forward sender run (a pure state
/// machine, like `OutboxQueue`: no I/O, no clock read, `now` passed in). A loop round asks it how
/// many items to claim (the free call slots, at most a batch, none once stopping), tells it what
/// it claimed and what the executor refused, hands it the answers the calls produced, and
/// records what `takeAnswers` gives; an answer that could not be recorded (its row locked by
/// another session) goes back with `keep` and is recorded on a later round. `next` says whether
/// to run again at once or wait for a wake or the poll; stopping, the loop finishes once
/// `mayFinish` (every call answered and recorded, or the grace over).
public struct CallRounds<Item, Answer> {
    /// Calls running at most.
    public let callsInFlight: Int
    /// Items claimed at most in one round.
    public let batchSize: Int
    /// Longest wait between two rounds when nothing wakes the loop (retries falling due).
    public let poll: Duration

    /// Claimed items whose call has not answered yet.
    public private(set) var inFlight = 0
    private var answers: [(Item, Answer)] = []
    /// Set by `stop`: when the loop stops waiting for calls in flight.
    public private(set) var finishBy: Deadline?

    public init(callsInFlight: Int, batchSize: Int = .max, poll: Duration) {
        self.callsInFlight = max(1, callsInFlight)
        self.batchSize = max(1, batchSize)
        self.poll = poll
    }

    /// What a round may claim: the free call slots, at most a batch; none once stopping.
    public var claimLimit: Int {
        finishBy != nil ? 0 : max(0, min(callsInFlight - inFlight, batchSize))
    }

    /// `count` items were claimed and handed to the executor.
    public mutating func claimed(_ count: Int) { inFlight += count }

    /// `count` claimed items were not started (the executor is stopping): their leases run out
    /// and whoever runs next claims them again.
    public mutating func notStarted(_ count: Int) { inFlight = max(0, inFlight - count) }

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

    /// Answers not recorded (a lock timeout, a lost connection): recorded first on a later round.
    public mutating func keep(_ unrecorded: [(Item, Answer)]) {
        answers = unrecorded + answers
    }

    /// Stops claiming; calls in flight are waited for until `now + grace`.
    public mutating func stop(at now: Deadline, grace: Duration) {
        if finishBy == nil { finishBy = now.adding(grace) }
    }

    public var isStopping: Bool { finishBy != nil }

    /// Stopping, and nothing is left to wait for: every call answered and recorded, or the grace over.
    public func mayFinish(at now: Deadline) -> Bool {
        guard let finishBy else { return false }
        return (inFlight == 0 && answers.isEmpty) || finishBy.hasPassed(at: now)
    }

    /// What the loop does after a round that claimed `claimed` items when it could claim `limit`:
    /// run again at once (a full batch with slots still free: more may be due), or wait for a
    /// wake (an answer, new work, stop) or the poll; stopping, for the end of the grace (nothing
    /// to wait for once `mayFinish`).
    public func next(claimed: Int, limit: Int, at now: Deadline) -> LoopNext {
        if mayFinish(at: now) { return .wait(until: now) }
        if let finishBy { return .wait(until: finishBy) }
        if claimed > 0 && claimed == limit && claimLimit > 0 { return .again }
        return .wait(until: now.adding(poll))
    }
}

/// Where the calls leave their answers for the loop's next round.
public final class CallInbox<Item: Sendable, Answer: Sendable>: Sendable {
    private let answers = Mutex<[(Item, Answer)]>([])

    public init() {}

    public func put(_ item: Item, _ answer: Answer) { answers.withLock { $0.append((item, answer)) } }

    public func take() -> [(Item, Answer)] {
        answers.withLock { a in
            defer { a = [] }
            return a
        }
    }
}

extension CallRounds where Item: Sendable, Answer: Sendable {
    /// Takes the answers the calls left in `inbox` since the last round.
    public mutating func collect(_ inbox: CallInbox<Item, Answer>) { answered(inbox.take()) }

    /// Counts `items` as claimed and starts one call each on `executor`; each answer goes to
    /// `inbox` and wakes the loop (`waking`). An item the executor refuses (stopping) is not
    /// started: its lease runs out and whoever runs next claims it again.
    public mutating func start<Local>(
        _ items: [Item], on executor: CallExecutor<Local>, answersTo inbox: CallInbox<Item, Answer>, waking: WakeSignal,
        call: @escaping @Sendable (Item, inout Local) -> Answer
    ) {
        claimed(items.count)
        for item in items {
            let started = executor.submit { (local: inout Local) in
                inbox.put(item, call(item, &local))
                waking.wake()
            }
            if !started { notStarted(1) }
        }
    }
}
