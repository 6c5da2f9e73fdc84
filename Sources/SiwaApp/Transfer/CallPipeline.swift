import Foundation
import SiwaCore
import SiwaRuntime
import Synchronization

/// Calls Apple once per item on a few threads, paced (`RatePacer`: never faster than `rate`, no
/// bursts), retrying transient failures with backoff that honors `Retry-After`, while the calling
/// thread commits results as they come (group commit: whatever is ready, at once). An item is
/// committed as soon as possible after Apple answered it, so a run killed midway has asked Apple
/// again for nothing it had committed. A permanent failure stops handing out items; the calls in
/// flight finish and are committed, then `run` throws.
struct CallPipeline<Item: Sendable, Output: Sendable>: Sendable {
    /// How one call ended, for the pipeline.
    enum Outcome: Sendable {
        case done(Output)
        /// Apple refused this item only (e.g. `invalid_request`: a user who revoked); counted, not committed.
        case skipped(String)
        /// Stop everything (e.g. `invalid_client`), with one clear line.
        case fatal(String)
        /// Retry later (429, 5xx, network): `retryAfter` from Apple, `reason` for the last error.
        case transient(reason: String, retryAfter: Int?)
    }

    struct Progress: Sendable, Equatable {
        var total: Int
        var done = 0
        var skipped = 0
        var retries = 0
    }

    var rate: Double
    var concurrency: Int
    var retry: AppleRetry
    var clock: any MonotonicClock = SystemClock.shared

    private struct Shared: ~Copyable {
        var next = 0
        var stopping: String?
        var ready: [(Item, Output)] = []
        var running = 0
        var progress: Progress
        var pacer: RatePacer
        var skipReasons: [String: Int] = [:]
    }

    /// Runs every item through `call`; `commit` gets the answered ones in groups, on the calling
    /// thread; `report` gets the progress after each group and about once a second.
    func run(
        _ items: [Item], call: @escaping @Sendable (Item) -> Outcome,
        commit: ([(Item, Output)]) throws -> Void, report: (Progress) -> Void
    ) throws -> (progress: Progress, skipReasons: [String: Int]) {
        let shared = SharedBox(
            Shared(progress: Progress(total: items.count), pacer: RatePacer(perSecond: rate)))
        let wake = WakeSignal(clock: clock)
        let workers = max(1, min(concurrency, items.count))
        shared.state.withLock { $0.running = workers }
        let this = self
        for k in 0..<workers {
            _ = LoopThread(name: "siwa-transfer-\(k + 1)") {
                this.work(items, shared: shared, wake: wake, call: call)
            }
        }
        var commitError: Error?
        while true {
            wake.wait(for: .seconds(1))
            let (batch, finished) = shared.state.withLock { state -> ([(Item, Output)], Bool) in
                defer { state.ready.removeAll(keepingCapacity: true) }
                return (state.ready, state.running == 0)
            }
            if !batch.isEmpty && commitError == nil {
                do {
                    try commit(batch)
                    shared.state.withLock { $0.progress.done += batch.count }
                } catch {
                    commitError = error
                    shared.state.withLock { $0.stopping = $0.stopping ?? "database: \(error)" }
                }
            }
            report(shared.state.withLock { $0.progress })
            if finished && batch.isEmpty { break }
        }
        let (progress, stopping, reasons) = shared.state.withLock { ($0.progress, $0.stopping, $0.skipReasons) }
        if let commitError { throw commitError }
        if let stopping { throw PipelineStopped(description: stopping) }
        return (progress, reasons)
    }

    private func work(
        _ items: [Item], shared: SharedBox<Shared>, wake: WakeSignal, call: @Sendable (Item) -> Outcome
    ) {
        defer {
            shared.state.withLock { $0.running -= 1 }
            wake.wake()
        }
        // Never stopped: each wait (a pace slot, a retry's backoff) ends at its deadline.
        let pauses = StopSignal(clock: clock)
        while let item = shared.state.withLock({ state -> Item? in
            guard state.stopping == nil, state.next < items.count else { return nil }
            state.next += 1
            return items[state.next - 1]
        }) {
            var attempts = 0
            while true {
                let now = clock.now
                let slot = shared.state.withLock { $0.pacer.reserve(now: now.seconds) }
                pauses.wait(until: now.adding(seconds: slot - now.seconds))
                switch call(item) {
                case .done(let output):
                    shared.state.withLock { $0.ready.append((item, output)) }
                    wake.wake()
                case .skipped(let reason):
                    shared.state.withLock {
                        $0.progress.skipped += 1
                        $0.skipReasons[reason, default: 0] += 1
                    }
                case .fatal(let line):
                    shared.state.withLock { $0.stopping = $0.stopping ?? line }
                case .transient(let reason, let retryAfter):
                    attempts += 1
                    if retry.isExhausted(attempts: attempts) {
                        shared.state.withLock {
                            $0.stopping = $0.stopping ?? "Apple kept failing (\(reason)) after \(attempts) attempts"
                        }
                        break
                    }
                    let delay = retry.delay(afterAttempts: attempts, retryAfter: retryAfter, jitter: Double.random(in: 0..<1))
                    let until = clock.now.adding(seconds: delay)
                    let stop = shared.state.withLock { state -> Bool in
                        state.progress.retries += 1
                        // Throttled: the whole pace waits, not only this call.
                        if retryAfter != nil || reason.hasPrefix("http_429") { state.pacer.hold(until: until.seconds) }
                        return state.stopping != nil
                    }
                    if stop { break }
                    pauses.wait(until: until)
                    continue
                }
                break
            }
        }
    }
}

extension Deadline {
    /// Seconds on the monotonic clock, the unit `RatePacer` counts in.
    fileprivate var seconds: Double { Double(uptimeNanoseconds) / 1e9 }
}

/// A pipeline stopped by a permanent failure; `description` is the one line to show.
struct PipelineStopped: Error, CustomStringConvertible {
    var description: String
}

/// A `Mutex` shared by reference between threads.
final class SharedBox<Value: ~Copyable>: Sendable {
    let state: Mutex<Value>
    init(_ value: consuming sending Value) { state = Mutex(value) }
}
