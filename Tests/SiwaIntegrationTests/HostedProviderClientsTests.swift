import Foundation
import Logging
import SiwaApp
import SiwaCore
import Testing

/// The one place each provider's client is made at start: its credential file read, each refused
/// value named by the variable it came from, and no secret in the line.
@Suite("Hosted provider clients at start")
struct HostedProviderClientsTests {
    static let logger = Logger(label: "test")

    final class Files {
        let dir: URL
        init() throws {
            dir = FileManager.default.temporaryDirectory.appendingPathComponent("siwa-providers-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        }
        func write(_ name: String, _ text: String) throws -> String {
            let url = dir.appendingPathComponent(name)
            try Data(text.utf8).write(to: url)
            return url.path
        }
        var missing: String { dir.appendingPathComponent("absent").path }
        deinit { try? FileManager.default.removeItem(at: dir) }
    }

    static func make(_ configure: (inout HostedProviderConfiguration) -> Void) -> Result<[any HostedProviderClient], HostedProviderClients.StartError>
    {
        var configuration = HostedProviderConfiguration()
        configure(&configuration)
        do throws(HostedProviderClients.StartError) {
            return .success(try HostedProviderClients.make(configuration, logger: logger))
        } catch {
            return .failure(error)
        }
    }

    static func refusal(_ result: Result<[any HostedProviderClient], HostedProviderClients.StartError>) -> ConfigurationError? {
        if case .failure(let error) = result { return error.problem }
        return nil
    }

    @Test("each target gets its own client, in SIWA_APPLY_TO's order, with its own values; a secret file's newline is not the secret's")
    func clientsMade() throws {
        let files = try Files()
        let tenant = try FakeAuth0()
        defer { tenant.fake.stop() }
        let instance = try FakeClerk()
        defer { instance.fake.stop() }
        // Written as `echo "$SECRET" > file` writes them.
        let auth0Secret = try files.write("auth0", FakeAuth0.secret + "\n")
        let clerkSecret = try files.write("clerk", FakeClerk.secretKey + "\r\n")
        let result = Self.make { c in
            c.targets = [.clerk, .firebase, .auth0, .cognito]
            c.firebase = .init(projectID: "demo-project", credentialsFile: nil, url: "http://127.0.0.1:9099")
            c.auth0 = .init(domain: FakeAuth0.domain, clientID: FakeAuth0.clientID, clientSecretFile: auth0Secret, url: tenant.fake.url)
            c.clerk = .init(secretKeyFile: clerkSecret, url: instance.fake.url + "/v1")
            c.cognito = .init(
                userPoolID: "eu-west-1_EXAMPLE", region: "eu-west-1",
                credentials: .environment(SigV4.Credentials(accessKeyID: "AKIDEXAMPLE", secretAccessKey: "secret")), url: "http://127.0.0.1:5001/")
        }
        let clients = try result.get()
        try #require(clients.map(\.provider) == [.clerk, .firebase, .auth0, .cognito])
        // Each client answers its own fake with what its settings said: the secret, trimmed.
        let clerk = try #require(clients[0] as? ClerkClient)
        #expect(clerk.check() == .done([], status: 200))
        #expect(instance.fake.requests.last?.authorization == "Bearer \(FakeClerk.secretKey)")
        let firebase = try #require(clients[1] as? FirebaseClient)
        #expect(firebase.projectID == "demo-project" && firebase.url == "http://127.0.0.1:9099")
        let auth0 = try #require(clients[2] as? Auth0Client)
        #expect(auth0.domain == FakeAuth0.domain && auth0.clientID == FakeAuth0.clientID)
        #expect(auth0.check() == .done([], status: 200))
        #expect(tenant.fake.requests.first?.field("client_secret") == FakeAuth0.secret)
        let cognito = try #require(clients[3] as? CognitoClient)
        #expect(cognito.region == "eu-west-1" && cognito.userPoolID == "eu-west-1_EXAMPLE" && cognito.url == "http://127.0.0.1:5001/")
    }

    @Test("an unreadable or empty secret file is named, never echoed")
    func secretFiles() throws {
        let files = try Files()
        let missing = Self.refusal(
            Self.make { c in
                c.targets = [.auth0]
                c.auth0 = .init(domain: "tenant.example.com", clientID: "client", clientSecretFile: files.missing, url: nil)
            })
        #expect(missing?.variable == "SIWA_AUTH0_CLIENT_SECRET_FILE")
        let empty = try files.write("empty", " \n")
        let blank = Self.refusal(
            Self.make { c in
                c.targets = [.clerk]
                c.clerk = .init(secretKeyFile: empty, url: nil)
            })
        #expect(blank?.variable == "SIWA_CLERK_SECRET_KEY_FILE")
        #expect(blank?.problem == "is empty")
    }

    @Test("a service-account file that is no service account names its variable, not its key")
    func firebaseCredential() throws {
        let files = try Files()
        let bad = try files.write("sa.json", #"{"type": "service_account", "private_key": "-----BEGIN PRIVATE KEY-----\nsecret-material\n"}"#)
        let refused = Self.refusal(
            Self.make { c in
                c.targets = [.firebase]
                c.firebase = .init(projectID: "demo-project", credentialsFile: bad, url: nil)
            })
        #expect(refused?.variable == "SIWA_FIREBASE_CREDENTIALS_FILE")
        #expect(refused?.description.contains("secret-material") == false)
        let noCredential = Self.refusal(
            Self.make { c in
                c.targets = [.firebase]
                c.firebase = .init(projectID: "demo-project", credentialsFile: nil, url: nil)
            })
        #expect(noCredential?.variable == "SIWA_FIREBASE_CREDENTIALS_FILE")
    }

    @Test("a value the client refuses is named by the variable it was read from")
    func refusedValues() throws {
        let files = try Files()
        let secret = try files.write("clerk", "sk_test_clerk-secret-value")
        let url = Self.refusal(
            Self.make { c in
                c.targets = [.clerk]
                c.clerk = .init(secretKeyFile: secret, url: "http://provider.example.com")
            })
        #expect(url?.variable == "SIWA_CLERK_URL")
        #expect(url?.description.contains("sk_test") == false)
        let project = Self.refusal(
            Self.make { c in
                c.targets = [.firebase]
                c.firebase = .init(projectID: "no spaces/allowed", credentialsFile: nil, url: "http://127.0.0.1:9099")
            })
        #expect(project?.variable == "SIWA_FIREBASE_PROJECT_ID")
    }
}
