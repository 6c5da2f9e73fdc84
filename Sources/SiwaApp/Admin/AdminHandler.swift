import Foundation
import SiwaCore
import SiwaHTTP
import SiwaPostgres
import Synchronization

/// The admin listener (never on the public port): `/healthz`, `/readyz`, `/metrics`, and the API
/// (`APIHandler`). None of them waits on the database on a listener thread: `/healthz` touches
/// nothing, `/readyz` is answered by the `AdminProbe` (within its 1.5 s deadline), the database
/// gauges of `/metrics` come from its snapshot (at once), the API runs on its own executor.
public final class AdminHandler: HTTPHandler {
    private let pool: PostgresPool
    private let probe: AdminProbe
    /// The key set readiness waits for (the receiving roles only).
    private let keys: KeyStore?
    /// The key set the process holds, whatever its role (`siwa_keys_loaded`).
    private let heldKeys: KeyStore?
    private let metrics: Metrics
    private let draining = Atomic<Bool>(false)

    private let writer: OutboxWriter?
    private let api: APIHandler?
    private let console: ConsoleHandler?

    public init(
        pool: PostgresPool, probe: AdminProbe, keys: KeyStore?, heldKeys: KeyStore? = nil, writer: OutboxWriter? = nil,
        metrics: Metrics, api: APIHandler? = nil, console: ConsoleHandler? = nil
    ) {
        self.heldKeys = heldKeys ?? keys
        self.console = console
        self.pool = pool
        self.probe = probe
        self.keys = keys
        self.writer = writer
        self.metrics = metrics
        self.api = api
    }

    /// What the listener serves at a path.
    public enum Route: Sendable, Equatable {
        /// Locked by the API's bearer token (`APIHandler`).
        case api
        case health, readiness, metrics, openAPI
    }

    /// Every path the listener answers besides the console's: the one place it routes (a path
    /// added here is in `APIRouteLockTests`' loop by construction).
    public static let routes: [String: Route] = [
        TokenExchange.path: .api, TokenExchange.handoverPath: .api,
        "/healthz": .health, "/readyz": .readiness, "/metrics": .metrics, "/openapi.json": .openAPI,
    ]

    /// This listener's OpenAPI 3.1 description (docs/openapi.json, compiled in).
    static let openAPI: [UInt8] = PackageResources.openapi_json

    /// Readiness turns 503 from now on (graceful shutdown).
    public func startDraining() {
        draining.store(true, ordering: .relaxed)
    }

    /// API calls in flight answer before the listener closes (until `deadline`).
    public func drainAPI(until deadline: Deadline) {
        api?.drain(until: deadline)
    }

    public func head(_ head: HTTPRequestHead) -> HTTPResponse? {
        // The console (off, 404, whenever the API is).
        if ConsoleHandler.owns(head.path) {
            guard let console else { return .text(404, "not found\n") }
            return console.head(head)
        }
        if Self.routes[head.path] == .api {
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
        if ConsoleHandler.owns(request.head.path) {
            guard let console else { return responder.respond(.text(404, "not found\n")) }
            return console.handle(request, responder: responder)
        }
        switch Self.routes[request.head.path] {
        case .api:
            if let api {
                api.handle(request, responder: responder)
            } else {
                responder.respond(APIHandler.error(404, "not_found"))
            }
        case .health:
            responder.respond(.text(200, "ok\n"))
        case .openAPI:
            responder.respond(HTTPResponse(status: 200, headers: [HTTPHeader("Content-Type", "application/json")], body: Self.openAPI))
        case .readiness:
            readiness { ready, why in responder.respond(.text(ready ? 200 : 503, why + "\n")) }
        case .metrics:
            gauges { [metrics] gauges in
                responder.respond(.text(200, metrics.render(gauges: gauges), contentType: "text/plain; version=0.0.4; charset=utf-8"))
            }
        case nil:
            responder.respond(.text(404, "not found\n"))
        }
    }

    /// Ready: not draining, a key set loaded, and the database answered a probe that began after
    /// the request (within the probe's deadline). Answered from another thread.
    private func readiness(_ answer: @escaping @Sendable (Bool, String) -> Void) {
        if draining.load(ordering: .relaxed) { return answer(false, "shutting down") }
        if let keys, !keys.isLoaded { return answer(false, "no key set loaded") }
        probe.probe { reading in
            reading.answered ? answer(true, "ready") : answer(false, "database unreachable or not answering")
        }
    }

    /// The gauges. The database ones come from the probe's snapshot, refreshed in the background
    /// (served at once, with `siwa_metrics_snapshot_age_seconds`; a hung database makes it age,
    /// never the answer wait); before the first snapshot, from a round awaited within the probe's
    /// deadline (left out when the database did not answer). Answered from another thread.
    private func gauges(_ answer: @escaping @Sendable ([(name: String, help: String, value: Double)]) -> Void) {
        var result: [(name: String, help: String, value: Double)] = [
            ("siwa_db_pool_open", "Open database connections of the request pool.", Double(pool.openConnections)),
            ("siwa_db_pool_busy", "Database connections in use.", Double(pool.busyConnections)),
            ("siwa_keys_loaded", "Signing keys held.", Double(heldKeys?.keyCount ?? 0)),
        ]
        if let writer {
            result.append(("siwa_writer_queue", "Verified notifications waiting for their commit.", Double(writer.queued)))
            result.append(("siwa_writer_pool_open", "Open database connections of the outbox writer.", Double(writer.openConnections)))
        }
        if let (reading, age) = probe.snapshot() {
            result.append(
                ("siwa_metrics_snapshot_age_seconds", "Age of the database gauges (the probe's last answered round).", age))
            return answer(result + Self.databaseGauges(reading))
        }
        let local = result
        probe.probe { reading in answer(local + Self.databaseGauges(reading)) }
    }

    /// The gauges read from the database in one probe round.
    private static func databaseGauges(_ reading: AdminProbe.Reading) -> [(name: String, help: String, value: Double)] {
        var result: [(name: String, help: String, value: Double)] = []
        if let backlog = reading.backlog {
            result.append(("siwa_outbox_backlog", "Events waiting to be applied (pending or failed).", Double(backlog.pending + backlog.failed)))
            result.append(("siwa_outbox_dead", "Dead-lettered events.", Double(backlog.dead)))
            result.append(("siwa_outbox_oldest_pending_age_seconds", "Age of the oldest event waiting.", backlog.oldestPendingAgeSeconds))
        }
        return result + reading.gauges.map { ($0.name, $0.help, $0.value) }
    }
}
