import Foundation
import Logging
import SiwaCore
import SiwaCrypto
import SiwaDevTools
import SiwaFetch
import SiwaPostgres
import SiwaRuntime
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

    /// True when `left` is within 5 s under `ttl` (the fetch took a moment).
    static func near(_ left: Duration?, _ ttl: Duration) -> Bool {
        guard let left else { return false }
        return left > ttl - .seconds(5) && left <= ttl
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

    @Test("a fetched key admits its own signatures only: tampered, or another key's under its kid, is invalid")
    func signatureChecked() throws {
        try Self.withServer { server in
            let store = KeyStore(url: server.url, minRefreshInterval: .zero, logger: Self.logger)
            try store.load()
            let token = try Self.keyA.sign(claims: NotificationSigner.claims(audience: "a", type: "consent-revoked", sub: "s"))
            let jws = try CompactJWS.parse(token)
            #expect(store.check(kid: "key-a", signingInput: jws.signingInput, signature: jws.signature) == .valid)
            var flipped = jws.signature
            flipped[7] ^= 0x01
            #expect(store.check(kid: "key-a", signingInput: jws.signingInput, signature: flipped) == .invalid)
            let impostor = NotificationSigner(key: Self.keyB.key, kid: "key-a")
            #expect(try Self.check(store, impostor) == .invalid)
        }
    }

    @Test("rotation: a new kid refused by a fetch is accepted after a later fetch has it; the old one keeps working")
    func rotation() throws {
        try Self.withServer { server in
            let store = KeyStore(url: server.url, minRefreshInterval: .zero, logger: Self.logger)
            try store.load()
            #expect(try Self.check(store, Self.keyA) == .valid)
            #expect(try Self.check(store, Self.keyB) == .unknownKey)
            server.set { $0.body = Self.jwks(Self.keyA, Self.keyB) }
            // Refused until a later fetch: the one after its first sighting lacked it.
            #expect(try Self.check(store, Self.keyB) == .unknownKey)
            #expect(server.requestCount == 2)
            try store.refresh()
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
            let store = KeyStore(url: server.url, minRefreshInterval: .zero, logger: Self.logger)
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
            let store = KeyStore(url: server.url, minRefreshInterval: .zero, fetchTimeout: .seconds(1), logger: Self.logger)
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
            let store = KeyStore(url: server.url, minRefreshInterval: .seconds(10), logger: Self.logger)
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
            let store = KeyStore(url: server.url, minRefreshInterval: .zero, fetchTimeout: .seconds(5), logger: Self.logger)
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
            store.wait(ticket, until: Deadline(after: .seconds(5))) { woken.store(true, ordering: .relaxed) }
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
            let store = KeyStore(url: server.url, minRefreshInterval: .zero, logger: Self.logger)
            server.set { $0.cacheControl = "public, max-age=600, must-revalidate" }
            try store.refresh()
            #expect(Self.near(store.expiresIn, .seconds(600)))
            #expect(!store.isRefreshDue)
            server.set { $0.cacheControl = "max-age=1" }
            try store.refresh()
            #expect(Self.near(store.expiresIn, .seconds(60)))
            server.set { $0.cacheControl = nil }
            try store.refresh()
            #expect(Self.near(store.expiresIn, KeyStore.defaultTTL))
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
            let persistence = Application.keyPersistence(pool: pool, url: server.url, saves: true, logger: Self.logger)
            let first = KeyStore(url: server.url, minRefreshInterval: .zero, persistence: persistence, logger: Self.logger)
            try first.load()
            // Saved right after the fetch, off the waiting callers' path.
            #expect(try eventually { try TestDatabase.query(url, "SELECT count(*) FROM siwa.key_sets").scalar == "1" })

            server.set { $0.status = 503 }
            let restarted = KeyStore(url: server.url, minRefreshInterval: .zero, persistence: persistence, logger: Self.logger)
            try restarted.load()
            #expect(restarted.isLoaded)
            #expect(try Self.check(restarted, Self.keyA) == .valid)

            let nothingStored = KeyStore(url: server.url, minRefreshInterval: .zero, logger: Self.logger)
            #expect(throws: (any Error).self) { try nothingStored.load() }
            #expect(!nothingStored.isLoaded)
        }
    }

    @Test("an unreachable key endpoint: the scheduled refresh backs off (doubling) and logs one warning, then one line when it recovers")
    func failingRefreshBacksOffAndLogsStateChanges() throws {
        try Self.withServer { server in
            let clock = ManualClock(start: Deadline(uptimeNanoseconds: 1000 * 1_000_000_000))
            let logs = LogSink.capturing()
            let logger = Logger(label: "keys") { LineLogHandler(label: $0, level: .debug, format: .json, sink: logs) }
            let store = KeyStore(
                url: server.url, minRefreshInterval: .seconds(2), refreshBackoffLimit: .seconds(16), logger: logger,
                clock: clock)
            try store.load()
            server.set { $0.status = 503 }
            clock.advance(by: .seconds(4000))  // the one-hour TTL ran out
            // The key refresher's loop, checking every second of the injected clock for 100 s.
            var tries: [Int64] = []
            for _ in 0..<100 {
                if store.isRefreshDue {
                    tries.append(Int64(clock.now.uptimeNanoseconds / 1_000_000_000) - 5000)
                    #expect(throws: (any Error).self) { try store.refresh() }
                }
                clock.advance(by: .seconds(1))
            }
            // Every 2 s before, this was 50 tries; now 2, 4, 8, 16 s apart, then 16 s.
            #expect(tries == [0, 2, 6, 14, 30, 46, 62, 78, 94])
            #expect(store.failedFetches == tries.count)
            #expect(server.requestCount == 1 + tries.count)
            let warnings = logs.lines.filter { $0.contains("\"level\":\"warning\"") }
            #expect(warnings.count == 1, "\(warnings)")
            #expect(warnings.first?.contains("key set refresh failing") == true)
            #expect(logs.lines.filter { $0.contains("key set refresh failed again") }.count == tries.count - 1)

            server.set { $0.status = 200 }
            clock.advance(by: .seconds(16))
            #expect(store.isRefreshDue)
            try store.refresh()
            #expect(store.failedFetches == 0)
            let recovered = logs.lines.filter { $0.contains("key set fetch recovered") }
            #expect(recovered.count == 1)
            #expect(recovered.first?.contains("\"failed_fetches\":\"\(tries.count)\"") == true, "\(recovered)")
            #expect(!store.isRefreshDue)  // fine again: next at the TTL
        }
    }
}
