import Foundation
import SiwaApp
import SiwaCore
import SiwaHTTP
import Synchronization
import Testing

/// A fixture's credential file, in a directory of its own removed by `remove`.
private struct SecretFile {
    let directory: URL
    let path: String

    init(_ name: String, _ content: [UInt8]) throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("siwa-fixture-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        path = directory.appendingPathComponent(name).path
        try Data(content).write(to: URL(fileURLWithPath: path))
    }

    func remove() { try? FileManager.default.removeItem(at: directory) }
}

/// Runs a fake's recorded-request check at `stop`, where a failure to run it is an issue too.
private func validating(_ check: () throws -> Void) {
    do { try check() } catch { Issue.record("recorded requests not checked: \(error)") }
}

/// Firebase Authentication: `FakeFirebase` with a service account whose key file the target reads.
/// A session is a refresh token issued at a second; it stops refreshing once `validSince` passes it.
final class FirebaseFixture: ProviderFixture {
    let fake: FakeFirebase
    private let credentials: SecretFile
    /// Each sub's local id.
    private let users = Mutex<[String: String]>([:])
    var provider: HostedProvider { .firebase }
    var behaviour: ProviderBehaviour { ProviderBehaviour(refusedCredential: "invalid_grant [credential]") }

    init() throws {
        fake = try FakeFirebase(key: FirebaseClientTests.key, clock: { Int64(Date().timeIntervalSince1970) })
        credentials = try SecretFile("service-account.json", FirebaseClientTests.keyFile(tokenURI: fake.tokenURL))
    }

    func configure(_ config: inout ServerConfiguration) {
        config.hostedProviders.targets.append(.firebase)
        config.hostedProviders.firebase = .init(projectID: fake.projectID, credentialsFile: credentials.path, url: fake.url)
    }

    private func add(sub: String, passwordHash: String?) {
        let localID = "u-\(sub.suffix(4))"
        users.withLock { $0[sub] = localID }
        fake.add(.init(localID: localID, identities: [.init(providerID: "apple.com", rawID: sub)], passwordHash: passwordHash))
    }

    func addAppleUser(sub: String) throws { add(sub: sub, passwordHash: nil) }
    func addLinkedUser(sub: String) throws { add(sub: sub, passwordHash: "aGFzaA==") }

    /// Signed in the second before: Google compares whole seconds, and a token of the revocation's
    /// own second outlives it.
    func startSession(sub: String) throws -> String {
        guard let localID = users.withLock({ $0[sub] }) else { throw MotoServer.Failure(description: "no user for \(sub)") }
        return "\(localID) \(Int64(Date().timeIntervalSince1970) - 1)"
    }

    func sessionAlive(_ session: String) throws -> Bool {
        let parts = session.split(separator: " ").map(String.init)
        return fake.refreshes(localID: parts[0], issuedAt: Int64(parts[1]) ?? 0)
    }

    func userExists(sub: String) throws -> Bool { users.withLock { $0[sub] }.flatMap(fake.user) != nil }

    var unlinked: [String] { fake.snapshot.unlinked.filter { $0.providerID == "apple.com" }.map(\.rawID) }

    func down() {
        let unavailable = FakeFirebase.googleError(503, "The service is currently unavailable.", status: "UNAVAILABLE")
        fake.change {
            $0.outage = unavailable
            $0.tokenAnswer = unavailable
        }
    }

    /// The service account's key deleted: new assertions refused, the access tokens given expired.
    func refuseCredential() {
        fake.change {
            $0.outage = nil
            $0.tokenAnswer = FakeFirebase.invalidGrant("Invalid JWT Signature.")
            $0.tokens.removeAll()
        }
    }

    func up() {
        fake.change {
            $0.outage = nil
            $0.tokenAnswer = nil
        }
    }

    func stop() {
        fake.stop()
        credentials.remove()
        validating { try FirebaseClientTests.validate(fake) }
    }
}

/// Auth0: `FakeAuth0`'s tenant, the Machine-to-Machine secret in a file. A user's session is its
/// sessions and refresh tokens at the tenant.
final class Auth0Fixture: ProviderFixture {
    let tenant: FakeAuth0
    private let secret: SecretFile
    /// Each sub's user id.
    private let users = Mutex<[String: String]>([:])
    var provider: HostedProvider { .auth0 }
    /// What the sign-out records on the tenant's plan.
    var signOut: String { tenant.plan == .enterprise ? "signed_out" : "refresh_tokens_revoked,blocked,unblocked" }
    var behaviour: ProviderBehaviour {
        ProviderBehaviour(
            // The sessions and refresh tokens are deleted before the user.
            deleteAppleOnly: "\(signOut),deleted",
            // Unlinking makes the Apple identity a user of its own, which is then deleted.
            deleteLinked: "\(signOut),unlinked,deleted",
            // A user's main identity cannot be unlinked ("Main identity cannot be removed").
            unlinksSoleIdentity: false,
            refusedCredential: "access_denied [credential]")
    }

    init(plan: FakeAuth0.Plan = .enterprise) throws {
        tenant = try FakeAuth0(plan: plan)
        // Ending in a newline, as `echo "$SECRET" > file` writes it: the secret is without it.
        secret = try SecretFile("auth0-client-secret", Array((FakeAuth0.secret + "\n").utf8))
    }

    func configure(_ config: inout ServerConfiguration) {
        config.hostedProviders.targets.append(.auth0)
        config.hostedProviders.auth0 = .init(
            domain: FakeAuth0.domain, clientID: FakeAuth0.clientID, clientSecretFile: secret.path, url: tenant.fake.url)
    }

    func addAppleUser(sub: String) throws {
        users.withLock { $0[sub] = "apple|\(sub)" }
        tenant.add("apple|\(sub)", [("apple", sub)])
    }

    func addLinkedUser(sub: String) throws {
        let id = "auth0|\(sub.suffix(4))"
        users.withLock { $0[sub] = id }
        tenant.add(id, [("auth0", String(sub.suffix(4))), ("apple", sub)])
    }

    func startSession(sub: String) throws -> String {
        guard let id = users.withLock({ $0[sub] }), tenant.user(id)?.signedIn == true else {
            throw MotoServer.Failure(description: "no signed-in user for \(sub)")
        }
        return id
    }

    func sessionAlive(_ session: String) throws -> Bool { tenant.user(session)?.signedIn == true }

    func userExists(sub: String) throws -> Bool { users.withLock { $0[sub] }.flatMap(tenant.user) != nil }

    var unlinked: [String] {
        tenant.fake.requests.compactMap { seen in
            guard seen.method == "DELETE", seen.answer.status == 200, seen.path.contains("/identities/apple/") else { return nil }
            return seen.path.split(separator: "/").last.map(String.init)
        }
    }

    func down() {
        tenant.fake.answer { _ in FakeAuth0.error(503, "Service Unavailable", "The service is unavailable.") }
    }

    /// The client secret rotated: the token endpoint refuses it and the tokens given stop working.
    func refuseCredential() {
        tenant.expireTokens()
        tenant.fake.answer { request in
            request.head.path == "/oauth/token"
                ? .json(401, #"{"error":"access_denied","error_description":"Unauthorized"}"#) : FakeAuth0.error(401, "Unauthorized", "Invalid token")
        }
    }

    func up() { tenant.fake.answer { _ in nil } }

    func stop() {
        tenant.fake.stop()
        secret.remove()
        // The outage's 503 comes from in front of the API, where the description does not reach.
        if OpenAPIChecker.runs {
            validating { try ProviderOpenAPI.expectValid(tenant.fake.requests, specs: Auth0ClientTests.specs, extraStatus: [503]) }
        }
    }
}

/// Clerk: `FakeClerk`'s instance, the secret key in a file. A session is one of the user's Clerk
/// sessions.
final class ClerkFixture: ProviderFixture {
    let instance: FakeClerk
    private let key: SecretFile
    /// Each sub's user id.
    private let users = Mutex<[String: String]>([:])
    var provider: HostedProvider { .clerk }
    var behaviour: ProviderBehaviour {
        ProviderBehaviour(
            // The sessions are revoked before the user is deleted.
            deleteAppleOnly: "signed_out,deleted",
            // The target keeps an Apple-only user's Apple account (docs/hosted-providers.md): removing
            // it would leave a user nobody can sign in as.
            unlinksSoleIdentity: false,
            refusedCredential: "authentication_invalid [credential]")
    }

    init() throws {
        instance = try FakeClerk()
        key = try SecretFile("clerk-secret-key", Array((FakeClerk.secretKey + "\n").utf8))
    }

    func configure(_ config: inout ServerConfiguration) {
        config.hostedProviders.targets.append(.clerk)
        config.hostedProviders.clerk = .init(secretKeyFile: key.path, url: instance.fake.url + "/v1")
    }

    private func add(sub: String, password: Bool) {
        let id = "user_\(sub.suffix(4))"
        users.withLock { $0[sub] = id }
        instance.add(id, apple: sub, password: password, emails: [.apple])
    }

    func addAppleUser(sub: String) throws { add(sub: sub, password: false) }
    func addLinkedUser(sub: String) throws { add(sub: sub, password: true) }

    func startSession(sub: String) throws -> String {
        guard let id = users.withLock({ $0[sub] }), let session = instance.user(id)?.sessions.first(where: { FakeClerk.live($0.status) }) else {
            throw MotoServer.Failure(description: "no session for \(sub)")
        }
        return "\(id) \(session.id)"
    }

    func sessionAlive(_ session: String) throws -> Bool {
        let parts = session.split(separator: " ").map(String.init)
        return instance.user(parts[0])?.sessions.contains { $0.id == parts[1] && FakeClerk.live($0.status) } == true
    }

    func userExists(sub: String) throws -> Bool { users.withLock { $0[sub] }.flatMap(instance.user) != nil }

    var unlinked: [String] {
        let subs = users.withLock { Dictionary(uniqueKeysWithValues: $0.map { ($1, $0) }) }
        return instance.fake.requests.compactMap { seen in
            let parts = seen.path.split(separator: "/").map(String.init)
            guard seen.method == "DELETE", seen.answer.status == 200, parts.count == 5, parts[3] == "external_accounts" else { return nil }
            return subs[parts[2]]
        }
    }

    func down() {
        instance.fake.answer { _ in FakeClerk.error(503, "service_unavailable", "The service is unavailable") }
    }

    /// The secret key rolled: every call is refused.
    func refuseCredential() {
        instance.fake.answer { _ in
            FakeClerk.error(401, "authentication_invalid", "Unable to authenticate the request, you need to supply an active API key")
        }
    }

    func up() { instance.fake.answer { _ in nil } }

    func stop() {
        instance.fake.stop()
        key.remove()
        // The 429 is on Clerk's rate-limits page; the outage's 503 from in front of the API.
        if OpenAPIChecker.runs {
            validating { try ProviderOpenAPI.expectValid(instance.fake.requests, specs: ["clerk-backend-api.json"], extraStatus: [429, 503]) }
        }
    }
}
