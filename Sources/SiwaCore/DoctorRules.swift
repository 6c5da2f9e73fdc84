/// The process a configuration is for: what its database login needs.
public enum DoctorProcess: String, Sendable, CaseIterable {
    case serve, receive, work

    /// The siwa roles its login needs (docs/security.md, "Roles"): the receiver's and the worker's for their
    /// halves, and `siwa_api` and `siwa_console` for the API and the console (on with `SIWA_API_TOKEN_FILE`).
    public func neededRoles(api: Bool) -> Set<String> {
        var roles: Set<String>
        switch self {
        case .serve: roles = ["siwa_receiver", "siwa_worker"]
        case .receive: roles = ["siwa_receiver"]
        case .work: roles = ["siwa_worker"]
        }
        if api { roles.formUnion(["siwa_api", "siwa_console"]) }
        return roles
    }
}

/// What `doctor` gathered (by reading the catalogs as the configured login, the files' modes, one
/// fetch of the key set); `DoctorRules.findings` decides.
public struct DoctorFacts: Sendable {
    public struct Database: Sendable {
        /// The login (`current_user`).
        public var login: String
        public var superuser: Bool
        /// The owner of schema `siwa`; nil when the schema does not exist.
        public var schemaOwner: String?
        /// The login is that owner or inherits its privileges.
        public var ownsSchema: Bool
        /// CREATE on schema `public` is granted to PUBLIC.
        public var publicSchemaWritable: Bool
        /// Privileges read from the catalogs, as `GrantMatrix` spells them (`role PRIVILEGE object`).
        public var grants: Set<String>
        /// The siwa roles the login is a member of (directly or through another role).
        public var memberships: Set<String>
        /// nil when it could not be read.
        public var durability: DatabaseDurability?

        public init(
            login: String, superuser: Bool, schemaOwner: String?, ownsSchema: Bool, publicSchemaWritable: Bool,
            grants: Set<String>, memberships: Set<String>, durability: DatabaseDurability?
        ) {
            self.login = login
            self.superuser = superuser
            self.schemaOwner = schemaOwner
            self.ownsSchema = ownsSchema
            self.publicSchemaWritable = publicSchemaWritable
            self.grants = grants
            self.memberships = memberships
            self.durability = durability
        }
    }

    /// A file holding a credential (a `*_FILE` variable).
    public struct SecretFile: Sendable {
        public var variable: String
        public var path: String
        /// Permission bits (`st_mode & 0o777`); nil when the file cannot be examined.
        public var mode: UInt32?
        /// Why it cannot be examined (`mode` nil).
        public var problem: String?

        public init(variable: String, path: String, mode: UInt32?, problem: String? = nil) {
            self.variable = variable
            self.path = path
            self.mode = mode
            self.problem = problem
        }
    }

    /// One fetch of `SIWA_JWKS_URL`.
    public struct KeySet: Sendable {
        public var url: String
        /// Why no usable key set came back; nil when it did.
        public var problem: String?
        /// The answer's `Date` minus this machine's clock; nil without a `Date` header.
        public var skew: Duration?

        public init(url: String, problem: String?, skew: Duration?) {
            self.url = url
            self.problem = problem
            self.skew = skew
        }
    }

    /// One email service of `SIWA_EMAIL_SENDERS`, put through the start-up check the work role runs.
    public struct Sender: Sendable {
        public var sender: EmailSender
        public var check: Provider.Check

        public init(_ sender: EmailSender, _ check: Provider.Check) {
            self.sender = sender
            self.check = check
        }
    }

    /// One hosted provider of `SIWA_APPLY_TO`, put through the start-up check the work role runs.
    public struct Provider: Sendable {
        public enum Check: Sendable {
            /// Its client could not be made (a credential file unreadable, a value refused).
            case unusable(ConfigurationError)
            /// The provider's answer to the start-up check.
            case answered(ProviderOutcome)
        }

        public var provider: HostedProvider
        public var check: Check
        /// How its users are signed out, where the provider's plan decides it (Auth0).
        public var signOut: String?

        public init(_ provider: HostedProvider, _ check: Check, signOut: String? = nil) {
            self.provider = provider
            self.check = check
            self.signOut = signOut
        }
    }

    /// One provider's call queue (`siwa.provider_call_backlog`).
    public struct ProviderQueue: Sendable {
        public var target: String
        public var waiting: Int
        public var dead: Int
        public var oldestWaitingAgeSeconds: Double

        public init(target: String, waiting: Int, dead: Int, oldestWaitingAgeSeconds: Double) {
            self.target = target
            self.waiting = waiting
            self.dead = dead
            self.oldestWaitingAgeSeconds = oldestWaitingAgeSeconds
        }
    }

    public var process: DoctorProcess
    /// `SIWA_API_TOKEN_FILE` is set: the API and the console are on.
    public var api: Bool
    /// nil: no `SIWA_DATABASE_URL` (the embedded database).
    public var conninfoOptions: [String: String]?
    /// Read as the login; nil when not read (embedded, or `databaseProblem`).
    public var database: Database?
    /// Why the database could not be read.
    public var databaseProblem: String?
    /// The grants matrix of docs/security.md (`GrantMatrix.expected`).
    public var expectedGrants: Set<String>
    /// `SIWA_APPLY_TO`'s start-up check: what it found missing (nil: none, or no target).
    public var authLibraryProblem: String?
    public var secretFiles: [SecretFile]
    public var adminListen: ListenAddress
    public var keySet: KeySet?
    /// The verifier's tolerance for `iat`/`exp` (`VerificationPolicy.clockSkewSeconds`).
    public var clockSkewAllowance: Duration
    /// `SIWA_APPLY_TO`'s hosted providers (the variables each finding names).
    public var hostedProviders = HostedProviderConfiguration()
    /// Each of them checked (the work role's processes only).
    public var providers: [Provider] = []
    /// `SIWA_EMAIL_SENDERS`' email services (the variables each finding names).
    public var emailSenders = EmailSenderConfiguration()
    /// Each of them checked (the work role's processes only).
    public var senders: [Sender] = []
    /// The providers' call queues, read as the worker's role (nil: not read).
    public var providerQueues: [ProviderQueue]? = nil
    /// Stored refresh tokens set aside at start (they do not open with their key), each named by
    /// its user's hash, client id and key (nil: not read).
    public var quarantinedTokens: [String]? = nil
    /// Who, besides superusers and siwa's roles, may create objects in a schema that holds a
    /// configured auth library's tables (`PUBLIC` for every login).
    public var libraryCreators: [(schema: String, role: String)] = []

    public init(
        process: DoctorProcess, api: Bool, conninfoOptions: [String: String]?, database: Database?, databaseProblem: String?,
        expectedGrants: Set<String>, authLibraryProblem: String?, secretFiles: [SecretFile], adminListen: ListenAddress,
        keySet: KeySet?, clockSkewAllowance: Duration = .seconds(60)
    ) {
        self.process = process
        self.api = api
        self.conninfoOptions = conninfoOptions
        self.database = database
        self.databaseProblem = databaseProblem
        self.expectedGrants = expectedGrants
        self.authLibraryProblem = authLibraryProblem
        self.secretFiles = secretFiles
        self.adminListen = adminListen
        self.keySet = keySet
        self.clockSkewAllowance = clockSkewAllowance
    }
}

/// `doctor`'s decisions: each finding from the facts, with its fix.
public enum DoctorRules {
    /// A role that may create in a library's schema can plant an operator there (for the
    /// library's `varchar` columns none of pg_catalog's fits exactly). siwa-notify's sessions pin
    /// their search_path, so it runs none of them; the app's own connections may, with the
    /// app's rights, so each such login is worth knowing, and PUBLIC is worth fixing.
    static func libraryCreators(_ creators: [(schema: String, role: String)]) -> [DoctorFinding] {
        var out: [DoctorFinding] = []
        let publicSchemas = creators.filter { $0.role == "PUBLIC" }.map(\.schema)
        if !publicSchemas.isEmpty {
            out.append(
                DoctorFinding(
                    "library-schema-writable", .medium,
                    "every login may create objects in schema \(publicSchemas.joined(separator: ", ")), which holds an auth library's tables: one may plant an operator the app's own statements run",
                    fix: publicSchemas.map { "REVOKE CREATE ON SCHEMA \($0) FROM PUBLIC;" }.joined(separator: " ")))
        }
        let named = creators.filter { $0.role != "PUBLIC" }
        if !named.isEmpty {
            let list = named.map { "\($0.role) on \($0.schema)" }.joined(separator: ", ")
            out.append(
                DoctorFinding(
                    "library-schema-creators", .info,
                    "these roles may create objects where an auth library keeps its tables (\(list)): siwa-notify's sessions pin their search_path and run nothing they plant; the app's own connections do not",
                    fix: "keep these logins as guarded as the owner's, or revoke CREATE where the app's migrations no longer need it"))
        }
        return out
    }

    public static func findings(_ facts: DoctorFacts) -> [DoctorFinding] {
        var out: [DoctorFinding] = []
        if facts.conninfoOptions == nil {
            out.append(
                DoctorFinding(
                    "database-embedded", .medium,
                    "no SIWA_DATABASE_URL: the embedded PostgreSQL under SIWA_DATA_DIR runs as its superuser, without a standby (for trying siwa-notify)",
                    fix: "set SIWA_DATABASE_URL to a PostgreSQL of your own, with a login per process (docs/operations.md, \"PostgreSQL\")"))
        }
        if let options = facts.conninfoOptions { out += transport(options) }
        if let problem = facts.databaseProblem {
            out.append(
                DoctorFinding(
                    "database-unreachable", .high, "the database could not be read: \(problem)",
                    fix: "check SIWA_DATABASE_URL (host, credentials, pg_hba.conf) and that PostgreSQL is up"))
        }
        if let db = facts.database { out += database(db, facts) }
        out += libraryCreators(facts.libraryCreators)
        if let problem = facts.authLibraryProblem {
            out.append(
                DoctorFinding(
                    "auth-library", .high, problem,
                    fix: "give the worker's role the grants docs/auth-libraries.md lists (\"Privileges on the libraries' tables\")"))
        }
        out += facts.secretFiles.compactMap(secretFile)
        if !facts.adminListen.isLoopback {
            out.append(
                DoctorFinding(
                    "admin-listener-exposed", .medium,
                    "the admin listener (SIWA_ADMIN_LISTEN=\(facts.adminListen)) is not on loopback: /metrics, the API and the console answer beyond this machine",
                    fix:
                        "set SIWA_ADMIN_LISTEN=127.0.0.1:9090, or keep its port unreachable from outside (a firewall, a cluster-internal address)"
                ))
        }
        if let keySet = facts.keySet { out += self.keySet(keySet, allowance: facts.clockSkewAllowance) }
        out += facts.providers.map { provider($0, facts.hostedProviders) }
        out += facts.senders.map { sender($0, facts.emailSenders) }
        out += (facts.providerQueues ?? []).flatMap(providerQueue)
        if let tokens = facts.quarantinedTokens, !tokens.isEmpty {
            out.append(
                DoctorFinding(
                    "stored-tokens-quarantined", .medium,
                    "\(tokens.count) stored refresh token\(tokens.count == 1 ? "" : "s") did not open with their key and were set aside "
                        + "(those users' tokens cannot be revoked at Apple): \(tokens.prefix(10).joined(separator: "; "))",
                    fix:
                        "each user's next sign-in replaces the token; ask them to sign in again, or remove the Apple grant "
                        + "(Settings > Apple ID > Sign in with Apple); review who could write siwa.apple_tokens"))
        }
        return out
    }

    // MARK: Hosted providers

    /// A call waiting longer than this is worth a look: a provider that answers takes seconds.
    public static let providerWaitingWarning: Double = 900

    /// The start-up check's verdict on one provider: a client that could not be made, a provider
    /// that does not answer, or one that refuses, each naming the variable; INFO when it passes.
    static func provider(_ p: DoctorFacts.Provider, _ configuration: HostedProviderConfiguration) -> DoctorFinding {
        let name = p.provider.rawValue
        let docs = "docs/hosted-providers.md, \"\(name)\""
        let stops = "(the work role does not start with SIWA_APPLY_TO=\(name))"
        switch p.check {
        case .unusable(let problem):
            return DoctorFinding(
                "provider-credential", .high, "\(problem) \(stops)", fix: "fix \(problem.variable) (\(docs))")
        case .answered(let outcome):
            guard let problem = configuration.startProblem(p.provider, outcome) else {
                let signOut = p.signOut.map { "; sign-out: \($0)" } ?? ""
                return DoctorFinding(
                    "provider-check", .info, "\(name) answers and accepts the credential\(signOut)", fix: "nothing to do")
            }
            if case .retryLater = outcome {
                return DoctorFinding(
                    "provider-unreachable", .high, "\(problem) \(stops)",
                    fix: "allow outbound HTTPS to \(name)'s API (a proxy, DNS, the firewall), or fix \(problem.variable)")
            }
            return DoctorFinding("provider-refused", .high, "\(problem) \(stops)", fix: "fix \(problem.variable) (\(docs))")
        }
    }

    /// The start-up check's verdict on one email service, as `provider`'s on a provider.
    static func sender(_ s: DoctorFacts.Sender, _ configuration: EmailSenderConfiguration) -> DoctorFinding {
        let name = s.sender.rawValue
        let docs = "docs/email-senders.md"
        let stops = "(the work role does not start with SIWA_EMAIL_SENDERS=\(name))"
        switch s.check {
        case .unusable(let problem):
            return DoctorFinding("sender-credential", .high, "\(problem) \(stops)", fix: "fix \(problem.variable) (\(docs))")
        case .answered(let outcome):
            guard let problem = configuration.startProblem(s.sender, outcome) else {
                return DoctorFinding("sender-check", .info, "\(name) answers and accepts the credential", fix: "nothing to do")
            }
            switch outcome {
            case .retryLater:
                return DoctorFinding(
                    "sender-unreachable", .high, "\(problem) \(stops)",
                    fix: "allow outbound HTTPS to \(name)'s API (a proxy, DNS, the firewall), or fix \(problem.variable)")
            default:
                return DoctorFinding("sender-refused", .high, "\(problem) \(stops)", fix: "fix \(problem.variable) (\(docs))")
            }
        }
    }

    /// Dead calls (sessions at the provider that were not ended: HIGH) and a call waiting for long.
    static func providerQueue(_ q: DoctorFacts.ProviderQueue) -> [DoctorFinding] {
        var out: [DoctorFinding] = []
        if q.dead > 0 {
            out.append(
                DoctorFinding(
                    "provider-calls-dead", .high,
                    "\(q.dead) call\(q.dead == 1 ? "" : "s") to \(q.target) gave up: "
                        + (EmailSender(rawValue: q.target) == nil
                            ? "those users' sessions there were not ended" : "those addresses' suppressions there were not kept in step"),
                    fix:
                        "read each one's last error (the console's Failures, siwa.dead_provider_calls), fix the cause, then `siwa-notify replay --provider-calls --type \(q.target)`"
                ))
        }
        if q.waiting > 0, q.oldestWaitingAgeSeconds > providerWaitingWarning {
            out.append(
                DoctorFinding(
                    "provider-calls-waiting", .medium,
                    "the oldest of \(q.waiting) call\(q.waiting == 1 ? "" : "s") waiting for \(q.target) was queued \(Int(q.oldestWaitingAgeSeconds / 60)) min ago",
                    fix:
                        "read its last error (`siwa-notify user-report`, the console's user page); check that \(q.target) answers and that a worker runs with it in SIWA_APPLY_TO"
                ))
        }
        return out
    }

    // MARK: The database

    static func database(_ db: DoctorFacts.Database, _ facts: DoctorFacts) -> [DoctorFinding] {
        var out: [DoctorFinding] = []
        let needed = facts.process.neededRoles(api: facts.api).sorted()
        let login =
            "point SIWA_DATABASE_URL at a login that is a member of \(needed.joined(separator: ", ")) and nothing else (`… LOGIN IN ROLE \(needed.joined(separator: ", "))`, docs/operations.md)"
        if db.superuser {
            out.append(
                DoctorFinding(
                    "login-superuser", .high,
                    "`\(facts.process.rawValue)` connects as \(db.login), a superuser: every statement it runs may do anything in the cluster",
                    fix: login))
        } else if db.ownsSchema {
            out.append(
                DoctorFinding(
                    "login-owner", .high,
                    "`\(facts.process.rawValue)` connects as \(db.login), the owner of schema siwa\(db.schemaOwner.map { $0 == db.login ? "" : " (\($0))" } ?? ""): its credentials may rewrite any user's state and skip the checks the roles enforce",
                    fix: login + " (keep the owner for `siwa-notify migrate`)"))
        }
        if db.publicSchemaWritable {
            out.append(
                DoctorFinding(
                    "public-schema-writable", .high,
                    "every login may create objects in schema public (CREATE granted to PUBLIC): one may plant a function that runs with another role's privileges",
                    fix: "REVOKE CREATE ON SCHEMA public FROM PUBLIC;"))
        }
        guard db.schemaOwner != nil else {
            out.append(
                DoctorFinding(
                    "schema-missing", .high, "schema siwa does not exist in this database",
                    fix: "run `siwa-notify migrate` with the owner's SIWA_DATABASE_URL"))
            return out
        }
        let extra = db.grants.subtracting(facts.expectedGrants).sorted()
        let missing = facts.expectedGrants.subtracting(db.grants).sorted()
        if !extra.isEmpty {
            out.append(
                DoctorFinding(
                    "grants-extra", .high, "privileges in schema siwa beyond the grants table of docs/security.md: \(extra.joined(separator: "; "))",
                    fix: extra.compactMap { GrantText($0)?.revoke }.joined(separator: "\n")))
        }
        if !missing.isEmpty {
            out.append(
                DoctorFinding(
                    "grants-missing", .medium,
                    "privileges of the grants table of docs/security.md missing in schema siwa: \(missing.joined(separator: "; "))",
                    fix: "run `siwa-notify migrate --force` as the owner, or:\n"
                        + missing.compactMap { GrantText($0)?.grant }.joined(separator: "\n")))
        }
        if !db.superuser && !db.ownsSchema {
            let needs = facts.process.neededRoles(api: facts.api)
            let beyond = db.memberships.subtracting(needs).sorted()
            let lacking = needs.subtracting(db.memberships).sorted()
            if !beyond.isEmpty {
                out.append(
                    DoctorFinding(
                        "login-roles-extra", .medium,
                        "\(db.login) is a member of \(beyond.joined(separator: ", ")), which `\(facts.process.rawValue)` does not need",
                        fix: beyond.map { "REVOKE \($0) FROM \(db.login);" }.joined(separator: "\n")))
            }
            if !lacking.isEmpty {
                out.append(
                    DoctorFinding(
                        "login-roles-missing", .medium,
                        "\(db.login) is not a member of \(lacking.joined(separator: ", ")), which `\(facts.process.rawValue)` needs\(facts.api ? " (siwa_api: the API; siwa_console: the console)" : "")",
                        fix: lacking.map { "GRANT \($0) TO \(db.login);" }.joined(separator: "\n")))
            }
        }
        if let d = db.durability { out += durability(d) }
        return out
    }

    static func durability(_ d: DatabaseDurability) -> [DoctorFinding] {
        let fix =
            "add a synchronous standby: synchronous_standby_names = 'ANY 1 (…)' with synchronous_commit = on (docs/operations.md, \"High availability\")"
        switch d.promise {
        case .standby: return []
        case .notFlushed, .waitingForStandby:
            return [
                DoctorFinding(
                    "commit-durability", .high, d.summary, fix: d.promise == .notFlushed ? "ALTER SYSTEM SET synchronous_commit = on;" : fix)
            ]
        case .asynchronous: return [DoctorFinding("commit-durability", .medium, d.summary, fix: fix)]
        case .thisServer: return [DoctorFinding("commit-durability", .info, d.summary, fix: fix)]
        case .unknown: return [DoctorFinding("commit-durability", .info, d.summary, fix: "GRANT pg_read_all_stats TO \(d.role);")]
        }
    }

    // MARK: TLS to the database

    /// libpq's `sslmode`s, weakest first.
    static let sslModes = ["disable", "allow", "prefer", "require", "verify-ca", "verify-full"]

    /// `sslmode` below `verify-full` to a host that is not this machine: a finding per connection.
    static func transport(_ options: [String: String]) -> [DoctorFinding] {
        let mode = options["sslmode"] ?? "prefer"
        let rank = sslModes.firstIndex(of: mode) ?? 0
        guard rank < sslModes.count - 1 else { return [] }
        let remote = remoteHosts(options)
        guard !remote.isEmpty else { return [] }
        let hosts = remote.joined(separator: ", ")
        let fix = "add sslmode=verify-full (and sslrootcert=<the server's CA>, or sslrootcert=system) to SIWA_DATABASE_URL"
        if rank < sslModes.firstIndex(of: "require")! {
            return [
                DoctorFinding(
                    "database-tls", .high,
                    "sslmode=\(mode) to \(hosts): the connection may be unencrypted, credentials and users' data readable on the network", fix: fix)
            ]
        }
        return [
            DoctorFinding(
                "database-tls", .medium,
                "sslmode=\(mode) to \(hosts): the server's certificate is not checked against its name, a machine in the path may pose as it",
                fix: fix)
        ]
    }

    /// The hosts of a conninfo that are not this machine: `hostaddr` where given (libpq connects
    /// there), else `host`; a unix socket directory (`/…`, `@…`), an empty entry (the default
    /// socket) and loopback addresses are local.
    static func remoteHosts(_ options: [String: String]) -> [String] {
        let hosts = (options["host"] ?? "").split(separator: ",", omittingEmptySubsequences: false).map(String.init)
        let addresses = (options["hostaddr"] ?? "").split(separator: ",", omittingEmptySubsequences: false).map(String.init)
        var remote: [String] = []
        for index in 0..<max(hosts.count, addresses.count) {
            let address = index < addresses.count ? addresses[index] : ""
            let host = index < hosts.count ? hosts[index] : ""
            let target = address.isEmpty ? host : address
            if target.isEmpty || target.hasPrefix("/") || target.hasPrefix("@") || IPAddress.isLoopbackHost(target) { continue }
            remote.append(host.isEmpty ? target : host)
        }
        return remote
    }

    // MARK: Files

    static func secretFile(_ file: DoctorFacts.SecretFile) -> DoctorFinding? {
        let name = "\(file.variable) (\(file.path))"
        guard let mode = file.mode else {
            return DoctorFinding(
                "secret-file-unchecked", .info, "\(name) could not be examined: \(file.problem ?? "unknown")",
                fix: "run doctor as the user siwa-notify runs as")
        }
        let fix = "chmod 0400 \(file.path) (or 0440 when its group is siwa-notify's own, as a container's fsGroup)"
        var may: [String] = []
        if mode & 0o004 != 0 { may.append("every user of this machine may read it") }
        if mode & 0o002 != 0 { may.append("every user of this machine may write it") }
        if mode & 0o040 != 0 { may.append("its group may read it") }
        if mode & 0o020 != 0 { may.append("its group may write it") }
        guard !may.isEmpty else { return nil }
        // A group that may only read is how a container shares a mounted secret with its user.
        let severity: DoctorFinding.Severity = mode & 0o026 != 0 ? .high : .low
        return DoctorFinding("secret-file-permissions", severity, "\(name) is mode \(octal(mode)): \(may.joined(separator: ", "))", fix: fix)
    }

    static func octal(_ mode: UInt32) -> String {
        let digits = String(mode & 0o777, radix: 8)
        return String(repeating: "0", count: max(0, 4 - digits.count)) + digits
    }

    // MARK: Apple's key set and the clock

    /// Past this the clock is off for a machine with time synchronisation (the `Date` header has
    /// whole seconds, and the fetch's own time adds to it).
    static let skewWarning = Duration.seconds(5)

    static func keySet(_ k: DoctorFacts.KeySet, allowance: Duration) -> [DoctorFinding] {
        var out: [DoctorFinding] = []
        if let problem = k.problem {
            out.append(
                DoctorFinding(
                    "jwks-unreachable", .high,
                    "Apple's key set (\(k.url)) could not be fetched: \(problem); a notification signed with a key not stored yet is refused",
                    fix: "allow outbound HTTPS to appleid.apple.com (a proxy, DNS, the firewall), or fix SIWA_JWKS_URL"))
        }
        guard let skew = k.skew else {
            if k.problem == nil {
                out.append(
                    DoctorFinding(
                        "clock-skew-unknown", .info, "the key set's answer has no Date header: the clock was not compared",
                        fix: "keep this machine's clock synchronised (NTP)"))
            }
            return out
        }
        let magnitude = skew < .zero ? .zero - skew : skew
        let seconds = Int(magnitude.inSeconds.rounded())
        let tolerance = allowance.components.seconds
        let direction = skew > .zero ? "behind" : "ahead of"
        let fix = "synchronise this machine's clock (NTP: chrony, systemd-timesyncd)"
        if magnitude >= allowance {
            out.append(
                DoctorFinding(
                    "clock-skew", .high,
                    "this machine's clock is \(seconds) s \(direction) the key set server's: beyond the \(tolerance) s tolerance, notifications are refused",
                    fix: fix))
        } else if magnitude > skewWarning {
            out.append(
                DoctorFinding(
                    "clock-skew", .medium,
                    "this machine's clock is \(seconds) s \(direction) the key set server's (tolerance \(tolerance) s)", fix: fix))
        }
        return out
    }
}

/// One privilege of `GrantMatrix`'s spelling, `role PRIVILEGE object`, and the statements that
/// grant or revoke it.
struct GrantText {
    var role: String
    var privilege: String
    var object: String

    init?(_ text: String) {
        let parts = text.split(separator: " ", maxSplits: 2).map(String.init)
        guard parts.count == 3 else { return nil }
        (role, privilege, object) = (parts[0], parts[1], parts[2])
    }

    /// The `ON …` part: a schema, a function (by name: siwa's are not overloaded), columns of a
    /// table, or a table or view.
    var target: String? {
        if privilege == "MEMBER" || privilege == "ATTRIBUTE" { return nil }
        if object.hasPrefix("schema ") { return "SCHEMA " + object.dropFirst("schema ".count) }
        if privilege == "EXECUTE" { return "FUNCTION siwa.\(object)" }
        if let open = object.firstIndex(of: "("), object.hasSuffix(")") {
            let columns = object[object.index(after: open)..<object.index(before: object.endIndex)]
            return "(\(columns.split(separator: ",").joined(separator: ", "))) ON siwa.\(object[..<open])"
        }
        return "siwa.\(object)"
    }

    private func statement(_ verb: String, _ preposition: String) -> String {
        guard let target else { return "" }
        // A column list follows the privilege directly: `GRANT INSERT (a, b) ON siwa.t`.
        return "\(verb) \(privilege)\(target.hasPrefix("(") ? " " : " ON ")\(target) \(preposition) \(role);"
    }

    var grant: String? { target == nil ? nil : statement("GRANT", "TO") }

    var revoke: String? {
        switch privilege {
        case "MEMBER": return "REVOKE \(object) FROM \(role);"
        case "ATTRIBUTE": return "\(role): make it a group without attributes (NOLOGIN NOSUPERUSER NOBYPASSRLS NOCREATEROLE NOCREATEDB)"
        default: return statement("REVOKE", "FROM")
        }
    }
}
