import Foundation
import Logging
import SiwaCore
import SiwaCrypto
import SiwaFetch
import SiwaHTTP
import SiwaPostgres

/// The process: database (external or embedded), key store, public and admin listeners and the
/// worker, started in order and stopped in reverse. `serve` runs both halves; `receive` and `work`
/// run one each.
public final class Application: Sendable {
    public struct Roles: OptionSet, Sendable {
        public let rawValue: Int
        public init(rawValue: Int) { self.rawValue = rawValue }
        /// The public listener (verify and commit notifications).
        public static let receive = Roles(rawValue: 1)
        /// The worker (apply events to accounts and sessions).
        public static let work = Roles(rawValue: 2)
        public static let all: Roles = [.receive, .work]
    }

    /// Tuning that is not part of the public configuration.
    public struct Options: Sendable {
        public var worker = Worker.Options()
        public var writer = OutboxWriter.Options()
        /// Seconds between checks of the key set's TTL. Default 1.
        public var keyCheckInterval: Double = 1
        public init() {}
    }

    public struct StartError: Error, CustomStringConvertible, Sendable {
        public var description: String
    }

    public let configuration: ServerConfiguration
    public let roles: Roles
    public let metrics = Metrics()
    private let logger: Logger
    private let options: Options
    private let state = ApplicationState()

    public init(configuration: ServerConfiguration, roles: Roles = .all, options: Options = Options(), logger: Logger) {
        self.configuration = configuration
        self.roles = roles
        self.options = options
        self.logger = logger
    }

    /// The bound public port (after `start`).
    public var publicPort: UInt16? { state.get { $0.publicServer?.port } }
    /// The bound admin port (after `start`).
    public var adminPort: UInt16? { state.get { $0.adminServer?.port } }
    /// The libpq conninfo in use (after `start`).
    public var conninfo: String? { state.get { $0.conninfo } }

    public func start() throws {
        let config = configuration
        Fetcher.initialize()
        if config.dev {
            logger.warning("DEVELOPMENT MODE: trusting the local dev signing key, listening on loopback only. Never use --dev in production.",
                           metadata: ["listen": "\(config.listen)", "admin_listen": "\(config.adminListen)"])
        }

        // 1. Database.
        let conninfo: String
        if let url = config.databaseURL {
            conninfo = url
        } else {
            let embedded = try EmbeddedPostgres(dataDirectory: config.dataDirectory, logger: logger)
            try embedded.start()
            state.set { $0.embedded = embedded }
            conninfo = embedded.conninfo
        }
        state.set { $0.conninfo = conninfo }
        do {
            try Migrator.migrate(conninfo: conninfo)
        } catch where error.sqlState == "42501" && Migrator.schemaExists(conninfo: conninfo) {
            // A least-privilege role (siwa_receiver / siwa_worker) may not migrate: run
            // `siwa-notify migrate` with the owner on deploy, and go on with the schema there.
            logger.notice("not allowed to migrate; using the existing schema (run `siwa-notify migrate` as the owner on deploy)")
        } catch {
            throw StartError(description: "cannot prepare the database: \(error) \(error.serverMessage)")
        }
        let pool = PostgresPool(conninfo: conninfo, size: 2, applicationName: "siwa-notify admin")
        state.set { $0.pool = pool }

        // 2. Keys and the public listener.
        var keys: KeyStore?
        if roles.contains(.receive) {
            var extra: [String: RSAPublicKey] = [:]
            if config.dev {
                extra[DevKey.kid] = try DevKey.loadOrCreate(dataDirectory: config.dataDirectory).publicKey()
            }
            let store = KeyStore(url: config.jwksURL, extraKeys: extra,
                                 minRefreshInterval: Double(config.keyRefreshInterval),
                                 persistence: Self.keyPersistence(pool: pool, url: config.jwksURL, logger: logger),
                                 logger: logger, metrics: metrics)
            do {
                try store.load()
            } catch {
                logger.warning("starting without Apple's key set; will fetch on the first notification",
                               metadata: ["jwks_url": "\(Self.redacted(config.jwksURL))"])
            }
            keys = store
            let refresher = Periodic(name: "siwa-keys", interval: options.keyCheckInterval) {
                if store.isRefreshDue { try? store.refresh() }
            }
            refresher.start()
            state.set { $0.refresher = refresher }
            let writer = OutboxWriter(conninfo: conninfo, options: options.writer, logger: logger)
            writer.start()
            state.set { $0.writer = writer }
            let receiver = Receiver(gate: RequestGate(path: config.path, maxBody: config.maxBody),
                                    verifier: NotificationVerifier(policy: VerificationPolicy(audiences: Set(config.audiences))),
                                    keys: store, writer: writer, logger: logger, metrics: metrics,
                                    commitTimeout: Double(config.commitTimeout))
            let server = try startServer(config.listen, handler: receiver, threads: config.httpThreads)
            state.set { $0.publicServer = server }
            logger.notice("receiving notifications", metadata: [
                "url": "http://\(config.listen.host):\(server.port)\(config.path)",
                "audiences": "\(config.audiences.joined(separator: ","))",
            ])
        }

        // 3. Admin listener.
        let admin = AdminHandler(pool: pool, keys: keys, writer: state.get { $0.writer }, metrics: metrics)
        let adminServer = try startServer(config.adminListen, handler: admin, threads: 1)
        state.set {
            $0.admin = admin
            $0.adminServer = adminServer
        }
        logger.info("admin listener up", metadata: ["address": "\(config.adminListen.host):\(adminServer.port)"])

        // 4. Worker.
        if roles.contains(.work) {
            var workerOptions = options.worker
            workerOptions.retry.maxAttempts = config.maxAttempts
            workerOptions.retentionDays = config.retentionDays
            workerOptions.statementTimeout = config.workerStatementTimeout
            workerOptions.lockTimeout = config.workerLockTimeout
            let worker = Worker(conninfo: conninfo, options: workerOptions, logger: logger, metrics: metrics)
            worker.start()
            state.set { $0.worker = worker }
            logger.info("worker started")
        }
    }

    /// Graceful stop: readiness off, listeners drain in-flight requests, the worker finishes its
    /// batch, the embedded database stops.
    public func shutdown() {
        let s = state.get { $0 }
        s.admin?.startDraining()
        s.publicServer?.shutdown(grace: 10)
        s.writer?.stop()
        s.refresher?.stop()
        s.worker?.stop()
        s.adminServer?.shutdown(grace: 1)
        s.pool?.close()
        s.embedded?.stop()
        state.set { $0 = ApplicationState.State() }
        logger.info("stopped")
    }

    private func startServer(_ address: ListenAddress, handler: any HTTPHandler, threads: Int) throws -> HTTPServer {
        let host = address.host == "localhost" ? "127.0.0.1" : address.host
        let config = HTTPServerConfiguration(host: host, port: address.port, threads: threads,
                                             connectionTimeout: configuration.connectionTimeout,
                                             connectionLimit: configuration.maxConnections,
                                             maxBody: configuration.maxBody)
        do {
            return try HTTPServer(configuration: config, handler: handler)
        } catch {
            throw StartError(description: "\(error)")
        }
    }

    /// Keeps the last good key set in `siwa.key_sets`.
    static func keyPersistence(pool: PostgresPool, url: String, logger: Logger) -> KeyStore.Persistence {
        KeyStore.Persistence(
            load: {
                (try? pool.withConnection(timeout: 5) { c in try c.row(KeySetStatements.load, url) }) ?? nil
            },
            save: { body in
                do {
                    _ = try pool.withConnection(timeout: 5) { c in try c.affected(KeySetStatements.save, (url, body)) }
                } catch {
                    logger.warning("cannot persist the key set", metadata: ["error": "\(error)"])
                }
            })
    }

    /// A URL without its query string (may hold credentials).
    static func redacted(_ url: String) -> String {
        String(url.split(separator: "?", maxSplits: 1).first ?? "")
    }
}

/// The mutable parts of `Application`, behind a lock.
final class ApplicationState: @unchecked Sendable {
    // @unchecked: every access goes through `lock`.
    struct State {
        var embedded: EmbeddedPostgres?
        var conninfo: String?
        var pool: PostgresPool?
        var publicServer: HTTPServer?
        var adminServer: HTTPServer?
        var admin: AdminHandler?
        var worker: Worker?
        var refresher: Periodic?
        var writer: OutboxWriter?
    }

    private let lock = NSLock()
    private var state = State()

    func get<T>(_ body: (State) -> T) -> T {
        lock.lock()
        defer { lock.unlock() }
        return body(state)
    }

    func set(_ body: (inout State) -> Void) {
        lock.lock()
        defer { lock.unlock() }
        body(&state)
    }
}
