import Foundation
import Logging
import SiwaCore
import SiwaHTTP
import SiwaPostgres
import SiwaRuntime
import Synchronization

/// The public endpoint: checks the request, verifies the token, hands it to the `OutboxWriter`,
/// and answers 200 only once the row is committed. Every refusal is a JSON
/// `{"error":"<reason code>"}`.
public final class Receiver: HTTPHandler {
    private let gate: RequestGate
    private let verifier: NotificationVerifier
    private let keys: KeyStore
    private let writer: any OutboxSink
    private let wallClock: WallClock
    private let logger: Logger
    private let metrics: Metrics
    private let requestCounter = Atomic<UInt64>(0)
    /// Seconds Apple is asked to wait after a 503 (unless the key store says otherwise).
    public let retryAfterSeconds: Int
    /// Longest from a request's arrival to its answer (`SIWA_COMMIT_TIMEOUT`), a key fetch it
    /// waits for included.
    public let commitTimeout: Duration
    /// Longest a request with an unknown `kid` waits for the key fetch it triggered before it is
    /// answered 503. Default: the commit timeout.
    public let keyWaitLimit: Duration

    /// - Parameter now: the wall clock tokens are checked against (`iat`, `exp`). Default: the
    ///   system clock.
    public init(
        gate: RequestGate, verifier: NotificationVerifier, keys: KeyStore, writer: any OutboxSink,
        logger: Logger, metrics: Metrics, retryAfterSeconds: Int = 5, commitTimeout: Duration = .seconds(5),
        keyWaitLimit: Duration? = nil,
        now: WallClock = .system
    ) {
        self.gate = gate
        self.verifier = verifier
        self.keys = keys
        self.writer = writer
        wallClock = now
        self.logger = logger
        self.metrics = metrics
        self.retryAfterSeconds = retryAfterSeconds
        self.commitTimeout = commitTimeout
        self.keyWaitLimit = min(keyWaitLimit ?? commitTimeout, commitTimeout)
    }

    public func head(_ head: HTTPRequestHead) -> HTTPResponse? {
        let length = head.contentLength.map { $0 < 0 ? Int.max : $0 }
        guard
            let reason = gate.check(
                method: head.method, path: head.path,
                contentType: head.contentType, contentLength: length)
        else { return nil }
        return reject(reason, requestID: nextRequestID())
    }

    public func bodyTooLarge(_ head: HTTPRequestHead) -> HTTPResponse {
        reject(.bodyTooLarge, requestID: nextRequestID())
    }

    public func handle(_ request: HTTPRequest, responder: HTTPResponder) {
        process(
            request.body, arrivedAt: keys.now(), deadline: Deadline.now.adding(commitTimeout), mayWait: true,
            requestID: nextRequestID(), responder: responder)
    }

    /// Verifies and submits. An unknown `kid` may make the request wait (suspended, holding no
    /// thread) for the key fetch it triggered; it is then processed again with `mayWait: false`
    /// from the thread that finished the fetch.
    /// `deadline` is the request's arrival plus the commit timeout: the key wait and the commit
    /// both end there.
    private func process(
        _ body: [UInt8], arrivedAt: Deadline, deadline: Deadline, mayWait: Bool, requestID: UInt64,
        responder: HTTPResponder
    ) {
        let started = Deadline.now
        let notification: VerifiedNotification
        var ticket: KeyStore.Ticket?
        var retryAfter: Int?
        do throws(RejectReason) {
            notification = try verifier.verify(body: body, now: wallClock.unixSeconds) { kid, input, signature in
                switch keys.check(kid: kid, signingInput: input, signature: signature, arrivedAt: arrivedAt, mayWait: mayWait) {
                case .checked(let result):
                    return result
                case .unavailable(let seconds):
                    retryAfter = seconds
                    return .keysUnavailable
                case .wait(let pending):
                    ticket = pending
                    return .keysUnavailable
                }
            }
        } catch {
            if let ticket {
                keys.wait(ticket, until: min(Deadline.now.adding(keyWaitLimit), deadline)) { [self] in
                    process(body, arrivedAt: arrivedAt, deadline: deadline, mayWait: false, requestID: requestID, responder: responder)
                }
                return
            }
            metrics.observeVerification(seconds: Self.seconds(since: started))
            responder.respond(reject(error, requestID: requestID, retryAfter: retryAfter))
            return
        }
        metrics.observeVerification(seconds: Self.seconds(since: started))

        // Answered from a writer thread once the row is committed (the connection waits suspended).
        let committing = Deadline.now
        let submitted = writer.submit(notification, deadline: deadline) { [self] result in
            responder.respond(answer(result, notification: notification, requestID: requestID, since: committing))
        }
        if !submitted {
            responder.respond(reject(.databaseUnavailable, requestID: requestID))
        }
    }

    private func answer(
        _ result: OutboxResult, notification: VerifiedNotification,
        requestID: UInt64, since committing: Deadline
    ) -> HTTPResponse {
        switch result {
        case .timedOut:
            logger.warning(
                "commit timeout: the database did not answer in time",
                metadata: [
                    "request_id": "\(requestID)", "jti": "\(notification.jti)", "commit_timeout": "\(commitTimeout.inSeconds)",
                ])
            return reject(.databaseUnavailable, requestID: requestID)
        case .unavailable(let detail), .refused(let detail):
            logger.error(
                "outbox insert failed",
                metadata: ["request_id": "\(requestID)", "jti": "\(notification.jti)", "error": "\(detail)"])
            if case .unavailable = result { return reject(.databaseUnavailable, requestID: requestID) }
            return reject(.internalError, requestID: requestID)
        case .committed(let outcome):
            metrics.observeCommit(seconds: Self.seconds(since: committing))
            metrics.request(status: 200, reason: outcome.rawValue)
            logger.info(
                "notification \(outcome.rawValue)",
                metadata: [
                    "request_id": "\(requestID)", "outcome": "\(outcome.rawValue)", "jti": "\(notification.jti)",
                    "type": "\(notification.event.type.rawValue.prefix(64))", "sub_hash": "\(SubjectHash.of(notification.event.sub))",
                ])
            return Self.committedResponse(outcome)
        }
    }

    private func reject(_ reason: RejectReason, requestID: UInt64, retryAfter: Int? = nil) -> HTTPResponse {
        metrics.request(status: reason.httpStatus, reason: reason.rawValue)
        let level: Logger.Level = reason.httpStatus >= 500 ? .warning : .info
        logger.log(
            level: level, "notification rejected",
            metadata: [
                "request_id": "\(requestID)", "status": "\(reason.httpStatus)", "reason": "\(reason.rawValue)",
            ])
        var headers: [HTTPHeader] = []
        switch reason {
        case .methodNotAllowed: headers.append(HTTPHeader("Allow", "POST"))
        case .databaseUnavailable, .keysUnavailable: headers.append(HTTPHeader("Retry-After", String(retryAfter ?? retryAfterSeconds)))
        default: break
        }
        return .json(reason.httpStatus, reason.responseBody, headers: headers)
    }

    private func nextRequestID() -> UInt64 {
        requestCounter.add(1, ordering: .relaxed).newValue
    }

    /// The 200 answers, built once (a writer answers a whole batch in a row).
    static let accepted = HTTPResponse.json(200, #"{"status":"accepted"}"#)
    static let duplicate = HTTPResponse.json(200, #"{"status":"duplicate"}"#)
    static let ignored = HTTPResponse.json(200, #"{"status":"ignored"}"#)

    static func committedResponse(_ outcome: InsertOutcome) -> HTTPResponse {
        switch outcome {
        case .accepted: return accepted
        case .duplicate: return duplicate
        case .ignored: return ignored
        }
    }

    static func seconds(since start: Deadline) -> Double {
        Double(Deadline.now.uptimeNanoseconds - start.uptimeNanoseconds) / 1e9
    }
}
