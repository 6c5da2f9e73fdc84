import Foundation
import Logging
import SiwaApp
import SiwaCore
import SiwaCrypto
import SiwaDevTools
import SiwaFetch
import SiwaPostgres

/// One in-process siwa-notify (receiver + worker) on loopback ports picked by the kernel, with a
/// fresh database, a signing key made for the test and its JWKS served from a file.
final class TestHarness: Sendable {
    static let audience = "com.example.siwa.tests"
    /// A second app of the same team (one endpoint serves every app).
    static let otherAudience = "com.example.siwa.tests.other"
    static let sharedKey: RSAPrivateKey = try! RSAPrivateKey.generate(bits: 2048)

    /// Application options of the in-process harnesses: quick retries and polls.
    static func options(retryBaseDelay: Double) -> Application.Options {
        var options = Application.Options()
        options.worker.retry.baseDelay = .seconds(retryBaseDelay)
        options.worker.retry.maxDelay = .seconds(max(retryBaseDelay, 0.5))
        options.worker.pollInterval = .milliseconds(200)
        options.revoker.schedule.backoff.baseDelay = .seconds(retryBaseDelay)
        options.revoker.schedule.backoff.maxDelay = .seconds(max(retryBaseDelay, 0.5))
        options.revoker.pollInterval = .milliseconds(200)
        options.metricsRefreshInterval = .milliseconds(200)
        return options
    }

    /// A debug-level JSON logger whose lines land in `sink` (tests read them).
    static func logger(into sink: LogSink) -> Logger {
        Logger(label: "siwa-test") { LineLogHandler(label: $0, level: .debug, format: .json, sink: sink) }
    }

    let app: Application
    let conninfo: String
    let signer: NotificationSigner
    let jwksPath: String
    let logs: LogSink
    let baseURL: String
    let adminURL: String
    /// `SIWA_JWKS_MIN_REFRESH` in use.
    let keyRefreshInterval: Int
    /// When `start` returned (the start-up key fetch had finished).
    let startedAt: Date

    /// - Parameter jwksURL: where the keys are fetched from; default the file `jwksPath`.
    init(
        conninfo: String? = nil, roles: Application.Roles = .all, maxBody: Int = 65536,
        jwks: String? = nil, jwksURL: String? = nil, keyRefreshInterval: Int = 1, maxAttempts: Int = 12,
        retryBaseDelay: Double = 1, timeouts: Timeouts = Timeouts(), forwarding: ForwardingConfiguration? = nil,
        forwardOptions: ForwardSender.Options = ForwardSender.Options(), workerGather: Duration? = nil,
        configure: (inout ServerConfiguration, inout Application.Options) -> Void = { _, _ in }
    ) throws {
        let conninfo = try conninfo ?? TestDatabase.create()
        self.conninfo = conninfo
        signer = NotificationSigner(key: Self.sharedKey, kid: "test-key-1")
        let dir = NSTemporaryDirectory() + "siwa-jwks-\(UInt64.random(in: 0...UInt64.max))"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        jwksPath = dir + "/keys.json"
        try (jwks ?? signer.jwks).write(toFile: jwksPath, atomically: true, encoding: .utf8)
        logs = LogSink.capturing()
        var config = ServerConfiguration()
        config.databaseURL = conninfo
        config.audiences = [Self.audience, Self.otherAudience]
        config.jwksURL = jwksURL ?? "file://" + jwksPath
        config.listen = ListenAddress(host: "127.0.0.1", port: 0)
        config.adminListen = ListenAddress(host: "127.0.0.1", port: 0)
        config.maxBody = maxBody
        config.connectionTimeout = .seconds(3)
        config.httpThreads = 4
        config.keyRefreshInterval = .seconds(keyRefreshInterval)
        self.keyRefreshInterval = keyRefreshInterval
        config.maxAttempts = maxAttempts
        if let t = timeouts.commit { config.commitTimeout = .seconds(t) }
        if let t = timeouts.workerStatement { config.workerStatementTimeout = .seconds(t) }
        if let t = timeouts.workerLock { config.workerLockTimeout = .seconds(t) }
        config.forwarding = forwarding
        var options = Self.options(retryBaseDelay: retryBaseDelay)
        options.forwarding = forwardOptions
        if let workerGather { options.worker.gather = workerGather }
        configure(&config, &options)
        app = Application(
            configuration: config, roles: roles, options: options,
            logger: Self.logger(into: logs))
        try app.start()
        baseURL = "http://127.0.0.1:\(app.publicPort ?? 0)"
        adminURL = "http://127.0.0.1:\(app.adminPort ?? 0)"
        AdminAnswers.register(adminURL)
        startedAt = Date()
    }

    /// Waits until `SIWA_JWKS_MIN_REFRESH` has passed since `lastFetch` (default: the start-up
    /// fetch), so that the next unknown `kid` may start a key fetch of its own.
    func waitForKeyFetchWindow(since lastFetch: Date? = nil) {
        let until = (lastFetch ?? startedAt).addingTimeInterval(Double(keyRefreshInterval) + 0.05)
        let wait = until.timeIntervalSinceNow
        if wait > 0 { Thread.sleep(forTimeInterval: wait) }
    }

    /// The database timeouts of `ServerConfiguration` (seconds); nil keeps the configuration's
    /// default (commit 5, worker statement 30, worker lock 5).
    struct Timeouts: Sendable {
        var commit: Int?
        var workerStatement: Int?
        var workerLock: Int?
        init(commit: Int? = nil, workerStatement: Int? = nil, workerLock: Int? = nil) {
            self.commit = commit
            self.workerStatement = workerStatement
            self.workerLock = workerLock
        }
    }

    func stop() {
        app.shutdown()
        AdminAnswers.unregister(adminURL)
    }

    /// Runs `body` with a started harness and always stops it.
    static func with<T>(
        roles: Application.Roles = .all, maxBody: Int = 65536,
        _ body: (TestHarness) throws -> T
    ) throws -> T {
        let harness = try TestHarness(roles: roles, maxBody: maxBody)
        defer { harness.stop() }
        return try body(harness)
    }

    // MARK: Tokens

    func token(
        type: String = "consent-revoked", sub: String = "000739.test.0001", eventTimeMillis: Int64? = nil,
        email: String? = nil, isPrivateEmail: Bool? = nil, jti: String = NotificationSigner.newJTI(),
        audience: String = TestHarness.audience
    ) throws -> String {
        try signer.sign(
            claims: NotificationSigner.claims(
                audience: audience, type: type, sub: sub,
                eventTimeMillis: eventTimeMillis, email: email,
                isPrivateEmail: isPrivateEmail, jti: jti))
    }

    // MARK: HTTP

    struct Reply {
        var status: Int
        var headers: [String: String]
        var body: String
        /// The `error` or `status` member of a JSON body.
        var code: String? {
            guard let value = try? JSONParser.parse(body) else { return nil }
            return value["error"]?.stringValue ?? value["status"]?.stringValue
        }
    }

    func post(token: String) throws -> Reply {
        try send(body: NotificationSigner.body(token: token))
    }

    func send(
        body: String, method: String = "POST", path: String = "/apple/notifications",
        contentType: String? = "application/json;charset=UTF-8"
    ) throws -> Reply {
        var headers = [contentType.map { "Content-Type: \($0)" } ?? "Content-Type:"]
        if method != "POST" && body.isEmpty { headers = [] }
        let response = try Fetcher.perform(
            FetchRequest(
                url: baseURL + path, method: method, headers: headers,
                body: body.isEmpty && method != "POST" ? nil : Array(body.utf8),
                connectTimeout: .seconds(5), totalTimeout: .seconds(15), allowedSchemes: [.http]))
        return Reply(status: response.status, headers: response.headers, body: String(decoding: response.body, as: UTF8.self))
    }

    func admin(_ path: String) throws -> Reply {
        let response = try Fetcher.perform(FetchRequest(url: adminURL + path, allowedSchemes: [.http]))
        AdminAnswers.record(method: "GET", url: adminURL + path, status: response.status, headers: response.headers, body: response.body)
        return Reply(status: response.status, headers: response.headers, body: String(decoding: response.body, as: UTF8.self))
    }

    // MARK: Database

    /// Replaces the operator hook `siwa.on_event(event, account)` with a plpgsql function whose
    /// body (between BEGIN and END) is `body`.
    func replaceHook(_ body: String) throws {
        _ = try query(
            """
            CREATE OR REPLACE FUNCTION siwa.on_event(event siwa.events, account siwa.accounts) RETURNS void
            LANGUAGE plpgsql AS $$ BEGIN \(body) END $$
            """)
    }

    func query(_ sql: String, _ parameters: [String?] = []) throws -> PostgresResult {
        try TestDatabase.query(conninfo, sql, parameters)
    }

    func scalar(_ sql: String, _ parameters: [String?] = []) throws -> String? {
        try query(sql, parameters).scalar
    }

    /// Waits until every non-ignored event is done (or dead); false on timeout.
    func waitForWorker(timeout: Double = 10) throws -> Bool {
        try eventually(timeout: timeout) {
            try scalar("SELECT count(*) FROM siwa.events WHERE status IN ('pending', 'failed')") == "0"
        }
    }

    /// Inserts a session for `sub` created at `createdAt` (ms since epoch); returns its id.
    @discardableResult
    func addSession(sub: String, createdAtMillis: Int64) throws -> String {
        try scalar(
            """
            INSERT INTO siwa.sessions (apple_sub, created_at, expires_at)
            VALUES ($1, timestamptz 'epoch' + $2::bigint * interval '1 millisecond', now() + interval '30 days')
            RETURNING id
            """, [sub, String(createdAtMillis)]) ?? ""
    }
}
