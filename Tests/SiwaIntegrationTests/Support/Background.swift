import Dispatch
import Foundation
import Synchronization

/// Work on a thread of its own (it blocks on a lock the test holds); `result()` waits for it, bounded.
final class Background<T: Sendable>: Sendable {
    private let outcome = Mutex<Result<T, any Error>?>(nil)
    private let done = DispatchSemaphore(value: 0)

    init(_ body: @escaping @Sendable () throws -> T) {
        Thread.detachNewThread {
            let result = Result { try body() }
            self.outcome.withLock { $0 = result }
            self.done.signal()
        }
    }

    /// Its result, or nil when it has not finished within `seconds`.
    func result(within seconds: Double = 15) -> Result<T, any Error>? {
        guard done.wait(timeout: .now() + seconds) == .success else { return nil }
        return outcome.withLock { $0 }
    }
}
