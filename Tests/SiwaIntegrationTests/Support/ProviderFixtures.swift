import Foundation
import Logging
import SiwaApp
import SiwaCore
import SiwaFetch
import SiwaHTTP
import Synchronization
import Testing

/// A hosted provider as the provider-call matrix (`ProviderCallTests`) drives it: its users, what
/// the calls did to them, and its outages. One per provider; each one's users are made for the test.
protocol ProviderFixture {
    var provider: HostedProvider { get }
    /// The variables of its target (`SIWA_APPLY_TO` set by the caller).
    func configure(_ config: inout ServerConfiguration)
    /// A user who signs in with Apple only, as `sub`.
    func addAppleUser(sub: String) throws
    /// A user with a password who also linked the Apple identity `sub`.
    func addLinkedUser(sub: String) throws
    /// A session of the user of `sub`; `sessionAlive` says whether it still works.
    func startSession(sub: String) throws -> String
    func sessionAlive(_ session: String) throws -> Bool
    /// The user of `sub` exists at the provider (deleted or not).
    func userExists(sub: String) throws -> Bool
    /// The Apple identities `sub` unlinked at the provider, in order.
    var unlinked: [String] { get }
    /// Every call answers as the provider down (a 503) until `up`.
    func down()
    /// Every call is refused as a revoked credential until `up`.
    func refuseCredential()
    func up()
    func stop()
    /// What its target does where the providers differ (docs/hosted-providers.md).
    var behaviour: ProviderBehaviour { get }
}

/// Where a provider's behaviour makes an effect's outcome differ from the common one.
struct ProviderBehaviour {
    /// The actions of `delete_user` on an Apple-only user.
    var deleteAppleOnly = "deleted"
    /// The actions of `delete_user` on a user with another way in, who keeps it.
    var deleteLinked = "signed_out,unlinked"
    /// `unlink` removes an Apple-only user's Apple identity (otherwise the user keeps it, signed out).
    var unlinksSoleIdentity = true
    /// `last_reason` of a call made with a credential the provider refuses.
    var refusedCredential: String
}

/// Amazon Cognito: moto's server behind a loopback front that answers what moto lacks
/// (AdminDisableProviderForUser: recorded, and the link removed from the user's `identities` as
/// Cognito does) and plays the
/// outages; everything else goes to moto as it came.
final class CognitoFixture: ProviderFixture {
    enum Mode { case normal, down, refusing }

    let moto: MotoServer
    let admin: CognitoClient
    let pool: String
    /// What the front plays, and the identities it unlinked.
    final class State: Sendable {
        let mode = Mutex(Mode.normal)
        let disabled = Mutex<[String]>([])
    }

    private let front: FakeCognito
    private let state = State()
    var provider: HostedProvider { .cognito }
    var behaviour: ProviderBehaviour { ProviderBehaviour(refusedCredential: "UnrecognizedClientException [credential]") }

    init() throws {
        moto = try MotoServer()
        let setup = try CognitoClientTests.client(url: moto.url)
        let created = setup.call("CreateUserPool", ["PoolName": .string("siwa-matrix")])
        pool = try CognitoClientTests.value(created)??["UserPool"]?["Id"]?.stringValue ?? { throw MotoServer.Failure(description: "no pool") }()
        admin = try CognitoClientTests.client(url: moto.url, pool: pool)
        let motoURL = moto.url
        let state = self.state
        let (admin, pool) = (admin, pool)
        front = try FakeCognito { seen in
            switch state.mode.withLock({ $0 }) {
            case .down: return HTTPResponse(status: 503)
            case .refusing: return .json(400, #"{"__type":"UnrecognizedClientException","message":"The security token is invalid"}"#)
            case .normal: break
            }
            if seen.target == Cognito.targetPrefix + "AdminDisableProviderForUser" {
                let sub = seen.json?["User"]?["ProviderAttributeValue"]?.stringValue ?? ""
                state.disabled.withLock { $0.append(sub) }
                Self.removeLink(sub: sub, admin: admin, pool: pool)
                return .json(200, "{}")
            }
            return Self.proxy(seen, to: motoURL)
        }
    }

    /// What Cognito does on `AdminDisableProviderForUser`: the Apple identity `sub` leaves the
    /// `identities` of the user holding it (moto lacks the call, so the front writes it).
    static func removeLink(sub: String, admin: CognitoClient, pool: String) {
        guard case .done(let user, _) = admin.findUser(sub: sub),
            case .done(let read?, _) = admin.call("AdminGetUser", ["UserPoolId": .string(pool), "Username": .string(user.username)]),
            let text = read["UserAttributes"]?.arrayValue?.first(where: { $0["Name"]?.stringValue == "identities" })?["Value"]?.stringValue,
            let identities = (try? JSONParser.parse(Array(text.utf8)))?.arrayValue
        else { return }
        let kept = identities.filter { !($0["providerName"]?.stringValue == Cognito.appleProvider && $0["userId"]?.stringValue == sub) }
        _ = admin.call(
            "AdminUpdateUserAttributes",
            [
                "UserPoolId": .string(pool), "Username": .string(user.username),
                "UserAttributes": .array([.object(["Name": .string("identities"), "Value": .string(JSONValue.array(kept).serialized())])]),
            ])
    }

    static func proxy(_ seen: FakeCognito.Seen, to url: String) -> HTTPResponse {
        let body = Array((seen.json ?? .object([:])).serialized().utf8)
        let request = FetchRequest(
            url: url, method: "POST",
            headers: [
                "Content-Type: \(Cognito.contentType)", "X-Amz-Target: \(seen.target ?? "")",
                "Authorization: AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20260101/us-east-1/cognito-idp/aws4_request, SignedHeaders=host, Signature=0",
            ],
            body: body, connectTimeout: .seconds(5), totalTimeout: .seconds(20), allowedSchemes: [.http])
        guard let response = try? Fetcher.perform(request) else { return HTTPResponse(status: 502) }
        return .json(response.status, String(decoding: response.body, as: UTF8.self))
    }

    func configure(_ config: inout ServerConfiguration) {
        config.hostedProviders.targets.append(.cognito)
        config.hostedProviders.cognito = .init(
            userPoolID: pool, region: "us-east-1", credentials: .environment(CognitoClientTests.credentials), url: front.url)
    }

    private func create(_ username: String, identities: [(String, String)]) throws {
        let result = admin.call(
            "AdminCreateUser",
            [
                "UserPoolId": .string(pool), "Username": .string(username), "MessageAction": .string("SUPPRESS"),
                "UserAttributes": .array([.object(["Name": .string("identities"), "Value": CognitoClientTests.identities(identities)])]),
            ])
        guard case .done = result else { throw MotoServer.Failure(description: "AdminCreateUser: \(result)") }
        _ = admin.call(
            "AdminSetUserPassword",
            ["UserPoolId": .string(pool), "Username": .string(username), "Password": .string("Pa55word!long"), "Permanent": .bool(true)])
    }

    func addAppleUser(sub: String) throws { try create(Cognito.federatedUsername(sub: sub), identities: [(Cognito.appleProvider, sub)]) }

    func addLinkedUser(sub: String) throws { try create("native-\(sub.suffix(4))", identities: [(Cognito.appleProvider, sub)]) }

    private func username(sub: String) -> String? {
        if case .done(let user, _) = admin.findUser(sub: sub) { return user.username }
        return nil
    }

    func startSession(sub: String) throws -> String {
        guard let user = username(sub: sub) else { throw MotoServer.Failure(description: "no user for \(sub)") }
        let pool = CognitoClientTests.Pool(moto: moto, admin: admin, id: self.pool)
        let (token, client) = try pool.refreshToken(user)
        return client + " " + token
    }

    func sessionAlive(_ session: String) throws -> Bool {
        let pool = CognitoClientTests.Pool(moto: moto, admin: admin, id: self.pool)
        let parts = session.split(separator: " ", maxSplits: 1).map(String.init)
        return pool.refreshes(parts[1], clientID: parts[0]) == .done(true, status: 200)
    }

    func userExists(sub: String) throws -> Bool { username(sub: sub) != nil }

    var unlinked: [String] { state.disabled.withLock { $0 } }

    func down() { state.mode.withLock { $0 = .down } }
    func refuseCredential() { state.mode.withLock { $0 = .refusing } }
    func up() { state.mode.withLock { $0 = .normal } }

    func stop() {
        front.stop()
        moto.stop()
        // Every answer checked against botocore's model but the outage's 503, from in front of the
        // API, which the model does not describe.
        do { try front.expectModelled { $0.answer?.status == 503 } } catch { Issue.record("recorded requests not checked: \(error)") }
    }
}
