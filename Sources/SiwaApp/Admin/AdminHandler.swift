import Foundation
import SiwaHTTP
import SiwaPostgres
import Synchronization

/// The admin listener (never on the public port): `/healthz`, `/readyz`, `/metrics`.
public final class AdminHandler: HTTPHandler {
    private let pool: PostgresPool
    private let keys: KeyStore?
    private let metrics: Metrics
    private let draining = Atomic<Bool>(false)

    private let writer: OutboxWriter?
    private let tokenExchange: TokenExchange?
    /// `SIWA_FORWARD_URL` is set: `/metrics` carries the forwarding backlog.
    private let forwarding: Bool

    public init(
        pool: PostgresPool, keys: KeyStore?, writer: OutboxWriter? = nil, metrics: Metrics,
        tokenExchange: TokenExchange? = nil, forwarding: Bool = false
    ) {
        self.forwarding = forwarding
        self.pool = pool
        self.keys = keys
        self.writer = writer
        self.metrics = metrics
        self.tokenExchange = tokenExchange
    }

    /// Readiness turns 503 from now on (graceful shutdown).
    public func startDraining() {
        draining.store(true, ordering: .relaxed)
    }

    public func head(_ head: HTTPRequestHead) -> HTTPResponse? {
        if head.path == TokenExchange.path || head.path == TokenExchange.handoverPath {
            guard head.method == "POST" else { return HTTPResponse(status: 405, headers: [HTTPHeader("Allow", "POST")]) }
            guard tokenExchange != nil else { return .json(404, "{\"error\":\"in_app_deletion_off\"}") }
            return nil
        }
        guard head.method == "GET" || head.method == "HEAD" else {
            return HTTPResponse(status: 405, headers: [HTTPHeader("Allow", "GET")])
        }
        return nil
    }

    public func bodyTooLarge(_ head: HTTPRequestHead) -> HTTPResponse {
        .text(413, "body too large\n")
    }

    public func handle(_ request: HTTPRequest, responder: HTTPResponder) {
        switch request.head.path {
        case TokenExchange.path, TokenExchange.handoverPath:
            if let tokenExchange {
                tokenExchange.handle(path: request.head.path, body: request.body, responder: responder)
            } else {
                responder.respond(.json(404, "{\"error\":\"in_app_deletion_off\"}"))
            }
        case "/healthz":
            responder.respond(.text(200, "ok\n"))
        case "/readyz":
            let (ready, why) = readiness()
            responder.respond(.text(ready ? 200 : 503, why + "\n"))
        case "/metrics":
            responder.respond(.text(200, metrics.render(gauges: gauges()), contentType: "text/plain; version=0.0.4; charset=utf-8"))
        default:
            responder.respond(.text(404, "not found\n"))
        }
    }

    private func readiness() -> (Bool, String) {
        if draining.load(ordering: .relaxed) { return (false, "shutting down") }
        if let keys, !keys.isLoaded { return (false, "no key set loaded") }
        do {
            _ = try pool.withConnection(timeout: 2) { try $0.row(OperatorStatements.ping) }
        } catch {
            return (false, "database unreachable")
        }
        return (true, "ready")
    }

    private func gauges() -> [(name: String, help: String, value: Double)] {
        var result: [(name: String, help: String, value: Double)] = [
            ("siwa_db_pool_open", "Open database connections of the request pool.", Double(pool.openConnections)),
            ("siwa_db_pool_busy", "Database connections in use.", Double(pool.busyConnections)),
            ("siwa_keys_loaded", "Signing keys held.", Double(keys?.keyCount ?? 0)),
        ]
        if let writer {
            result.append(("siwa_writer_queue", "Verified notifications waiting for their commit.", Double(writer.queued)))
            result.append(("siwa_writer_pool_open", "Open database connections of the outbox writer.", Double(writer.openConnections)))
        }
        let backlog = try? pool.withConnection(timeout: 2) { connection in
            try connection.row(OperatorStatements.backlog)
        }
        if let backlog = backlog ?? nil {
            result.append(("siwa_outbox_backlog", "Events waiting to be applied (pending or failed).", Double(backlog.pending + backlog.failed)))
            result.append(("siwa_outbox_dead", "Dead-lettered events.", Double(backlog.dead)))
            result.append(("siwa_outbox_oldest_pending_age_seconds", "Age of the oldest event waiting.", backlog.oldestPendingAgeSeconds))
        }
        if forwarding, let f = (try? pool.withConnection(timeout: 2) { try $0.row(ForwardStatements.backlog) }) ?? nil {
            result += [
                ("siwa_forward_backlog", "Forwards waiting to be delivered (pending or failed, in flight included).", Double(f.pending + f.failed)),
                ("siwa_forward_failed", "Forwards whose last attempt failed (will retry).", Double(f.failed)),
                ("siwa_forward_dead", "Dead forwards (retried for SIWA_FORWARD_RETRY_FOR; replay --forwards).", Double(f.dead)),
                ("siwa_forward_oldest_waiting_age_seconds", "Age of the oldest forward waiting.", f.oldestWaitingAgeSeconds),
            ]
        }
        return result
    }
}
