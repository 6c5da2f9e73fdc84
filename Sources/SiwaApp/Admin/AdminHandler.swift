import Foundation
import SiwaHTTP
import SiwaPostgres
import Synchronization

/// The admin listener (never on the public port): `/healthz`, `/readyz`, `/metrics`, and the API
/// (`APIHandler`).
public final class AdminHandler: HTTPHandler {
    private let pool: PostgresPool
    private let keys: KeyStore?
    private let metrics: Metrics
    private let draining = Atomic<Bool>(false)

    private let writer: OutboxWriter?
    private let api: APIHandler?

    public init(
        pool: PostgresPool, keys: KeyStore?, writer: OutboxWriter? = nil, metrics: Metrics,
        api: APIHandler? = nil
    ) {
        self.pool = pool
        self.keys = keys
        self.writer = writer
        self.metrics = metrics
        self.api = api
    }

    /// Readiness turns 503 from now on (graceful shutdown).
    public func startDraining() {
        draining.store(true, ordering: .relaxed)
    }

    /// API calls in flight answer before the listener closes (within `seconds`).
    public func drainAPI(timeout seconds: Double) {
        api?.drain(timeout: seconds)
    }

    public func head(_ head: HTTPRequestHead) -> HTTPResponse? {
        if APIHandler.paths.contains(head.path) {
            guard let api else { return APIHandler.error(404, "not_found") }
            return api.head(head)
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
            if let api {
                api.handle(request, responder: responder)
            } else {
                responder.respond(APIHandler.error(404, "not_found"))
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
        return result
    }
}
