import Logging
import SiwaClock
import SiwaCore

/// A service that calls out once per item claimed from the database (Apple, a receiver, an
/// identity provider) and records each answer: the revoker, the forward sender, the reconciler
/// and transfer. A caller says how to connect, claim, call and record; the loop owns the rest:
/// the connection and its reconnects (`ConnectedLoop`), the lease -> call -> record bookkeeping
/// (`CallRounds`), the call threads (`CallExecutor`), the answers' inbox and the stop (nothing
/// claimed once stopping; answers of the calls in flight recorded as they come until the stop
/// grace; a call still out then is abandoned: its lease runs out and whoever runs next claims it
/// again).
///
/// A round records the answers that came, claims up to `CallRounds.claimLimit` items and starts
/// their calls (those `queue`d with a time start at it). `claim` and `record` get the rounds: a
/// `record` takes the answers (`takeAnswers`) and gives back with `keep` what it could not record
/// (a row locked), may queue a retry (`queue`), hold the pace (`hold`) or stop (`stop`).
public final class CallLoop<Item: Sendable, Answer: Sendable>: Service, @unchecked Sendable {
    // @unchecked: the stored closures are @Sendable; the rounds live on the loop's thread only.
    public typealias Rounds = CallRounds<Item, Answer>

    /// How a call loop runs.
    public struct Settings: Sendable {
        /// The service's name, in logs.
        public var name: String
        /// The loop thread's name; the call threads are named `calls-1`, `calls-2`, …
        public var thread: String
        public var calls: String
        /// Calls at once, at most.
        public var callsInFlight: Int
        /// Items claimed at most in one round.
        public var batchSize: Int = .max
        /// Longest wait between two rounds when nothing wakes the loop (retries falling due).
        public var poll: Duration
        public var refill: Rounds.Refill = .freeSlots
        /// Calls a second at most, spread evenly (nil: no pace).
        public var pace: Double?
        /// How long a stop waits for the calls in flight, recording their answers as they come.
        public var stopGrace: Duration
        public var backoff = ReconnectBackoff()
        /// What part of the shutdown budget the stop may use (`ServiceGroup`).
        public var budget: StopBudget = .whatIsLeft
        public var clock: any MonotonicClock = SystemClock.shared

        public init(name: String, thread: String, calls: String, callsInFlight: Int, poll: Duration, stopGrace: Duration) {
            self.name = name
            self.thread = thread
            self.calls = calls
            self.callsInFlight = callsInFlight
            self.poll = poll
            self.stopGrace = stopGrace
        }
    }

    public let name: String
    private let logger: Logger
    public let stopBudget: StopBudget
    /// Woken by new work (a NOTIFY), by the answers of the calls, and by a stop.
    public let wakeups: WakeSignal
    public var clock: any MonotonicClock { wakeups.clock }
    private let service: any Service
    private let startLoop: @Sendable () -> Void
    private let stopUntil: @Sendable (Deadline) -> Bool

    /// - Parameters:
    ///   - connect: the loop's connection (at start, and again after a failure).
    ///   - claim: claims (leases, committed) up to `limit` items; returns those to call now, at
    ///     the pace if there is one (an item whose call must wait for its time goes to
    ///     `rounds.queue` instead).
    ///   - whenIdle: a claim found nothing: the latest moment to look again (nil: the poll).
    ///   - makeLocal: what each call thread keeps between its calls (a connection to a receiver).
    ///   - call: one call, on a call thread, no database.
    ///   - record: records the answers (`rounds.takeAnswers()`; `keep` what was not recorded).
    ///   - failed: a round or a connect threw (logged by the loop); the queued items are dropped
    ///     (their leases run out) before it is called.
    public init<Connection: LoopConnection, Local>(
        _ settings: Settings, logger: Logger,
        connect: @escaping @Sendable () throws -> Connection,
        claim: @escaping @Sendable (Connection, _ limit: Int, inout Rounds) throws -> [Item],
        whenIdle: (@Sendable (Connection) throws -> Deadline?)? = nil,
        makeLocal: @escaping @Sendable () -> Local,
        call: @escaping @Sendable (Item, inout Local) -> Answer,
        record: @escaping @Sendable (Connection, inout Rounds) throws -> Void,
        failed: @escaping @Sendable (any Error) -> Void = { _ in }
    ) {
        let engine = Engine(settings, makeLocal: makeLocal, call: call)
        let clock = engine.clock
        let name = settings.name
        /// Stopping: claims nothing more; records the answers of the calls in flight as they come,
        /// until the grace (on a new connection if the loop's broke).
        let finish = { @Sendable (connection: Connection?, rounds: inout Rounds) in
            var connection = connection
            do {
                let left = try rounds.finish(grace: settings.stopGrace, clock: clock, executor: engine.executor, inbox: engine.inbox) {
                    let c = try connection ?? connect()
                    connection = c
                    try record(c, &$0)
                }
                if left > 0 {
                    logger.warning(
                        "calls still out at the end of the stop grace; their leases run out and they are claimed again",
                        metadata: ["service": "\(name)", "left": "\(left)"])
                }
            } catch {
                logger.warning(
                    "answers not recorded at stop; their leases run out and they are claimed again",
                    metadata: ["service": "\(name)", "error": "\(error)"])
            }
            logger.info("call loop stopped", metadata: ["service": "\(name)"])
        }
        let loop = ConnectedLoop<Connection, Rounds>(
            name: name, threadName: settings.thread, wakeups: engine.wakeups, backoff: settings.backoff,
            body: .init(
                connect: connect, makeState: { settings.rounds() },
                round: { c, rounds in
                    try engine.round(
                        &rounds, claim: { try claim(c, $0, &$1) }, whenIdle: { try whenIdle?(c) }, record: { try record(c, &$0) }
                    ).next
                },
                failed: { error, rounds, wait in
                    rounds.dropQueued()
                    logger.warning(
                        "database error, reconnecting", metadata: ["service": "\(name)", "error": "\(error)", "retry_in": "\(wait)"])
                    failed(error)
                },
                finish: finish))
        self.name = name
        self.logger = logger
        self.stopBudget = settings.budget
        self.wakeups = engine.wakeups
        service = loop
        startLoop = { loop.start() }
        stopUntil = { loop.stop(until: $0) }
    }

    /// A loop whose calls need nothing of their thread.
    public convenience init<Connection: LoopConnection>(
        _ settings: Settings, logger: Logger,
        connect: @escaping @Sendable () throws -> Connection,
        claim: @escaping @Sendable (Connection, _ limit: Int, inout Rounds) throws -> [Item],
        whenIdle: (@Sendable (Connection) throws -> Deadline?)? = nil,
        call: @escaping @Sendable (Item) -> Answer,
        record: @escaping @Sendable (Connection, inout Rounds) throws -> Void,
        failed: @escaping @Sendable (any Error) -> Void = { _ in }
    ) {
        self.init(
            settings, logger: logger, connect: connect, claim: claim, whenIdle: whenIdle, makeLocal: {},
            call: { item, _ in call(item) }, record: record, failed: failed)
    }

    public func start() { startLoop() }

    public func prepareToStop() { service.prepareToStop() }

    /// Stops claiming, and waits for the calls in flight (`stopGrace`) until `deadline`; true
    /// when the loop ended.
    @discardableResult
    public func stop(until deadline: Deadline) -> Bool { stopUntil(deadline) }

    public func stop(deadline: Deadline) {
        if !stop(until: deadline) {
            logger.warning(
                "calls still out at the end of the shutdown budget; their leases run out and they are claimed again",
                metadata: ["service": "\(name)"])
        }
    }

    /// Runs the rounds on the calling thread, without a database, until a claim finds nothing
    /// and every call is answered and recorded (or, once `record` stopped the rounds, until every
    /// call in flight is): a command's run (transfer). `claim` and `record` run on the calling
    /// thread; the calls on threads of their own.
    public static func run(
        _ settings: Settings, claim: (_ limit: Int, inout Rounds) throws -> [Item], call: @escaping @Sendable (Item) -> Answer,
        record: (inout Rounds) throws -> Void
    ) rethrows {
        let engine = Engine(settings, makeLocal: {}, call: { item, _ in call(item) })
        defer { engine.executor.drain(until: .never) }  // every call has answered by then: the threads end
        var rounds = settings.rounds()
        while true {
            let (next, idle) = try engine.round(&rounds, claim: claim, whenIdle: { nil }, record: record)
            if idle || rounds.mayFinish(at: engine.clock.now) { return }
            switch next {
            case .again: continue
            case .wait(let until), .pause(let until): engine.wakeups.wait(until: until)
            }
        }
    }
}

extension CallLoop.Settings {
    func rounds() -> CallRounds<Item, Answer> {
        CallRounds(callsInFlight: callsInFlight, batchSize: batchSize, poll: poll, refill: refill, pace: pace)
    }
}

/// The parts of a call loop: its call threads, the inbox of their answers, what wakes the loop,
/// and one round.
private struct Engine<Item: Sendable, Answer: Sendable, Local>: Sendable {
    let settings: CallLoop<Item, Answer>.Settings
    let executor: CallExecutor<Local>
    let inbox = CallInbox<Item, Answer>()
    let wakeups: WakeSignal
    let call: @Sendable (Item, inout Local) -> Answer
    var clock: any MonotonicClock { wakeups.clock }

    init(
        _ settings: CallLoop<Item, Answer>.Settings, makeLocal: @escaping @Sendable () -> Local,
        call: @escaping @Sendable (Item, inout Local) -> Answer
    ) {
        self.settings = settings
        executor = CallExecutor(limit: settings.callsInFlight, name: settings.calls, clock: settings.clock, makeLocal: makeLocal)
        wakeups = WakeSignal(clock: settings.clock)
        self.call = call
    }

    /// One round: records what answered, claims for the free slots, starts the calls due.
    /// Returns what to do next, and whether the round found nothing to do (a claim found
    /// nothing, nothing is held).
    func round(
        _ rounds: inout CallRounds<Item, Answer>, claim: (Int, inout CallRounds<Item, Answer>) throws -> [Item],
        whenIdle: () throws -> Deadline?, record: (inout CallRounds<Item, Answer>) throws -> Void
    ) rethrows -> (next: LoopNext, idle: Bool) {
        rounds.collect(inbox)
        if rounds.hasAnswers { try record(&rounds) }
        let limit = rounds.claimLimit
        var claimed = 0
        var lookAgain: Deadline?
        if limit > 0 {
            let queuedBefore = rounds.held - rounds.inFlight
            let items = try claim(limit, &rounds)
            claimed = items.count + max(0, rounds.held - rounds.inFlight - queuedBefore)
            if settings.pace == nil {
                rounds.start(items, on: executor, answersTo: inbox, waking: wakeups, call: call)
            } else {
                rounds.queue(items.map { ($0, clock.now) })  // started at the pace
            }
            if claimed == 0 { lookAgain = try whenIdle() }
        }
        let now = clock.now
        rounds.startDue(at: now, on: executor, answersTo: inbox, waking: wakeups, call: call)
        var next = rounds.next(claimed: claimed, limit: limit, at: now)
        if let lookAgain, case .wait(let until) = next { next = .wait(until: min(until, max(lookAgain, now))) }
        return (next, limit > 0 && claimed == 0 && rounds.held == 0 && !rounds.hasAnswers)
    }
}
