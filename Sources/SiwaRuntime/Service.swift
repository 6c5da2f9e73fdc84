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
    func stop(deadline: ShutdownDeadline)
}

extension Service {
    public func prepareToStop() {}
}

/// The end of the graceful-shutdown budget (`SIWA_SHUTDOWN_TIMEOUT`), shared by every service.
public typealias ShutdownDeadline = Deadline

/// A service made of closures, for parts that are a thread and a stop call.
public final class ClosureService: Service {
    public let name: String
    private let onStart: @Sendable () throws -> Void
    private let onPrepare: @Sendable () -> Void
    private let onStop: @Sendable (ShutdownDeadline) -> Void

    public init(
        _ name: String, start: @escaping @Sendable () throws -> Void,
        prepareToStop: @escaping @Sendable () -> Void = {},
        stop: @escaping @Sendable (ShutdownDeadline) -> Void
    ) {
        self.name = name
        onStart = start
        onPrepare = prepareToStop
        onStop = stop
    }

    public func start() throws { try onStart() }
    public func prepareToStop() { onPrepare() }
    public func stop(deadline: ShutdownDeadline) { onStop(deadline) }
}
