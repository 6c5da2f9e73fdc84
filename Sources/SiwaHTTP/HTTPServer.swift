import CMicroHTTPD
import Foundation
import SiwaCore
import SiwaRuntime
import Synchronization

/// A libmicrohttpd listener: epoll, a thread pool, a connection timeout and limit, a body cap,
/// and suspend/resume so a handler can answer from another thread (e.g. after a batched commit).
public final class HTTPServer: Sendable {
    public let configuration: HTTPServerConfiguration
    /// The bound port (differs from the configured one when that was 0).
    public let port: UInt16
    private let context: ServerContext
    private let daemon: Mutex<DaemonLifecycle>

    public init(configuration: HTTPServerConfiguration, handler: any HTTPHandler) throws(HTTPServerError) {
        let address = "\(configuration.host):\(configuration.port)"
        // libmicrohttpd counts its timeout in whole seconds.
        let timeoutSeconds = min(max(1, configuration.connectionTimeout.components.seconds), Int64(UInt32.max))
        let context = ServerContext(
            handler: handler, maxBody: configuration.maxBody,
            requestTimeout: .seconds(timeoutSeconds), keptHeaders: configuration.keptHeaders,
            readsQuery: configuration.readsQuery, readsClientAddress: configuration.readsClientAddress)
        let unmanaged = Unmanaged.passUnretained(context).toOpaque()
        var options = siwa_mhd_options(
            host: nil, port: configuration.port,
            threads: UInt32(max(1, configuration.threads)),
            connection_timeout: UInt32(timeoutSeconds),
            connection_limit: UInt32(max(1, configuration.connectionLimit)),
            memory_limit: max(4096, configuration.connectionMemoryLimit),
            suspend_resume: 1)
        let started: OpaquePointer? = configuration.host.withCString { host in
            options.host = host
            return siwa_mhd_start(
                &options, accessCallback, unmanaged, completedCallback, unmanaged,
                connectionCallback, unmanaged)
        }
        guard let started else {
            let numeric = configuration.host.contains(":") || configuration.host.split(separator: ".").count == 4
            throw HTTPServerError(code: numeric ? .startFailed : .invalidAddress, address: address)
        }
        self.configuration = configuration
        self.context = context
        self.daemon = Mutex(.running(DaemonHandle(pointer: started)))
        self.port = siwa_mhd_bound_port(started)
        context.startSweeper()
    }

    /// Where the listener is in its life. `shutdown` moves it from `running` to `stopping` once
    /// (a second call returns at once), then to `stopped`, or to `abandoned` when a connection
    /// could not be released in time: libmicrohttpd aborts the process when stopped with a
    /// suspended connection, so the daemon is then left to the process's exit (and its context
    /// kept alive for it) rather than stopped or waited for without end.
    public enum State: Sendable, Equatable {
        case running
        case stopping
        case stopped
        case abandoned
    }

    /// How long answered connections get to leave libmicrohttpd's suspended list after the
    /// shutdown deadline (they need a turn of their polling thread).
    public static let releaseBudget: Duration = .seconds(2)

    public var state: State {
        daemon.withLock { lifecycle in
            switch lifecycle {
            case .running: return .running
            case .stopping: return .stopping
            case .stopped: return .stopped
            case .abandoned: return .abandoned
            }
        }
    }

    /// `shutdown(deadline:)` with a budget in seconds.
    @discardableResult
    public func shutdown(grace: Duration = .seconds(10)) -> State {
        shutdown(deadline: Deadline.now.adding(grace))
    }

    /// Stops admitting requests (those arriving from now on are answered `503 shutting_down` at
    /// once), lets in-flight requests finish until `deadline`, answers those still waiting
    /// `503 shutting_down`, then stops the daemon. Returns within `deadline` plus `releaseBudget`
    /// whatever the handler does. Safe to call more than once.
    ///
    /// Admission is closed here, not with `MHD_quiesce_daemon`: on an epoll thread pool that call
    /// removes the listen socket from each worker's epoll set while the worker may be removing it
    /// itself (at its connection limit), and the loser's `ENOENT` is an `MHD_PANIC` (abort) in
    /// 0.9.75. The listen socket stays open until `MHD_stop_daemon`, which joins the workers first.
    @discardableResult
    public func shutdown(deadline: Deadline) -> State {
        let handle = daemon.withLock { lifecycle -> DaemonHandle? in
            guard case .running(let handle) = lifecycle else { return nil }
            lifecycle = .stopping
            return handle
        }
        guard let current = handle?.pointer else { return state }
        context.closeAdmission()
        defer { context.stopSweeper() }
        context.waitUntilIdle(until: deadline)
        // Still waiting for an answer: answer 503 (the client retries) and give the polling
        // threads a moment to send it. A handler thread that was about to suspend when the
        // registry stopped may add itself after an `answerAll`: answer again until none is left.
        context.suspended.stop()
        let released = Deadline.now.adding(Self.releaseBudget)
        while context.inFlight.load(ordering: .relaxed) > 0 || !context.suspended.isEmpty {
            context.suspended.answerAll(SuspendedConnections.shutdownResponse)
            if released.hasPassed(at: .now) { break }
            // Until the last request completes, answering again every 10 ms.
            context.waitUntilIdle(until: min(released, Deadline.now.adding(.milliseconds(10))))
        }
        guard context.suspended.isEmpty else {
            _ = Unmanaged.passRetained(context)  // the daemon's threads may still call into it
            daemon.withLock { $0 = .abandoned }
            return .abandoned
        }
        // Resumed connections leave libmicrohttpd's suspended list on its polling threads' next
        // turn, which nothing signals: give them one.
        WakeSignal().wait(for: .milliseconds(50))
        MHD_stop_daemon(current)
        daemon.withLock { $0 = .stopped }
        return .stopped
    }

    deinit {
        shutdown(grace: .zero)
    }
}

/// The `MHD_Daemon*` and where it is in its life; libmicrohttpd's daemon calls are thread-safe,
/// and `HTTPServer` hands the pointer out once (to shut down) under its mutex.
enum DaemonLifecycle: @unchecked Sendable {
    case running(DaemonHandle)
    case stopping
    case stopped
    case abandoned
}

struct DaemonHandle: @unchecked Sendable {
    let pointer: OpaquePointer
}

/// What the C callbacks reach through their `cls` pointer; lives as long as the server.
final class ServerContext: Sendable {
    /// A connection as the sweeper sees it.
    struct Tracked {
        var fd: Int32
        /// When the current request (or the connection) started.
        var since: Deadline
        /// The handler has the request (the time is ours, not the client's).
        var busy = false
        var cut = false
    }

    let handler: any HTTPHandler
    let maxBody: Int
    /// How long a client may take to send one whole request, however it trickles it.
    let requestTimeout: Duration
    /// Admitted requests not completed yet (those refused at shutdown are not counted).
    let inFlight = Atomic<Int>(0)
    /// False once shutdown began: requests are refused at their first call.
    private let admitting = Atomic<Bool>(true)
    /// Signalled when `inFlight` drops to 0 (graceful shutdown waits on it).
    private let idle = Condition()
    let connections = Mutex<[UInt: Tracked]>([:])
    let suspended = SuspendedConnections()
    /// The sweeper's thread and what stops it, while it runs.
    private let sweeper = Mutex<(thread: LoopThread, stopping: WakeSignal)?>(nil)

    /// A request completed: wakes a shutdown waiting for the last one.
    func requestCompleted() {
        if inFlight.subtract(1, ordering: .acquiringAndReleasing).newValue == 0 {
            idle.withLock { idle.broadcast() }
        }
    }

    /// Counts a new request in flight, or refuses it (false) once admission is closed. Counted
    /// before the flag is read, and the flag cleared before shutdown reads the count (both
    /// sequentially consistent): a request is either refused or waited for, never neither.
    func admit() -> Bool {
        inFlight.add(1, ordering: .sequentiallyConsistent)
        if admitting.load(ordering: .sequentiallyConsistent) { return true }
        requestCompleted()
        return false
    }

    func closeAdmission() {
        admitting.store(false, ordering: .sequentiallyConsistent)
    }

    /// Waits until no request is in flight, or until `deadline`.
    func waitUntilIdle(until deadline: Deadline) {
        idle.lock()
        defer { idle.unlock() }
        while inFlight.load(ordering: .acquiring) > 0 && !deadline.hasPassed(at: .now) {
            idle.waitLocked(until: deadline)
        }
    }

    /// Request headers copied into the head (`HTTPServerConfiguration.keptHeaders`).
    let keptHeaders: [String]
    let readsQuery: Bool
    let readsClientAddress: Bool

    init(
        handler: any HTTPHandler, maxBody: Int, requestTimeout: Duration, keptHeaders: [String] = [], readsQuery: Bool = false,
        readsClientAddress: Bool = false
    ) {
        self.keptHeaders = keptHeaders
        self.readsQuery = readsQuery
        self.readsClientAddress = readsClientAddress
        self.handler = handler
        self.maxBody = maxBody
        self.requestTimeout = requestTimeout
    }

    func track(_ connection: OpaquePointer, _ change: (inout Tracked) -> Void) {
        connections.withLock { all in
            if var entry = all[UInt(bitPattern: Int(bitPattern: UnsafeRawPointer(connection)))] {
                change(&entry)
                all[UInt(bitPattern: Int(bitPattern: UnsafeRawPointer(connection)))] = entry
            }
        }
    }

    /// libmicrohttpd's own timeout counts only silence: a client that sends one byte every few
    /// seconds never trips it (slowloris). The sweeper cuts any connection whose current request
    /// has taken longer than `requestTimeout` on the client's side, by shutting its socket down
    /// (the polling thread then closes it). Entries leave the table in the CLOSED notification,
    /// under the same lock, before libmicrohttpd closes the descriptor, so a reused fd is never hit.
    func startSweeper() {
        let stopping = WakeSignal()
        let thread = LoopThread(name: "siwa-http-sweeper") { [self] in
            while !stopping.wait(for: .milliseconds(200)) {
                connections.withLock { all in
                    // The clock is read under the lock: a connection that started while the
                    // sweeper waited for it has a `since` later than a clock read before.
                    for key in Self.overdue(all, now: .now, limit: requestTimeout) {
                        if let fd = all[key]?.fd { _ = Glibc.shutdown(fd, Int32(SHUT_RDWR)) }
                        all[key]?.cut = true
                    }
                }
            }
        }
        sweeper.withLock { $0 = (thread, stopping) }
    }

    /// The connections to cut at `now`: not with the handler, not cut yet, and their current
    /// request (or the connection) started more than `limit` ago. A `since` later than `now` is
    /// a connection that just started, never an overdue one.
    static func overdue(_ all: [UInt: Tracked], now: Deadline, limit: Duration) -> [UInt] {
        all.compactMap { key, entry in
            !entry.busy && !entry.cut && now > entry.since.adding(limit) ? key : nil
        }
    }

    func stopSweeper() {
        let running = sweeper.withLock { s in
            defer { s = nil }
            return s
        }
        guard let (thread, stopping) = running else { return }
        stopping.stop()
        thread.join(until: .never)
    }

    /// Bytes of an over-limit streamed body read and dropped before the connection is cut.
    var discardLimit: Int { max(maxBody * 16, 1 << 20) }
}

private func queue(_ response: HTTPResponse, on connection: OpaquePointer) -> MHD_Result {
    let mhdResponse: OpaquePointer? = response.body.withUnsafeBytes { raw in
        MHD_create_response_from_buffer(
            raw.count, UnsafeMutableRawPointer(mutating: raw.baseAddress),
            .RESPMEM_MUST_COPY)
    }
    guard let mhdResponse else { return .NO }
    for header in response.headers {
        _ = MHD_add_response_header(mhdResponse, header.name, header.value)
    }
    let result = MHD_queue_response(connection, UInt32(response.status), mhdResponse)
    MHD_destroy_response(mhdResponse)
    return result
}

private func header(_ connection: OpaquePointer, _ name: String) -> String? {
    guard let value = siwa_mhd_header(connection, name) else { return nil }
    return String(cString: value)
}

/// Collects query arguments into the `[HTTPHeader]` box passed as `cls`.
private final class ArgumentBox {
    var items: [HTTPHeader] = []
}

private func collectArgument(
    cls: UnsafeMutableRawPointer?, kind: MHD_ValueKind, key: UnsafePointer<CChar>?, value: UnsafePointer<CChar>?
) -> MHD_Result {
    guard let cls, let key else { return .YES }
    let box = Unmanaged<ArgumentBox>.fromOpaque(cls).takeUnretainedValue()
    box.items.append(HTTPHeader(String(cString: key), value.map { String(cString: $0) } ?? ""))
    return .YES
}

private func queryArguments(_ connection: OpaquePointer) -> [HTTPHeader] {
    let box = ArgumentBox()
    _ = siwa_mhd_query(connection, collectArgument, Unmanaged.passUnretained(box).toOpaque())
    return box.items
}

/// Every line of the kept headers, in the order received (`header` would give a repeated one's
/// first line only: `X-Forwarded-For` is read whole, every line).
private func keptHeaders(_ connection: OpaquePointer, _ names: [String]) -> [HTTPHeader] {
    guard !names.isEmpty else { return [] }
    let box = ArgumentBox()
    _ = siwa_mhd_headers(connection, collectArgument, Unmanaged.passUnretained(box).toOpaque())
    let wanted = Set(names.map { $0.lowercased() })
    return box.items.filter { wanted.contains($0.name.lowercased()) }.map { item in
        HTTPHeader(names.first { $0.lowercased() == item.name.lowercased() } ?? item.name, item.value)
    }
}

private func clientAddress(_ connection: OpaquePointer) -> String? {
    var buffer = [CChar](repeating: 0, count: 64)
    guard siwa_mhd_client_address(connection, &buffer, buffer.count) == 1 else { return nil }
    return buffer.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
}

private func accessCallback(
    cls: UnsafeMutableRawPointer?, connection: OpaquePointer?, url: UnsafePointer<CChar>?,
    method: UnsafePointer<CChar>?, version: UnsafePointer<CChar>?, uploadData: UnsafePointer<CChar>?,
    uploadDataSize: UnsafeMutablePointer<Int>?, conCls: UnsafeMutablePointer<UnsafeMutableRawPointer?>?
) -> MHD_Result {
    guard let cls, let connection, let conCls, let uploadDataSize else { return .NO }
    let context = Unmanaged<ServerContext>.fromOpaque(cls).takeUnretainedValue()

    // First call: headers only.
    guard let existing = conCls.pointee else {
        let contentLength: Int? = header(connection, "Content-Length").map { Int($0.trimmingSpaces) ?? -1 }
        let head = HTTPRequestHead(
            method: method.map { String(cString: $0) } ?? "",
            path: url.map { String(cString: $0) } ?? "/",
            contentType: header(connection, "Content-Type"),
            contentLength: contentLength,
            authorization: header(connection, "Authorization"),
            headers: keptHeaders(connection, context.keptHeaders),
            query: context.readsQuery ? queryArguments(connection) : [],
            clientAddress: context.readsClientAddress ? clientAddress(connection) : nil)
        let state = ConnectionState(connection: connection, head: head, registry: context.suspended)
        conCls.pointee = Unmanaged.passRetained(state).toOpaque()
        guard context.admit() else {
            // Shutting down: answered at once, never handed to the handler (nor suspended).
            state.counted = false
            state.dispatched = true
            state.deliver(SuspendedConnections.shutdownResponse)
            _ = state.takeResponseOrSuspend()
            return queue(SuspendedConnections.shutdownResponse, on: connection)
        }
        if let early = context.handler.head(head) {
            state.dispatched = true
            state.deliver(early)
            _ = state.takeResponseOrSuspend()
            return queue(early, on: connection)
        }
        return .YES
    }
    let state = Unmanaged<ConnectionState>.fromOpaque(existing).takeUnretainedValue()

    // Body chunks.
    let size = uploadDataSize.pointee
    if size > 0 {
        if !state.tooLarge && state.body.count + size <= context.maxBody, let uploadData {
            uploadData.withMemoryRebound(to: UInt8.self, capacity: size) { bytes in
                state.body.append(contentsOf: UnsafeBufferPointer(start: bytes, count: size))
            }
        } else {
            state.tooLarge = true
            state.body = []
            state.discarded += size
            if state.discarded > context.discardLimit { return .NO }
        }
        uploadDataSize.pointee = 0
        return .YES
    }

    // Request complete (or resumed after suspension).
    if !state.dispatched {
        state.dispatched = true
        context.track(connection) { $0.busy = true }
        if state.tooLarge {
            state.deliver(context.handler.bodyTooLarge(state.head))
        } else {
            let request = HTTPRequest(head: state.head, body: state.body)
            state.body = []
            context.handler.handle(request, responder: HTTPResponder(state: state))
        }
    }
    if let response = state.takeResponseOrSuspend() {
        return queue(response, on: connection)
    }
    return .YES
}

private func completedCallback(
    cls: UnsafeMutableRawPointer?, connection: OpaquePointer?,
    conCls: UnsafeMutablePointer<UnsafeMutableRawPointer?>?, toe: MHD_RequestTerminationCode
) {
    guard let cls else { return }
    let context = Unmanaged<ServerContext>.fromOpaque(cls).takeUnretainedValue()
    if let connection {
        context.track(connection) {
            $0.busy = false
            $0.since = .now
        }
    }
    guard let conCls, let existing = conCls.pointee else { return }
    let state = Unmanaged<ConnectionState>.fromOpaque(existing)
    let counted = state.takeUnretainedValue().counted
    state.release()
    conCls.pointee = nil
    if counted { context.requestCompleted() }
}

private func connectionCallback(
    cls: UnsafeMutableRawPointer?, connection: OpaquePointer?,
    socketContext: UnsafeMutablePointer<UnsafeMutableRawPointer?>?, code: MHD_ConnectionNotificationCode
) {
    guard let cls, let connection else { return }
    let context = Unmanaged<ServerContext>.fromOpaque(cls).takeUnretainedValue()
    let key = UInt(bitPattern: Int(bitPattern: UnsafeRawPointer(connection)))
    if code == .CONNECTION_NOTIFY_STARTED {
        let fd = siwa_mhd_connection_fd(connection)
        context.connections.withLock { $0[key] = ServerContext.Tracked(fd: fd, since: .now) }
    } else {
        context.connections.withLock { _ = $0.removeValue(forKey: key) }
    }
}

extension String {
    var trimmingSpaces: Substring {
        var s = Substring(self)
        while s.first == " " || s.first == "\t" { s.removeFirst() }
        while s.last == " " || s.last == "\t" { s.removeLast() }
        return s
    }
}
