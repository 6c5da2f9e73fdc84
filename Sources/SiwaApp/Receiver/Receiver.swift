import Foundation
import Logging
import SiwaCore
import SiwaHTTP
import SiwaPostgres
import Synchronization

/// The public endpoint: checks the request, verifies the token, commits it to the outbox,
/// and only then answers 200. Every refusal is a JSON `{"error":"<reason code>"}`.
public final class Receiver: HTTPHandler {
    private let gate: RequestGate
    private let verifier: NotificationVerifier
    private let keys: KeyStore
    private let pool: PostgresPool
    private let logger: Logger
    private let metrics: Metrics
    private let requestCounter = Atomic<UInt64>(0)
    /// Seconds Apple is asked to wait after a 503.
    public let retryAfterSeconds: Int

    public init(gate: RequestGate, verifier: NotificationVerifier, keys: KeyStore, pool: PostgresPool,
                logger: Logger, metrics: Metrics, retryAfterSeconds: Int = 5) {
        self.gate = gate
        self.verifier = verifier
        self.keys = keys
        self.pool = pool
        self.logger = logger
        self.metrics = metrics
        self.retryAfterSeconds = retryAfterSeconds
    }

    public func head(_ head: HTTPRequestHead) -> HTTPResponse? {
        let length = head.contentLength.map { $0 < 0 ? Int.max : $0 }
        guard let reason = gate.check(method: head.method, path: head.path,
                                      contentType: head.contentType, contentLength: length) else { return nil }
        return reject(reason, requestID: nextRequestID())
    }

    public func bodyTooLarge(_ head: HTTPRequestHead) -> HTTPResponse {
        reject(.bodyTooLarge, requestID: nextRequestID())
    }

    public func handle(_ request: HTTPRequest, responder: HTTPResponder) {
        responder.respond(process(body: request.body))
    }

    /// The whole pipeline for one body; also used in-process by tests.
    public func process(body: [UInt8]) -> HTTPResponse {
        let requestID = nextRequestID()
        let started = DispatchTime.now()
        let notification: VerifiedNotification
        do throws(RejectReason) {
            notification = try verifier.verify(body: body, now: Int64(Date().timeIntervalSince1970)) { kid, input, signature in
                keys.check(kid: kid, signingInput: input, signature: signature)
            }
        } catch {
            metrics.observeVerification(seconds: Self.seconds(since: started))
            return reject(error, requestID: requestID)
        }
        metrics.observeVerification(seconds: Self.seconds(since: started))

        let committing = DispatchTime.now()
        let outcome: EventStore.Outcome
        do {
            outcome = try insert(notification)
        } catch let error as PostgresError {
            logger.error("outbox insert failed", metadata: [
                "request_id": "\(requestID)", "jti": "\(notification.jti)", "error": "\(error)",
                "detail": "\(error.serverMessage.prefix(200))",
            ])
            return reject(error.isConnectionProblem ? .databaseUnavailable : .internalError, requestID: requestID)
        } catch {
            return reject(.internalError, requestID: requestID)
        }
        metrics.observeCommit(seconds: Self.seconds(since: committing))
        metrics.request(status: 200, reason: outcome.rawValue)
        logger.info("notification \(outcome.rawValue)", metadata: [
            "request_id": "\(requestID)", "outcome": "\(outcome.rawValue)", "jti": "\(notification.jti)",
            "type": "\(notification.event.type.rawValue.prefix(64))", "sub_hash": "\(SubjectHash.of(notification.event.sub))",
        ])
        return .json(200, "{\"status\":\"\(outcome.rawValue)\"}")
    }

    /// Inserts on a pooled connection. A connection that broke (e.g. the database restarted since
    /// it was opened) is retried once on a fresh one: safe, because the insert is idempotent — if
    /// the first try did commit, the second answers `duplicate`.
    private func insert(_ notification: VerifiedNotification) throws -> EventStore.Outcome {
        do {
            return try pool.withConnection(timeout: 5) { try EventStore.insert(notification, on: $0) }
        } catch let error as PostgresError where error.isConnectionProblem {
            return try pool.withConnection(timeout: 5) { try EventStore.insert(notification, on: $0) }
        }
    }

    private func reject(_ reason: RejectReason, requestID: UInt64) -> HTTPResponse {
        metrics.request(status: reason.httpStatus, reason: reason.rawValue)
        let level: Logger.Level = reason.httpStatus >= 500 ? .warning : .info
        logger.log(level: level, "notification rejected", metadata: [
            "request_id": "\(requestID)", "status": "\(reason.httpStatus)", "reason": "\(reason.rawValue)",
        ])
        var headers: [HTTPHeader] = []
        switch reason {
        case .methodNotAllowed: headers.append(HTTPHeader("Allow", "POST"))
        case .databaseUnavailable, .keysUnavailable: headers.append(HTTPHeader("Retry-After", String(retryAfterSeconds)))
        default: break
        }
        return .json(reason.httpStatus, reason.responseBody, headers: headers)
    }

    private func nextRequestID() -> UInt64 {
        requestCounter.add(1, ordering: .relaxed).newValue
    }

    static func seconds(since start: DispatchTime) -> Double {
        Double(DispatchTime.now().uptimeNanoseconds - start.uptimeNanoseconds) / 1e9
    }
}
