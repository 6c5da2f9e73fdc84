import Foundation
import SiwaApp
import SiwaCore
import SiwaDevTools
import SiwaFetch
import Synchronization

/// Sends unique, validly signed notifications from several client threads until stopped (or
/// `limit` sent), and records for each exchange when it was sent and answered, the status, the
/// JSON `error`/`status` code and the `Retry-After` header. For "every request is answered within
/// N seconds" contracts: the HTTP client's own timeout is long (`timeout`), so a hang is measured
/// as a hang rather than cut short.
final class TimedSender: Sendable {
    struct Exchange: Sendable {
        var jti: String
        var sent: Date
        var answered: Date
        var status: Int?  // nil: no answer (refused, reset or the client timeout)
        var code: String?
        var retryAfter: String?
        var seconds: Double { answered.timeIntervalSince(sent) }
    }

    let url: String
    let prefix: String
    let signer: NotificationSigner
    let limit: Int
    let pause: Double
    let timeout: Double
    let exchanges = Mutex<[Exchange]>([])
    private let next = Atomic<Int>(0)
    private let stopped = Atomic<Bool>(false)
    private let group = DispatchGroup()

    init(
        url: String, prefix: String, signer: NotificationSigner, limit: Int = 5000, pause: Double = 0.02,
        timeout: Double = 20
    ) {
        self.url = url
        self.prefix = prefix
        self.signer = signer
        self.limit = limit
        self.pause = pause
        self.timeout = timeout
    }

    /// Starts `clients` sender threads and returns at once.
    func start(clients: Int) {
        for _ in 0..<clients {
            group.enter()
            Thread.detachNewThread { [self] in
                defer { group.leave() }
                while !stopped.load(ordering: .relaxed) {
                    let i = next.add(1, ordering: .relaxed).oldValue
                    guard i < limit else { return }
                    let jti = NotificationSigner.newJTI()
                    let claims = NotificationSigner.claims(
                        audience: TestHarness.audience, type: "consent-revoked",
                        sub: "\(prefix).\(i)", jti: jti)
                    guard let token = try? signer.sign(claims: claims) else { continue }
                    let sent = Date()
                    var exchange = Exchange(jti: jti, sent: sent, answered: sent)
                    if let r = try? Fetcher.perform(
                        FetchRequest(
                            url: url, method: "POST", headers: ["Content-Type: application/json;charset=UTF-8"],
                            body: Array(NotificationSigner.body(token: token).utf8), connectTimeout: .seconds(timeout),
                            totalTimeout: .seconds(timeout), allowedSchemes: [.http]))
                    {
                        exchange.status = r.status
                        let value = try? JSONParser.parse(String(decoding: r.body, as: UTF8.self))
                        exchange.code = value?["error"]?.stringValue ?? value?["status"]?.stringValue
                        exchange.retryAfter = r.headers["retry-after"]
                    }
                    exchange.answered = Date()
                    exchanges.withLock { $0.append(exchange) }
                    if pause > 0 { Thread.sleep(forTimeInterval: pause) }
                }
            }
        }
    }

    /// Stops sending new requests and waits (up to `timeout` seconds) for those in flight.
    @discardableResult
    func stop(timeout: Double = 60) -> Bool {
        stopped.store(true, ordering: .relaxed)
        return group.wait(timeout: .now() + timeout) == .success
    }

    var all: [Exchange] { exchanges.withLock { $0 } }
}
