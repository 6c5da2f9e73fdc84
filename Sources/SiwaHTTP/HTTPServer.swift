import CMicroHTTPD
import Synchronization

/// A libmicrohttpd listener: epoll, a thread pool, a connection timeout and limit, a body cap,
/// and suspend/resume so a handler can answer from another thread (e.g. after a batched commit).
public final class HTTPServer: Sendable {
    public let configuration: HTTPServerConfiguration
    /// The bound port (differs from the configured one when that was 0).
    public let port: UInt16
    private let context: ServerContext
    private let daemon: Mutex<DaemonHandle?>

    public init(configuration: HTTPServerConfiguration, handler: any HTTPHandler) throws(HTTPServerError) {
        let address = "\(configuration.host):\(configuration.port)"
        let context = ServerContext(handler: handler, maxBody: configuration.maxBody)
        let unmanaged = Unmanaged.passUnretained(context).toOpaque()
        var options = siwa_mhd_options(
            host: nil, port: configuration.port,
            threads: UInt32(max(1, configuration.threads)),
            connection_timeout: UInt32(max(1, configuration.connectionTimeout)),
            connection_limit: UInt32(max(1, configuration.connectionLimit)),
            memory_limit: max(4096, configuration.connectionMemoryLimit),
            suspend_resume: 1)
        let started: OpaquePointer? = configuration.host.withCString { host in
            options.host = host
            return siwa_mhd_start(&options, accessCallback, unmanaged, completedCallback, unmanaged)
        }
        guard let started else {
            let numeric = configuration.host.contains(":") || configuration.host.split(separator: ".").count == 4
            throw HTTPServerError(code: numeric ? .startFailed : .invalidAddress, address: address)
        }
        self.configuration = configuration
        self.context = context
        self.daemon = Mutex(DaemonHandle(pointer: started))
        self.port = siwa_mhd_bound_port(started)
    }

    /// Requests received and not yet completed.
    public var inFlight: Int { context.inFlight.load(ordering: .relaxed) }

    /// Stops accepting new connections, waits up to `grace` seconds for in-flight requests,
    /// then stops the daemon. Safe to call more than once.
    public func shutdown(grace: Double = 10) {
        let handle = daemon.withLock { d -> DaemonHandle? in
            let current = d
            d = nil
            return current
        }
        guard let current = handle?.pointer else { return }
        let fd = MHD_quiesce_daemon(current)
        if fd >= 0 { close(fd) }
        var waited = 0.0
        while context.inFlight.load(ordering: .relaxed) > 0 && waited < grace {
            usleep(10_000)
            waited += 0.01
        }
        MHD_stop_daemon(current)
    }

    deinit {
        shutdown(grace: 0)
    }
}

/// The `MHD_Daemon*`; libmicrohttpd's daemon calls are thread-safe, and `HTTPServer` hands the
/// pointer out once (to shut down) under its mutex.
struct DaemonHandle: @unchecked Sendable {
    let pointer: OpaquePointer
}

/// What the C callbacks reach through their `cls` pointer; lives as long as the server.
final class ServerContext: Sendable {
    let handler: any HTTPHandler
    let maxBody: Int
    let inFlight = Atomic<Int>(0)

    init(handler: any HTTPHandler, maxBody: Int) {
        self.handler = handler
        self.maxBody = maxBody
    }

    /// Bytes of an over-limit streamed body read and dropped before the connection is cut.
    var discardLimit: Int { max(maxBody * 16, 1 << 20) }
}

private func queue(_ response: HTTPResponse, on connection: OpaquePointer) -> MHD_Result {
    let mhdResponse: OpaquePointer? = response.body.withUnsafeBytes { raw in
        MHD_create_response_from_buffer(raw.count, UnsafeMutableRawPointer(mutating: raw.baseAddress),
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
        let head = HTTPRequestHead(method: method.map { String(cString: $0) } ?? "",
                                   path: url.map { String(cString: $0) } ?? "/",
                                   contentType: header(connection, "Content-Type"),
                                   contentLength: contentLength)
        let state = ConnectionState(connection: connection, head: head)
        conCls.pointee = Unmanaged.passRetained(state).toOpaque()
        context.inFlight.add(1, ordering: .relaxed)
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
    guard let cls, let conCls, let existing = conCls.pointee else { return }
    let context = Unmanaged<ServerContext>.fromOpaque(cls).takeUnretainedValue()
    Unmanaged<ConnectionState>.fromOpaque(existing).release()
    conCls.pointee = nil
    context.inFlight.subtract(1, ordering: .relaxed)
}

extension String {
    var trimmingSpaces: Substring {
        var s = Substring(self)
        while s.first == " " || s.first == "\t" { s.removeFirst() }
        while s.last == " " || s.last == "\t" { s.removeLast() }
        return s
    }
}
