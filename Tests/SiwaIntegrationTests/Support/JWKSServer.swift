import Foundation
import SiwaHTTP
import Synchronization

/// A real HTTP server on loopback (our libmicrohttpd listener) that plays Apple's key endpoint:
/// its answer — body, status, Cache-Control, delay — can be changed while it runs.
final class JWKSServer {
    let endpoint: JWKSEndpoint
    let server: HTTPServer

    init(body: String) throws {
        endpoint = JWKSEndpoint(body: body)
        server = try HTTPServer(
            configuration: HTTPServerConfiguration(
                host: "127.0.0.1", port: 0, threads: 2,
                connectionTimeout: .seconds(30), maxBody: 1024),
            handler: endpoint)
    }

    var url: String { "http://127.0.0.1:\(server.port)/auth/keys" }
    /// Requests served so far.
    var requestCount: Int { endpoint.requests.load(ordering: .relaxed) }
    /// When each request arrived.
    var requestTimes: [Date] { endpoint.times.withLock { $0 } }
    /// When the last request arrived.
    var lastRequest: Date? { requestTimes.last }

    /// Publishes a new key set (Apple rotating its keys).
    func rotate(to body: String) { set { $0.body = body } }

    func set(_ change: @Sendable (inout JWKSEndpoint.Behavior) -> Void) { endpoint.behavior.withLock { change(&$0) } }

    func stop() { server.shutdown(grace: .seconds(0)) }
}

final class JWKSEndpoint: HTTPHandler {
    struct Behavior {
        var body: String
        var status = 200
        var cacheControl: String?
        /// Seconds to wait before answering (a hanging endpoint: longer than the fetch timeout).
        var delay: Double = 0
        /// A `Date` header of the test's choosing (a server whose clock differs from ours).
        var date: String?
    }

    let behavior: Mutex<Behavior>
    let requests = Atomic<Int>(0)
    let times = Mutex<[Date]>([])

    init(body: String) {
        behavior = Mutex(Behavior(body: body))
    }

    func head(_ head: HTTPRequestHead) -> HTTPResponse? { nil }

    func bodyTooLarge(_ head: HTTPRequestHead) -> HTTPResponse { HTTPResponse(status: 413) }

    func handle(_ request: HTTPRequest, responder: HTTPResponder) {
        times.withLock { $0.append(Date()) }
        requests.add(1, ordering: .relaxed)
        let b = behavior.withLock { $0 }
        var headers = [HTTPHeader("Content-Type", "application/json")]
        if let cc = b.cacheControl { headers.append(HTTPHeader("Cache-Control", cc)) }
        if let date = b.date { headers.append(HTTPHeader("Date", date)) }
        let response = HTTPResponse(status: b.status, headers: headers, body: Array(b.body.utf8))
        if b.delay > 0 {
            DispatchQueue.global().asyncAfter(deadline: .now() + b.delay) { responder.respond(response) }
        } else {
            responder.respond(response)
        }
    }
}
