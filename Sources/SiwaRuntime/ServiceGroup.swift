import Foundation
import Logging
import SiwaClock
import SiwaCore
import Synchronization

/// Services started in order and stopped in reverse, under one shutdown budget: first every
/// service is told it is going (`prepareToStop`: readiness off, stop accepting), then each is
/// stopped with what is left of the budget.
public final class ServiceGroup: Sendable {
    private let services = Mutex<[any Service]>([])
    private let logger: Logger

    public init(logger: Logger) {
        self.logger = logger
    }

    /// Starts `service` now and keeps it for `stop`. When it throws, nothing is kept (the caller
    /// stops the group: what started before is stopped in reverse).
    public func start(_ service: any Service) throws {
        try service.start()
        services.withLock { $0.append(service) }
        logger.debug("service started", metadata: ["service": "\(service.name)"])
    }

    /// The services started so far, in start order.
    public var started: [String] { services.withLock { $0.map(\.name) } }

    /// Stops every started service, last started first, within `budget` in all. Each gets what
    /// is left of it, or half of that (`StopBudget`).
    public func stop(budget: Duration, clock: any MonotonicClock = SystemClock.shared) {
        let all = services.withLock { s -> [any Service] in
            let current = s
            s = []
            return current
        }
        let deadline = clock.now.adding(budget)
        for service in all { service.prepareToStop() }
        for service in all.reversed() {
            let started = clock.now
            service.stop(deadline: Self.deadline(for: service.stopBudget, within: deadline, at: started))
            let took = clock.now.timeLeft(at: started)  // the time from `started` to now
            logger.debug(
                "service stopped", metadata: ["service": "\(service.name)", "seconds": "\(String(format: "%.3f", took.inSeconds))"])
        }
    }

    /// The end of a service's stop: the end of the budget, or halfway to it.
    static func deadline(for share: StopBudget, within deadline: Deadline, at now: Deadline) -> Deadline {
        switch share {
        case .whatIsLeft: return deadline
        case .halfOfWhatIsLeft: return now.adding(deadline.timeLeft(at: now) / 2)
        }
    }
}
