import Foundation
import Logging
import SiwaCore
import SiwaRuntime

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
    /// `clock`: what Auth0's and Clerk's rate-limit resets are read against.
    public static func make(
        _ configuration: HostedProviderConfiguration, logger: Logger, clock: WallClock = .system
    ) throws(StartError) -> [any HostedProviderClient] {
        var clients: [any HostedProviderClient] = []
        for provider in configuration.targets {
            if let client = try make(provider, configuration, logger: logger, clock: clock) { clients.append(client) }
        }
        return clients
    }

    /// The client of one provider (nil: its settings are not configured).
    static func make(
        _ provider: HostedProvider, _ configuration: HostedProviderConfiguration, logger: Logger, clock: WallClock = .system
    ) throws(StartError) -> (any HostedProviderClient)? {
        switch provider {
        case .cognito: if let s = configuration.cognito { return try cognito(s, logger: logger) }
        case .firebase: if let s = configuration.firebase { return try firebase(s, logger: logger) }
        case .auth0: if let s = configuration.auth0 { return try auth0(s, logger: logger, clock: clock) }
        case .clerk: if let s = configuration.clerk { return try clerk(s, logger: logger, clock: clock) }
        }
        return nil
    }

    /// Each provider of `configuration` as the start checks it, every one examined (`doctor`):
    /// its client made, then asked.
    public static func examine(_ configuration: HostedProviderConfiguration, logger: Logger) -> [DoctorFacts.Provider] {
        configuration.targets.compactMap { provider in
            do throws(StartError) {
                guard let client = try make(provider, configuration, logger: logger) else { return nil }
                let answer = client.check()
                return DoctorFacts.Provider(provider, .answered(answer), signOut: client.signOutDescription())
            } catch {
                return DoctorFacts.Provider(provider, .unusable(error.problem))
            }
        }
    }

    /// Each client's start-up check; the first that does not pass stops the start.
    public static func check(_ clients: [any HostedProviderClient], configuration: HostedProviderConfiguration) throws(StartError) {
        for client in clients {
            if let problem = configuration.startProblem(client.provider, client.check()) { throw StartError(problem: problem) }
        }
    }

    static func firebase(_ settings: HostedProviderConfiguration.FirebaseSettings, logger: Logger) throws(StartError) -> FirebaseClient {
        var credential: FirebaseCredential?
        if let path = settings.credentialsFile {
            do throws(FirebaseCredentialError) {
                credential = try FirebaseCredential(path: path)
            } catch {
                throw StartError(problem: ConfigurationError(variable: "SIWA_FIREBASE_CREDENTIALS_FILE", problem: error.description))
            }
        }
        let names = ["url": "SIWA_FIREBASE_URL", "projectID": "SIWA_FIREBASE_PROJECT_ID"]
        return try built(names, otherwise: "SIWA_FIREBASE_CREDENTIALS_FILE") { () throws(ConfigurationError) in
            try FirebaseClient(projectID: settings.projectID, credential: credential, url: settings.url, logger: logger)
        }
    }

    static func auth0(
        _ settings: HostedProviderConfiguration.Auth0Settings, logger: Logger, clock: WallClock = .system
    ) throws(StartError) -> Auth0Client {
        let secret = try secret(settings.clientSecretFile, variable: "SIWA_AUTH0_CLIENT_SECRET_FILE")
        return try built(["url": "SIWA_AUTH0_URL"], otherwise: "SIWA_AUTH0_DOMAIN") { () throws(ConfigurationError) in
            try Auth0Client(
                domain: settings.domain, clientID: settings.clientID, clientSecret: secret, url: settings.url, logger: logger, clock: clock)
        }
    }

    static func clerk(
        _ settings: HostedProviderConfiguration.ClerkSettings, logger: Logger, clock: WallClock = .system
    ) throws(StartError) -> ClerkClient {
        let secret = try secret(settings.secretKeyFile, variable: "SIWA_CLERK_SECRET_KEY_FILE")
        return try built(["url": "SIWA_CLERK_URL"], otherwise: "SIWA_CLERK_SECRET_KEY_FILE") { () throws(ConfigurationError) in
            try ClerkClient(secretKey: secret, url: settings.url, logger: logger, clock: clock)
        }
    }

    /// A secret file's content, trimmed; never echoed in an error.
    static func secret(_ path: String, variable: String) throws(StartError) -> String {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw StartError(problem: ConfigurationError(variable: variable, problem: "cannot read \(path)"))
        }
        let text = String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        guard !text.isEmpty else { throw StartError(problem: ConfigurationError(variable: variable, problem: "is empty")) }
        return text
    }

    /// A client's init names the parameter it refuses: `names` maps it to the variable it was
    /// read from, `otherwise` names the rest (a value read from that file).
    static func built<Client>(
        _ names: [String: String], otherwise: String, _ make: () throws(ConfigurationError) -> Client
    ) throws(StartError) -> Client {
        do throws(ConfigurationError) {
            return try make()
        } catch {
            throw StartError(problem: ConfigurationError(variable: names[error.variable] ?? otherwise, problem: error.problem))
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
