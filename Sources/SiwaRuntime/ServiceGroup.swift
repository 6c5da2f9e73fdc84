import Foundation
import Logging
import SiwaClock
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

    /// Stops every started service, last started first, within `budget` seconds in all.
    public func stop(budget: Double) {
        let all = services.withLock { s -> [any Service] in
            let current = s
            s = []
            return current
        }
        let deadline = ShutdownDeadline(secondsFromNow: budget)
        for service in all { service.prepareToStop() }
        for service in all.reversed() {
            let before = deadline.remaining
            service.stop(deadline: deadline)
            logger.debug(
                "service stopped",
                metadata: [
                    "service": "\(service.name)", "seconds": "\(String(format: "%.3f", before - deadline.remaining))",
                ])
        }
    }
}
