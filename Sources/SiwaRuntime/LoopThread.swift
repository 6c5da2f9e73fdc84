import Foundation
import SiwaCore

/// A named thread running one body, and the latch that says it ended: every background thread
/// of the process is started here, so each has a name and a way to be waited for.
public final class LoopThread: Sendable {
    private let ended = WakeSignal()

    /// Starts `body` on a new thread named `name` (shown by `top -H`, `perf`, `gdb`).
    public init(name: String, _ body: @escaping @Sendable () -> Void) {
        let thread = Thread { [ended] in
            body()
            ended.stop()
        }
        thread.name = name
        thread.start()
    }

    /// Waits until the body returned or `deadline`; true when it returned.
    @discardableResult
    public func join(until deadline: Deadline) -> Bool {
        ended.wait(until: deadline)
    }

    public var hasEnded: Bool { ended.isStopped }
}
