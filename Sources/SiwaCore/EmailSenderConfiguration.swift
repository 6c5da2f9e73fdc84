/// The email services `SIWA_EMAIL_SENDERS` names and each one's variables
/// (docs/email-senders.md). Names, paths and addresses only: the credential files are read, and
/// each service asked, by the application at start.
public struct EmailSenderConfiguration: Sendable, Equatable {
    /// The services of `SIWA_EMAIL_SENDERS`, in `EmailSender.allCases` order; none by default.
    public var targets: [EmailSender] = []
    /// `SIWA_EMAIL_SENDERS_ALL_ADDRESSES`: also addresses that are not Apple's relay's.
    public var allAddresses = false
    public var ses: SESSettings?
    public var sendgrid: SendGridSettings?
    public var postmark: PostmarkSettings?
    public var mailgun: MailgunSettings?

    public struct SESSettings: Sendable, Equatable {
        /// `SIWA_SES_REGION`.
        public var region: String
        /// The AWS variables, the SDKs' way (as Cognito's).
        public var credentials: AWSCredentialSource
        /// `SIWA_SES_URL`: nil: `https://email.<region>.amazonaws.com`.
        public var url: String?

        public init(region: String, credentials: AWSCredentialSource, url: String?) {
            self.region = region
            self.credentials = credentials
            self.url = url
        }
    }

    public struct SendGridSettings: Sendable, Equatable {
        /// `SIWA_SENDGRID_API_KEY_FILE`.
        public var apiKeyFile: String
        /// `SIWA_SENDGRID_URL`: nil: `https://api.sendgrid.com` (`https://api.eu.sendgrid.com` for EU subusers).
        public var url: String?

        public init(apiKeyFile: String, url: String?) {
            self.apiKeyFile = apiKeyFile
            self.url = url
        }
    }

    public struct PostmarkSettings: Sendable, Equatable {
        /// `SIWA_POSTMARK_SERVER_TOKEN_FILE`.
        public var serverTokenFile: String
        /// `SIWA_POSTMARK_STREAMS`: default `outbound`.
        public var streams: [String]
        /// `SIWA_POSTMARK_URL`: nil: `https://api.postmarkapp.com`.
        public var url: String?

        public init(serverTokenFile: String, streams: [String], url: String?) {
            self.serverTokenFile = serverTokenFile
            self.streams = streams
            self.url = url
        }
    }

    public struct MailgunSettings: Sendable, Equatable {
        /// `SIWA_MAILGUN_API_KEY_FILE`.
        public var apiKeyFile: String
        /// `SIWA_MAILGUN_DOMAINS`.
        public var domains: [String]
        /// `SIWA_MAILGUN_URL`: nil: the US base `https://api.mailgun.net` (EU: `https://api.eu.mailgun.net`).
        public var url: String?

        public init(apiKeyFile: String, domains: [String], url: String?) {
            self.apiKeyFile = apiKeyFile
            self.domains = domains
            self.url = url
        }
    }

    public init(targets: [EmailSender] = []) {
        self.targets = targets
    }

    public static let variables = [
        "SIWA_EMAIL_SENDERS", "SIWA_EMAIL_SENDERS_ALL_ADDRESSES",
        "SIWA_SES_REGION", "SIWA_SES_URL",
        "SIWA_SENDGRID_API_KEY_FILE", "SIWA_SENDGRID_URL",
        "SIWA_POSTMARK_SERVER_TOKEN_FILE", "SIWA_POSTMARK_STREAMS", "SIWA_POSTMARK_URL",
        "SIWA_MAILGUN_API_KEY_FILE", "SIWA_MAILGUN_DOMAINS", "SIWA_MAILGUN_URL",
    ]

    /// The variable that holds a service's credential: the one a refused credential names.
    public func credentialVariable(of sender: EmailSender) -> String {
        switch sender {
        case .ses: return ses?.credentials.variable ?? AWSCredentialSource.accessKeyVariable
        case .sendgrid: return "SIWA_SENDGRID_API_KEY_FILE"
        case .postmark: return "SIWA_POSTMARK_SERVER_TOKEN_FILE"
        case .mailgun: return "SIWA_MAILGUN_API_KEY_FILE"
        }
    }

    /// The variable naming the lists: the one a list that does not exist names.
    public static func listVariable(of sender: EmailSender) -> String {
        switch sender {
        case .ses: return "SIWA_SES_REGION"
        case .sendgrid: return "SIWA_SENDGRID_URL"
        case .postmark: return "SIWA_POSTMARK_STREAMS"
        case .mailgun: return "SIWA_MAILGUN_DOMAINS"
        }
    }

    /// The variable of a service's base address.
    public static func urlVariable(of sender: EmailSender) -> String { "SIWA_\(sender.rawValue.uppercased())_URL" }

    /// Reads `SIWA_EMAIL_SENDERS` and each named service's variables; a missing or malformed one is
    /// an error naming it. `environment` is the process environment (the AWS variables and `HOME`).
    static func load(_ value: (String) -> String?, environment: [String: String]) throws(ConfigurationError) -> EmailSenderConfiguration {
        var config = EmailSenderConfiguration()
        let items = list(value("SIWA_EMAIL_SENDERS"))
        for item in items where EmailSender(rawValue: item) == nil {
            throw ConfigurationError(
                variable: "SIWA_EMAIL_SENDERS", problem: "unknown email service '\(item)' (ses, sendgrid, postmark, mailgun)")
        }
        config.targets = EmailSender.allCases.filter { items.contains($0.rawValue) }
        switch value("SIWA_EMAIL_SENDERS_ALL_ADDRESSES")?.lowercased() {
        case nil, "false", "0", "no": config.allAddresses = false
        case "true", "1", "yes": config.allAddresses = true
        default: throw ConfigurationError(variable: "SIWA_EMAIL_SENDERS_ALL_ADDRESSES", problem: "must be true or false")
        }
        func required(_ name: String, _ sender: EmailSender, _ what: String) throws(ConfigurationError) -> String {
            guard let v = value(name) else {
                throw ConfigurationError(variable: name, problem: "is required with SIWA_EMAIL_SENDERS=\(sender.rawValue): \(what)")
            }
            return v
        }
        func url(_ sender: EmailSender) throws(ConfigurationError) -> String? {
            let name = urlVariable(of: sender)
            guard let v = value(name) else { return nil }
            if let problem = EmailSenders.problem(withURL: v) { throw ConfigurationError(variable: name, problem: problem) }
            return v
        }
        func names(_ name: String, _ text: String) throws(ConfigurationError) -> [String] {
            let items = list(text)
            // Host names (Mailgun's domains) and stream ids (Postmark's): nothing that changes a path.
            guard !items.isEmpty, items.allSatisfy({ HostedProviderConfiguration.isHostName(String($0.map { $0 == "_" ? "-" : $0 })) })
            else {
                throw ConfigurationError(variable: name, problem: "must be a comma-separated list of names (letters, digits, '-', '.')")
            }
            return items
        }
        for sender in config.targets {
            switch sender {
            case .ses:
                let region = try required("SIWA_SES_REGION", sender, "the AWS region of the SES account (eu-west-1)")
                guard HostedProviderConfiguration.isHostName(region), !region.contains(".") else {
                    throw ConfigurationError(variable: "SIWA_SES_REGION", problem: "must be an AWS region (eu-west-1)")
                }
                config.ses = SESSettings(region: region, credentials: try AWSCredentialSource.resolve(environment: environment), url: try url(sender))
            case .sendgrid:
                config.sendgrid = SendGridSettings(
                    apiKeyFile: try required("SIWA_SENDGRID_API_KEY_FILE", sender, "a file holding an API key with Suppressions access"),
                    url: try url(sender))
            case .postmark:
                config.postmark = PostmarkSettings(
                    serverTokenFile: try required("SIWA_POSTMARK_SERVER_TOKEN_FILE", sender, "a file holding the server's API token"),
                    streams: try names("SIWA_POSTMARK_STREAMS", value("SIWA_POSTMARK_STREAMS") ?? "outbound"), url: try url(sender))
            case .mailgun:
                let domains = try required("SIWA_MAILGUN_DOMAINS", sender, "the sending domains, comma-separated")
                config.mailgun = MailgunSettings(
                    apiKeyFile: try required("SIWA_MAILGUN_API_KEY_FILE", sender, "a file holding a Mailgun API key"),
                    domains: try names("SIWA_MAILGUN_DOMAINS", domains), url: try url(sender))
            }
        }
        return config
    }

    static func list(_ text: String?) -> [String] {
        (text ?? "").split(separator: ",").map { ServerConfiguration.trim(String($0)) }.filter { !$0.isEmpty }
    }

    /// The one line that stops the start when a service's start-up check did not pass, naming the
    /// variable to fix; nil when it passed. A refused credential names the credential's variable;
    /// a service that does not answer names its address (it may be down, or the address wrong).
    public func startProblem(_ sender: EmailSender, _ outcome: ProviderOutcome) -> ConfigurationError? {
        let name = sender.rawValue
        switch outcome {
        case .done, .userNotFound:
            return nil
        case .retryLater(let failure):
            return ConfigurationError(
                variable: Self.urlVariable(of: sender), problem: "\(name) did not answer the start-up check: \(failure); is it reachable?")
        case .refused(let failure):
            switch failure.blame ?? .request {
            case .credential:
                return ConfigurationError(variable: credentialVariable(of: sender), problem: "\(name) refused the credential: \(failure)")
            case .permission:
                return ConfigurationError(
                    variable: credentialVariable(of: sender), problem: "\(name) accepts the credential but does not allow the call: \(failure)")
            case .tenant:
                return ConfigurationError(variable: Self.listVariable(of: sender), problem: "\(name) does not know it: \(failure)")
            case .request:
                return ConfigurationError(variable: Self.urlVariable(of: sender), problem: "\(name) refused the start-up check: \(failure)")
            }
        }
    }
}
