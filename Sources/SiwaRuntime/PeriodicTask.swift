import Foundation

/// Runs `body` every `interval` seconds on a thread of its own (the key refresher, retention).
/// Stopping wakes the wait at once and waits for a running `body` up to the deadline.
public final class PeriodicTask: Service {
    public let name: String
    private let interval: Double
    private let body: @Sendable (_ stopping: StopSignal) -> Void
    private let stopping = StopSignal()
    private let finished = StopSignal()

    /// `body` gets the stop signal, to end a long run early (e.g. between pruning batches).
    public init(name: String, interval: Double, _ body: @escaping @Sendable (_ stopping: StopSignal) -> Void) {
        self.name = name
        self.interval = interval
        self.body = body
    }

    public func start() {
        let thread = Thread { [self] in
            while !stopping.wait(timeout: interval) {
                body(stopping)
            }
            finished.stop()
        }
        thread.name = "siwa-" + name.replacingOccurrences(of: " ", with: "-")
        thread.start()
    }

    public func stop(deadline: ShutdownDeadline) {
        stopping.stop()
        finished.wait(timeout: deadline.remaining)
    }
}
