import Glibc
import SiwaClock
import SiwaCore
import Synchronization

/// A clock that moves only when told (`advance`): loops and waits tested without sleeping. A
/// wait on it ends when the time is advanced to its deadline (or its condition is signalled).
public final class ManualClock: MonotonicClock {
    private struct State {
        var now: Deadline
        var waiting: [ObjectIdentifier: (condition: Condition, count: Int)] = [:]
        var blocked = 0
    }

    private let state: Mutex<State>

    public init(start: Deadline = Deadline(uptimeNanoseconds: 1_000_000_000)) {
        state = Mutex(State(now: start))
    }

    public var now: Deadline { state.withLock { $0.now } }

    /// Moves the time on and wakes every wait, so each one looks at the new time.
    public func advance(by duration: Duration) {
        let conditions = state.withLock { s -> [Condition] in
            s.now = s.now.adding(duration)
            return s.waiting.values.map(\.condition)
        }
        for condition in conditions { condition.withLock { condition.broadcast() } }
    }

    /// Threads blocked in a wait on this clock (a test waits for a loop to be idle).
    public var waiters: Int { state.withLock { s in s.waiting.values.reduce(0) { $0 + $1.count } } }

    /// Waits that blocked so far: a test that moved the time (or woke a loop) waits for this
    /// to grow, i.e. for the loop to have done its round and to wait again.
    public var blockedWaits: Int { state.withLock { $0.blocked } }

    /// Blocks the calling (test) thread until a wait blocks after the `blockedWaits` seen
    /// before: the loop under test is idle again. Gives up after `limit` of real time (a loop
    /// that never waits again must fail its test, not hang it); false then.
    @discardableResult
    public func settle(after seen: Int, limit: Duration = .seconds(30)) -> Bool {
        let giveUp = SystemClock.shared.now.adding(limit)
        while blockedWaits <= seen {
            if SystemClock.shared.now >= giveUp { return false }
            sched_yield()
        }
        return true
    }

    public func wait(on condition: Condition, until deadline: Deadline) {
        let key = ObjectIdentifier(condition)
        let due = state.withLock { s -> Bool in
            if s.now >= deadline { return true }
            s.waiting[key, default: (condition, 0)].count += 1
            s.blocked += 1
            return false
        }
        guard !due else { return }
        condition.waitLocked()
        state.withLock { s in
            if let entry = s.waiting[key] {
                s.waiting[key] = entry.count > 1 ? (entry.condition, entry.count - 1) : nil
            }
        }
    }
}
