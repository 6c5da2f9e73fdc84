import Foundation

/// The API's own bounded executor: at most `limit` calls in flight, each on one of `limit`
/// threads of its own (a call waits on Apple for seconds: never on the listener's threads, never
/// on the global queue, whose width the process shares). A call beyond the limit is refused at
/// once (`submit` returns false: the caller answers `503 busy`), so a flood of API calls cannot
/// queue without bound or starve anything else.
final class APIExecutor: @unchecked Sendable {
    // @unchecked: `queue`, `inFlight` and `stopped` are only touched with `condition` locked.
    private let condition = NSCondition()
    private var queue: [@Sendable () -> Void] = []
    private var inFlight = 0
    private var stopped = false
    let limit: Int

    init(limit: Int, name: String = "siwa-api") {
        self.limit = max(1, limit)
        for k in 0..<self.limit {
            let thread = Thread { [self] in run() }
            thread.name = "\(name)-\(k + 1)"
            thread.start()
        }
    }

    /// Calls admitted and not finished.
    var busy: Int {
        condition.lock()
        defer { condition.unlock() }
        return inFlight
    }

    /// Runs `work` on an executor thread; false (and `work` is not run) when `limit` calls are
    /// in flight or the executor is stopping.
    func submit(_ work: @escaping @Sendable () -> Void) -> Bool {
        condition.lock()
        defer { condition.unlock() }
        guard !stopped, inFlight < limit else { return false }
        inFlight += 1
        queue.append(work)
        condition.signal()
        return true
    }

    /// Refuses new calls and waits until those in flight have finished or `seconds` passed;
    /// true when none is left. The threads end once idle.
    @discardableResult
    func drain(timeout seconds: Double) -> Bool {
        let deadline = Date().addingTimeInterval(max(0, seconds))
        condition.lock()
        defer { condition.unlock() }
        stopped = true
        condition.broadcast()
        while inFlight > 0 {
            if !condition.wait(until: deadline) { break }
        }
        return inFlight == 0
    }

    private func run() {
        while true {
            condition.lock()
            while queue.isEmpty && !stopped { condition.wait() }
            if queue.isEmpty {
                condition.unlock()
                return
            }
            let work = queue.removeFirst()
            condition.unlock()
            work()
            condition.lock()
            inFlight -= 1
            condition.broadcast()
            condition.unlock()
        }
    }
}
