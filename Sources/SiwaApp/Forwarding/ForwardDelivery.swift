import Foundation
import SiwaCore
import SiwaCrypto
import SiwaFetch
import SiwaRuntime

/// Where and how forwards are sent: the URL, the signing keys (every key of
/// `SIWA_FORWARD_SECRET_FILE` signs), the timeout. One signed `POST` per attempt, through libcurl
/// with TLS verification on; `webhook-timestamp` is the attempt's time.
public struct ForwardDelivery: Sendable {
    public let url: String
    let keys: [[UInt8]]
    /// How long an attempt may take (connect, send, answer). Default 10 s.
    public let timeout: Duration
    /// Where `webhook-timestamp` is read.
    let clock: WallClock

    /// What one attempt gave.
    public struct Attempt: Sendable {
        /// The HTTP status, when the receiver answered.
        public var status: Int?
        /// Why it did not deliver (`http 500`, `fetch error: timedOut …`); nil when delivered.
        public var error: String?
        /// When the POST started (uptime nanoseconds).
        public var startedAt: UInt64
        public var delivered: Bool { error == nil }
    }

    /// A configuration problem at start, naming the variable.
    public struct SecretError: Error, CustomStringConvertible, Sendable {
        public var description: String
    }

    init(url: String, keys: [[UInt8]], timeout: Duration = .seconds(10), clock: WallClock = .system) {
        self.url = url
        self.keys = keys
        self.timeout = timeout
        self.clock = clock
    }

    /// Reads and checks `SIWA_FORWARD_SECRET_FILE`; a bad file is one line naming the variable
    /// (never a secret).
    public static func load(
        _ configuration: ForwardingConfiguration, timeout: Duration = .seconds(10), clock: WallClock = .system
    ) throws(SecretError) -> ForwardDelivery {
        let name = "SIWA_FORWARD_SECRET_FILE"
        guard let data = FileManager.default.contents(atPath: configuration.secretFile) else {
            throw SecretError(description: "\(name): cannot read \(configuration.secretFile)")
        }
        switch StandardWebhookSecret.parse(file: String(decoding: data, as: UTF8.self)) {
        case .success(let keys): return ForwardDelivery(url: configuration.url, keys: keys, timeout: timeout, clock: clock)
        case .failure(let problem): throw SecretError(description: "\(name): \(problem)")
        }
    }

    /// The request of one attempt at `timestamp` (Unix seconds).
    func request(_ message: ForwardMessage, timestamp: Int64) -> FetchRequest {
        let body = message.body()
        let signature = StandardWebhook.signature(
            id: message.id, timestamp: timestamp, body: body, keys: keys, mac: HMACSHA256.authenticate)
        return FetchRequest(
            url: url, method: "POST",
            headers: [
                "Content-Type: application/json", "webhook-id: \(message.id)", "webhook-timestamp: \(timestamp)",
                "webhook-signature: \(signature)",
            ],
            body: body, connectTimeout: min(timeout, .seconds(5)), totalTimeout: timeout, maxResponseBytes: 64 * 1024,
            allowedSchemes: FetchScheme(url: url) == .http ? [.http] : [.https])
    }

    /// One attempt: a `2xx` within the timeout is delivered; anything else is not. With a
    /// `session` (one per sender thread), the connection of its last attempt is used again.
    public func send(_ message: ForwardMessage, session: FetchSession? = nil) -> Attempt {
        let started = Deadline.now.uptimeNanoseconds
        let request = request(message, timestamp: clock.unixSeconds)
        do {
            let response = try session.map { s throws(FetchError) in try s.perform(request) } ?? Fetcher.perform(request)
            let ok = (200...299).contains(response.status)
            return Attempt(status: response.status, error: ok ? nil : "http \(response.status)", startedAt: started)
        } catch {
            return Attempt(status: nil, error: "\(error)", startedAt: started)
        }
    }

    /// The sample `forward-test` sends: a `consent-revoked` of a made-up user, id `msg_test_<random>`,
    /// dated by `clock`.
    public static func sample(audience: String, clock: WallClock = .system) -> ForwardMessage {
        ForwardMessage(
            id: "msg_test_\(UInt64.random(in: 0...UInt64.max))", type: .consentRevoked, sub: "000000.forward-test.0000",
            audience: audience, eventTimeMillis: clock.unixMilliseconds, source: .apple)
    }
}
