import Foundation
import Logging
import SiwaCore
import SiwaCrypto
import SiwaDevTools
import SiwaHTTP
import SiwaPostgres
import SiwaRuntime
import Synchronization

@testable import SiwaApp

/// An `OutboxSink` in memory: records every submission and answers the way the test says —
/// at once, later (`hold`, then `complete`), or not at all (`refuse`: the queue is full).
final class MemorySink: OutboxSink {
    enum Behaviour: Sendable {
        /// Calls the completion at once, on the submitting thread, with this result.
        case answer(OutboxResult)
        /// Keeps the completion until `complete(_:)`.
        case hold
        /// Returns false: the queue is full (or the writer is not running).
        case refuse
    }

    struct Submission: Sendable {
        var notification: VerifiedNotification
        var deadline: Deadline
    }

    private struct State {
        var behaviour: Behaviour
        var submissions: [Submission] = []
        var held: [OutboxWriter.Completion] = []
    }

    private let state: Mutex<State>

    init(_ behaviour: Behaviour = .answer(.committed(.accepted))) {
        state = Mutex(State(behaviour: behaviour))
    }

    func submit(
        _ notification: VerifiedNotification, deadline: Deadline,
        completion: @escaping OutboxWriter.Completion
    ) -> Bool {
        let behaviour = state.withLock { s -> Behaviour in
            s.submissions.append(Submission(notification: notification, deadline: deadline))
            if case .hold = s.behaviour { s.held.append(completion) }
            return s.behaviour
        }
        switch behaviour {
        case .answer(let result):
            completion(result)
            return true
        case .hold:
            return true
        case .refuse:
            return false
        }
    }

    var submissions: [Submission] { state.withLock { $0.submissions } }

    /// Completions waiting (`hold`).
    var heldCount: Int { state.withLock { $0.held.count } }

    /// Answers every held submission with `result`.
    func complete(_ result: OutboxResult) {
        let held = state.withLock { s -> [OutboxWriter.Completion] in
            defer { s.held = [] }
            return s.held
        }
        for completion in held { completion(result) }
    }
}

/// The one answer a handler gives, captured in-process through `HTTPResponder(delivery:)`.
final class Answer: Sendable {
    private final class Deliveries: Sendable {
        let responses = Mutex<[HTTPResponse]>([])
    }

    private let deliveries = Deliveries()
    /// Hands the response to this answer instead of a connection.
    let responder: HTTPResponder

    init() {
        responder = HTTPResponder { [deliveries] response in deliveries.responses.withLock { $0.append(response) } }
    }

    /// Every response the delivery closure got (at most one: the responder delivers once).
    var delivered: [HTTPResponse] { deliveries.responses.withLock { $0 } }

    /// The response, nil while the handler has not answered.
    var response: HTTPResponse? { delivered.first }

    /// Waits (polling) for an answer given from another thread; false after `timeout` seconds.
    func wait(timeout: Double = 30) -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        while response == nil && Date() < deadline { Thread.sleep(forTimeInterval: 0.005) }
        return response != nil
    }

    var status: Int? { response?.status }
    /// The `error` or `status` member of the JSON body.
    var code: String? {
        guard let body = response?.body, let value = try? JSONParser.parse(body) else { return nil }
        return value["error"]?.stringValue ?? value["status"]?.stringValue
    }
    func header(_ name: String) -> String? {
        response?.headers.first { $0.name.lowercased() == name.lowercased() }?.value
    }
}

/// A directory removed when the last reference goes.
final class TemporaryDirectory: Sendable {
    let path: String

    init() throws {
        path = NSTemporaryDirectory() + "siwa-app-tests-\(UInt64.random(in: 0...UInt64.max))"
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    }

    deinit { try? FileManager.default.removeItem(atPath: path) }
}

/// A receiver over a key store reading a `file://` key set written at test time, an in-memory
/// sink, and a pinned wall clock.
struct ReceiverFixture {
    static let audience = "com.example.app"
    static let path = "/apple/notifications"
    /// The pinned wall clock: 2023-11-14T22:13:20Z.
    static let now: Int64 = 1_700_000_000
    /// One RSA key for the whole suite (generating one takes a while).
    static let key = try! RSAPrivateKey.generate()
    static let signer = NotificationSigner(key: key, kid: "test-key-1")

    let receiver: Receiver
    let sink: MemorySink
    let keys: KeyStore
    let logs: LogSink
    let metrics: Metrics
    /// Holds the key set file (the store reads it again on an unknown `kid`).
    let directory: TemporaryDirectory

    init(
        sink: MemorySink = MemorySink(), now: Int64 = Self.now, retryAfterSeconds: Int = 7,
        commitTimeout: Duration = .seconds(5), maxBody: Int = 65536, keyRefreshInterval: Double = 10
    ) throws {
        directory = try TemporaryDirectory()
        let file = directory.path + "/keys.json"
        try Self.signer.jwks.write(toFile: file, atomically: true, encoding: .utf8)
        let logs = LogSink.capturing()
        let logger = Logger(label: "receiver") { LineLogHandler(label: $0, level: .debug, format: .json, sink: logs) }
        keys = KeyStore(url: "file://" + file, minRefreshInterval: .seconds(keyRefreshInterval), logger: logger)
        try keys.load()
        metrics = Metrics()
        self.sink = sink
        self.logs = logs
        receiver = Receiver(
            gate: RequestGate(path: Self.path, maxBody: maxBody),
            verifier: NotificationVerifier(policy: VerificationPolicy(audiences: [Self.audience])),
            keys: keys, writer: sink, logger: logger, metrics: metrics,
            retryAfterSeconds: retryAfterSeconds, commitTimeout: commitTimeout,
            now: .fixed(unixSeconds: now))
    }

    /// Apple's claims for one event issued at the pinned time (or `issuedAt`).
    static func claims(
        audience: String = audience, type: String = "consent-revoked", sub: String = "000739.test.0001",
        eventTimeMillis: Int64? = nil, issuedAt: Int64 = now, jti: String = NotificationSigner.newJTI()
    )
        -> [String: JSONValue]
    {
        NotificationSigner.claims(
            audience: audience, type: type, sub: sub, eventTimeMillis: eventTimeMillis,
            jti: jti, now: issuedAt)
    }

    static func token(_ claims: [String: JSONValue] = claims(), signer: NotificationSigner = signer) throws -> String {
        try signer.sign(claims: claims)
    }

    /// Runs the request through `head` then, if it passes, `handle` — as the listener does.
    func post(token: String, contentType: String? = "application/json;charset=UTF-8") -> Answer {
        post(body: NotificationSigner.body(token: token), contentType: contentType)
    }

    func post(
        body: String, method: String = "POST", path: String = Self.path,
        contentType: String? = "application/json;charset=UTF-8"
    ) -> Answer {
        let answer = Answer()
        let bytes = Array(body.utf8)
        let head = HTTPRequestHead(method: method, path: path, contentType: contentType, contentLength: bytes.count)
        if let early = receiver.head(head) {
            answer.responder.respond(early)
        } else {
            receiver.handle(HTTPRequest(head: head, body: bytes), responder: answer.responder)
        }
        return answer
    }
}

/// Waits (real time, `limit` at most) until `condition` holds; false then: a test fails with its
/// message rather than hang.
func waitUntil(limit: Duration = .seconds(30), _ condition: () -> Bool) -> Bool {
    let giveUp = Deadline.now.adding(limit)
    while !condition() {
        if Deadline.now >= giveUp { return false }
        sched_yield()
    }
    return true
}
