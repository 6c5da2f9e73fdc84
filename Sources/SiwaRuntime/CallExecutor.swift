import SiwaClock
import SiwaCore

/// The bounded executor of the API, the console and the call loops (revoker, forward sender,
/// reconciler, transfer): at most `limit` calls in flight, each on one of `limit` threads of its
/// own (a call waits on Apple or a receiver for seconds: never on the listener's threads, never
/// on the global queue, whose width the process shares). A call beyond the limit is refused at
/// once (`submit` returns false: the API answers `503 busy`; the loops claim only free slots),
/// so calls cannot queue without bound.
/// Each thread keeps a `Local` of its own between calls (e.g. a connection to the receiver).
public final class CallExecutor<Local>: @unchecked Sendable {
    // @unchecked: `queue`, `inFlight` and `stopped` are only touched with `condition` locked;
    // each `Local` is made and used on its own thread only.
    public typealias Work = @Sendable (inout Local) -> Void
    /// A call, and what to do once its slot is free again (nil: nothing).
    private typealias Job = @Sendable (inout Local) -> (@Sendable () -> Void)?
    private let condition = Condition()
    private var queue: [Job] = []
    private var inFlight = 0
    /// Calls whose slot is free and whose `then` is still running.
    private var finishing = 0
    private var stopped = false
    private let clock: any MonotonicClock
    public let limit: Int

    public init(
        limit: Int, name: String, clock: any MonotonicClock = SystemClock.shared, makeLocal: @escaping @Sendable () -> Local
    ) {
        self.limit = max(1, limit)
        self.clock = clock
        for k in 0..<self.limit {
            _ = LoopThread(name: "\(name)-\(k + 1)") { [self] in
                var local = makeLocal()
                run(&local)
            }
        }
    }

    /// Calls admitted and not finished.
    public var busy: Int { condition.withLock { inFlight } }

    /// Runs `work` on an executor thread; false (and `work` is not run) when `limit` calls are
    /// in flight or the executor is stopping.
    public func submit(_ work: @escaping Work) -> Bool {
        enqueue { local in
            work(&local)
            return nil
        }
    }

    /// `submit`, then `done` with the call's result once its slot is free again: whoever sees
    /// the result (a loop counting its free slots) may submit the next call at once.
    public func submit<Result: Sendable>(
        _ work: @escaping @Sendable (inout Local) -> Result, then done: @escaping @Sendable (Result) -> Void
    ) -> Bool {
        enqueue { local in
            let result = work(&local)
            return { done(result) }
        }
    }

    private func enqueue(_ job: @escaping Job) -> Bool {
        condition.withLock {
            guard !stopped, inFlight < limit else { return false }
            inFlight += 1
            queue.append(job)
            condition.signal()
            return true
        }
    }

    /// Refuses new calls and waits until those in flight have finished (their `then` too) or
    /// `deadline`; true when none is left. The threads end once idle.
    @discardableResult
    public func drain(until deadline: Deadline) -> Bool {
        condition.lock()
        defer { condition.unlock() }
        stopped = true
        condition.broadcast()
        while inFlight + finishing > 0 && clock.now < deadline {
            clock.wait(on: condition, until: deadline)
        }
        return inFlight + finishing == 0
    }

    private func run(_ local: inout Local) {
        while true {
            condition.lock()
            while queue.isEmpty && !stopped { condition.waitLocked() }
            if queue.isEmpty {
                condition.unlock()
                return
            }
            let job = queue.removeFirst()
            condition.unlock()
            let then = job(&local)
            condition.withLock {
                inFlight -= 1
                if then != nil { finishing += 1 }
                condition.broadcast()
            }
            if let then {
                then()
                condition.withLock {
                    finishing -= 1
                    condition.broadcast()
                }
            }
        }
    }
}

extension CallExecutor where Local == Void {
    public convenience init(limit: Int, name: String, clock: any MonotonicClock = SystemClock.shared) {
        self.init(limit: limit, name: name, clock: clock, makeLocal: {})
    }

    /// `submit` for calls that need nothing of their thread.
    public func submit(_ work: @escaping @Sendable () -> Void) -> Bool {
        submit { (_: inout Void) in work() }
    }
}
