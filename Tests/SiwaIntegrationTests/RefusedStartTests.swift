import Foundation
import SiwaCore
import Synchronization
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// A start the configuration, the database or a target's check refuses leaves nothing listening:
/// the real binary, with a client that keeps trying both configured ports while it starts and
/// exits (a load balancer must never see a port that answers and then goes).
@Suite("Refused start", .serialized, .needsDatabase)
struct RefusedStartTests {
    struct Outcome {
        var status: Int32
        var log: String
        /// The ports a connection was accepted on while the process ran.
        var connected: Set<UInt16>
        var exited: Bool
        /// The process's last stderr line (ArgumentParser's `Error: ...`).
        var lastLine: String { log.split(separator: "\n").last.map(String.init) ?? "" }
    }

    /// `siwa-notify serve` with `environment` on two configured loopback ports, tried for a
    /// connection from before it runs until it has exited (60 s at most), or, with
    /// `untilBothAnswer`, until both ports accepted one (the probe's positive control).
    static func serve(_ environment: [String: String], untilBothAnswer: Bool = false) throws -> Outcome {
        let ports = [ServerProcess.freePort(), ServerProcess.freePort()]
        let base = [
            "SIWA_AUDIENCES": TestHarness.audience, "SIWA_JWKS_URL": "file:///nonexistent/siwa-jwks.json",
            "SIWA_LISTEN": "127.0.0.1:\(ports[0])", "SIWA_ADMIN_LISTEN": "127.0.0.1:\(ports[1])", "SIWA_LOG_LEVEL": "info",
        ]
        let server = try ServerProcess(["serve"], environment: base.merging(environment) { _, new in new })
        var connected = Set<UInt16>()
        // Every millisecond: a listener that is up for a few milliseconds is seen.
        let deadline = Date().addingTimeInterval(60)
        var exited = false
        while !exited && Date() < deadline && !(untilBothAnswer && connected.count == ports.count) {
            exited = !server.process.isRunning
            for port in ports {
                if let fd = try? RawHTTP(port: port).connect() {
                    close(fd)
                    connected.insert(port)
                }
            }
            usleep(1000)
        }
        if !exited { server.kill9() }
        server.process.waitUntilExit()
        return Outcome(status: server.process.terminationStatus, log: server.log, connected: connected, exited: exited)
    }

    static func expectRefused(_ outcome: Outcome, naming expected: String, sourceLocation: SourceLocation = #_sourceLocation) {
        #expect(outcome.exited, "still running after 60 s: \(outcome.log)", sourceLocation: sourceLocation)
        #expect(outcome.status != 0, "\(outcome.log)", sourceLocation: sourceLocation)
        #expect(outcome.lastLine.contains(expected), "last line: \(outcome.lastLine)", sourceLocation: sourceLocation)
        #expect(outcome.connected.isEmpty, "a refused start accepted connections on \(outcome.connected.sorted())", sourceLocation: sourceLocation)
        let listened = ["admin listener up", "receiving notifications"].filter { outcome.log.contains($0) }
        #expect(listened.isEmpty, "a refused start logged \(listened)", sourceLocation: sourceLocation)
    }

    @Test("the probe's control: a start that succeeds is seen on both ports")
    func probeSeesAStart() throws {
        // Without it, a probe that could not connect at all would pass every refusal below.
        let outcome = try Self.serve(["SIWA_DATABASE_URL": try TestDatabase.create()], untilBothAnswer: true)
        #expect(!outcome.exited, "\(outcome.log)")
        #expect(outcome.connected.count == 2, "the probe saw \(outcome.connected.sorted()): \(outcome.log)")
    }

    @Test("a bad variable: one line naming it, no port opened")
    func badVariable() throws {
        let outcome = try Self.serve(["SIWA_DATABASE_URL": try TestDatabase.create(), "SIWA_MAX_BODY": "lots"])
        Self.expectRefused(outcome, naming: "SIWA_MAX_BODY")
    }

    @Test("an unreachable database: one line saying so, no port opened")
    func unreachableDatabase() throws {
        // A loopback port nothing listens on: refused at once.
        let url = "host=127.0.0.1 port=\(ServerProcess.freePort()) user=siwa dbname=siwa connect_timeout=5"
        let outcome = try Self.serve(["SIWA_DATABASE_URL": url])
        Self.expectRefused(outcome, naming: "cannot prepare the database")
    }

    @Test("an auth library's failed check (Better Auth without its index): its line, no port opened")
    func authLibraryCheck() throws {
        let db = try AuthLibraryDatabase(schema: AuthLibrarySchemas.betterAuth, config: AuthLibraryTests.config(.betterAuth))
        let outcome = try Self.serve(["SIWA_DATABASE_URL": db.url, "SIWA_APPLY_TO": "better-auth"])
        Self.expectRefused(outcome, naming: "SIWA_APPLY_TO=better-auth: no index on account")
    }

    @Test("an unreadable forwarding secret file: its line, no port opened")
    func forwardingSecret() throws {
        let outcome = try Self.serve([
            "SIWA_DATABASE_URL": try TestDatabase.create(), "SIWA_FORWARD_URL": "http://127.0.0.1:9/hook",
            "SIWA_FORWARD_SECRET_FILE": "/nonexistent/siwa-forward-secret",
        ])
        Self.expectRefused(outcome, naming: "SIWA_FORWARD_SECRET_FILE: cannot read")
    }

    @Test("an unreadable Apple private key (in-app deletion): its line, no port opened")
    func applePrivateKey() throws {
        let outcome = try Self.serve([
            "SIWA_DATABASE_URL": try TestDatabase.create(), "SIWA_TEAM_ID": "TEAM000000", "SIWA_KEY_ID": "KEY0000000",
            "SIWA_PRIVATE_KEY_FILE": "/nonexistent/siwa-apple-key.p8", "SIWA_TOKEN_KEY_FILE": "/nonexistent/siwa-token-key",
        ])
        Self.expectRefused(outcome, naming: "SIWA_PRIVATE_KEY_FILE")
    }

    @Test("an unreadable API token file: its line, no port opened")
    func apiTokenFile() throws {
        let outcome = try Self.serve([
            "SIWA_DATABASE_URL": try TestDatabase.create(), "SIWA_API_TOKEN_FILE": "/nonexistent/siwa-api-tokens",
        ])
        Self.expectRefused(outcome, naming: "SIWA_API_TOKEN_FILE")
    }

    /// A credential file in a directory of its own; nil content: a path nothing is at.
    static func secretFile(_ content: [UInt8]?) throws -> String {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("siwa-refused-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let path = directory.appendingPathComponent("secret").path
        if let content { try Data(content).write(to: URL(fileURLWithPath: path)) }
        return path
    }

    @Test("Firebase: an unreadable service-account file, or a key Google refuses: its line, no port opened")
    func firebaseCredential() throws {
        let fake = try FakeFirebase(key: FirebaseClientTests.key, clock: { Int64(Date().timeIntervalSince1970) })
        defer { fake.stop() }
        let base = [
            "SIWA_DATABASE_URL": try TestDatabase.create(), "SIWA_APPLY_TO": "firebase", "SIWA_FIREBASE_PROJECT_ID": fake.projectID,
            "SIWA_FIREBASE_URL": fake.url,
        ]
        let unreadable = try Self.serve(base.merging(["SIWA_FIREBASE_CREDENTIALS_FILE": try Self.secretFile(nil)]) { $1 })
        Self.expectRefused(unreadable, naming: "SIWA_FIREBASE_CREDENTIALS_FILE: ")
        fake.change { $0.tokenAnswer = FakeFirebase.invalidGrant("Invalid JWT Signature.") }
        let file = try Self.secretFile(FirebaseClientTests.keyFile(tokenURI: fake.tokenURL))
        let refused = try Self.serve(base.merging(["SIWA_FIREBASE_CREDENTIALS_FILE": file]) { $1 })
        Self.expectRefused(refused, naming: "SIWA_FIREBASE_CREDENTIALS_FILE: firebase refused the credential")
    }

    @Test("Auth0: an unreadable client secret, or one the tenant refuses: its line, no port opened")
    func auth0Credential() throws {
        let tenant = try FakeAuth0()
        defer { tenant.fake.stop() }
        let base = [
            "SIWA_DATABASE_URL": try TestDatabase.create(), "SIWA_APPLY_TO": "auth0", "SIWA_AUTH0_DOMAIN": FakeAuth0.domain,
            "SIWA_AUTH0_CLIENT_ID": FakeAuth0.clientID, "SIWA_AUTH0_URL": tenant.fake.url,
        ]
        let unreadable = try Self.serve(base.merging(["SIWA_AUTH0_CLIENT_SECRET_FILE": try Self.secretFile(nil)]) { $1 })
        Self.expectRefused(unreadable, naming: "SIWA_AUTH0_CLIENT_SECRET_FILE: cannot read")
        let wrong = try Self.secretFile(Array("not-the-secret".utf8))
        let refused = try Self.serve(base.merging(["SIWA_AUTH0_CLIENT_SECRET_FILE": wrong]) { $1 })
        Self.expectRefused(refused, naming: "SIWA_AUTH0_CLIENT_SECRET_FILE: auth0 refused the credential")
    }

    @Test("Clerk: an unreadable secret key, or one Clerk refuses: its line, no port opened")
    func clerkCredential() throws {
        let instance = try FakeClerk()
        defer { instance.fake.stop() }
        let base = ["SIWA_DATABASE_URL": try TestDatabase.create(), "SIWA_APPLY_TO": "clerk", "SIWA_CLERK_URL": instance.fake.url + "/v1"]
        let unreadable = try Self.serve(base.merging(["SIWA_CLERK_SECRET_KEY_FILE": try Self.secretFile(nil)]) { $1 })
        Self.expectRefused(unreadable, naming: "SIWA_CLERK_SECRET_KEY_FILE: cannot read")
        let wrong = try Self.secretFile(Array("sk_test_rolled".utf8))
        let refused = try Self.serve(base.merging(["SIWA_CLERK_SECRET_KEY_FILE": wrong]) { $1 })
        Self.expectRefused(refused, naming: "SIWA_CLERK_SECRET_KEY_FILE: clerk refused the credential")
    }
}
