import Foundation
import Logging
import SiwaCore

/// Builds the client of each hosted provider `SIWA_APPLY_TO` names, reading its credential files
/// now (at start), and runs each one's start-up check. The one place a provider's client is made.
public enum HostedProviderClients {
    /// A provider whose client could not be made or whose check did not pass: one line naming the
    /// variable to fix.
    public struct StartError: Error, Sendable, CustomStringConvertible {
        public var problem: ConfigurationError
        public var description: String { problem.description }
    }

    /// The clients of `configuration.targets`, in that order.
    public static func make(_ configuration: HostedProviderConfiguration, logger: Logger) throws(StartError) -> [any HostedProviderClient] {
        var clients: [any HostedProviderClient] = []
        for provider in configuration.targets {
            switch provider {
            case .cognito:
                guard let settings = configuration.cognito else { continue }
                clients.append(try cognito(settings, logger: logger))
            case .firebase, .auth0, .clerk:
                throw StartError(
                    problem: ConfigurationError(variable: "SIWA_APPLY_TO", problem: "\(provider.rawValue) is not available in this build"))
            }
        }
        return clients
    }

    /// Each client's start-up check; the first that does not pass stops the start.
    public static func check(_ clients: [any HostedProviderClient], configuration: HostedProviderConfiguration) throws(StartError) {
        for client in clients {
            if let problem = configuration.startProblem(client.provider, client.check()) { throw StartError(problem: problem) }
        }
    }

    static func cognito(_ settings: HostedProviderConfiguration.CognitoSettings, logger: Logger) throws(StartError) -> CognitoClient {
        do throws(ConfigurationError) {
            let credentials: SigV4.Credentials
            switch settings.credentials {
            case .environment(let c):
                credentials = c
            case .sharedFile(let path, let profile):
                guard let data = FileManager.default.contents(atPath: path) else {
                    throw ConfigurationError(variable: AWSCredentialSource.fileVariable, problem: "cannot read \(path)")
                }
                credentials = try AWSCredentialSource.parseSharedFile(String(decoding: data, as: UTF8.self), profile: profile)
            }
            do throws(ConfigurationError) {
                return try CognitoClient(
                    region: settings.region, userPoolID: settings.userPoolID, credentials: credentials, url: settings.url,
                    logger: logger)
            } catch {
                throw ConfigurationError(variable: "SIWA_COGNITO_URL", problem: error.problem)
            }
        } catch {
            throw StartError(problem: error)
        }
    }
}
