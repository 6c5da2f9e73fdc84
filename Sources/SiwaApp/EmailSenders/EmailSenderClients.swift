import Foundation
import Logging
import SiwaCore

/// Builds the client of each email service `SIWA_EMAIL_SENDERS` names, reading its credential
/// file now (at start), and runs each one's start-up check. The one place a sender's client is made.
public enum EmailSenderClients {
    public typealias StartError = HostedProviderClients.StartError

    /// The clients of `configuration.targets`, in that order.
    public static func make(
        _ configuration: EmailSenderConfiguration, options: ProviderHTTPOptions = ProviderHTTPOptions(), logger: Logger
    ) throws(StartError) -> [any EmailSenderClient] {
        var clients: [any EmailSenderClient] = []
        for sender in configuration.targets {
            if let client = try make(sender, configuration, options: options, logger: logger) { clients.append(client) }
        }
        return clients
    }

    /// The client of one service (nil: its settings are not configured).
    static func make(
        _ sender: EmailSender, _ configuration: EmailSenderConfiguration, options: ProviderHTTPOptions, logger: Logger
    ) throws(StartError) -> (any EmailSenderClient)? {
        let api: any SuppressionAPI
        let credential: SenderTransport.Credential
        let url: String
        switch sender {
        case .ses:
            guard let s = configuration.ses else { return nil }
            credential = .sigV4(try awsCredentials(s.credentials), region: s.region, service: SESSuppressionAPI.service)
            api = SESSuppressionAPI()
            url = s.url ?? EmailSenders.defaultURL(.ses, region: s.region)
        case .sendgrid:
            guard let s = configuration.sendgrid else { return nil }
            credential = .bearer(try HostedProviderClients.secret(s.apiKeyFile, variable: "SIWA_SENDGRID_API_KEY_FILE"))
            api = SendGridSuppressionAPI()
            url = s.url ?? EmailSenders.defaultURL(.sendgrid)
        case .postmark:
            guard let s = configuration.postmark else { return nil }
            let token = try HostedProviderClients.secret(s.serverTokenFile, variable: "SIWA_POSTMARK_SERVER_TOKEN_FILE")
            credential = .header(name: "X-Postmark-Server-Token", value: token)
            api = PostmarkSuppressionAPI(streams: s.streams)
            url = s.url ?? EmailSenders.defaultURL(.postmark)
        case .mailgun:
            guard let s = configuration.mailgun else { return nil }
            credential = .basic(user: "api", password: try HostedProviderClients.secret(s.apiKeyFile, variable: "SIWA_MAILGUN_API_KEY_FILE"))
            api = MailgunSuppressionAPI(domains: s.domains)
            url = s.url ?? EmailSenders.defaultURL(.mailgun)
        }
        do throws(ConfigurationError) {
            let transport = try SenderTransport(url: url, credential: credential, options: options)
            return SuppressionClient(api: api, transport: transport, logger: logger)
        } catch {
            throw StartError(problem: ConfigurationError(variable: EmailSenderConfiguration.urlVariable(of: sender), problem: error.problem))
        }
    }

    /// Each service of `configuration` as the start checks it, every one examined (`doctor`).
    public static func examine(_ configuration: EmailSenderConfiguration, logger: Logger) -> [(EmailSender, Result<ProviderOutcome, StartError>)] {
        configuration.targets.compactMap { sender in
            do throws(StartError) {
                guard let client = try make(sender, configuration, options: ProviderHTTPOptions(), logger: logger) else { return nil }
                return (sender, .success(client.check()))
            } catch {
                return (sender, .failure(error))
            }
        }
    }

    /// Each client's start-up check; the first that does not pass stops the start.
    public static func check(_ clients: [any EmailSenderClient], configuration: EmailSenderConfiguration) throws(StartError) {
        for client in clients {
            if let problem = configuration.startProblem(client.sender, client.check()) { throw StartError(problem: problem) }
        }
    }

    static func awsCredentials(_ source: AWSCredentialSource) throws(StartError) -> SigV4.Credentials {
        do throws(ConfigurationError) {
            switch source {
            case .environment(let c):
                return c
            case .sharedFile(let path, let profile):
                guard let data = FileManager.default.contents(atPath: path) else {
                    throw ConfigurationError(variable: AWSCredentialSource.fileVariable, problem: "cannot read \(path)")
                }
                return try AWSCredentialSource.parseSharedFile(String(decoding: data, as: UTF8.self), profile: profile)
            }
        } catch {
            throw StartError(problem: error)
        }
    }
}
