import SiwaCore
import SiwaRuntime

/// Calls Apple once per item, `concurrency` calls at most, paced (never faster than `rate`, no
/// bursts), retrying transient failures with backoff that honors `Retry-After`, while the calling
/// thread commits results as they come (group commit: whatever is ready, at once). A `CallLoop`
/// run on the calling thread: the list is what is claimed from, a retry is queued for the end of
/// its backoff, a 429 holds the whole pace. An item is committed as soon as
/// possible after Apple answered it, so a run killed midway has asked Apple again for nothing it
/// had committed. A permanent failure stops handing out items; the calls in flight finish and
/// are committed, then `run` throws.
struct CallPipeline<Item: Sendable, Output: Sendable>: Sendable {
    /// How one call ended, for the pipeline.
    enum Outcome: Sendable {
        case done(Output)
        /// Apple refused this item only (e.g. `invalid_request`: a user who revoked); counted, not committed.
        case skipped(String)
        /// Stop everything (e.g. `invalid_client`), with one clear line.
        case fatal(String)
        /// Retry later (429, 5xx, network): `retryAfter` from Apple, `reason` for the last error.
        case transient(reason: String, retryAfter: Duration?)
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

    /// An item and its failed attempts so far.
    private struct Attempt: Sendable {
        var item: Item
        var failures = 0
    }

    /// Runs every item through `call`; `commit` gets the answered ones in groups, on the calling
    /// thread; `report` gets the progress after each group and about once a second.
    func run(
        _ items: [Item], call: @escaping @Sendable (Item) -> Outcome,
        commit: ([(Item, Output)]) throws -> Void, report: (Progress) -> Void
    ) throws -> (progress: Progress, skipReasons: [String: Int]) {
        var settings = CallLoop<Attempt, Outcome>.Settings(
            name: "transfer", thread: "siwa-transfer", calls: "siwa-transfer", callsInFlight: max(1, min(concurrency, items.count)),
            poll: .seconds(1), stopGrace: .zero)
        settings.pace = rate
        settings.clock = clock
        var progress = Progress(total: items.count)
        var skipReasons: [String: Int] = [:]
        var stopping: String?
        var commitError: Error?
        var next = 0
        var reported = clock.now
        CallLoop.run(
            settings,
            claim: { limit, _ in
                defer { next += min(limit, items.count - next) }
                return items[next..<next + min(limit, items.count - next)].map { Attempt(item: $0) }
            },
            call: { attempt in call(attempt.item) },
            record: { rounds in
                var ready: [(Item, Output)] = []
                for (attempt, outcome) in rounds.takeAnswers() {
                    switch outcome {
                    case .done(let output):
                        ready.append((attempt.item, output))
                    case .skipped(let reason):
                        progress.skipped += 1
                        skipReasons[reason, default: 0] += 1
                    case .fatal(let line):
                        stopping = stopping ?? line
                        rounds.stop(finishingBy: .never)
                    case .transient(let reason, let retryAfter):
                        let failures = attempt.failures + 1
                        if retry.isExhausted(attempts: failures) {
                            stopping = stopping ?? "Apple kept failing (\(reason)) after \(failures) attempts"
                            rounds.stop(finishingBy: .never)
                            continue
                        }
                        progress.retries += 1
                        let delay = retry.delay(afterAttempts: failures, retryAfter: retryAfter, jitter: Double.random(in: 0..<1))
                        let until = clock.now.adding(delay)
                        // Throttled: the whole pace waits, not only this call.
                        if retryAfter != nil || reason.hasPrefix("http_429") { rounds.hold(until: until) }
                        rounds.queue([(Attempt(item: attempt.item, failures: failures), until)])
                    }
                }
                if !ready.isEmpty && commitError == nil {
                    do {
                        try commit(ready)
                        progress.done += ready.count
                    } catch {
                        commitError = error
                        stopping = stopping ?? "database: \(error)"
                        rounds.stop(finishingBy: .never)
                    }
                }
                if !ready.isEmpty || clock.now >= reported.adding(.seconds(1)) {
                    report(progress)
                    reported = clock.now
                }
            })
        report(progress)
        if let commitError { throw commitError }
        if let stopping { throw PipelineStopped(description: stopping) }
        return (progress, skipReasons)
    }
}

/// A pipeline stopped by a permanent failure; `description` is the one line to show.
struct PipelineStopped: Error, CustomStringConvertible {
    var description: String
}
