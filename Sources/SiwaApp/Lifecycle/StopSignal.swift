import Foundation

/// A one-way flag that threads can wait on: `wait(_:)` sleeps until the timeout or until
/// `stop()` is called, whichever comes first (no polling).
public final class StopSignal: @unchecked Sendable {
    // @unchecked: `stopped` is only touched with `condition` locked.
    private let condition = NSCondition()
    private var stopped = false

    public init() {}

    /// Sets the flag and wakes every waiter. Later calls do nothing.
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

    /// Waits up to `seconds`; returns true when stopped (at once if it already was).
    @discardableResult
    public func wait(_ seconds: Double) -> Bool {
        let deadline = Date().addingTimeInterval(max(0, seconds))
        condition.lock()
        defer { condition.unlock() }
        while !stopped {
            if !condition.wait(until: deadline) { break }
        }
        return stopped
    }
}
