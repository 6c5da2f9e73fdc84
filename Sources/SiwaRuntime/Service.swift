import Foundation
import SiwaCore

/// A long-running part of the process (a listener, the outbox writer, the worker, the key
/// refresher, retention, LISTEN wake-ups, the embedded database). Every one has the same shape:
/// `start` returns once it runs (or throws: the process then stops what already started),
/// `prepareToStop` says it is going (readiness off, stop taking new work) and returns at once,
/// `stop` finishes or abandons what is in flight before `deadline` and releases everything.
public protocol Service: AnyObject, Sendable {
    /// For logs: `public listener`, `worker`, ...
    var name: String { get }
    func start() throws
    func prepareToStop()
    /// `deadline`: the end of the graceful-shutdown budget (`SIWA_SHUTDOWN_TIMEOUT`), or of
    /// the part of it `stopBudget` leaves this service.
    func stop(deadline: Deadline)
    /// What part of the shutdown budget `ServiceGroup` gives this service's stop.
    var stopBudget: StopBudget { get }
}

extension Service {
    public func prepareToStop() {}
    public var stopBudget: StopBudget { .whatIsLeft }
}

/// What part of what is left of the shutdown budget a service's stop may use.
public enum StopBudget: Sendable, Equatable {
    case whatIsLeft
    /// Half: the services stopped after it (the listeners answering what is in flight, the
    /// writer) keep time of their own, however long its calls or its batch take.
    case halfOfWhatIsLeft
}

/// A service made of closures, for parts that are a thread and a stop call.
public final class ClosureService: Service {
    public let name: String
    private let onStart: @Sendable () throws -> Void
    private let onPrepare: @Sendable () -> Void
    private let onStop: @Sendable (Deadline) -> Void

    public init(
        _ name: String, start: @escaping @Sendable () throws -> Void,
        prepareToStop: @escaping @Sendable () -> Void = {},
        stop: @escaping @Sendable (Deadline) -> Void
    ) {
        self.name = name
        onStart = start
        onPrepare = prepareToStop
        onStop = stop
    }

    public func start() throws { try onStart() }
    public func prepareToStop() { onPrepare() }
    public func stop(deadline: Deadline) { onStop(deadline) }
}
