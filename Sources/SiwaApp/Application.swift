import Foundation
import Logging
import SiwaBuildInfo
import SiwaCore
import SiwaCrypto
import SiwaFetch
import SiwaHTTP
import SiwaPostgres
import SiwaRuntime
import Synchronization

/// The process: composes the services its roles need, starts them in order and stops them in
/// reverse under one shutdown budget (`SIWA_SHUTDOWN_TIMEOUT`). `serve` runs both halves;
/// `receive` and `work` run one each.
///
/// Start order: (embedded database) → migration → key set and its refresher → outbox writer →
/// admin listener → public listener → worker, its wake-up listener and retention. Stop is the
/// reverse, after every service was told it is going (readiness off first). Whatever can refuse
/// the start (configuration, database, schema, keys and secret files, every target's check) is
/// checked before the first listener binds: a refused start never accepted a connection.
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
        public var revoker = Revoker.Options()
        /// Between checks of the key set's TTL. Default 1 s.
        public var keyCheckInterval: Duration = .seconds(1)
        /// Between two retention passes. Default 10 min.
        public var retentionInterval: Duration = .seconds(600)
        public var forwarding = ForwardSender.Options()
        /// The migration at start (lock timeout, retries).
        public var migration = Migrator.Options()
        public var reconciler = Reconciler.Options()
        public var libraryTokens = LibraryTokenSweep.Options()
        public var providers = ProviderSender.Options()
        /// Between two refreshes of the database gauges of `/metrics`. Default 5 s.
        public var metricsRefreshInterval: Duration = .seconds(5)
        /// Between two beats of this process's row in `siwa.processes`. Default 10 s.
        public var heartbeatInterval: Duration = ProcessHeartbeat.interval
        public init() {}
    }

    public struct StartError: Error, CustomStringConvertible, Sendable {
        public var description: String
    }

    /// Where the process is. Each running service is reachable only while it runs.
    enum State: Sendable {
        case idle
        case running(Running)
        case stopped
    }

    struct Running: Sendable {
        var conninfo: String
        var services: ServiceGroup
        var publicListener: ListenerService?
        var adminListener: ListenerService
    }

    public let configuration: ServerConfiguration
    public let roles: Roles
    public let metrics = Metrics()
    private let logger: Logger
    private let options: Options
    private let state = Mutex<State>(.idle)
    private let apiTokenSource = Mutex<APIHandler.Tokens?>(nil)

    public init(configuration: ServerConfiguration, roles: Roles = .all, options: Options = Options(), logger: Logger) {
        self.configuration = configuration
        self.roles = roles
        self.options = options
        self.logger = logger
    }

    /// The bound public port (while running with the receive role).
    public var publicPort: UInt16? { running?.publicListener?.port }
    /// The bound admin port (while running).
    public var adminPort: UInt16? { running?.adminListener.port }
    /// The libpq conninfo in use (while running).
    public var conninfo: String? { running?.conninfo }

    private var running: Running? {
        state.withLock { s in
            if case .running(let r) = s { return r }
            return nil
        }
    }

    /// Starts every service of `roles`; on failure stops what started and throws.
    public func start() throws {
        let group = ServiceGroup(logger: logger)
        do {
            let running = try compose(into: group)
            state.withLock { $0 = .running(running) }
        } catch {
            group.stop(budget: configuration.shutdownTimeout)
            throw error
        }
    }

    /// Graceful stop within `SIWA_SHUTDOWN_TIMEOUT`: readiness off, listeners answer what is in
    /// flight, the writer commits or answers 503, the worker finishes or abandons its batch,
    /// connections close, the embedded database stops.
    public func shutdown() {
        let previous = state.withLock { s -> State in
            let p = s
            s = .stopped
            return p
        }
        guard case .running(let r) = previous else { return }
        r.services.stop(budget: configuration.shutdownTimeout)
        logger.info("stopped")
    }

    /// The command this process runs as: `serve`, `receive` or `work` (its heartbeat's role).
    public var roleName: String { roles == .all ? "serve" : roles.contains(.receive) ? "receive" : "work" }

    private func compose(into group: ServiceGroup) throws -> Running {
        let config = configuration
        logger.notice("siwa-notify starting", metadata: ["version": "\(BuildInfo.version)", "commit": "\(BuildInfo.commit)", "role": "\(roleName)"])
        Fetcher.initialize()
        if config.dev {
            logger.warning(
                "DEVELOPMENT MODE: trusting the local dev signing key, listening on loopback only. Never use --dev in production.",
                metadata: ["listen": "\(config.listen)", "admin_listen": "\(config.adminListen)"])
        }

        // 1. Database: external, or embedded (a service: stopped last).
        let conninfo: String
        if let url = config.databaseURL {
            conninfo = url
        } else {
            let embedded = try EmbeddedPostgres(dataDirectory: config.dataDirectory, logger: logger)
            try group.start(embedded)
            conninfo = embedded.conninfo
        }
        try migrate(conninfo)
        logDurability(conninfo)
        if configuration.databaseURL != nil { warnOfOwnerLogin(conninfo) }
        // In-app deletion (Apple's REST API): the keys are checked now, a bad one stops the start.
        let appleAPI = try config.appleAPI.map { try AppleAPICredentials.load($0, audiences: config.audiences, logger: logger) }
        if let appleAPI {
            // A stored token whose key is not configured stops the start (README "In-app account deletion").
            do {
                try StoredTokenKeys.check(appleAPI.vault, conninfo: conninfo, logger: logger)
            } catch {
                throw StartError(description: "SIWA_TOKEN_KEY_FILE: \(error)")
            }
        }
        if let api = config.appleAPI {
            logger.info("in-app deletion on", metadata: ["apple_url": "\(api.baseURL)", "team_id": "\(api.teamID)", "key_id": "\(api.keyID)"])
        }
        // Every use of the admin pool runs with a statement and a lock timeout (transaction-local).
        let pool = PostgresPool(
            conninfo: conninfo, size: 2, applicationName: "siwa-notify admin", transactionBegin: AdminStatements.beginAdmin)
        try group.start(ClosureService("admin pool", start: {}, stop: { _ in pool.close() }))
        try group.start(ProcessHeartbeat(conninfo: conninfo, role: roleName, interval: options.heartbeatInterval, logger: logger))
        let probe = AdminProbe(
            conninfo: conninfo, refreshInterval: options.metricsRefreshInterval, forwarding: config.forwarding != nil,
            providers: !config.hostedProviders.targets.isEmpty || !config.emailSenders.targets.isEmpty, logger: logger)
        try group.start(probe)

        // 2. Keys and the outbox writer (receive role).
        var keys: KeyStore?
        var heldKeys: KeyStore?
        var writer: OutboxWriter?
        if roles.contains(.receive) || roles.contains(.work) {
            let store = try keyStore(pool: pool)
            heldKeys = store
            try group.start(
                PeriodicTask(name: "key refresher", interval: options.keyCheckInterval) { _ in
                    if store.isRefreshDue { try? store.refresh() }
                })
            if roles.contains(.receive) { keys = store }
        }
        if roles.contains(.receive) {
            let outbox = OutboxWriter(conninfo: conninfo, options: options.writer, logger: logger)
            try group.start(outbox)
            writer = outbox
        }

        // 3. Admin listener (readiness turns 503 as soon as shutdown begins) and the API on it.
        let exchange = appleAPI.flatMap { r in
            keys.map {
                TokenExchange(
                    apple: r, keys: $0, audiences: config.audiences, pool: pool, logger: logger,
                    keyAudiences: Self.verificationPolicy(config).keyAudiences, forwarding: config.forwarding != nil)
            }
        }
        let tokens = try apiTokens()
        apiTokenSource.withLock { $0 = tokens }
        let api = APIHandler(tokens: tokens, exchange: exchange, concurrency: config.apiConcurrency, logger: logger)
        let console = try consoleHandler(apiOn: tokens != nil, conninfo: conninfo, inAppDeletion: appleAPI != nil, group: group)
        let admin = AdminHandler(
            pool: pool, probe: probe, keys: keys, heldKeys: heldKeys, writer: writer, metrics: metrics, api: api, console: console)
        var adminConfiguration = listenerConfiguration(config.adminListen, threads: 2)
        adminConfiguration.keptHeaders = ConsoleHandler.keptHeaders
        adminConfiguration.readsQuery = true
        adminConfiguration.readsClientAddress = true
        let adminListener = ListenerService(
            name: "admin listener", configuration: adminConfiguration,
            handler: admin, prepareToStop: { admin.startDraining() })
        // The last checks that can refuse the start, before the first listener binds.
        let work = try workTargets(conninfo: conninfo, apple: appleAPI)
        try startListener(adminListener, in: group)
        logger.info("admin listener up", metadata: ["address": "\(config.adminListen.host):\(adminListener.port ?? 0)"])
        if console != nil {
            logger.notice("operator console", metadata: ["url": "http://\(config.adminListen.host):\(adminListener.port ?? 0)/console"])
        }
        // Stopped right before the admin listener (services stop in reverse): code exchanges in
        // flight (waiting on Apple) finish and are answered while the listener and the admin pool
        // are still up; new API calls get 503 busy meanwhile.
        try group.start(ClosureService("API calls", start: {}, stop: { deadline in admin.drainAPI(until: deadline) }))

        // 4. Public listener.
        var publicListener: ListenerService?
        if let keys, let writer {
            let receiver = Receiver(
                gate: RequestGate(path: config.path, maxBody: config.maxBody),
                verifier: NotificationVerifier(policy: Self.verificationPolicy(config)),
                keys: keys, writer: writer, logger: logger, metrics: metrics,
                commitTimeout: config.commitTimeout)
            let listener = ListenerService(
                name: "public listener",
                configuration: listenerConfiguration(config.listen, threads: config.httpThreads),
                handler: receiver)
            try startListener(listener, in: group)
            publicListener = listener
            logger.notice(
                "receiving notifications",
                metadata: [
                    "url": "http://\(config.listen.host):\(listener.port ?? 0)\(config.path)",
                    "audiences": "\(config.audiences.joined(separator: ","))",
                ])
        }

        // 5. Worker, its wake-ups, retention (work role).
        if let work {
            var workerOptions = options.worker
            workerOptions.retry.maxAttempts = config.maxAttempts
            workerOptions.statementTimeout = config.workerStatementTimeout
            workerOptions.lockTimeout = config.workerLockTimeout
            workerOptions.connections = config.workerConnections
            workerOptions.forwarding = config.forwarding != nil
            workerOptions.authLibraries = work.libraries
            workerOptions.providers = ProviderTargets(
                providers: work.providers.map(\.provider), policy: config.authLibraries.onAccountDelete, senders: work.senders.map(\.sender),
                allAddresses: config.emailSenders.allAddresses)
            let worker = Worker(conninfo: conninfo, options: workerOptions, logger: logger, metrics: metrics)
            try group.start(worker)
            if let appleAPI {
                var revokerOptions = options.revoker
                revokerOptions.schedule.retryFor = config.revokeRetryFor
                try group.start(Revoker(conninfo: conninfo, apple: appleAPI, options: revokerOptions, logger: logger, metrics: metrics))
            }
            try group.start(WakeUpListener(conninfo: conninfo, channel: WorkerStatements.channel, waking: worker.wakeups, logger: logger))
            try group.start(
                Retention.service(
                    conninfo: conninfo, days: config.retentionDays,
                    interval: options.retentionInterval, logger: logger))
            logger.info("worker started")
            if let delivery = work.forwarding { try startForwarding(delivery, conninfo: conninfo, in: group) }
            if !work.providers.isEmpty || !work.senders.isEmpty {
                try startProviderCalls(work.providers, senders: work.senders, conninfo: conninfo, in: group)
            }

            // Reconciliation (README "Missed notifications"): with in-app deletion, unless SIWA_RECONCILE_EVERY=0.
            if let appleAPI, config.reconcileEvery > .zero {
                try group.start(
                    Reconciler(
                        conninfo: conninfo, interval: config.reconcileEvery, apple: appleAPI,
                        options: options.reconciler, logger: logger, metrics: metrics))
                // The tokens Better Auth / Auth.js store in clear, adopted so that they are validated too.
                if let adoption = workerOptions.authLibraries.tokens {
                    try group.start(
                        LibraryTokenSweep(
                            conninfo: conninfo, targets: workerOptions.authLibraries, adoption: adoption, options: options.libraryTokens,
                            logger: logger))
                }
            }
        }
        return Running(conninfo: conninfo, services: group, publicListener: publicListener, adminListener: adminListener)
    }

    /// What the work role applies events to besides siwa's own tables.
    struct WorkTargets {
        var libraries: AuthLibraryTargets
        /// `SIWA_FORWARD_URL` with its secrets read, when forwarding is on.
        var forwarding: ForwardDelivery?
        /// `SIWA_APPLY_TO`'s hosted providers, each client checked.
        var providers: [any HostedProviderClient] = []
        /// `SIWA_EMAIL_SENDERS`' email services, each client checked.
        var senders: [any EmailSenderClient] = []
    }

    /// The work role's targets, each checked (nil without the work role); the first that fails
    /// stops the start with its one line.
    private func workTargets(conninfo: String, apple: AppleAPICredentials?) throws -> WorkTargets? {
        guard roles.contains(.work) else { return nil }
        let libraries = try authLibraries(conninfo: conninfo, apple: apple)
        var targets = WorkTargets(libraries: libraries)
        do {
            if let forwarding = configuration.forwarding {
                targets.forwarding = try ForwardDelivery.load(forwarding, timeout: options.forwarding.timeout)
            }
            targets.providers = try HostedProviderClients.make(
                configuration.hostedProviders, logger: logger, clock: options.providers.wallClock)
            try HostedProviderClients.check(targets.providers, configuration: configuration.hostedProviders)
            targets.senders = try EmailSenderClients.make(configuration.emailSenders, logger: logger)
            try EmailSenderClients.check(targets.senders, configuration: configuration.emailSenders)
        } catch {
            throw StartError(description: "\(error)")
        }
        return targets
    }

    /// `SIWA_APPLY_TO`'s targets, checked with the worker's role: a missing table, column,
    /// index or grant stops the start with one line naming it.
    /// With in-app deletion, the Apple refresh tokens the libraries store are adopted under
    /// `SIWA_LIBRARY_CLIENT_ID` (or the only audience).
    private func authLibraries(conninfo: String, apple: AppleAPICredentials?) throws -> AuthLibraryTargets {
        let config = configuration.authLibraries
        var adoption: LibraryTokenAdoption?
        if let apple, config.targets.contains(where: { $0 != .supabase }) {
            if let id = LibraryTokenRules.clientID(configured: config.clientID, audiences: configuration.audiences) {
                adoption = LibraryTokenAdoption(vault: apple.vault, clientID: id)
            } else {
                logger.warning(
                    "the refresh tokens the auth library stores are not used: SIWA_AUDIENCES names several client ids; set SIWA_LIBRARY_CLIENT_ID"
                )
            }
        }
        let targets: AuthLibraryTargets
        do {
            targets = try AuthLibraryCheck.resolve(config, conninfo: conninfo, tokens: adoption)
        } catch {
            throw StartError(description: "\(error)")
        }
        for schema in targets.schemas {
            let tokens = schema.identities.refreshToken == nil ? "none stored" : adoption.map { "used for \($0.clientID)" } ?? "not used"
            logger.info(
                "applying events to an auth library's tables",
                metadata: [
                    "target": "\(schema.kind.rawValue)", "accounts": "\(schema.identities.table)", "on_account_delete": "\(targets.policy.rawValue)",
                    "refresh_tokens": "\(tokens)",
                ])
        }
        return targets
    }

    /// Re-reads `SIWA_API_TOKEN_FILE` (SIGHUP): returns how many tokens are in use now, nil when
    /// the API is off. On error the tokens in use stay. Either way one log line says what happened.
    @discardableResult
    public func reloadAPITokens() throws -> Int? {
        guard let tokens = apiTokenSource.withLock({ $0 }) else { return nil }
        do {
            let count = try tokens.reload()
            logger.notice("API tokens reloaded", metadata: ["tokens": "\(count)"])
            return count
        } catch {
            logger.error("API tokens not reloaded; the previous ones stay", metadata: ["error": "\(error)"])
            throw error
        }
    }

    /// The operator console (README "Console"), with the API only (its tokens do not open it:
    /// operators sign in with their own): its own small pool, stopped after its pages in flight
    /// have answered.
    private func consoleHandler(apiOn: Bool, conninfo: String, inAppDeletion: Bool, group: ServiceGroup) throws -> ConsoleHandler? {
        guard apiOn else { return nil }
        let pool = PostgresPool(
            conninfo: conninfo, size: 2, applicationName: "siwa-notify console", transactionBegin: AdminStatements.beginConsole)
        let console = ConsoleHandler(
            pool: pool, secureCookie: configuration.consoleSecureCookie, trustedProxies: configuration.trustedProxies,
            inAppDeletion: inAppDeletion, forwarding: configuration.forwarding != nil,
            providers: configuration.hostedProviders.targets.map(CallTarget.provider) + configuration.emailSenders.targets.map(CallTarget.sender),
            logger: logger,
            doctor: DoctorWatch(configuration, process: roles == .all ? .serve : roles.contains(.receive) ? .receive : .work))
        try group.start(
            ClosureService(
                "console", start: {},
                stop: { deadline in
                    console.drain(until: deadline)
                    pool.close()
                }))
        // The hourly charts' rollup, counted in the background (a page never waits on it).
        try group.start(PeriodicTask(name: "console charts", interval: .seconds(5)) { _ in console.refreshCharts() })
        return console
    }

    /// The API's bearer tokens: `SIWA_API_TOKEN_FILE`; in `--dev` without one, a development token
    /// made once under the data directory and printed, like the dev signing key.
    private func apiTokens() throws -> APIHandler.Tokens? {
        if let file = configuration.apiTokenFile {
            let tokens = try APIHandler.Tokens(file: file)
            logger.info("API on", metadata: ["token_file": "\(file)"])
            return tokens
        }
        guard configuration.dev else { return nil }
        let file = try DevKey.apiToken(dataDirectory: configuration.dataDirectory)
        let tokens = try APIHandler.Tokens(file: file.path)
        logger.warning(
            "DEVELOPMENT API TOKEN (send as Authorization: Bearer <token>): \(file.token)",
            metadata: ["token_file": "\(file.path)"])
        return tokens
    }

    /// Forwarding (README "Forwarding to your app", work role, when `SIWA_FORWARD_URL` is set): the sender and its
    /// NOTIFY wake-ups. Started after the worker, so stopped before it.
    private func startForwarding(_ delivery: ForwardDelivery, conninfo: String, in group: ServiceGroup) throws {
        guard let forwarding = configuration.forwarding else { return }
        let sender = ForwardSender(
            conninfo: conninfo, delivery: delivery, retryFor: forwarding.retryFor, options: options.forwarding,
            logger: logger, metrics: metrics)
        try group.start(sender)
        try group.start(WakeUpListener(conninfo: conninfo, channel: ForwardStatements.channel, waking: sender.wakeups, logger: logger))
        logger.info(
            "forwarding on",
            metadata: ["forward_url": "\(Self.redacted(forwarding.url))", "retry_for_seconds": "\(forwarding.retryFor.components.seconds)"])
    }

    /// The hosted providers' calls (docs/hosted-providers.md, work role, with a provider in
    /// `SIWA_APPLY_TO`): the sender and its NOTIFY wake-ups. Started after the worker, so stopped before it.
    /// The email services of `SIWA_EMAIL_SENDERS` (docs/email-senders.md) are clients of the same sender.
    private func startProviderCalls(
        _ clients: [any HostedProviderClient], senders: [any EmailSenderClient], conninfo: String, in group: ServiceGroup
    ) throws {
        let sender = ProviderSender(
            conninfo: conninfo, clients: clients, senders: senders, options: options.providers, logger: logger, metrics: metrics)
        try group.start(sender)
        try group.start(WakeUpListener(conninfo: conninfo, channel: ProviderCallStatements.channel, waking: sender.wakeups, logger: logger))
        logger.info(
            "hosted providers on",
            metadata: [
                "targets": "\((clients.map(\.provider.rawValue) + senders.map(\.sender.rawValue)).joined(separator: ","))",
                "on_account_delete": "\(configuration.authLibraries.onAccountDelete.rawValue)",
            ])
    }

    /// Says what a commit answered 200 survives (README "High availability: what a failover keeps"); a warning when a failover or a
    /// crash may lose it.
    private func logDurability(_ conninfo: String) {
        do {
            let durability = try DatabaseDurability.read(conninfo: conninfo)
            let metadata: Logger.Metadata = [
                "promise": "\(durability.promise.rawValue)", "synchronous_commit": "\(durability.synchronousCommit)",
                "synchronous_standbys": "\(durability.synchronousStandbys.map(String.init) ?? "unknown")",
                "asynchronous_standbys": "\(durability.asynchronousStandbys.map(String.init) ?? "unknown")",
            ]
            if let warning = durability.warning {
                logger.warning("database durability: \(warning)", metadata: metadata)
            } else {
                logger.info("database durability: \(durability.summary)", metadata: metadata)
            }
        } catch {
            logger.warning("database durability unknown", metadata: ["error": "\(error)"])
        }
    }

    /// A process that runs as a superuser or as the schema's owner can do anything a leak of its
    /// login would: said once at start, with the fix (`doctor` reports it as HIGH).
    private func warnOfOwnerLogin(_ conninfo: String) {
        guard let identity = try? Doctor.identity(conninfo: conninfo) else { return }
        if identity.superuser || identity.ownsSchema {
            logger.warning(
                "this process connects as \(identity.superuser ? "a superuser" : "the owner of schema siwa"): give it a login of its own with only the roles it needs",
                metadata: ["role": "\(identity.login)", "fix": "docs/operations.md, \"PostgreSQL\""])
        }
    }

    private func migrate(_ conninfo: String) throws {
        let outcome: Migrator.Outcome
        do {
            outcome = try Migrator.migrate(conninfo: conninfo, options: options.migration) { [logger] retry in
                logger.warning("\(retry)", metadata: ["attempt": "\(retry.attempt)", "retry_in": "\(retry.delay)"])
            }
        } catch {
            throw StartError(description: "cannot prepare the database: \(error) \(error.serverMessage)")
        }
        if let warning = Migrator.publicSchemaWarning(conninfo: conninfo) { logger.warning("\(warning)") }
        switch outcome {
        case .upToDate:
            logger.info("schema up to date", metadata: ["version": "\(Migrator.versionMarker)"])
        case .applied:
            logger.notice("schema applied", metadata: ["version": "\(Migrator.versionMarker)"])
        case .notAllowed(let role) where Migrator.schemaExists(conninfo: conninfo):
            // A least-privilege role (siwa_receiver / siwa_worker) may not migrate: run
            // `siwa-notify migrate` with the owner on deploy, and go on with the schema there.
            // Checked before any lock: such a process never queues the receivers behind it.
            logger.notice(
                "not allowed to migrate; using the existing schema (run `siwa-notify migrate` as the owner on deploy)",
                metadata: ["role": "\(role)"])
        case .notAllowed(let role):
            throw StartError(
                description: "cannot prepare the database: role \(role) may not create schema siwa (run `siwa-notify migrate` as the owner)")
        case .newer(let recorded):
            logger.notice(
                "\(SchemaDecision.newerNote(recorded, running: Migrator.release))",
                metadata: ["schema_release": "\(recorded.version)", "release": "\(Migrator.release)"])
        case .refused(let recorded):
            throw StartError(description: SchemaDecision.refusal(recorded, running: Migrator.release))
        }
    }

    /// What a notification must satisfy: the configured audiences; in `--dev` the dev key signs
    /// for the dev audience only (a dev-signed token for a real audience is `401 wrong_audience`).
    static func verificationPolicy(_ config: ServerConfiguration) -> VerificationPolicy {
        VerificationPolicy(
            audiences: Set(config.audiences),
            keyAudiences: config.dev ? [DevKey.kid: [ServerConfiguration.devAudience]] : [:])
    }

    /// Apple's key set: fetched, else the persisted last good one; the dev key in `--dev`. Only the
    /// worker's role writes the persisted set (docs/security.md "The cached key set"): `work`
    /// fetches it to keep it fresh for the receivers, which read it; `work` alone verifies
    /// nothing, so its start never waits for the fetch (the refresher makes it at once).
    private func keyStore(pool: PostgresPool) throws -> KeyStore {
        let config = configuration
        var extra: [String: RSAPublicKey] = [:]
        if config.dev {
            extra[DevKey.kid] = try DevKey.loadOrCreate(dataDirectory: config.dataDirectory).publicKey()
        }
        let store = KeyStore(
            url: config.jwksURL, extraKeys: extra,
            minRefreshInterval: config.keyRefreshInterval,
            persistence: Self.keyPersistence(pool: pool, url: config.jwksURL, saves: roles.contains(.work), logger: logger),
            logger: logger, metrics: metrics)
        guard roles.contains(.receive) else { return store }
        do {
            try store.load()
        } catch {
            logger.warning(
                "starting without Apple's key set; will fetch on the first notification",
                metadata: ["jwks_url": "\(Self.redacted(config.jwksURL))"])
        }
        return store
    }

    private func listenerConfiguration(_ address: ListenAddress, threads: Int) -> HTTPServerConfiguration {
        HTTPServerConfiguration(
            host: address.host == "localhost" ? "127.0.0.1" : address.host, port: address.port,
            threads: threads, connectionTimeout: configuration.connectionTimeout,
            connectionLimit: configuration.maxConnections, maxBody: configuration.maxBody)
    }

    private func startListener(_ listener: ListenerService, in group: ServiceGroup) throws {
        do {
            try group.start(listener)
        } catch {
            throw StartError(description: "\(error)")
        }
    }

    /// Keeps the last good key set in `siwa.key_sets`: read by every process, written only when
    /// `saves` (the worker's role: the receiver's may not write it).
    static func keyPersistence(pool: PostgresPool, url: String, saves: Bool, logger: Logger) -> KeyStore.Persistence {
        KeyStore.Persistence(
            load: {
                (try? pool.withConnection(timeout: .seconds(5)) { c in try c.row(KeySetStatements.load, url) }) ?? nil
            },
            save: { body in
                guard saves else { return }
                do {
                    _ = try pool.withConnection(timeout: .seconds(5)) { c in try c.affected(KeySetStatements.save, (url, body)) }
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
