import ArgumentParser
import Foundation
import Logging
import SiwaApp
import SiwaCore

/// Flags that override the `SIWA_*` variable of the same name.
struct ConfigurationOptions: ParsableArguments {
    @Option(name: .customLong("database-url"), help: "libpq URI or conninfo (SIWA_DATABASE_URL). Default: embedded PostgreSQL under the data dir.")
    var databaseURL: String?
    @Option(name: .customLong("data-dir"), help: "Embedded database and dev key directory (SIWA_DATA_DIR, default ./.siwa).")
    var dataDir: String?
    @Option(name: .customLong("audiences"), help: "Comma-separated accepted aud values (SIWA_AUDIENCES).")
    var audiences: String?
    @Option(name: .customLong("jwks-url"), help: "Apple's key set URL (SIWA_JWKS_URL).")
    var jwksURL: String?
    @Option(name: .customLong("listen"), help: "Public listener host:port (SIWA_LISTEN, default 0.0.0.0:8080).")
    var listen: String?
    @Option(name: .customLong("path"), help: "Endpoint path (SIWA_PATH, default /apple/notifications).")
    var path: String?
    @Option(name: .customLong("admin-listen"), help: "Admin listener host:port (SIWA_ADMIN_LISTEN, default 127.0.0.1:9090).")
    var adminListen: String?
    @Option(name: .customLong("max-body"), help: "Largest accepted body in bytes (SIWA_MAX_BODY, default 65536).")
    var maxBody: String?
    @Option(name: .customLong("log-level"), help: "trace|debug|info|notice|warning|error|critical (SIWA_LOG_LEVEL, default info).")
    var logLevel: String?
    @Option(name: .customLong("log-format"), help: "json|text (SIWA_LOG_FORMAT, default json).")
    var logFormat: String?
    @Option(name: .customLong("connection-timeout"), help: "Seconds before an idle or slow client is cut off (SIWA_CONNECTION_TIMEOUT, default 10).")
    var connectionTimeout: String?
    @Option(name: .customLong("max-connections"), help: "Concurrent connections per listener (SIWA_MAX_CONNECTIONS, default 1024).")
    var maxConnections: String?
    @Option(name: .customLong("http-threads"), help: "Listener threads (SIWA_HTTP_THREADS, default 4).")
    var httpThreads: String?
    @Option(name: .customLong("max-attempts"), help: "Worker attempts before an event is dead (SIWA_MAX_ATTEMPTS, default 12).")
    var maxAttempts: String?
    @Option(name: .customLong("retention-days"), help: "Days done and ignored events are kept (SIWA_RETENTION_DAYS, default 30, at least 2).")
    var retentionDays: String?
    @Option(name: .customLong("jwks-min-refresh"), help: "Least seconds between two key set fetches (SIWA_JWKS_MIN_REFRESH, default 10, at least 1).")
    var jwksMinRefresh: String?
    @Option(name: .customLong("commit-timeout"), help: "Most seconds from a notification's arrival to its answer (SIWA_COMMIT_TIMEOUT, default 5).")
    var commitTimeout: String?
    @Option(name: .customLong("worker-statement-timeout"), help: "Seconds a worker statement may run (SIWA_WORKER_STATEMENT_TIMEOUT, default 30).")
    var workerStatementTimeout: String?
    @Option(name: .customLong("worker-lock-timeout"), help: "Seconds the worker waits for a row lock (SIWA_WORKER_LOCK_TIMEOUT, default 5).")
    var workerLockTimeout: String?
    @Option(name: .customLong("worker-connections"), help: "Worker database connections (SIWA_WORKER_CONNECTIONS, default 2).")
    var workerConnections: String?
    @Option(name: .customLong("shutdown-timeout"), help: "Graceful-stop budget in seconds (SIWA_SHUTDOWN_TIMEOUT, default 20).")
    var shutdownTimeout: String?
    @Option(name: .customLong("team-id"), help: "Apple Developer team id, for app-initiated deletion (SIWA_TEAM_ID).")
    var teamID: String?
    @Option(name: .customLong("key-id"), help: "Sign in with Apple key id (SIWA_KEY_ID).")
    var keyID: String?
    @Option(name: .customLong("private-key-file"), help: "The .p8 private key file (SIWA_PRIVATE_KEY_FILE).")
    var privateKeyFile: String?
    @Option(name: .customLong("token-key-file"), help: "File holding the 32-byte refresh-token encryption key (SIWA_TOKEN_KEY_FILE).")
    var tokenKeyFile: String?
    @Option(name: .customLong("apple-url"), help: "Apple's base URL (SIWA_APPLE_URL, default https://appleid.apple.com).")
    var appleURL: String?
    @Option(name: .customLong("api-token-file"), help: "Bearer tokens of the API, one a line (SIWA_API_TOKEN_FILE). Default: the API is off.")
    var apiTokenFile: String?
    @Option(name: .customLong("api-concurrency"), help: "API calls in flight before 503 busy (SIWA_API_CONCURRENCY, default 16).")
    var apiConcurrency: String?
    @Option(name: .customLong("console-secure-cookie"), help: "The console cookie's Secure flag, true/false (SIWA_CONSOLE_SECURE_COOKIE).")
    var consoleSecureCookie: String?
    @Option(name: .customLong("trusted-proxies"), help: "Proxies whose X-Forwarded-For the console believes: IPs or CIDRs (SIWA_TRUSTED_PROXIES).")
    var trustedProxies: String?
    @Option(name: .customLong("revoke-retry-for"), help: "How long a revocation at Apple is retried, e.g. 7d (SIWA_REVOKE_RETRY_FOR, default 7d).")
    var revokeRetryFor: String?
    @Option(
        name: .customLong("forward-url"), help: "Forward applied events to this URL, signed (SIWA_FORWARD_URL; https://, http:// to loopback only).")
    var forwardURL: String?
    @Option(name: .customLong("forward-secret-file"), help: "File of whsec_<base64> signing secrets, one a line (SIWA_FORWARD_SECRET_FILE).")
    var forwardSecretFile: String?
    @Option(name: .customLong("forward-retry-for"), help: "How long a forward is retried before it is dead (SIWA_FORWARD_RETRY_FOR, default 3d).")
    var forwardRetryFor: String?
    @Option(name: .customLong("reconcile-every"), help: "Validate stored refresh tokens this often (SIWA_RECONCILE_EVERY, default 24h, 0 off).")
    var reconcileEvery: String?
    @Option(
        name: .customLong("apply-to"), help: "Libraries or providers events reach too, e.g. supabase,cognito (SIWA_APPLY_TO).")
    var applyTo: String?
    @Option(name: .customLong("on-account-delete"), help: "unlink (default) or delete-user (SIWA_ON_ACCOUNT_DELETE).")
    var onAccountDelete: String?
    @Option(name: .customLong("better-auth-tables"), help: "Better Auth's user,session,account tables if renamed (SIWA_BETTER_AUTH_TABLES).")
    var betterAuthTables: String?
    @Option(name: .customLong("authjs-tables"), help: "Auth.js's users,sessions,accounts tables if renamed (SIWA_AUTHJS_TABLES).")
    var authjsTables: String?
    @Option(name: .customLong("library-client-id"), help: "Client id of the tokens Better Auth / Auth.js store (SIWA_LIBRARY_CLIENT_ID).")
    var libraryClientID: String?
    @Option(name: .customLong("firebase-project-id"), help: "Firebase project whose users events reach (SIWA_FIREBASE_PROJECT_ID).")
    var firebaseProjectID: String?
    @Option(name: .customLong("firebase-credentials-file"), help: "Firebase service-account JSON (SIWA_FIREBASE_CREDENTIALS_FILE).")
    var firebaseCredentialsFile: String?
    @Option(name: .customLong("firebase-url"), help: "Identity Toolkit base URL, e.g. an emulator's (SIWA_FIREBASE_URL).")
    var firebaseURL: String?
    @Option(name: .customLong("auth0-domain"), help: "Auth0 tenant domain (SIWA_AUTH0_DOMAIN).")
    var auth0Domain: String?
    @Option(name: .customLong("auth0-client-id"), help: "Auth0 Machine-to-Machine client id (SIWA_AUTH0_CLIENT_ID).")
    var auth0ClientID: String?
    @Option(name: .customLong("auth0-client-secret-file"), help: "File holding its client secret (SIWA_AUTH0_CLIENT_SECRET_FILE).")
    var auth0ClientSecretFile: String?
    @Option(name: .customLong("auth0-url"), help: "Auth0 base URL if not https://<domain>/ (SIWA_AUTH0_URL).")
    var auth0URL: String?
    @Option(name: .customLong("clerk-secret-key-file"), help: "File holding the Clerk secret key (SIWA_CLERK_SECRET_KEY_FILE).")
    var clerkSecretKeyFile: String?
    @Option(name: .customLong("clerk-url"), help: "Clerk Backend API base URL (SIWA_CLERK_URL).")
    var clerkURL: String?
    @Option(name: .customLong("cognito-user-pool-id"), help: "Cognito user pool id, e.g. eu-west-1_EXAMPLE (SIWA_COGNITO_USER_POOL_ID).")
    var cognitoUserPoolID: String?
    @Option(name: .customLong("cognito-region"), help: "Cognito region; default the pool id's (SIWA_COGNITO_REGION).")
    var cognitoRegion: String?
    @Option(name: .customLong("cognito-url"), help: "Cognito API base URL, e.g. a local emulator's (SIWA_COGNITO_URL).")
    var cognitoURL: String?
    @Option(name: .customLong("email-senders"), help: "Email services: ses, sendgrid, postmark, mailgun (SIWA_EMAIL_SENDERS).")
    var emailSenders: String?
    @Option(name: .customLong("email-senders-all-addresses"), help: "Not only relay addresses (SIWA_EMAIL_SENDERS_ALL_ADDRESSES).")
    var emailSendersAllAddresses: String?
    @Option(name: .customLong("ses-region"), help: "AWS region of the SES account (SIWA_SES_REGION).")
    var sesRegion: String?
    @Option(name: .customLong("ses-url"), help: "SES base URL, scheme and host, e.g. a local fake's (SIWA_SES_URL).")
    var sesURL: String?
    @Option(name: .customLong("sendgrid-api-key-file"), help: "File holding the SendGrid API key (SIWA_SENDGRID_API_KEY_FILE).")
    var sendgridAPIKeyFile: String?
    @Option(name: .customLong("sendgrid-url"), help: "SendGrid base URL, e.g. https://api.eu.sendgrid.com (SIWA_SENDGRID_URL).")
    var sendgridURL: String?
    @Option(name: .customLong("postmark-server-token-file"), help: "File holding the Postmark server token (SIWA_POSTMARK_SERVER_TOKEN_FILE).")
    var postmarkServerTokenFile: String?
    @Option(name: .customLong("postmark-streams"), help: "Postmark message streams, comma-separated; default outbound (SIWA_POSTMARK_STREAMS).")
    var postmarkStreams: String?
    @Option(name: .customLong("postmark-url"), help: "Postmark base URL, scheme and host (SIWA_POSTMARK_URL).")
    var postmarkURL: String?
    @Option(name: .customLong("mailgun-api-key-file"), help: "File holding the Mailgun API key (SIWA_MAILGUN_API_KEY_FILE).")
    var mailgunAPIKeyFile: String?
    @Option(name: .customLong("mailgun-domains"), help: "Mailgun sending domains, comma-separated (SIWA_MAILGUN_DOMAINS).")
    var mailgunDomains: String?
    @Option(name: .customLong("mailgun-url"), help: "Mailgun base URL, e.g. https://api.eu.mailgun.net (SIWA_MAILGUN_URL).")
    var mailgunURL: String?

    var overrides: [String: String] {
        var o: [String: String] = [:]
        o["SIWA_DATABASE_URL"] = databaseURL
        o["SIWA_DATA_DIR"] = dataDir
        o["SIWA_AUDIENCES"] = audiences
        o["SIWA_JWKS_URL"] = jwksURL
        o["SIWA_LISTEN"] = listen
        o["SIWA_PATH"] = path
        o["SIWA_ADMIN_LISTEN"] = adminListen
        o["SIWA_MAX_BODY"] = maxBody
        o["SIWA_LOG_LEVEL"] = logLevel
        o["SIWA_LOG_FORMAT"] = logFormat
        o["SIWA_CONNECTION_TIMEOUT"] = connectionTimeout
        o["SIWA_MAX_CONNECTIONS"] = maxConnections
        o["SIWA_HTTP_THREADS"] = httpThreads
        o["SIWA_MAX_ATTEMPTS"] = maxAttempts
        o["SIWA_RETENTION_DAYS"] = retentionDays
        o["SIWA_JWKS_MIN_REFRESH"] = jwksMinRefresh
        o["SIWA_COMMIT_TIMEOUT"] = commitTimeout
        o["SIWA_WORKER_STATEMENT_TIMEOUT"] = workerStatementTimeout
        o["SIWA_WORKER_LOCK_TIMEOUT"] = workerLockTimeout
        o["SIWA_WORKER_CONNECTIONS"] = workerConnections
        o["SIWA_SHUTDOWN_TIMEOUT"] = shutdownTimeout
        o["SIWA_TEAM_ID"] = teamID
        o["SIWA_KEY_ID"] = keyID
        o["SIWA_PRIVATE_KEY_FILE"] = privateKeyFile
        o["SIWA_TOKEN_KEY_FILE"] = tokenKeyFile
        o["SIWA_APPLE_URL"] = appleURL
        o["SIWA_API_TOKEN_FILE"] = apiTokenFile
        o["SIWA_API_CONCURRENCY"] = apiConcurrency
        o["SIWA_CONSOLE_SECURE_COOKIE"] = consoleSecureCookie
        o["SIWA_TRUSTED_PROXIES"] = trustedProxies
        o["SIWA_REVOKE_RETRY_FOR"] = revokeRetryFor
        o["SIWA_FORWARD_URL"] = forwardURL
        o["SIWA_FORWARD_SECRET_FILE"] = forwardSecretFile
        o["SIWA_FORWARD_RETRY_FOR"] = forwardRetryFor
        o["SIWA_RECONCILE_EVERY"] = reconcileEvery
        o["SIWA_APPLY_TO"] = applyTo
        o["SIWA_ON_ACCOUNT_DELETE"] = onAccountDelete
        o["SIWA_BETTER_AUTH_TABLES"] = betterAuthTables
        o["SIWA_AUTHJS_TABLES"] = authjsTables
        o["SIWA_LIBRARY_CLIENT_ID"] = libraryClientID
        o["SIWA_FIREBASE_PROJECT_ID"] = firebaseProjectID
        o["SIWA_FIREBASE_CREDENTIALS_FILE"] = firebaseCredentialsFile
        o["SIWA_FIREBASE_URL"] = firebaseURL
        o["SIWA_AUTH0_DOMAIN"] = auth0Domain
        o["SIWA_AUTH0_CLIENT_ID"] = auth0ClientID
        o["SIWA_AUTH0_CLIENT_SECRET_FILE"] = auth0ClientSecretFile
        o["SIWA_AUTH0_URL"] = auth0URL
        o["SIWA_CLERK_SECRET_KEY_FILE"] = clerkSecretKeyFile
        o["SIWA_CLERK_URL"] = clerkURL
        o["SIWA_COGNITO_USER_POOL_ID"] = cognitoUserPoolID
        o["SIWA_COGNITO_REGION"] = cognitoRegion
        o["SIWA_COGNITO_URL"] = cognitoURL
        o["SIWA_EMAIL_SENDERS"] = emailSenders
        o["SIWA_EMAIL_SENDERS_ALL_ADDRESSES"] = emailSendersAllAddresses
        o["SIWA_SES_REGION"] = sesRegion
        o["SIWA_SES_URL"] = sesURL
        o["SIWA_SENDGRID_API_KEY_FILE"] = sendgridAPIKeyFile
        o["SIWA_SENDGRID_URL"] = sendgridURL
        o["SIWA_POSTMARK_SERVER_TOKEN_FILE"] = postmarkServerTokenFile
        o["SIWA_POSTMARK_STREAMS"] = postmarkStreams
        o["SIWA_POSTMARK_URL"] = postmarkURL
        o["SIWA_MAILGUN_API_KEY_FILE"] = mailgunAPIKeyFile
        o["SIWA_MAILGUN_DOMAINS"] = mailgunDomains
        o["SIWA_MAILGUN_URL"] = mailgunURL
        return o
    }

    /// Loads the configuration; a bad value stops the program with one line naming the variable.
    func load(dev: Bool = false, requireAudiences: Bool = true) throws -> ServerConfiguration {
        do {
            return try ServerConfiguration.load(
                environment: ProcessInfo.processInfo.environment,
                overrides: overrides, dev: dev, requireAudiences: requireAudiences)
        } catch {
            throw CLIError("configuration: \(error)")
        }
    }
}

struct CLIError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

enum Bootstrap {
    /// Installs the JSON (or text) log handler on stderr. Only `main` does this. Also ignores
    /// SIGPIPE process-wide (a closed stderr or socket must give EPIPE, not kill the server) and
    /// flushes queued log lines at exit, waiting at most 2 s for a stalled reader.
    static func logging(_ configuration: ServerConfiguration) -> Logger {
        signal(SIGPIPE, SIG_IGN)
        let level = Logger.Level(configValue: configuration.logLevel) ?? .info
        let format = LineLogHandler.Format(rawValue: configuration.logFormat) ?? .json
        LogWriter.standardError.noticeFormat = format
        LoggingSystem.bootstrap { label in LineLogHandler(label: label, level: level, format: format) }
        atexit { LogWriter.standardError.flush(timeout: .seconds(2)) }
        return Logger(label: "siwa-notify")
    }
}
