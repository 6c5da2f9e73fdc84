import Logging
import SiwaClock
import SiwaCore
import SiwaPostgres
import Synchronization

/// What a loop's connection must say: whether it can still be used.
public protocol LoopConnection: AnyObject, SendableMetatype {
    var isHealthy: Bool { get }
}

extension PostgresConnection: LoopConnection {}

/// What a round of a connected loop asks for next.
public enum LoopNext: Sendable, Equatable {
    /// Run the next round at once.
    case again
    /// Wait for a wake (`ConnectedLoop.wakeups`) or the deadline, then run the next round.
    case wait(until: Deadline)
    /// Wait for the deadline (or a stop) without ending early on a wake, then run the next
    /// round: lets work gather (wakes that come meanwhile are kept for the next `wait`).
    case pause(until: Deadline)
}

/// A background loop that owns one connection: it connects (again, with `ReconnectBackoff`,
/// when the connection broke or a round threw), runs rounds, waits between them on `wakeups`
/// (a NOTIFY, a finished call) or the round's deadline, and stops within the shutdown budget.
/// The worker, the revoker, the forward sender, the reconciler, the wake-up listener and
/// retention are configurations of it: what differs is the round and its `State` (kept on the
/// loop's thread, never shared).
public final class ConnectedLoop<Connection: LoopConnection, State>: Service, @unchecked Sendable {
    // @unchecked: the closures are @Sendable; `State` and the connection live only on the loop's
    // thread (created there, never handed out).

    /// The parts that make one loop.
    public struct Body: Sendable {
        /// Opens the connection (at start and after every failure).
        public var connect: @Sendable () throws -> Connection
        /// Makes the loop's state, on its thread, once.
        public var makeState: @Sendable () -> State
        /// One round on a healthy connection.
        public var round: @Sendable (Connection, inout State) throws -> LoopNext
        /// A round or a connect threw: called before the backoff wait (log it, drop what the
        /// round held). The connection is dropped.
        public var failed: @Sendable (any Error, inout State, Duration) -> Void
        /// After the last round (stopping), with the connection if it is still healthy.
        public var finish: @Sendable (Connection?, inout State) -> Void

        public init(
            connect: @escaping @Sendable () throws -> Connection,
            makeState: @escaping @Sendable () -> State,
            round: @escaping @Sendable (Connection, inout State) throws -> LoopNext,
            failed: @escaping @Sendable (any Error, inout State, Duration) -> Void,
            finish: @escaping @Sendable (Connection?, inout State) -> Void = { _, _ in }
        ) {
            self.connect = connect
            self.makeState = makeState
            self.round = round
            self.failed = failed
            self.finish = finish
        }
    }

    public let name: String
    private let threadName: String
    private let body: Body
    private let backoff: ReconnectBackoff
    /// What waits between rounds end on (new work, a finished call) besides their deadline.
    public let wakeups: WakeSignal
    /// Set by `stop`: ends the backoff waits and the loop.
    private let stopping: WakeSignal
    private let thread = Mutex<LoopThread?>(nil)
    public var clock: any MonotonicClock { wakeups.clock }

    /// `wakeups` may be shared by several loops (each wake ends one wait of each).
    public init(
        name: String, threadName: String, wakeups: WakeSignal = WakeSignal(), backoff: ReconnectBackoff = ReconnectBackoff(),
        body: Body
    ) {
        self.name = name
        self.threadName = threadName
        self.wakeups = wakeups
        self.stopping = WakeSignal(clock: wakeups.clock)
        self.backoff = backoff
        self.body = body
    }

    public func start() {
        let started = LoopThread(name: threadName) { [self] in run() }
        thread.withLock { $0 = started }
    }

    /// Says it is going: the current round finishes, no new one starts.
    public func prepareToStop() {
        stopping.stop()
        wakeups.stop()
    }

    /// Stops and waits for the loop's end until `deadline`; true when it ended.
    @discardableResult
    public func stop(until deadline: Deadline) -> Bool {
        prepareToStop()
        return thread.withLock { $0 }?.join(until: deadline) ?? true
    }

    public func stop(deadline: Deadline) { stop(until: deadline) }

    public var isStopping: Bool { stopping.isStopped }

    private func run() {
        var state = body.makeState()
        var connection: Connection?
        var backoff = self.backoff
        while !stopping.isStopped {
            do {
                if connection == nil || !connection!.isHealthy {
                    connection = nil
                    connection = try body.connect()
                }
                let next = try body.round(connection!, &state)
                backoff.succeeded()
                switch next {
                case .again: continue
                case .wait(let deadline): wakeups.wait(until: deadline)
                case .pause(let deadline): stopping.wait(until: deadline)
                }
            } catch {
                connection = nil
                let wait = backoff.failed()
                body.failed(error, &state, wait)
                stopping.wait(for: wait)
            }
        }
        body.finish(connection.flatMap { $0.isHealthy ? $0 : nil }, &state)
    }
}
