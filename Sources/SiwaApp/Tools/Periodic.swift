import Foundation
import Synchronization

/// Runs `body` every `interval` seconds on a thread of its own until `stop`.
public final class Periodic: Sendable {
    private let name: String
    private let interval: Double
    private let body: @Sendable () -> Void
    private let stopping = Atomic<Bool>(false)
    private let done = DispatchSemaphore(value: 0)
    private let started = Atomic<Bool>(false)

    public init(name: String, interval: Double, _ body: @escaping @Sendable () -> Void) {
        self.name = name
        self.interval = interval
        self.body = body
    }

    public func start() {
        started.store(true, ordering: .relaxed)
        let thread = Thread { [self] in
            while !stopping.load(ordering: .relaxed) {
                var waited = 0.0
                while waited < interval && !stopping.load(ordering: .relaxed) {
                    Thread.sleep(forTimeInterval: min(0.05, interval))
                    waited += 0.05
                }
                if stopping.load(ordering: .relaxed) { break }
                body()
            }
            done.signal()
        }
        thread.name = name
        thread.start()
    }

    /// Stops after the current run of `body` and waits for it.
    public func stop() {
        guard started.load(ordering: .relaxed), !stopping.exchange(true, ordering: .relaxed) else { return }
        done.wait()
    }
}
