import Foundation
import Logging
import SiwaCore
import SiwaCrypto
import SiwaDevTools
import SiwaFetch
import Testing

@testable import SiwaApp

/// The `--dev` key is trusted besides Apple's key set: a token under its `kid` must still carry
/// its signature (a tampered one, or one made by another key, is refused like any other).
@Suite("Dev key signatures")
struct DevKeySignatureTests {
    static let devKey = try! RSAPrivateKey.generate(bits: 2048)
    static let stranger = try! RSAPrivateKey.generate(bits: 2048)

    /// `token` with one character of its signature changed (not the last: its low bits may be padding).
    static func tampered(_ token: String) -> String {
        var parts = token.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
        var signature = Array(parts[2])
        signature[10] = signature[10] == "A" ? "B" : "A"
        parts[2] = String(signature)
        return parts.joined(separator: ".")
    }

    static func token(_ key: RSAPrivateKey, audience: String = ServerConfiguration.devAudience) throws -> String {
        try NotificationSigner(key: key, kid: DevKey.kid).sign(
            claims: NotificationSigner.claims(audience: audience, type: "consent-revoked", sub: "000739.dev.0001"))
    }

    @Test("key store: the dev key admits its own signature only (tampered, or another key's under its kid: invalid)")
    func keyStore() throws {
        let store = KeyStore(
            url: "file:///nonexistent/siwa-keys.json", extraKeys: [DevKey.kid: try Self.devKey.publicKey()],
            logger: Logger(label: "keys") { _ in SwiftLogNoOpLogHandler() })
        func check(_ token: String) throws -> SignatureCheck {
            let jws = try CompactJWS.parse(token)
            return store.check(kid: DevKey.kid, signingInput: jws.signingInput, signature: jws.signature)
        }
        let good = try Self.token(Self.devKey)
        #expect(try check(good) == .valid)
        #expect(try check(Self.tampered(good)) == .invalid)
        #expect(try check(try Self.token(Self.stranger)) == .invalid)
    }

    @Test(
        "serve --dev in process: a dev-signed notification is accepted; tampered or another key's is 401 bad_signature, nothing stored",
        .needsDatabase)
    func overHTTP() throws {
        let conninfo = try TestDatabase.create()
        let dir = NSTemporaryDirectory() + "siwa-devkey-\(UInt64.random(in: 0...UInt64.max))"
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let key = try DevKey.loadOrCreate(dataDirectory: dir)
        var config = ServerConfiguration()
        config.dev = true
        config.dataDirectory = dir
        config.databaseURL = conninfo
        config.audiences = [ServerConfiguration.devAudience]
        config.jwksURL = "file://" + dir + "/no-keys.json"
        config.listen = ListenAddress(host: "127.0.0.1", port: 0)
        config.adminListen = ListenAddress(host: "127.0.0.1", port: 0)
        config.httpThreads = 2
        let app = Application(
            configuration: config, roles: .receive, options: TestHarness.options(retryBaseDelay: 1),
            logger: Logger(label: "dev") { _ in SwiftLogNoOpLogHandler() })
        try app.start()
        defer { app.shutdown() }
        let url = "http://127.0.0.1:\(app.publicPort ?? 0)/apple/notifications"
        func post(_ token: String) throws -> (status: Int, code: String?) {
            let response = try Fetcher.perform(
                FetchRequest(
                    url: url, method: "POST", headers: ["Content-Type: application/json"],
                    body: Array(NotificationSigner.body(token: token).utf8), allowedSchemes: [.http]))
            let json = try? JSONParser.parse(response.body)
            return (response.status, json?["error"]?.stringValue ?? json?["status"]?.stringValue)
        }
        let good = try Self.token(key)
        let bad = try post(Self.tampered(good))
        #expect(bad.status == 401 && bad.code == "bad_signature")
        let foreign = try post(try Self.token(Self.stranger))
        #expect(foreign.status == 401 && foreign.code == "bad_signature")
        #expect(try TestDatabase.query(conninfo, "SELECT count(*) FROM siwa.events").scalar == "0")
        // The same token untouched: the dev key does sign (the refusals above were the signature's).
        let accepted = try post(good)
        #expect(accepted.status == 200 && accepted.code == "accepted")
        #expect(try TestDatabase.query(conninfo, "SELECT count(*) FROM siwa.events").scalar == "1")
    }
}
