import Foundation

/// Wakes a waiting thread early: `wake()` (e.g. a NOTIFY arrived) or `stop()` (shutdown) end a
/// `wait(timeout:)` at once; otherwise it returns at the timeout (the poll that finds retries
/// falling due). A wake with nobody waiting is remembered for the next wait. Used without
/// `wake()` it is a one-way stop flag that threads wait on (`StopSignal`).
public final class WakeSignal: @unchecked Sendable {
    // @unchecked: `pending` and `stopped` are only touched with `condition` locked.
    private let condition = NSCondition()
    private var pending = false
    private var stopped = false

    public init() {}

    public func wake() {
        condition.lock()
        pending = true
        condition.broadcast()
        condition.unlock()
    }

    public func stop() {
        condition.lock()
        stopped = true
        condition.broadcast()
        condition.unlock()
    }

    public var isStopped: Bool {
        condition.lock()
        defer { condition.unlock() }
        return stopped
    }

    /// Waits up to `seconds` for a wake or a stop; consumes a pending wake. Returns true when
    /// stopped (at once if it already was).
    @discardableResult
    public func wait(timeout seconds: Double) -> Bool {
        let deadline = Date().addingTimeInterval(max(0, seconds))
        condition.lock()
        defer { condition.unlock() }
        while !pending && !stopped {
            if !condition.wait(until: deadline) { break }
        }
        pending = false
        return stopped
    }
}

/// A `WakeSignal` used only as a stop flag: `stop()` ends every `wait(timeout:)` at once.
public typealias StopSignal = WakeSignal
