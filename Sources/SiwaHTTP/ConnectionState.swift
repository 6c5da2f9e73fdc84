import CMicroHTTPD
import Synchronization

/// Per-request state, owned by libmicrohttpd through `con_cls` (retained on the first
/// access call, released in the completion callback).
///
/// `@unchecked Sendable`: the request fields (`head`, `body`, counters) are only touched from
/// the access callback, which libmicrohttpd runs for one connection on one thread at a time;
/// the hand-over of the response between threads goes through `exchange` (a `Mutex`).
final class ConnectionState: @unchecked Sendable {
    struct Exchange {
        var response: HTTPResponse?
        var suspended = false
        var queued = false
    }

    let connection: OpaquePointer
    let registry: SuspendedConnections
    var head: HTTPRequestHead
    var body: [UInt8] = []
    var discarded = 0
    var tooLarge = false
    var dispatched = false
    /// Counted in the server's in-flight requests (false: refused at shutdown).
    var counted = true
    let exchange = Mutex(Exchange())

    init(connection: OpaquePointer, head: HTTPRequestHead, registry: SuspendedConnections) {
        self.connection = connection
        self.head = head
        self.registry = registry
    }

    /// Stores the response; resumes the connection when it is waiting for it.
    func deliver(_ response: HTTPResponse) {
        exchange.withLock { ex in
            guard ex.response == nil else { return }
            ex.response = response
            if ex.suspended {
                ex.suspended = false
                registry.remove(self)
                MHD_resume_connection(connection)
            }
        }
    }

    /// Called from the access callback once the request is complete: takes the response if it
    /// is ready, else marks the connection suspended (and suspends it) in one step.
    func takeResponseOrSuspend() -> HTTPResponse? {
        exchange.withLock { ex in
            if let response = ex.response {
                if ex.queued { return nil }
                ex.queued = true
                return response
            }
            if registry.isStopping {
                // The listener is shutting down: never suspend again (stopping libmicrohttpd
                // with a suspended connection aborts the process).
                ex.response = SuspendedConnections.shutdownResponse
                ex.queued = true
                return ex.response
            }
            ex.suspended = true
            registry.add(self)
            MHD_suspend_connection(connection)
            return nil
        }
    }
}

/// The connections waiting for their handler's answer. libmicrohttpd aborts the process when
/// stopped with a suspended connection, so shutdown answers whatever is still here.
final class SuspendedConnections: Sendable {
    private let states = Mutex<[ObjectIdentifier: ConnectionState]>([:])
    private let stopping = Atomic<Bool>(false)

    /// What a request still waiting at shutdown gets (the client retries).
    static let shutdownResponse = HTTPResponse.json(
        503, #"{"error":"shutting_down"}"#,
        headers: [HTTPHeader("Retry-After", "5"), HTTPHeader("Connection", "close")])

    var isStopping: Bool { stopping.load(ordering: .relaxed) }

    /// From now on no connection is suspended; those waiting are answered `shutdownResponse`.
    func stop() {
        stopping.store(true, ordering: .relaxed)
        answerAll(Self.shutdownResponse)
    }

    func add(_ state: ConnectionState) {
        states.withLock { $0[ObjectIdentifier(state)] = state }
    }

    func remove(_ state: ConnectionState) {
        states.withLock { _ = $0.removeValue(forKey: ObjectIdentifier(state)) }
    }

    var isEmpty: Bool { states.withLock { $0.isEmpty } }

    /// Answers every waiting connection with `response` (which resumes it).
    func answerAll(_ response: HTTPResponse) {
        let waiting = states.withLock { Array($0.values) }
        for state in waiting { state.deliver(response) }
    }
}
