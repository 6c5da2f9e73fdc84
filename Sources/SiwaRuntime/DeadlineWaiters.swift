import SiwaClock
import SiwaCore
import Synchronization

/// Callers waiting for something that answers them, by a deadline at the latest (a `/readyz`
/// request waiting for a probe round, a request waiting for a key fetch, a timer): each is
/// answered exactly once, by `answer(_:where:)` or with `timedOut` at its deadline. Deadlines are
/// kept by a thread of their own, not by a shared queue: threads blocked elsewhere in the process
/// (on a hung database) never delay them. The thread runs only while a deadline is pending.
public final class DeadlineWaiters<Tag: Sendable, Answer: Sendable>: Sendable {
    private struct Waiter {
        var tag: Tag
        var deadline: Deadline
        var answer: @Sendable (Answer) -> Void
    }

    private struct State {
        var waiters: [UInt64: Waiter] = [:]
        var next: UInt64 = 0
        /// The deadline thread runs (it ends once no deadline is pending).
        var timing = false
        var stopped = false
    }

    private let name: String
    private let timedOut: Answer
    private let state = Mutex(State())
    private let wakeups: WakeSignal
    private var clock: any MonotonicClock { wakeups.clock }

    /// - Parameters:
    ///   - name: the deadline thread's name.
    ///   - timedOut: what a waiter is answered at its deadline (and once stopped).
    public init(name: String, timedOut: Answer, clock: any MonotonicClock = SystemClock.shared) {
        self.name = name
        self.timedOut = timedOut
        wakeups = WakeSignal(clock: clock)
    }

    /// Waiters not answered yet.
    public var count: Int { state.withLock { $0.waiters.count } }

    /// Adds a waiter; `answer` runs once, on another thread (or on this one, at once, when
    /// stopped or `deadline` has passed).
    public func add(_ tag: Tag, until deadline: Deadline, answer: @escaping @Sendable (Answer) -> Void) {
        let (added, startTimer) = state.withLock { s -> (Bool, Bool) in
            guard !s.stopped else { return (false, false) }
            s.next += 1
            s.waiters[s.next] = Waiter(tag: tag, deadline: deadline, answer: answer)
            guard deadline != .never, !s.timing else { return (true, false) }
            s.timing = true
            return (true, true)
        }
        guard added else { return answer(timedOut) }
        if startTimer {
            _ = LoopThread(name: name) { [self] in expire() }
        } else if deadline != .never {
            wakeups.wake()  // it may be sooner than the one the thread waits for
        }
    }

    /// Answers (and forgets) the waiters whose tag matches.
    public func answer(_ answer: Answer, where matches: (Tag) -> Bool) {
        let due = state.withLock { s -> [Waiter] in
            let ids = s.waiters.filter { matches($0.value.tag) }.map(\.key)
            return ids.compactMap { s.waiters.removeValue(forKey: $0) }
        }
        for waiter in due { waiter.answer(answer) }
    }

    /// Answers every waiter `timedOut`, and every later one at once.
    public func stop() {
        let all = state.withLock { s -> [Waiter] in
            s.stopped = true
            defer { s.waiters.removeAll() }
            return Array(s.waiters.values)
        }
        wakeups.wake()
        for waiter in all { waiter.answer(timedOut) }
    }

    /// The deadline thread: answers the waiters whose deadline has passed; ends once none is pending.
    private func expire() {
        while true {
            let now = clock.now
            let (expired, next) = state.withLock { s -> ([Waiter], Deadline?) in
                let ids = s.waiters.filter { $0.value.deadline.hasPassed(at: now) }.map(\.key)
                let expired = ids.compactMap { s.waiters.removeValue(forKey: $0) }
                let next = s.waiters.values.lazy.map(\.deadline).filter { $0 != .never }.min()
                if next == nil { s.timing = false }
                return (expired, next)
            }
            for waiter in expired { waiter.answer(timedOut) }
            guard let next else { return }
            wakeups.wait(until: next)
        }
    }
}
