import SiwaClock
import SiwaCore
import Synchronization

/// Runs `body` every `interval` on a `LoopThread` of its own (the key refresher, the console's
/// charts), the first time one interval after `start`. Stopping ends the wait at once and waits
/// for a running `body` up to the deadline.
public final class PeriodicTask: Service {
    public let name: String
    private let interval: Duration
    private let body: @Sendable (_ stopping: WakeSignal) -> Void
    private let stopping: WakeSignal
    private let thread = Mutex<LoopThread?>(nil)

    /// `body` gets the stop signal, to end a long run early.
    public init(
        name: String, interval: Duration, clock: any MonotonicClock = SystemClock.shared,
        _ body: @escaping @Sendable (_ stopping: WakeSignal) -> Void
    ) {
        self.name = name
        self.interval = interval
        self.body = body
        stopping = WakeSignal(clock: clock)
    }

    public func start() {
        let started = LoopThread(name: "siwa-" + name.split(separator: " ").joined(separator: "-")) { [self] in
            while !stopping.wait(for: interval) {
                body(stopping)
            }
        }
        thread.withLock { $0 = started }
    }

    public func stop(deadline: Deadline) {
        stopping.stop()
        thread.withLock { $0 }?.join(until: deadline)
    }
}
