/// The hosted identity providers `SIWA_APPLY_TO` names and each one's variables
/// (docs/hosted-providers.md). Names, paths and addresses only: the credential files are read,
/// and each provider asked, by the application at start.
public struct HostedProviderConfiguration: Sendable, Equatable {
    /// The providers of `SIWA_APPLY_TO`, in `HostedProvider.allCases` order; none by default.
    public var targets: [HostedProvider] = []
    public var firebase: FirebaseSettings?
    public var auth0: Auth0Settings?
    public var clerk: ClerkSettings?
    public var cognito: CognitoSettings?

    public struct FirebaseSettings: Sendable, Equatable {
        /// `SIWA_FIREBASE_PROJECT_ID`.
        public var projectID: String
        /// `SIWA_FIREBASE_CREDENTIALS_FILE`: a service-account JSON; nil only with an emulator's
        /// `SIWA_FIREBASE_URL` (it takes no credential).
        public var credentialsFile: String?
        /// `SIWA_FIREBASE_URL`: the Identity Toolkit base; nil: Google's.
        public var url: String?

        public init(projectID: String, credentialsFile: String?, url: String?) {
            self.projectID = projectID
            self.credentialsFile = credentialsFile
            self.url = url
        }
    }

    public struct Auth0Settings: Sendable, Equatable {
        /// `SIWA_AUTH0_DOMAIN`: the tenant's domain (`example.eu.auth0.com`).
        public var domain: String
        /// `SIWA_AUTH0_CLIENT_ID`: the Machine-to-Machine application's.
        public var clientID: String
        /// `SIWA_AUTH0_CLIENT_SECRET_FILE`.
        public var clientSecretFile: String
        /// `SIWA_AUTH0_URL`: nil: `https://<domain>/`.
        public var url: String?

        public init(domain: String, clientID: String, clientSecretFile: String, url: String?) {
            self.domain = domain
            self.clientID = clientID
            self.clientSecretFile = clientSecretFile
            self.url = url
        }
    }

    public struct ClerkSettings: Sendable, Equatable {
        /// `SIWA_CLERK_SECRET_KEY_FILE`.
        public var secretKeyFile: String
        /// `SIWA_CLERK_URL`: nil: Clerk's Backend API.
        public var url: String?

        public init(secretKeyFile: String, url: String?) {
            self.secretKeyFile = secretKeyFile
            self.url = url
        }
    }

    public struct CognitoSettings: Sendable, Equatable {
        /// `SIWA_COGNITO_USER_POOL_ID`.
        public var userPoolID: String
        /// `SIWA_COGNITO_REGION`; by default the region the pool id starts with.
        public var region: String
        /// The AWS variables, the SDKs' way.
        public var credentials: AWSCredentialSource
        /// `SIWA_COGNITO_URL`: nil: the region's endpoint.
        public var url: String?

        public init(userPoolID: String, region: String, credentials: AWSCredentialSource, url: String?) {
            self.userPoolID = userPoolID
            self.region = region
            self.credentials = credentials
            self.url = url
        }
    }

    public init(targets: [HostedProvider] = []) {
        self.targets = targets
    }

    public static let variables = [
        "SIWA_FIREBASE_PROJECT_ID", "SIWA_FIREBASE_CREDENTIALS_FILE", "SIWA_FIREBASE_URL",
        "SIWA_AUTH0_DOMAIN", "SIWA_AUTH0_CLIENT_ID", "SIWA_AUTH0_CLIENT_SECRET_FILE", "SIWA_AUTH0_URL",
        "SIWA_CLERK_SECRET_KEY_FILE", "SIWA_CLERK_URL",
        "SIWA_COGNITO_USER_POOL_ID", "SIWA_COGNITO_REGION", "SIWA_COGNITO_URL",
    ]

    /// The AWS SDKs' variables the Cognito target reads (no command-line flag: the SDKs' way).
    public static let awsVariables = [
        AWSCredentialSource.accessKeyVariable, AWSCredentialSource.secretKeyVariable, AWSCredentialSource.sessionTokenVariable,
        AWSCredentialSource.fileVariable, AWSCredentialSource.profileVariable,
    ]

    /// The variable that holds a provider's credential: the one a refused credential names.
    public func credentialVariable(of provider: HostedProvider) -> String {
        switch provider {
        case .firebase: return firebase?.credentialsFile == nil ? "SIWA_FIREBASE_URL" : "SIWA_FIREBASE_CREDENTIALS_FILE"
        case .auth0: return "SIWA_AUTH0_CLIENT_SECRET_FILE"
        case .clerk: return "SIWA_CLERK_SECRET_KEY_FILE"
        case .cognito: return cognito?.credentials.variable ?? AWSCredentialSource.accessKeyVariable
        }
    }

    /// The variable naming where a provider's project, tenant or pool is: the one a refused
    /// tenant names.
    public static func tenantVariable(of provider: HostedProvider) -> String {
        switch provider {
        case .firebase: return "SIWA_FIREBASE_PROJECT_ID"
        case .auth0: return "SIWA_AUTH0_DOMAIN"
        case .clerk: return "SIWA_CLERK_SECRET_KEY_FILE"
        case .cognito: return "SIWA_COGNITO_USER_POOL_ID"
        }
    }

    /// The variable of a provider's base address (for a provider that does not answer).
    public static func urlVariable(of provider: HostedProvider) -> String {
        switch provider {
        case .firebase: return "SIWA_FIREBASE_URL"
        case .auth0: return "SIWA_AUTH0_URL"
        case .clerk: return "SIWA_CLERK_URL"
        case .cognito: return "SIWA_COGNITO_URL"
        }
    }

    /// The providers named by `applyTo` (the items of `SIWA_APPLY_TO` that are providers), each
    /// with its variables; a missing or malformed one is an error naming it. `environment` is
    /// the process environment (the AWS variables and `HOME`).
    static func load(
        applyTo items: [String], _ value: (String) -> String?, environment: [String: String]
    ) throws(ConfigurationError) -> HostedProviderConfiguration {
        var config = HostedProviderConfiguration()
        config.targets = HostedProvider.allCases.filter { items.contains($0.rawValue) }
        func required(_ name: String, _ provider: HostedProvider, _ what: String) throws(ConfigurationError) -> String {
            guard let v = value(name) else {
                throw ConfigurationError(variable: name, problem: "is required with SIWA_APPLY_TO=\(provider.rawValue): \(what)")
            }
            return v
        }
        func url(_ name: String) throws(ConfigurationError) -> String? {
            guard let v = value(name) else { return nil }
            if let problem = ForwardingConfiguration.problem(withURL: v) { throw ConfigurationError(variable: name, problem: problem) }
            return v
        }
        for provider in config.targets {
            switch provider {
            case .firebase:
                let base = try url("SIWA_FIREBASE_URL")
                let file = value("SIWA_FIREBASE_CREDENTIALS_FILE")
                if file == nil && base == nil {
                    throw ConfigurationError(
                        variable: "SIWA_FIREBASE_CREDENTIALS_FILE",
                        problem: "is required with SIWA_APPLY_TO=firebase: a service-account JSON (only an emulator's SIWA_FIREBASE_URL goes without)"
                    )
                }
                config.firebase = FirebaseSettings(
                    projectID: try required("SIWA_FIREBASE_PROJECT_ID", provider, "the Firebase project id"), credentialsFile: file, url: base)
            case .auth0:
                let domain = try required("SIWA_AUTH0_DOMAIN", provider, "the tenant's domain (example.eu.auth0.com)")
                guard isHostName(domain) else {
                    throw ConfigurationError(
                        variable: "SIWA_AUTH0_DOMAIN", problem: "must be a host name (example.eu.auth0.com), without scheme or path")
                }
                config.auth0 = Auth0Settings(
                    domain: domain, clientID: try required("SIWA_AUTH0_CLIENT_ID", provider, "the Machine-to-Machine application's client id"),
                    clientSecretFile: try required("SIWA_AUTH0_CLIENT_SECRET_FILE", provider, "a file holding its client secret"),
                    url: try url("SIWA_AUTH0_URL"))
            case .clerk:
                config.clerk = ClerkSettings(
                    secretKeyFile: try required("SIWA_CLERK_SECRET_KEY_FILE", provider, "a file holding the instance's secret key (sk_...)"),
                    url: try url("SIWA_CLERK_URL"))
            case .cognito:
                let pool = try required("SIWA_COGNITO_USER_POOL_ID", provider, "the user pool id (eu-west-1_EXAMPLE)")
                let region: String
                if let r = value("SIWA_COGNITO_REGION") {
                    region = r
                } else if let prefix = pool.split(separator: "_").first, pool.contains("_"), isHostName(String(prefix)) {
                    region = String(prefix)
                } else {
                    throw ConfigurationError(
                        variable: "SIWA_COGNITO_REGION", problem: "is required when SIWA_COGNITO_USER_POOL_ID does not start with its region")
                }
                guard isHostName(region), !region.contains(".") else {
                    throw ConfigurationError(variable: "SIWA_COGNITO_REGION", problem: "must be an AWS region (eu-west-1)")
                }
                config.cognito = CognitoSettings(
                    userPoolID: pool, region: region, credentials: try AWSCredentialSource.resolve(environment: environment),
                    url: try url("SIWA_COGNITO_URL"))
            }
        }
        return config
    }

    /// Letters, digits, `-` and `.`: a host name to put in a URL, nothing that changes the URL.
    static func isHostName(_ text: String) -> Bool {
        !text.isEmpty && text.utf8.count <= 253
            && text.utf8.allSatisfy { ($0 >= 97 && $0 <= 122) || ($0 >= 65 && $0 <= 90) || ($0 >= 48 && $0 <= 57) || $0 == 45 || $0 == 46 }
    }
}

extension HostedProviderConfiguration {
    /// The one line that stops the start when a provider's start-up check did not pass, naming
    /// the variable to fix; nil when it passed. A provider that did not answer stops the start too:
    /// its address (or its project, tenant or pool) is wrong, or it is down, and nothing tells
    /// which until it answers.
    public func startProblem(_ provider: HostedProvider, _ outcome: ProviderOutcome) -> ConfigurationError? {
        let name = provider.rawValue
        switch outcome {
        case .done, .userNotFound:
            return nil
        case .retryLater(let failure):
            return ConfigurationError(
                variable: Self.urlVariable(of: provider), problem: "\(name) did not answer the start-up check: \(failure); is it reachable?")
        case .refused(let failure):
            switch failure.blame ?? .request {
            case .credential:
                return ConfigurationError(variable: credentialVariable(of: provider), problem: "\(name) refused the credential: \(failure)")
            case .permission:
                return ConfigurationError(
                    variable: credentialVariable(of: provider), problem: "\(name) accepts the credential but does not allow the call: \(failure)")
            case .tenant:
                return ConfigurationError(variable: Self.tenantVariable(of: provider), problem: "\(name) does not know it: \(failure)")
            case .request:
                return ConfigurationError(
                    variable: Self.urlVariable(of: provider), problem: "\(name) refused the start-up check: \(failure)")
            }
        }
    }
}
