import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Minimal blocking TCP server on 127.0.0.1 for SiwaFetch tests. One thread
/// accepts; each connection gets its own thread that reads one request (until
/// the headers and Content-Length body are complete, EOF, or a short read
/// timeout), records the raw bytes, and answers with whatever `respond`
/// returns. `respond` returning nil means "never answer": the connection is
/// held open until `stop()`.
final class LoopbackServer: @unchecked Sendable {
    // @unchecked: mutable state is guarded by `lock`; fds are immutable.
    let port: UInt16
    private let listenFD: Int32
    private let lock = NSLock()
    private var received: [[UInt8]] = []
    private var heldConnections: [Int32] = []
    private var stopped = false
    private let acceptExited = DispatchSemaphore(value: 0)
    private let respond: @Sendable ([UInt8]) -> [UInt8]?
    /// Answers requests on one connection until the client closes it (or is idle 300 ms).
    private let keepAlive: Bool
    private var accepted = 0

    struct SocketError: Error {
        let what: String
        let errno: Int32
    }

    init(keepAlive: Bool = false, respond: @escaping @Sendable ([UInt8]) -> [UInt8]?) throws {
        self.respond = respond
        self.keepAlive = keepAlive
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw SocketError(what: "socket", errno: errno) }
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_port = 0
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        let bound = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard bound == 0, listen(fd, 16) == 0 else {
            let e = errno
            close(fd)
            throw SocketError(what: "bind/listen", errno: e)
        }
        self.listenFD = fd
        self.port = try Self.localPort(fd)
        let thread = Thread { [self] in acceptLoop() }
        thread.start()
    }

    deinit { stop() }

    static func localPort(_ fd: Int32) throws -> UInt16 {
        var addr = sockaddr_in()
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        let rc = withUnsafeMutablePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &len) }
        }
        guard rc == 0 else { throw SocketError(what: "getsockname", errno: errno) }
        return UInt16(bigEndian: addr.sin_port)
    }

    var baseURL: String { "http://127.0.0.1:\(port)" }

    /// Raw bytes of every request received so far.
    var requests: [[UInt8]] { lock.withLock { received } }

    /// Connections accepted so far.
    var connections: Int { lock.withLock { accepted } }

    func stop() {
        let held: [Int32]? = lock.withLock {
            if stopped { return nil }
            stopped = true
            let h = heldConnections
            heldConnections = []
            return h
        }
        guard let held else { return }
        shutdown(listenFD, Int32(SHUT_RDWR))  // wakes accept()
        acceptExited.wait()
        close(listenFD)
        for fd in held { close(fd) }
    }

    private func acceptLoop() {
        defer { acceptExited.signal() }
        while true {
            let conn = accept(listenFD, nil, nil)
            if conn < 0 {
                if errno == EINTR { continue }
                return
            }
            if lock.withLock({ stopped }) {
                close(conn)
                return
            }
            lock.withLock { accepted += 1 }
            let thread = Thread { [self] in keepAlive ? serveKeepAlive(conn) : handle(conn) }
            thread.start()
        }
    }

    private func handle(_ conn: Int32) {
        var timeout = timeval(tv_sec: 0, tv_usec: 300_000)
        setsockopt(conn, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        let request = readRequest(conn)
        lock.withLock { received.append(request) }
        guard let response = respond(request) else {
            let alreadyStopped = lock.withLock {
                if !stopped { heldConnections.append(conn) }
                return stopped
            }
            if alreadyStopped { close(conn) }
            return
        }
        response.withUnsafeBytes { raw in
            var offset = 0
            while offset < raw.count {
                let n = send(conn, raw.baseAddress! + offset, raw.count - offset, Int32(MSG_NOSIGNAL))
                if n <= 0 { break }  // peer went away (e.g. aborted transfer)
                offset += n
            }
        }
        shutdown(conn, Int32(SHUT_WR))
        // Drain briefly so the client sees a clean close rather than a reset.
        var sink = [UInt8](repeating: 0, count: 4096)
        _ = recv(conn, &sink, sink.count, 0)
        close(conn)
    }

    private func serveKeepAlive(_ conn: Int32) {
        var timeout = timeval(tv_sec: 0, tv_usec: 300_000)
        setsockopt(conn, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        while true {
            let request = readRequest(conn)
            guard !request.isEmpty, let response = respond(request) else { break }
            lock.withLock { received.append(request) }
            let sent = response.withUnsafeBytes { raw in
                send(conn, raw.baseAddress!, raw.count, Int32(MSG_NOSIGNAL)) == raw.count
            }
            if !sent { break }
        }
        close(conn)
    }

    private func readRequest(_ conn: Int32) -> [UInt8] {
        var data: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        while data.count < 8 << 20 {
            let n = recv(conn, &buffer, buffer.count, 0)
            if n <= 0 { break }  // EOF, error or read timeout
            data.append(contentsOf: buffer[0..<n])
            if let parsed = HTTPRequest(data), parsed.body.count >= parsed.contentLength { break }
        }
        return data
    }
}

/// Parsed view of a raw HTTP/1.1 request (for assertions).
struct HTTPRequest {
    var requestLine: String
    var headers: [(name: String, value: String)]
    var body: [UInt8]
    var contentLength: Int

    init?(_ raw: [UInt8]) {
        let separator: [UInt8] = [13, 10, 13, 10]
        guard raw.count >= 4,
            let end = (0...(raw.count - 4)).first(where: { Array(raw[$0..<$0 + 4]) == separator })
        else { return nil }
        let head = String(decoding: raw[..<end], as: UTF8.self)
        var lines = head.components(separatedBy: "\r\n")
        requestLine = lines.removeFirst()
        headers = lines.compactMap { line in
            guard let colon = line.firstIndex(of: ":") else { return nil }
            return (
                String(line[..<colon]).lowercased(),
                line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
            )
        }
        body = Array(raw[(end + 4)...])
        contentLength = headers.last(where: { $0.name == "content-length" }).flatMap { Int($0.value) } ?? 0
    }

    func header(_ name: String) -> String? {
        headers.last(where: { $0.name == name.lowercased() })?.value
    }
}

func httpResponse(
    status: String = "200 OK", headers: [String] = [], body: [UInt8] = [],
    contentLength: Bool = true, keepAlive: Bool = false
) -> [UInt8] {
    var head = "HTTP/1.1 \(status)\r\n"
    for h in headers { head += h + "\r\n" }
    if contentLength { head += "Content-Length: \(body.count)\r\n" }
    head += keepAlive ? "\r\n" : "Connection: close\r\n\r\n"
    return Array(head.utf8) + body
}

/// A loopback port that is bound but not listening: connecting is refused.
final class ClosedPort {
    let port: UInt16
    private let fd: Int32

    init() throws {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw LoopbackServer.SocketError(what: "socket", errno: errno) }
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        let bound = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard bound == 0 else {
            close(fd)
            throw LoopbackServer.SocketError(what: "bind", errno: errno)
        }
        do {
            port = try LoopbackServer.localPort(fd)
        } catch {
            close(fd)
            throw error
        }
        self.fd = fd
    }

    deinit { close(fd) }
}
