import Dispatch
import Foundation
import SiwaHTTP
import Synchronization
import Testing

/// `HTTPServer.shutdown`: its states, and that a request whose handler never answers gets
/// `503 shutting_down` instead of holding the shutdown.
@Suite("HTTP server shutdown")
struct HTTPServerShutdownTests {
    /// Keeps every responder and never answers; signals when a request has arrived.
    final class SilentHandler: HTTPHandler {
        let arrived = DispatchSemaphore(value: 0)
        let responders = Mutex<[HTTPResponder]>([])

        func head(_ head: HTTPRequestHead) -> HTTPResponse? { nil }
        func bodyTooLarge(_ head: HTTPRequestHead) -> HTTPResponse { .json(413, "{}") }
        func handle(_ request: HTTPRequest, responder: HTTPResponder) {
            responders.withLock { $0.append(responder) }
            arrived.signal()
        }
    }

    /// Sends one request on a new connection and returns the socket (the answer is read later).
    static func send(port: UInt16) throws -> Int32 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        try #require(connected == 0)
        let request = Array("GET /x HTTP/1.1\r\nHost: localhost\r\n\r\n".utf8)
        #expect(write(fd, request, request.count) == request.count)
        return fd
    }

    static func readAll(_ fd: Int32) -> String {
        var out: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let n = read(fd, &buffer, buffer.count)
            if n <= 0 { break }
            out += buffer[0..<n]
        }
        close(fd)
        return String(decoding: out, as: UTF8.self)
    }

    @Test("a request never answered by its handler gets 503 shutting_down; the server ends stopped; a second call returns at once")
    func unansweredRequest() throws {
        let handler = SilentHandler()
        let server = try HTTPServer(configuration: HTTPServerConfiguration(port: 0, threads: 2), handler: handler)
        #expect(server.state == .running)
        let fd = try Self.send(port: server.port)
        handler.arrived.wait()
        #expect(server.shutdown(grace: 0.1) == .stopped)
        let answer = Self.readAll(fd)
        #expect(answer.hasPrefix("HTTP/1.1 503"))
        #expect(answer.contains(#"{"error":"shutting_down"}"#))
        #expect(server.state == .stopped)
        #expect(server.shutdown(grace: 10) == .stopped)
        // The handler's late answer goes nowhere.
        handler.responders.withLock { $0.forEach { $0.respond(.json(200, "{}")) } }
    }
}
