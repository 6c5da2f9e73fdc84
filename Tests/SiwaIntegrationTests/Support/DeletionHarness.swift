import Foundation
import Logging
import SiwaApp
import SiwaCore
import SiwaCrypto
import SiwaDevTools
import SiwaFetch
import SiwaPostgres
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// An in-process siwa-notify with in-app deletion on: a fresh database, a `FakeApple` on loopback
/// (its `/auth/keys` is also the key set the receiver and the code exchange trust), the team's
/// `.p8` and a token key written to a temporary directory, short worker retries.
final class DeletionHarness: Sendable {
    typealias S = AppleTestSetup

    let fake: FakeApple
    let app: Application
    let conninfo: String
    let logs: LogSink
    let directory: String
    let privateKeyFile: String
    let tokenKeyFile: String
    let tokenKey: TokenKey
    let baseURL: String
    let adminURL: String
    /// The API's bearer token (in `SIWA_API_TOKEN_FILE`).
    let apiToken: String
    let apiTokenFile: String

    /// - Parameters:
    ///   - roles: `.receive` alone exchanges codes without a worker (a `work` process may revoke).
    ///   - jwksURL: the key set the receiver and the code exchange trust (default: the fake's).
    init(
        roles: Application.Roles = .all, conninfo: String? = nil, maxAttempts: Int = 12,
        retryBaseDelay: Double = 0.2, apiConcurrency: Int = 16, reconcileEvery: Int? = nil, jwksURL: String? = nil,
        forwardURL: String? = nil, authLibraries: AuthLibraryConfiguration? = nil, trustedProxies: TrustedProxies = .none
    ) throws {
        fake = try S.fake()
        let conninfo = try conninfo ?? TestDatabase.create()
        self.conninfo = conninfo
        directory = NSTemporaryDirectory() + "siwa-deletion-\(UInt64.random(in: 0...UInt64.max))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        privateKeyFile = directory + "/AuthKey_\(S.keyID).p8"
        try S.teamKey.pkcs8PEM().write(toFile: privateKeyFile, atomically: true, encoding: .utf8)
        let raw = SecureRandom.bytes(32)
        tokenKey = try TokenKey(bytes: raw)
        tokenKeyFile = directory + "/token.key"
        // 64 hex characters, like `openssl rand -hex 32`.
        try (SHA256.hex(raw) + "\n").write(toFile: tokenKeyFile, atomically: true, encoding: .utf8)

        apiToken = "test_" + SHA256.hex(SecureRandom.bytes(16))
        apiTokenFile = directory + "/api-tokens"
        try ("# rotated weekly\n" + apiToken + "\n").write(toFile: apiTokenFile, atomically: true, encoding: .utf8)

        logs = LogSink.capturing()
        var config = ServerConfiguration()
        config.databaseURL = conninfo
        config.audiences = [S.clientID, S.otherClientID]
        config.jwksURL = jwksURL ?? fake.jwksURL
        config.listen = ListenAddress(host: "127.0.0.1", port: 0)
        config.adminListen = ListenAddress(host: "127.0.0.1", port: 0)
        config.connectionTimeout = .seconds(3)
        config.httpThreads = 2
        config.keyRefreshInterval = .seconds(1)
        config.maxAttempts = maxAttempts
        config.apiTokenFile = apiTokenFile
        config.apiConcurrency = apiConcurrency
        config.trustedProxies = trustedProxies
        if let reconcileEvery { config.reconcileEvery = .seconds(reconcileEvery) }
        if let authLibraries { config.authLibraries = authLibraries }
        if let forwardURL {
            let secrets = directory + "/forward-secrets"
            try ("whsec_" + Data(SecureRandom.bytes(24)).base64EncodedString() + "\n").write(toFile: secrets, atomically: true, encoding: .utf8)
            config.forwarding = ForwardingConfiguration(url: forwardURL, secretFile: secrets)
        }
        var options = TestHarness.options(retryBaseDelay: retryBaseDelay)
        options.reconciler.idleWait = .milliseconds(200)
        options.reconciler.recount = .milliseconds(200)
        options.reconciler.maximumSpacing = .seconds(2)
        config.appleAPI = AppleAPIConfiguration(
            teamID: S.teamID, keyID: S.keyID, privateKeyFile: privateKeyFile,
            tokenKeyFile: tokenKeyFile, baseURL: fake.baseURL)
        app = Application(
            configuration: config, roles: roles, options: options,
            logger: TestHarness.logger(into: logs))
        do {
            try app.start()
        } catch {
            fake.stop()
            throw error
        }
        baseURL = "http://127.0.0.1:\(app.publicPort ?? 0)"
        adminURL = "http://127.0.0.1:\(app.adminPort ?? 0)"
        AdminAnswers.register(adminURL)
    }

    func stop() {
        app.shutdown()
        AdminAnswers.unregister(adminURL)
        fake.stop()
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// The real binary's `serve` on this configuration, with its admin listener on a port of its
    /// own: the process and the URL of `POST /apple/tokens` there. `hangUpUnblocked`: spawned with
    /// SIGHUP deliverable, as a shell or systemd starts it (the test runner's threads block it,
    /// and a child inherits the mask of the thread that spawns it).
    func serve(hangUpUnblocked: Bool = false) throws -> (server: ServerProcess, tokensURL: String) {
        let adminPort = ServerProcess.freePort()
        var hangUp = sigset_t(), previous = sigset_t()
        sigemptyset(&hangUp)
        sigaddset(&hangUp, SIGHUP)
        if hangUpUnblocked { pthread_sigmask(SIG_UNBLOCK, &hangUp, &previous) }
        defer { if hangUpUnblocked { pthread_sigmask(SIG_SETMASK, &previous, nil) } }
        let server = try ServerProcess(
            ["serve"], environment: environment.merging(["SIWA_ADMIN_LISTEN": "127.0.0.1:\(adminPort)"]) { _, n in n })
        return (server, "http://127.0.0.1:\(adminPort)/apple/tokens")
    }

    /// The environment that configures the same in-app deletion for the real binary.
    var environment: [String: String] {
        [
            "SIWA_DATABASE_URL": conninfo, "SIWA_TEAM_ID": S.teamID, "SIWA_KEY_ID": S.keyID,
            "SIWA_PRIVATE_KEY_FILE": privateKeyFile, "SIWA_TOKEN_KEY_FILE": tokenKeyFile, "SIWA_APPLE_URL": fake.baseURL,
            "SIWA_AUDIENCES": "\(S.clientID),\(S.otherClientID)", "SIWA_JWKS_URL": fake.jwksURL, "SIWA_DATA_DIR": directory,
            "SIWA_LISTEN": "127.0.0.1:0", "SIWA_ADMIN_LISTEN": "127.0.0.1:0", "SIWA_LOG_LEVEL": "debug",
            "SIWA_API_TOKEN_FILE": apiTokenFile,
        ]
    }

    // MARK: HTTP

    struct Reply {
        var status: Int
        var body: String
        var json: JSONValue? { try? JSONParser.parse(Array(body.utf8)) }
        var error: String? { json?["error"]?.stringValue }
    }

    static func post(
        _ url: String, json: String, timeout: Double = 30, token: String? = nil,
        contentType: String = "application/json"
    ) throws -> Reply {
        let response = try Fetcher.perform(
            FetchRequest(
                url: url, method: "POST",
                headers: ["Content-Type: \(contentType)"] + (token.map { ["Authorization: Bearer \($0)"] } ?? []),
                body: Array(json.utf8), connectTimeout: .seconds(5), totalTimeout: .seconds(timeout),
                allowedSchemes: [.http]))
        AdminAnswers.record(method: "POST", url: url, status: response.status, headers: response.headers, body: response.body)
        return Reply(status: response.status, body: String(decoding: response.body, as: UTF8.self))
    }

    static func exchangeBody(code: String, clientID: String = S.clientID, redirectURI: String? = nil, nonce: String? = nil) -> String {
        var body: [String: JSONValue] = ["code": .string(code), "client_id": .string(clientID)]
        if let redirectURI { body["redirect_uri"] = .string(redirectURI) }
        if let nonce { body["nonce"] = .string(nonce) }
        return JSONValue.object(body).serialized()
    }

    /// `POST /apple/tokens` on the admin listener.
    func exchange(code: String, clientID: String = S.clientID, redirectURI: String? = nil, nonce: String? = nil) throws -> Reply {
        try Self.post(
            adminURL + "/apple/tokens",
            json: Self.exchangeBody(
                code: code, clientID: clientID, redirectURI: redirectURI,
                nonce: nonce), token: apiToken)
    }

    /// A call to the API with the bearer token.
    func api(_ path: String, json: String) throws -> Reply {
        try Self.post(adminURL + path, json: json, token: apiToken)
    }

    /// Waits up to `seconds` for `condition`; true when it held.
    func eventually(_ seconds: Double = 10, _ condition: () throws -> Bool) rethrows -> Bool {
        let end = Date().addingTimeInterval(seconds)
        while Date() < end {
            if try condition() { return true }
            Thread.sleep(forTimeInterval: 0.05)
        }
        return try condition()
    }

    /// The status of `sub`'s account (nil: none).
    func accountStatus(_ sub: String) throws -> String? {
        try scalar("SELECT status FROM siwa.accounts WHERE apple_sub = $1", [sub])
    }

    /// A sign-in: registers a code at the fake and exchanges it; returns the refresh token Apple issued.
    @discardableResult
    func signIn(sub: String, email: String? = nil, clientID: String = S.clientID) throws -> String {
        let code = "c." + NotificationSigner.newJTI()
        let before = Set(fake.issuedRefreshTokens.keys)
        fake.addCode(code, user: .init(sub: sub, email: email, isPrivateEmail: email.map { $0.hasSuffix("privaterelay.appleid.com") }))
        let reply = try exchange(code: code, clientID: clientID)
        guard reply.status == 200, let token = Set(fake.issuedRefreshTokens.keys).subtracting(before).first else {
            throw Failure(description: "sign-in failed: \(reply.status) \(reply.body)")
        }
        return token
    }

    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    /// An Apple notification (signed by the fake's key, which the receiver trusts) to the public listener.
    func notify(type: String, sub: String, email: String? = nil, eventTimeMillis: Int64? = nil) throws -> Reply {
        let token = try fake.signer.sign(
            claims: NotificationSigner.claims(
                audience: S.clientID, type: type, sub: sub,
                eventTimeMillis: eventTimeMillis, email: email))
        return try Self.post(baseURL + "/apple/notifications", json: NotificationSigner.body(token: token))
    }

    func admin(_ path: String) throws -> Reply {
        let response = try Fetcher.perform(FetchRequest(url: adminURL + path, allowedSchemes: [.http]))
        AdminAnswers.record(method: "GET", url: adminURL + path, status: response.status, headers: response.headers, body: response.body)
        return Reply(status: response.status, body: String(decoding: response.body, as: UTF8.self))
    }

    // MARK: Database

    func query(_ sql: String, _ parameters: [String?] = []) throws -> PostgresResult {
        try TestDatabase.query(conninfo, sql, parameters)
    }

    /// Events of `sub` holding `email`, in the column or in the stored claims.
    func eventsHolding(_ email: String, sub: String) throws -> Int {
        Int(
            try scalar("SELECT count(*) FROM siwa.events WHERE sub = $1 AND (email = $2 OR position($2 IN claims::text) > 0)", [sub, email])
                ?? "-1") ?? -1
    }

    /// Forwards of `sub` holding `email`.
    func forwardsHolding(_ email: String, sub: String) throws -> Int {
        Int(try scalar("SELECT count(*) FROM siwa.forwards WHERE sub = $1 AND email = $2", [sub, email]) ?? "-1") ?? -1
    }

    func scalar(_ sql: String, _ parameters: [String?] = []) throws -> String? {
        try query(sql, parameters).scalar
    }

    /// The status of the newest deletion request of `sub`.
    func jobStatus(_ sub: String) throws -> String? {
        try scalar("SELECT status FROM siwa.events WHERE type = 'deletion-requested' AND sub = $1 ORDER BY id DESC LIMIT 1", [sub])
    }

    /// The statuses of `sub`'s revocations at Apple, oldest first.
    func revocations(_ sub: String) throws -> [String] {
        try query("SELECT status FROM siwa.revocations WHERE apple_sub = $1 ORDER BY id", [sub]).rows.compactMap { $0.first ?? nil }
    }

    /// Replaces `siwa.on_event` with one that appends every call to `hook_log`.
    func installLoggingHook() throws {
        _ = try query("CREATE TABLE IF NOT EXISTS public.hook_log (event_id bigint, type text, sub text, outcome text, account_status text)")
        _ = try query(
            """
            CREATE OR REPLACE FUNCTION siwa.on_event(event siwa.events, account siwa.accounts) RETURNS void
            LANGUAGE plpgsql AS $$
            BEGIN
                INSERT INTO public.hook_log VALUES (event.id, event.type, event.sub, event.outcome, account.status);
            END
            $$
            """)
    }

    /// The captured log, one string.
    var logText: String { logs.lines.joined(separator: "\n") }
}

/// A child process whose stdout is read line by line as it comes (for `dev-apple`).
final class LineReadingProcess {
    final class Buffer: Sendable {
        let text = Mutex<String>("")
    }

    let process: Process
    private let output = Buffer()
    private let errorLog: String

    init(_ arguments: [String], environment: [String: String]) throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: ServerProcess.binary)
        process.arguments = arguments
        process.environment = ProcessInfo.processInfo.environment.merging(environment) { _, new in new }
        let pipe = Pipe()
        process.standardOutput = pipe
        errorLog = NSTemporaryDirectory() + "siwa-proc-\(UInt64.random(in: 0...UInt64.max)).err"
        _ = FileManager.default.createFile(atPath: errorLog, contents: nil)
        process.standardError = FileHandle(forWritingAtPath: errorLog)
        process.standardInput = FileHandle.nullDevice
        self.process = process
        try process.run()
        let reader = pipe.fileHandleForReading
        let buffer = output
        Thread.detachNewThread {
            while true {
                let data = reader.availableData
                if data.isEmpty { break }
                buffer.text.withLock { $0 += String(decoding: data, as: UTF8.self) }
            }
        }
    }

    /// Everything written to stdout so far.
    var stdout: String { output.text.withLock { $0 } }
    var stderr: String { (try? String(contentsOfFile: errorLog, encoding: .utf8)) ?? "" }

    func terminate() -> Int32 {
        if process.isRunning { process.terminate() }
        process.waitUntilExit()
        try? FileManager.default.removeItem(atPath: errorLog)
        return process.terminationStatus
    }
}
