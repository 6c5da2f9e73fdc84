import Foundation
import Logging
import SiwaBuildInfo
import SiwaCore
import SiwaFetch
import SiwaPostgres
import SiwaRuntime
import Synchronization

/// `siwa-notify doctor`: gathers the facts of a deployment as its configuration sees them — the
/// catalogs as the configured login reads them, the credential files' modes, one fetch of
/// Apple's key set — and lets `DoctorRules` decide (docs/configuration.md, "Commands").
public enum Doctor {
    /// Examines the deployment `config` describes, for `process`.
    public static func examine(_ config: ServerConfiguration, process: DoctorProcess) -> DoctorReport {
        var facts = DoctorFacts(
            process: process, api: config.apiTokenFile != nil, conninfoOptions: nil, database: nil, databaseProblem: nil,
            expectedGrants: GrantMatrix.expected, authLibraryProblem: nil, secretFiles: secretFiles(config),
            adminListen: config.adminListen, keySet: keySet(url: config.jwksURL),
            clockSkewAllowance: .seconds(VerificationPolicy(audiences: []).clockSkewSeconds))
        if let url = config.databaseURL {
            facts.conninfoOptions = PostgresConninfo.options(url) ?? [:]
            do {
                facts.database = try database(conninfo: url)
            } catch {
                facts.databaseProblem = "\(error)"
            }
            if facts.database != nil, process != .receive {
                (facts.authLibraryProblem, facts.libraryCreators) = authLibraries(config, conninfo: url)
                facts.providerQueues = try? providerQueues(conninfo: url)
                facts.quarantinedTokens = try? quarantinedTokens(conninfo: url)
            }
        }
        if process != .receive {
            facts.hostedProviders = config.hostedProviders
            facts.providers = HostedProviderClients.examine(config.hostedProviders, logger: Logger(label: "doctor") { _ in SwiftLogNoOpLogHandler() })
            facts.emailSenders = config.emailSenders
            facts.senders = EmailSenderClients.examine(config.emailSenders, logger: Logger(label: "doctor") { _ in SwiftLogNoOpLogHandler() })
                .map { sender, result in
                    switch result {
                    case .success(let outcome): return DoctorFacts.Sender(sender, .answered(outcome))
                    case .failure(let error): return DoctorFacts.Sender(sender, .unusable(error.problem))
                    }
                }
        }
        var report = DoctorReport(process: process.rawValue, findings: DoctorRules.findings(facts) + releaseFindings(config))
        report.version = BuildInfo.version
        report.commit = BuildInfo.commit
        return report
    }

    /// Unknown `SIWA_` variables in this environment; this release against the schema's, and
    /// the releases running (their heartbeats).
    static func releaseFindings(_ config: ServerConfiguration) -> [DoctorFinding] {
        var found = UnknownVariables.finding(UnknownVariables.unknown(in: ProcessInfo.processInfo.environment)).map { [$0] } ?? []
        if let url = config.databaseURL, let releases = try? ReleaseReport.read(conninfo: url) {
            let schema = releases.schemaVersion.flatMap(SemanticVersion.init).flatMap { v in
                releases.schemaOldestSupported.flatMap(SemanticVersion.init).map { RecordedSchema(version: v, oldestSupported: $0, digest: "") }
            }
            found += ReleaseMix.findings(schema: schema, running: Migrator.release, processes: releases.running.map(\.version))
        }
        return found
    }

    /// Who the login of `conninfo` is: a superuser, the schema's owner (or inheriting it).
    static func identity(conninfo: String) throws -> (login: String, superuser: Bool, ownsSchema: Bool) {
        let c = try PostgresConnection(conninfo: conninfo, applicationName: "siwa-notify doctor")
        guard let identity = try c.row(DoctorStatements.identity) else {
            throw PostgresError(code: .unexpectedRow, serverMessage: "doctor: the login's role was not found")
        }
        return (identity.login, identity.superuser, identity.ownsSchema)
    }

    /// The database's facts, read as the login of `conninfo` (on the connection `serve` would get).
    static func database(conninfo: String) throws -> DoctorFacts.Database {
        let c = try PostgresConnection(conninfo: conninfo, applicationName: "siwa-notify doctor")
        guard let identity = try c.row(DoctorStatements.identity) else {
            throw PostgresError(code: .unexpectedRow, serverMessage: "doctor: the login's role was not found")
        }
        return DoctorFacts.Database(
            login: identity.login, superuser: identity.superuser, schemaOwner: identity.schemaOwner, ownsSchema: identity.ownsSchema,
            publicSchemaWritable: try c.row(MigrationStatements.publicWritable) ?? false,
            grants: try GrantMatrix.read(on: c), memberships: Set(try c.rows(DoctorStatements.memberships, GrantMatrix.roles)),
            durability: try? DatabaseDurability.read(on: c))
    }

    /// The stored tokens set aside at start, each as its user's hash, client id and key.
    static func quarantinedTokens(conninfo: String) throws -> [String] {
        let c = try PostgresConnection(conninfo: conninfo, applicationName: "siwa-notify doctor")
        return try c.rows(TokenKeyStatements.quarantined, 100).map {
            "sub_hash \(SubjectHash.of($0.sub)), client id \($0.clientID), key \($0.keyID), since \($0.at)"
        }
    }

    /// The hosted providers' call queues, as `status` reads them.
    static func providerQueues(conninfo: String) throws -> [DoctorFacts.ProviderQueue] {
        let c = try PostgresConnection(conninfo: conninfo, applicationName: "siwa-notify doctor")
        return try c.rows(ProviderCallStatements.backlog).map {
            DoctorFacts.ProviderQueue(
                target: $0.target.rawValue, waiting: $0.pending, dead: $0.dead, oldestWaitingAgeSeconds: $0.oldestWaitingAgeSeconds)
        }
    }

    /// `SIWA_APPLY_TO`'s start-up check, as the worker runs it (nil when it passes, or no
    /// target), and who else may create in the schemas of the tables it found.
    static func authLibraries(
        _ config: ServerConfiguration, conninfo: String
    ) -> (problem: String?, creators: [(schema: String, role: String)]) {
        do {
            let targets = try AuthLibraryCheck.resolve(config.authLibraries, conninfo: conninfo)
            let schemas = Set(targets.schemas.flatMap(\.tables).compactMap { $0.schema ?? $0.foundIn }).sorted()
            guard !schemas.isEmpty else { return (nil, []) }
            let c = try PostgresConnection(conninfo: conninfo, applicationName: "siwa-notify doctor")
            return (nil, try c.rows(DoctorStatements.schemaCreators, schemas).map { ($0.schema, $0.role) })
        } catch {
            return ("\(error)", [])
        }
    }

    /// The files that hold credentials, with their permission bits (symbolic links followed, as
    /// a mounted secret often is one).
    static func secretFiles(_ config: ServerConfiguration) -> [DoctorFacts.SecretFile] {
        var files: [(String, String)] = []
        if let path = config.apiTokenFile { files.append(("SIWA_API_TOKEN_FILE", path)) }
        if let api = config.appleAPI {
            files.append(("SIWA_PRIVATE_KEY_FILE", api.privateKeyFile))
            files += TokenVault.paths(api.tokenKeyFile).map { ("SIWA_TOKEN_KEY_FILE", $0) }
        }
        if let forwarding = config.forwarding { files.append(("SIWA_FORWARD_SECRET_FILE", forwarding.secretFile)) }
        let providers = config.hostedProviders
        if let path = providers.firebase?.credentialsFile { files.append(("SIWA_FIREBASE_CREDENTIALS_FILE", path)) }
        if let auth0 = providers.auth0 { files.append(("SIWA_AUTH0_CLIENT_SECRET_FILE", auth0.clientSecretFile)) }
        if let clerk = providers.clerk { files.append(("SIWA_CLERK_SECRET_KEY_FILE", clerk.secretKeyFile)) }
        if case .sharedFile(let path, _)? = providers.cognito?.credentials { files.append((AWSCredentialSource.fileVariable, path)) }
        let senders = config.emailSenders
        if let s = senders.sendgrid { files.append(("SIWA_SENDGRID_API_KEY_FILE", s.apiKeyFile)) }
        if let s = senders.postmark { files.append(("SIWA_POSTMARK_SERVER_TOKEN_FILE", s.serverTokenFile)) }
        if let s = senders.mailgun { files.append(("SIWA_MAILGUN_API_KEY_FILE", s.apiKeyFile)) }
        if case .sharedFile(let path, _)? = senders.ses?.credentials, !files.contains(where: { $0.1 == path }) {
            files.append((AWSCredentialSource.fileVariable, path))
        }
        return files.map { variable, path in
            var info = stat()
            guard stat(path, &info) == 0 else {
                return DoctorFacts.SecretFile(variable: variable, path: path, mode: nil, problem: String(cString: strerror(errno)))
            }
            return DoctorFacts.SecretFile(variable: variable, path: path, mode: UInt32(info.st_mode) & 0o777)
        }
    }

    /// One fetch of the key set, as the key store fetches it: whether usable keys came back, and
    /// the answer's `Date` against this machine's clock (taken halfway through the fetch).
    static func keySet(url: String) -> DoctorFacts.KeySet {
        Fetcher.initialize()
        let before = Date()
        let response: FetchResponse
        do {
            response = try Fetcher.perform(
                FetchRequest(url: url, connectTimeout: .seconds(5), totalTimeout: .seconds(10), allowedSchemes: [FetchScheme(url: url) ?? .https]))
        } catch {
            return DoctorFacts.KeySet(url: Application.redacted(url), problem: "\(error)", skew: nil)
        }
        let middle = before.addingTimeInterval(Date().timeIntervalSince(before) / 2)
        let skew = response.headers["date"].flatMap(httpDate).map { Duration.seconds($0.timeIntervalSince(middle)) }
        var problem: String?
        if response.status != 200 {
            problem = "HTTP \(response.status)"
        } else {
            do {
                _ = try KeyStore.parse(response.body, logger: Logger(label: "doctor") { _ in SwiftLogNoOpLogHandler() })
            } catch {
                problem = "\(error)"
            }
        }
        return DoctorFacts.KeySet(url: Application.redacted(url), problem: problem, skew: skew)
    }

    /// An HTTP `Date` (IMF-fixdate, RFC 9110), e.g. `Sun, 06 Nov 1994 08:49:37 GMT`.
    static func httpDate(_ text: String) -> Date? {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
        return formatter.date(from: text)
    }
}

/// The console's copy of `doctor`'s report: examined in the background, again once it is older
/// than `maxAge`, so that a page never waits on the key set's fetch or the catalogs.
public final class DoctorWatch: Sendable {
    private let examine: @Sendable () -> DoctorReport
    private let maxAge: Duration
    private let clock: any MonotonicClock
    private let background: @Sendable (@escaping @Sendable () -> Void) -> Void
    private let state = Mutex<(report: DoctorReport?, at: Deadline, running: Bool)>((nil, .never, false))

    public convenience init(_ configuration: ServerConfiguration, process: DoctorProcess, maxAge: Duration = .seconds(600)) {
        self.init(maxAge: maxAge) { Doctor.examine(configuration, process: process) }
    }

    /// `clock` decides when a report is due; `background` runs an examination (a thread of its
    /// own): a test counts the examinations on a manual clock.
    init(
        maxAge: Duration, clock: any MonotonicClock = SystemClock.shared,
        background: @escaping @Sendable (@escaping @Sendable () -> Void) -> Void = { _ = LoopThread(name: "siwa-doctor", $0) },
        examine: @escaping @Sendable () -> DoctorReport
    ) {
        self.examine = examine
        self.maxAge = maxAge
        self.clock = clock
        self.background = background
    }

    /// The latest report (nil until the first is done); a fresh one starts in the background
    /// when it is due.
    public func latest() -> DoctorReport? {
        let now = clock.now
        let (report, due) = state.withLock { s -> (DoctorReport?, Bool) in
            let due = !s.running && (s.report == nil || now >= s.at.adding(maxAge))
            if due { s.running = true }
            return (s.report, due)
        }
        if due {
            background { [self] in
                let fresh = examine()
                state.withLock { $0 = (fresh, clock.now, false) }
            }
        }
        return report
    }
}
