/// The server's configuration, from `SIWA_*` environment variables and command-line overrides.
public struct ServerConfiguration: Sendable, Equatable {
    /// `SIWA_DATABASE_URL`; default nil (use the embedded PostgreSQL).
    public var databaseURL: String?
    /// `SIWA_DATA_DIR`; default `./.siwa`.
    public var dataDirectory: String
    /// `SIWA_AUDIENCES`, comma-separated (trimmed, empties dropped); required unless dev. Default empty.
    public var audiences: [String]
    /// `SIWA_JWKS_URL`; default `https://appleid.apple.com/auth/keys`.
    public var jwksURL: String
    /// `SIWA_LISTEN`; default `0.0.0.0:8080`.
    public var listen: ListenAddress
    /// `SIWA_PATH`; default `/apple/notifications` (must start with `/`).
    public var path: String
    /// `SIWA_ADMIN_LISTEN`; default `127.0.0.1:9090`.
    public var adminListen: ListenAddress
    /// `SIWA_MAX_BODY` in bytes; default 65536 (1024...10485760).
    public var maxBody: Int
    /// `SIWA_LOG_LEVEL`; default `info` (trace|debug|info|notice|warning|error|critical).
    public var logLevel: String
    /// `SIWA_LOG_FORMAT`; default `json` (json|text).
    public var logFormat: String
    /// `SIWA_CONNECTION_TIMEOUT` in seconds; default 10 (1...300).
    public var connectionTimeout: Duration
    /// `SIWA_MAX_CONNECTIONS`; default 1024 (1...65536).
    public var maxConnections: Int
    /// `SIWA_HTTP_THREADS`; default 4 (1...256).
    public var httpThreads: Int
    /// `SIWA_MAX_ATTEMPTS`; default 12 (1...100).
    public var maxAttempts: Int
    /// `SIWA_RETENTION_DAYS`: done and ignored events older than this are pruned; default 30
    /// (2...3650: a `jti` must outlive the longest token lifetime, one day). Pending, failed and
    /// dead events are never pruned.
    public var retentionDays: Int
    /// `SIWA_JWKS_MIN_REFRESH`: minimum seconds between two key set fetches (an unknown `kid`
    /// cannot force more); default 10 (1...3600).
    public var keyRefreshInterval: Duration
    /// `SIWA_COMMIT_TIMEOUT`: most seconds a notification waits from arrival to answer; past it
    /// the answer is 503 + Retry-After (it may still commit: Apple's retry is then a duplicate).
    /// Default 5 (1...60).
    public var commitTimeout: Duration
    /// `SIWA_WORKER_STATEMENT_TIMEOUT`: seconds one worker statement (the operator hook included)
    /// may run before the event fails and is retried. Default 30 (1...3600).
    public var workerStatementTimeout: Duration
    /// `SIWA_WORKER_LOCK_TIMEOUT`: seconds the worker waits for a row lock (e.g. held by a
    /// dashboard query) before the event fails and is retried. Default 5 (1...600).
    public var workerLockTimeout: Duration
    /// `SIWA_WORKER_CONNECTIONS`: batches a `serve`/`work` process applies at once, each on a
    /// database connection of its own. Default 2 (1...32): one batch keeps one PostgreSQL backend
    /// busy (its round trips are sequential), two use both cores of a small machine.
    public var workerConnections: Int
    /// `SIWA_SHUTDOWN_TIMEOUT`: the graceful-stop budget in seconds shared by every part of the
    /// process on SIGTERM. Default 20 (1...600; keep it under systemd's `TimeoutStopSec=30`).
    public var shutdownTimeout: Duration
    /// App-initiated deletion (Apple's REST API): on when all of `SIWA_TEAM_ID`, `SIWA_KEY_ID`,
    /// `SIWA_PRIVATE_KEY_FILE` and `SIWA_TOKEN_KEY_FILE` are set; nil (off) when none is.
    public var appleAPI: AppleAPIConfiguration?
    /// Forwarding to the app (Standard Webhooks): on when `SIWA_FORWARD_URL` and
    /// `SIWA_FORWARD_SECRET_FILE` are set; nil (off) when neither is.
    public var forwarding: ForwardingConfiguration?
    /// `--dev`; default false.
    public var dev: Bool
    /// `SIWA_API_TOKEN_FILE`: the API's bearer tokens, one a line; nil (default): the API answers 404.
    public var apiTokenFile: String?
    /// `SIWA_API_CONCURRENCY`: API calls in flight before `503 busy`. Default 16.
    public var apiConcurrency: Int
    /// `SIWA_CONSOLE_SECURE_COOKIE` (`true`/`false`): the console cookie's `Secure` flag; nil
    /// (default): set when the request came over HTTPS.
    public var consoleSecureCookie: Bool? = nil
    /// `SIWA_TRUSTED_PROXIES`: proxies whose `X-Forwarded-For` the console believes for a
    /// sign-in's client address (IPs or CIDR blocks). Default none: the TCP peer.
    public var trustedProxies = TrustedProxies.none
    /// `SIWA_REVOKE_RETRY_FOR`: seconds a revocation at Apple is retried before it is dead. Default 7 days.
    public var revokeRetryFor: Duration
    /// `SIWA_RECONCILE_EVERY` in seconds: every stored refresh token is validated at Apple at
    /// most once per this interval (README "Missed notifications"; on with in-app deletion). Default 86400 (24h);
    /// 0 is off; otherwise 1s...365d.
    public var reconcileEvery: Duration = .seconds(86_400)
    /// `SIWA_APPLY_TO`, `SIWA_ON_ACCOUNT_DELETE` and the auth libraries' table names (README "Using Supabase Auth / Better Auth / Auth.js").
    /// Default: no target.
    public var authLibraries = AuthLibraryConfiguration()
    /// `SIWA_APPLY_TO`'s hosted identity providers and their variables (docs/hosted-providers.md).
    /// Default: none.
    public var hostedProviders = HostedProviderConfiguration()

    /// Every variable `load` reads, in the order of docs/configuration.md (a test checks its table
    /// and the command-line flags against this list).
    public static let variables =
        [
            "SIWA_DATABASE_URL", "SIWA_DATA_DIR", "SIWA_AUDIENCES", "SIWA_JWKS_URL", "SIWA_LISTEN", "SIWA_PATH",
            "SIWA_ADMIN_LISTEN", "SIWA_MAX_BODY", "SIWA_LOG_LEVEL", "SIWA_LOG_FORMAT", "SIWA_CONNECTION_TIMEOUT",
            "SIWA_MAX_CONNECTIONS", "SIWA_HTTP_THREADS", "SIWA_MAX_ATTEMPTS", "SIWA_RETENTION_DAYS",
            "SIWA_JWKS_MIN_REFRESH", "SIWA_COMMIT_TIMEOUT", "SIWA_WORKER_STATEMENT_TIMEOUT", "SIWA_WORKER_LOCK_TIMEOUT",
            "SIWA_WORKER_CONNECTIONS", "SIWA_SHUTDOWN_TIMEOUT", "SIWA_TEAM_ID", "SIWA_KEY_ID", "SIWA_PRIVATE_KEY_FILE", "SIWA_TOKEN_KEY_FILE",
            "SIWA_APPLE_URL", "SIWA_API_TOKEN_FILE", "SIWA_API_CONCURRENCY", "SIWA_REVOKE_RETRY_FOR",
            "SIWA_FORWARD_URL", "SIWA_FORWARD_SECRET_FILE", "SIWA_FORWARD_RETRY_FOR",
            "SIWA_RECONCILE_EVERY", "SIWA_CONSOLE_SECURE_COOKIE", "SIWA_TRUSTED_PROXIES",
        ] + AuthLibraryConfiguration.variables + HostedProviderConfiguration.variables

    /// Audience always accepted in dev mode.
    public static let devAudience = "com.example.siwa-notify.dev"

    /// Accepted values of `logLevel`.
    public static let logLevels = ["trace", "debug", "info", "notice", "warning", "error", "critical"]
    /// Accepted values of `logFormat`.
    public static let logFormats = ["json", "text"]

    /// All defaults.
    public init() {
        databaseURL = nil
        dataDirectory = "./.siwa"
        audiences = []
        jwksURL = "https://appleid.apple.com/auth/keys"
        listen = ListenAddress(host: "0.0.0.0", port: 8080)
        path = "/apple/notifications"
        adminListen = ListenAddress(host: "127.0.0.1", port: 9090)
        maxBody = 65_536
        logLevel = "info"
        logFormat = "json"
        connectionTimeout = .seconds(10)
        maxConnections = 1024
        httpThreads = 4
        maxAttempts = 12
        retentionDays = 30
        keyRefreshInterval = .seconds(10)
        commitTimeout = .seconds(5)
        workerStatementTimeout = .seconds(30)
        workerLockTimeout = .seconds(5)
        workerConnections = 2
        shutdownTimeout = .seconds(20)
        appleAPI = nil
        forwarding = nil
        dev = false
        apiTokenFile = nil
        apiConcurrency = 16
        revokeRetryFor = .seconds(7 * 86_400)
    }

    /// Loads the configuration. `environment` is the process environment; `overrides` are
    /// command-line values keyed by the same variable names (they win). Unknown `SIWA_` variables
    /// are ignored here (`UnknownVariables` names them at start); values are trimmed and an empty value counts as unset.
    ///
    /// In dev mode, audiences may be empty, `devAudience` is always appended, non-loopback
    /// listen hosts are replaced by 127.0.0.1 (the caller warns), and `SIWA_DATABASE_URL` is
    /// refused: development mode trusts a local key, so it runs on the embedded database only.
    /// Errors name the variable (a listen/admin-listen clash is reported as `SIWA_ADMIN_LISTEN`).
    /// `requireAudiences: false` is for processes that never verify tokens (`work`, operator commands).
    public static func load(
        environment: [String: String], overrides: [String: String] = [:], dev: Bool = false,
        requireAudiences: Bool = true
    ) throws(ConfigurationError) -> ServerConfiguration {
        func value(_ name: String) -> String? {
            guard let raw = overrides[name] ?? environment[name] else { return nil }
            let trimmed = trim(raw)
            return trimmed.isEmpty ? nil : trimmed
        }
        func integer(_ name: String, _ range: ClosedRange<Int>, default def: Int) throws(ConfigurationError) -> Int {
            guard let text = value(name) else { return def }
            guard let n = Int(text), range.contains(n) else {
                throw ConfigurationError(variable: name, problem: "must be an integer between \(range.lowerBound) and \(range.upperBound)")
            }
            return n
        }
        // Whole seconds, as the variables have always been written (`10`, not `10s`).
        func seconds(_ name: String, _ range: ClosedRange<Int>, default def: Duration) throws(ConfigurationError) -> Duration {
            value(name) == nil ? def : .seconds(try integer(name, range, default: 0))
        }
        func address(_ name: String, default def: ListenAddress) throws(ConfigurationError) -> ListenAddress {
            guard let text = value(name) else { return def }
            guard let parsed = ListenAddress.parse(text) else {
                throw ConfigurationError(
                    variable: name, problem: "must be host:port with an IPv4 address, a bracketed IPv6 address or localhost, and a port 0-65535")
            }
            return parsed
        }

        var config = ServerConfiguration()
        config.dev = dev
        config.databaseURL = value("SIWA_DATABASE_URL")
        if dev && config.databaseURL != nil {
            throw ConfigurationError(
                variable: "SIWA_DATABASE_URL",
                problem:
                    "must not be set with --dev: development mode trusts a local signing key and runs on the embedded database only (unset it, or drop --dev)"
            )
        }
        if let dir = value("SIWA_DATA_DIR") { config.dataDirectory = dir }

        config.audiences = (value("SIWA_AUDIENCES") ?? "")
            .split(separator: ",", omittingEmptySubsequences: true)
            .map { trim(String($0)) }
            .filter { !$0.isEmpty }
        if dev {
            if !config.audiences.contains(devAudience) { config.audiences.append(devAudience) }
        } else if config.audiences.isEmpty && requireAudiences {
            throw ConfigurationError(variable: "SIWA_AUDIENCES", problem: "is required: the comma-separated client ids (audiences) of your app")
        }

        if let url = value("SIWA_JWKS_URL") {
            if let problem = JWKSLocation.problem(with: url) {
                throw ConfigurationError(variable: "SIWA_JWKS_URL", problem: problem)
            }
            config.jwksURL = url
        }

        config.listen = try address("SIWA_LISTEN", default: config.listen)
        if let path = value("SIWA_PATH") {
            guard path.hasPrefix("/"), path.utf8.allSatisfy({ $0 > 0x20 && $0 != 0x7F && $0 != UInt8(ascii: "?") && $0 != UInt8(ascii: "#") }) else {
                throw ConfigurationError(
                    variable: "SIWA_PATH", problem: "must start with \"/\" and contain no spaces, control characters, \"?\" or \"#\"")
            }
            config.path = path
        }
        config.adminListen = try address("SIWA_ADMIN_LISTEN", default: config.adminListen)

        config.maxBody = try integer("SIWA_MAX_BODY", 1024...10_485_760, default: config.maxBody)

        if let level = value("SIWA_LOG_LEVEL") {
            let lower = level.lowercased()
            guard logLevels.contains(lower) else {
                throw ConfigurationError(variable: "SIWA_LOG_LEVEL", problem: "must be one of " + logLevels.joined(separator: ", "))
            }
            config.logLevel = lower
        }
        if let format = value("SIWA_LOG_FORMAT") {
            let lower = format.lowercased()
            guard logFormats.contains(lower) else {
                throw ConfigurationError(variable: "SIWA_LOG_FORMAT", problem: "must be one of " + logFormats.joined(separator: ", "))
            }
            config.logFormat = lower
        }

        config.connectionTimeout = try seconds("SIWA_CONNECTION_TIMEOUT", 1...300, default: config.connectionTimeout)
        config.maxConnections = try integer("SIWA_MAX_CONNECTIONS", 1...65_536, default: config.maxConnections)
        config.httpThreads = try integer("SIWA_HTTP_THREADS", 1...256, default: config.httpThreads)
        config.maxAttempts = try integer("SIWA_MAX_ATTEMPTS", 1...100, default: config.maxAttempts)
        config.retentionDays = try integer("SIWA_RETENTION_DAYS", 2...3650, default: config.retentionDays)
        config.keyRefreshInterval = try seconds("SIWA_JWKS_MIN_REFRESH", 1...3600, default: config.keyRefreshInterval)
        config.commitTimeout = try seconds("SIWA_COMMIT_TIMEOUT", 1...60, default: config.commitTimeout)
        config.workerStatementTimeout = try seconds("SIWA_WORKER_STATEMENT_TIMEOUT", 1...3600, default: config.workerStatementTimeout)
        config.workerLockTimeout = try seconds("SIWA_WORKER_LOCK_TIMEOUT", 1...600, default: config.workerLockTimeout)
        config.workerConnections = try integer("SIWA_WORKER_CONNECTIONS", 1...32, default: config.workerConnections)
        config.shutdownTimeout = try seconds("SIWA_SHUTDOWN_TIMEOUT", 1...600, default: config.shutdownTimeout)
        config.appleAPI = try AppleAPIConfiguration.load(value)
        config.apiTokenFile = value("SIWA_API_TOKEN_FILE")
        config.apiConcurrency = try integer("SIWA_API_CONCURRENCY", 1...1024, default: config.apiConcurrency)
        if let secure = value("SIWA_CONSOLE_SECURE_COOKIE") {
            switch secure.lowercased() {
            case "true", "1", "on", "yes": config.consoleSecureCookie = true
            case "false", "0", "off", "no": config.consoleSecureCookie = false
            default: throw ConfigurationError(variable: "SIWA_CONSOLE_SECURE_COOKIE", problem: "must be true or false")
            }
        }
        config.trustedProxies = try TrustedProxies.parse(value("SIWA_TRUSTED_PROXIES") ?? "")
        config.revokeRetryFor = try Self.duration(
            "SIWA_REVOKE_RETRY_FOR", value("SIWA_REVOKE_RETRY_FOR"), range: 60...(365 * 86_400), default: config.revokeRetryFor)
        config.forwarding = try ForwardingConfiguration.load(value)
        config.reconcileEvery = try Self.duration(
            "SIWA_RECONCILE_EVERY", value("SIWA_RECONCILE_EVERY"), range: 1...(365 * 86_400), allowZero: true,
            default: config.reconcileEvery)
        config.authLibraries = try AuthLibraryConfiguration.load(value)
        let applyTo = (value("SIWA_APPLY_TO") ?? "").split(separator: ",").map { trim(String($0)).lowercased() }
        let awsEnvironment = (HostedProviderConfiguration.awsVariables + ["HOME"]).compactMap { name in
            value(name).map { (name, $0) }
        }
        config.hostedProviders = try HostedProviderConfiguration.load(
            applyTo: applyTo, value, environment: Dictionary(awsEnvironment, uniquingKeysWith: { a, _ in a }))
        if let id = config.authLibraries.clientID, !config.audiences.isEmpty, !config.audiences.contains(id) {
            throw ConfigurationError(variable: "SIWA_LIBRARY_CLIENT_ID", problem: "must be one of SIWA_AUDIENCES")
        }

        if dev {
            if !config.listen.isLoopback { config.listen.host = "127.0.0.1" }
            if !config.adminListen.isLoopback { config.adminListen.host = "127.0.0.1" }
        }

        if conflicts(config.listen, config.adminListen) {
            throw ConfigurationError(variable: "SIWA_ADMIN_LISTEN", problem: "must differ from SIWA_LISTEN (\(config.listen))")
        }
        return config
    }

    /// Two listeners clash when they use the same non-zero port on the same host, or when either is a wildcard address.
    static func conflicts(_ a: ListenAddress, _ b: ListenAddress) -> Bool {
        guard a.port == b.port, a.port != 0 else { return false }
        return a.host == b.host || a.isUnspecified || b.isUnspecified
    }

    static func trim(_ s: String) -> String {
        let isSpace: (Character) -> Bool = { $0 == " " || $0 == "\t" || $0 == "\n" || $0 == "\r" }
        guard let first = s.firstIndex(where: { !isSpace($0) }) else { return "" }
        let last = s.lastIndex(where: { !isSpace($0) })!
        return String(s[first...last])
    }
}
