import Foundation
import Logging
import SiwaCore
import SiwaCrypto
import SiwaDevTools
import SiwaFetch
import SiwaPostgres
import Synchronization
import Testing

@testable import SiwaApp

/// Key set management against a loopback JWKS server that rotates keys, fails and hangs.
@Suite("Key store over HTTP")
struct KeyStoreTests {
    static let keyA = NotificationSigner(key: TestHarness.sharedKey, kid: "key-a")
    static let keyB = NotificationSigner(key: try! RSAPrivateKey.generate(), kid: "key-b")
    static let logger = Logger(label: "keys") { _ in SwiftLogNoOpLogHandler() }

    static func jwks(_ signers: NotificationSigner...) -> String {
        JWKSet.serialize(signers.map { JWK(kid: $0.kid, modulus: $0.key.modulus, exponent: $0.key.exponent) })
    }

    /// Runs `body` with a loopback JWKS server publishing key A, stopped afterwards.
    static func withServer(_ body: (JWKSServer) throws -> Void) throws {
        Fetcher.initialize()
        let server = try JWKSServer(body: jwks(keyA))
        defer { server.stop() }
        try body(server)
    }

    /// Checks a token signed by `signer` the way the receiver does.
    static func check(_ store: KeyStore, _ signer: NotificationSigner) throws -> SignatureCheck {
        let token = try signer.sign(claims: NotificationSigner.claims(audience: "a", type: "consent-revoked", sub: "s"))
        let jws = try CompactJWS.parse(token)
        return store.check(kid: signer.kid, signingInput: jws.signingInput, signature: jws.signature)
    }

    @Test("rotation: a new kid is fetched once and accepted; the old one keeps working")
    func rotation() throws {
        try Self.withServer { server in
            let store = KeyStore(url: server.url, minRefreshInterval: 0, logger: Self.logger)
            try store.load()
            #expect(try Self.check(store, Self.keyA) == .valid)
            #expect(try Self.check(store, Self.keyB) == .unknownKey)
            server.set { $0.body = Self.jwks(Self.keyA, Self.keyB) }
            #expect(try Self.check(store, Self.keyB) == .valid)
            #expect(try Self.check(store, Self.keyA) == .valid)
            server.set { $0.body = Self.jwks(Self.keyB) }  // Apple retires key A
            try store.refresh()
            #expect(try Self.check(store, Self.keyA) == .unknownKey)
        }
    }

    @Test("a failing endpoint keeps the old keys; an unknown kid then gets keys_unavailable")
    func failingEndpoint() throws {
        try Self.withServer { server in
            let store = KeyStore(url: server.url, minRefreshInterval: 0, logger: Self.logger)
            try store.load()
            server.set {
                $0.status = 500
                $0.body = "oops"
            }
            #expect(throws: (any Error).self) { try store.refresh() }
            #expect(try Self.check(store, Self.keyA) == .valid)
            #expect(try Self.check(store, Self.keyB) == .keysUnavailable)
            server.set {
                $0.status = 200
                $0.body = "{\"keys\":[]}"
            }  // no usable key: also a failure
            #expect(throws: (any Error).self) { try store.refresh() }
            #expect(try Self.check(store, Self.keyA) == .valid)
        }
    }

    @Test("a hanging endpoint is given up after the fetch timeout; an oversized one is refused")
    func hangingAndOversized() throws {
        try Self.withServer { server in
            let store = KeyStore(url: server.url, minRefreshInterval: 0, fetchTimeout: 1, logger: Self.logger)
            try store.load()
            server.set { $0.delay = 5 }
            let started = Date()
            #expect(throws: (any Error).self) { try store.refresh() }
            #expect(Date().timeIntervalSince(started) < 3)
            #expect(try Self.check(store, Self.keyA) == .valid)
            server.set {
                $0.delay = 0
                $0.body = "{\"keys\":[],\"pad\":\"" + String(repeating: "x", count: KeyStore.maxResponseBytes) + "\"}"
            }
            #expect(throws: (any Error).self) { try store.refresh() }
        }
    }

    @Test("made-up kids cannot force a fetch storm: at most one fetch start per minimum interval, and no 401 they are unsure of")
    func rateLimited() throws {
        try Self.withServer { server in
            let store = KeyStore(url: server.url, minRefreshInterval: 10, logger: Self.logger)
            try store.load()
            #expect(server.requestCount == 1)
            for i in 0..<50 {
                // Inside the interval after the load no fetch can begin after these arrived: 503, not 401.
                let stranger = NotificationSigner(key: TestHarness.sharedKey, kid: "made-up-\(i)")
                #expect(try Self.check(store, stranger) == .keysUnavailable)
            }
            #expect(throws: (any Error).self) { try store.refresh() }
            #expect(server.requestCount == 1)
            #expect(try Self.check(store, Self.keyA) == .valid)
        }
    }

    @Test("an unknown kid does not block: the lookup says wait while the fetch runs, known kids are answered meanwhile")
    func unknownKidWaitsWithoutBlocking() throws {
        try Self.withServer { server in
            let store = KeyStore(url: server.url, minRefreshInterval: 0, fetchTimeout: 5, logger: Self.logger)
            try store.load()
            server.set { $0.delay = 1 }
            let token = try Self.keyB.sign(claims: NotificationSigner.claims(audience: "a", type: "consent-revoked", sub: "s"))
            let jws = try CompactJWS.parse(token)
            let arrived = store.now()
            guard case .wait(let ticket) = store.check(kid: "key-b", signingInput: jws.signingInput, signature: jws.signature, arrivedAt: arrived)
            else {
                Issue.record("expected to wait for a fetch")
                return
            }
            #expect(try Self.check(store, Self.keyA) == .valid)  // not behind the fetch
            let woken = Atomic<Bool>(false)
            store.wait(ticket, timeout: 5) { woken.store(true, ordering: .relaxed) }
            #expect(eventually(timeout: 5) { woken.load(ordering: .relaxed) })
            guard
                case .checked(let result) = store.check(
                    kid: "key-b", signingInput: jws.signingInput, signature: jws.signature,
                    arrivedAt: arrived, mayWait: false)
            else {
                Issue.record("expected a definite answer after the fetch")
                return
            }
            #expect(result == .unknownKey)
            #expect(server.requestCount == 2)
        }
    }

    @Test("Cache-Control max-age sets the TTL (clamped to 60 s .. 1 day); without it one hour")
    func cacheControl() throws {
        try Self.withServer { server in
            let store = KeyStore(url: server.url, minRefreshInterval: 0, logger: Self.logger)
            server.set { $0.cacheControl = "public, max-age=600, must-revalidate" }
            try store.refresh()
            #expect(abs((store.expiresIn ?? 0) - 600) < 5)
            #expect(!store.isRefreshDue)
            server.set { $0.cacheControl = "max-age=1" }
            try store.refresh()
            #expect(abs((store.expiresIn ?? 0) - 60) < 5)
            server.set { $0.cacheControl = nil }
            try store.refresh()
            #expect(abs((store.expiresIn ?? 0) - KeyStore.defaultTTL) < 5)
            #expect(KeyStore.maxAge("no-cache, max-age=0") == 0)
            #expect(KeyStore.maxAge("private") == nil)
        }
    }

    @Test("the last good key set is persisted: a restart while the endpoint is down still verifies")
    func persistedAcrossRestart() throws {
        let url = try TestDatabase.create()
        let pool = PostgresPool(conninfo: url, size: 1)
        defer { pool.close() }
        try Self.withServer { server in
            let persistence = Application.keyPersistence(pool: pool, url: server.url, logger: Self.logger)
            let first = KeyStore(url: server.url, minRefreshInterval: 0, persistence: persistence, logger: Self.logger)
            try first.load()
            // Saved right after the fetch, off the waiting callers' path.
            #expect(try eventually { try TestDatabase.query(url, "SELECT count(*) FROM siwa.key_sets").scalar == "1" })

            server.set { $0.status = 503 }
            let restarted = KeyStore(url: server.url, minRefreshInterval: 0, persistence: persistence, logger: Self.logger)
            try restarted.load()
            #expect(restarted.isLoaded)
            #expect(try Self.check(restarted, Self.keyA) == .valid)

            let nothingStored = KeyStore(url: server.url, minRefreshInterval: 0, logger: Self.logger)
            #expect(throws: (any Error).self) { try nothingStored.load() }
            #expect(!nothingStored.isLoaded)
        }
    }
}
