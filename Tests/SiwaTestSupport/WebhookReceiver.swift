import Foundation
import SiwaCore
import SiwaCrypto
import SiwaHTTP
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// A Standard Webhooks receiver on a loopback port (libmicrohttpd, like the product's
/// listeners), for forwarding tests: it records every delivery, checks its signature with the
/// spec's reference algorithm against each key it knows, and answers as `behaviour` says.
public final class WebhookReceiver: HTTPHandler {
    /// How to answer one delivery.
    public enum Behaviour: Sendable {
        case status(Int)
        /// Never answers (the sender's timeout fires; the server answers 503 when it stops).
        case hang
        /// Answers `status` after `seconds` (a receiver slow to answer).
        case delayed(Int, seconds: Double)
    }

    public struct Delivery: Sendable {
        public var id: String?
        public var timestamp: String?
        public var signature: String?
        public var contentType: String?
        public var body: [UInt8]
        /// Per key of the receiver, in order: whether one of the `v1,` signatures verifies.
        public var verified: [Bool]
        /// When it arrived (uptime nanoseconds).
        public var arrivedAt: UInt64
        public var answered: Int?

        public var text: String { String(decoding: body, as: UTF8.self) }
        public var json: JSONValue? { try? JSONParser.parse(body) }
        /// Every key verified it.
        public var verifiedByEveryKey: Bool { !verified.isEmpty && verified.allSatisfy { $0 } }
    }

    public let keys: [[UInt8]]
    private let state = Mutex<(deliveries: [Delivery], behaviour: @Sendable (Delivery, Int) -> Behaviour)>(([], { _, _ in .status(200) }))
    private let server = Mutex<HTTPServer?>(nil)
    private let boundPort = Atomic<Int>(0)
    public var port: UInt16 { UInt16(boundPort.load(ordering: .relaxed)) }

    /// Listens on 127.0.0.1 (a port the kernel picks). `secrets` are `whsec_…` strings.
    public init(secrets: [String], threads: Int = 4) throws {
        keys = secrets.map { secret in
            guard case .success(let k) = StandardWebhookSecret.parse(file: secret) else { fatalError("bad test secret") }
            return k[0]
        }
        let s = try HTTPServer(
            configuration: HTTPServerConfiguration(
                host: "127.0.0.1", port: 0, threads: threads, connectionTimeout: .seconds(30),
                keptHeaders: ["webhook-id", "webhook-timestamp", "webhook-signature"]),
            handler: self)
        boundPort.store(Int(s.port), ordering: .relaxed)
        server.withLock { $0 = s }
    }

    public var url: String { "http://127.0.0.1:\(port)/hooks/siwa" }

    /// How the next deliveries are answered: `decide(delivery, n)` where `n` counts the
    /// deliveries with the same `webhook-id` before this one (0 for the first attempt).
    public func answer(_ decide: @escaping @Sendable (Delivery, Int) -> Behaviour) {
        state.withLock { $0.behaviour = decide }
    }

    public var deliveries: [Delivery] { state.withLock { $0.deliveries } }

    public func stop() {
        let s = server.withLock { s -> HTTPServer? in
            let current = s
            s = nil
            return current
        }
        s?.shutdown(grace: .seconds(0))
    }

    public func head(_ head: HTTPRequestHead) -> HTTPResponse? {
        head.method == "POST" ? nil : HTTPResponse(status: 405)
    }

    public func bodyTooLarge(_ head: HTTPRequestHead) -> HTTPResponse { HTTPResponse(status: 413) }

    public func handle(_ request: HTTPRequest, responder: HTTPResponder) {
        let id = request.head.header("webhook-id"), timestamp = request.head.header("webhook-timestamp")
        let signature = request.head.header("webhook-signature")
        let verified = keys.map { key -> Bool in
            guard let id, let signature, let ts = timestamp.flatMap({ Int64($0) }) else { return false }
            return StandardWebhook.verify(
                signatureHeader: signature, id: id, timestamp: ts, body: request.body, key: key, mac: HMACSHA256.authenticate)
        }
        var delivery = Delivery(
            id: id, timestamp: timestamp, signature: signature, contentType: request.head.contentType, body: request.body,
            verified: verified, arrivedAt: DispatchTime.now().uptimeNanoseconds)
        let behaviour = state.withLock { s -> Behaviour in
            let earlier = s.deliveries.filter { $0.id == id }.count
            let b = s.behaviour(delivery, earlier)
            if case .status(let code) = b { delivery.answered = code }
            if case .delayed(let code, _) = b { delivery.answered = code }
            s.deliveries.append(delivery)
            return b
        }
        switch behaviour {
        case .status(let code):
            responder.respond(Self.response(code))
        case .delayed(let code, let seconds):
            DispatchQueue.global().asyncAfter(deadline: .now() + seconds) { responder.respond(Self.response(code)) }
        case .hang:
            break
        }
    }

    private static func response(_ code: Int) -> HTTPResponse {
        .json(code, code < 300 ? "{\"ok\":true}" : "{\"error\":\"test\"}")
    }
}

/// A loopback TCP listener that reads what arrives and closes the connection without answering
/// (a receiver that crashes mid-request). Counts the connections it closed.
public final class ClosingListener: Sendable {
    public let port: UInt16
    private let fd: Int32
    private let closed = Atomic<Int>(0)
    private let stopped = Atomic<Bool>(false)

    public init() throws {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        self.fd = fd
        var one: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = 0
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { p -> Bool in
                bind(fd, p, length) == 0 && listen(fd, 16) == 0 && getsockname(fd, p, &length) == 0
            }
        }
        guard bound else { throw POSIXError(.EADDRINUSE) }
        port = UInt16(bigEndian: address.sin_port)
        Thread.detachNewThread { [self] in
            while !stopped.load(ordering: .relaxed) {
                let client = accept(fd, nil, nil)
                if client < 0 { break }
                var buffer = [UInt8](repeating: 0, count: 4096)
                _ = recv(client, &buffer, buffer.count, 0)
                close(client)
                closed.add(1, ordering: .relaxed)
            }
        }
    }

    public var url: String { "http://127.0.0.1:\(port)/hooks/siwa" }
    /// Connections read and closed unanswered.
    public var closedConnections: Int { closed.load(ordering: .relaxed) }

    public func stop() {
        stopped.store(true, ordering: .relaxed)
        shutdown(fd, Int32(SHUT_RDWR))
        close(fd)
    }
}
