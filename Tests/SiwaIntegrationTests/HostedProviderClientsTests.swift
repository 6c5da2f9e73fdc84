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

    @Test("each target gets its own client, in SIWA_APPLY_TO's order")
    func clientsMade() throws {
        let files = try Files()
        let auth0Secret = try files.write("auth0", "auth0-secret-value\n")
        let clerkSecret = try files.write("clerk", "sk_test_clerk-secret-value\n")
        let result = Self.make { c in
            c.targets = [.clerk, .firebase, .auth0]
            c.firebase = .init(projectID: "demo-project", credentialsFile: nil, url: "http://127.0.0.1:9099")
            c.auth0 = .init(domain: "tenant.example.com", clientID: "client", clientSecretFile: auth0Secret, url: nil)
            c.clerk = .init(secretKeyFile: clerkSecret, url: nil)
        }
        let clients = try result.get()
        #expect(clients.map(\.provider) == [.clerk, .firebase, .auth0])
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
