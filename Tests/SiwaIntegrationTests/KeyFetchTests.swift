import Foundation
import SiwaApp
import SiwaCore
import SiwaCrypto
import SiwaDevTools
import SiwaFetch
import Synchronization
import Testing

/// Unknown `kid`s over real HTTP against a loopback JWKS server that rotates and hangs: a genuine
/// new key is never refused with a 401, fetches are single-flight and rate limited, and known
/// keys never wait for a fetch.
@Suite(
    "Key fetches: waiting, single flight, 503 for an unknown kid",
    .needsDatabase)
struct KeyFetchTests {
    /// Runs `body` with a JWKS server publishing the harness key and a harness fetching from it.
    static func withServer(interval: Int, _ body: (TestHarness, JWKSServer) throws -> Void) throws {
        Fetcher.initialize()
        let server = try JWKSServer(body: NotificationSigner(key: TestHarness.sharedKey, kid: "test-key-1").jwks)
        defer { server.stop() }
        let h = try TestHarness(jwksURL: server.url, keyRefreshInterval: interval)
        defer { h.stop() }
        try body(h, server)
    }

    static func jwks(_ signers: NotificationSigner...) -> String {
        JWKSet.serialize(signers.map { JWK(kid: $0.kid, modulus: $0.key.modulus, exponent: $0.key.exponent) })
    }

    /// `token` with its header's `kid` replaced (the signature no longer matters: an unknown kid
    /// is decided before any signature check).
    static func withKid(_ token: String, _ kid: String) -> String {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        let header = JSONValue.object(["kid": .string(kid), "alg": .string("RS256")]).serialized()
        return Base64URL.encode(Array(header.utf8)) + "." + parts[1] + "." + parts[2]
    }

    static func token(_ signer: NotificationSigner, sub: String) throws -> String {
        try signer.sign(claims: NotificationSigner.claims(audience: TestHarness.audience, type: "consent-revoked", sub: sub))
    }

    @Test("a made-up kid just before Apple's first token with a rotated key: the genuine one gets 503 + Retry-After, and 200 on the retry")
    func scannerThenRotation() throws {
        try Self.withServer(interval: 3) { h, server in
            let rotated = NotificationSigner(key: try RSAPrivateKey.generate(), kid: "rotated-\(UInt32.random(in: 0...UInt32.max))")
            let genuine = try Self.token(rotated, sub: "sub.rotated")
            let bogus = Self.withKid(try h.token(sub: "sub.scanner"), "made-up-by-a-scanner")
            h.waitForKeyFetchWindow(since: server.lastRequest)
            let fetches = server.requestCount

            // t0: the scanner's kid starts a fetch, waits for it, and is refused.
            let t0 = Date()
            let scanner = try h.post(token: bogus)
            #expect(scanner.status == 401)
            #expect(scanner.code == "unknown_kid")
            #expect(server.requestCount == fetches + 1)
            #expect(h.logs.lines.contains { $0.contains(#""kid":"made-up-by-a-scanner""#) }, "the kid quoted once: \(h.logs.lines)")

            // t0 + 0.3 s: Apple rotates; its first notification signed with the new key follows.
            Thread.sleep(until: t0.addingTimeInterval(0.3))
            server.rotate(to: Self.jwks(h.signer, rotated))
            let sentAt = Date()
            let first = try h.post(token: genuine)
            #expect(sentAt.timeIntervalSince(t0) < Double(h.keyRefreshInterval), "sent inside the min-refresh window")
            #expect(first.status == 503)
            #expect(first.code == "keys_unavailable")
            let retryAfter = Int(first.headers["retry-after"] ?? "") ?? 0
            #expect(retryAfter >= 1 && retryAfter <= h.keyRefreshInterval + 1, "Retry-After \(retryAfter)")

            // Apple retries after Retry-After: the fetch owed in the background has the key.
            Thread.sleep(forTimeInterval: Double(retryAfter))
            let retry = try h.post(token: genuine)
            #expect(retry.status == 200)
            #expect(retry.code == "accepted")
            #expect(server.requestCount == fetches + 2)
        }
    }

    @Test("a made-up kid POSTed inside the min-refresh window: 503 + Retry-After; Apple's retry after the Retry-After: 401, and every later one")
    func madeUpKidThen401() throws {
        try Self.withServer(interval: 3) { h, server in
            let bogus = Self.withKid(try h.token(sub: "sub.made-up"), "made-up-\(UInt32.random(in: 0...UInt32.max))")
            // Just after a fetch: no fetch may begin now.
            h.waitForKeyFetchWindow(since: server.lastRequest)
            _ = try h.post(token: Self.withKid(try h.token(sub: "sub.trigger"), "trigger-a-fetch"))
            let fetches = server.requestCount
            let first = try h.post(token: bogus)
            #expect(first.status == 503)
            #expect(first.code == "keys_unavailable")
            let retryAfter = Int(first.headers["retry-after"] ?? "") ?? 0
            #expect(retryAfter >= 1 && retryAfter <= h.keyRefreshInterval + 1, "Retry-After \(retryAfter)")
            // Apple waits the Retry-After and retries: the fetch owed in the background has run
            // (after the kid was first seen) without it.
            Thread.sleep(forTimeInterval: Double(retryAfter))
            let retry = try h.post(token: bogus)
            #expect(retry.status == 401)
            #expect(retry.code == "unknown_kid")
            #expect(server.requestCount == fetches + 1)
            // Later retries, each after the last fetch: still 401, and no more fetches for it.
            Thread.sleep(forTimeInterval: Double(h.keyRefreshInterval))
            let again = try h.post(token: bogus)
            #expect(again.status == 401)
            #expect(again.code == "unknown_kid")
            #expect(server.requestCount == fetches + 1)
        }
    }

    @Test("a plain unknown kid with no recent fetch waits for its fetch and gets 401; a rotated genuine kid gets 200 at once")
    func noRecentFetch() throws {
        try Self.withServer(interval: 1) { h, server in
            h.waitForKeyFetchWindow(since: server.lastRequest)
            let fetches = server.requestCount
            let reply = try h.post(token: Self.withKid(try h.token(sub: "sub.plain"), "plain-unknown"))
            #expect(reply.status == 401)
            #expect(reply.code == "unknown_kid")
            #expect(server.requestCount == fetches + 1)

            let rotated = NotificationSigner(key: try RSAPrivateKey.generate(), kid: "rotated-key-d")
            server.rotate(to: Self.jwks(h.signer, rotated))
            h.waitForKeyFetchWindow(since: server.lastRequest)
            let genuine = try h.post(token: try Self.token(rotated, sub: "sub.rotated.d"))
            #expect(genuine.status == 200)
            #expect(genuine.code == "accepted")
            #expect(server.requestCount == fetches + 2)
            // The old key still verifies.
            #expect(try h.post(token: try h.token(sub: "sub.oldkey.d")).code == "accepted")
        }
    }

    @Test("a hanging key endpoint: known kids all 200 while the fetch hangs; unknown kids 503 within the bound")
    func hangingEndpoint() throws {
        try Self.withServer(interval: 1) { h, server in
            h.waitForKeyFetchWindow(since: server.lastRequest)
            server.set { $0.delay = 14 }  // longer than the 10 s fetch timeout
            let fetches = server.requestCount
            let stranger = Self.withKid(try h.token(sub: "sub.hang"), "unknown-during-hang")
            let waited = Mutex<(status: Int?, code: String?, retryAfter: String?, seconds: Double)?>(nil)
            let group = DispatchGroup()
            DispatchQueue.global().async(group: group) {
                let started = Date()
                let reply = try? h.post(token: stranger)
                waited.withLock { $0 = (reply?.status, reply?.code, reply?.headers["retry-after"], Date().timeIntervalSince(started)) }
            }
            // The fetch it triggered is in flight (and hangs).
            #expect(eventually(timeout: 5) { server.requestCount == fetches + 1 })

            for i in 0..<20 {
                let reply = try h.post(token: try h.token(sub: "sub.hang.known.\(i)"))
                #expect(reply.status == 200, "known kid \(i): \(reply.body)")
            }
            // Another unknown kid while a fetch that began before it runs: 503 at once.
            let other = try h.post(token: Self.withKid(stranger, "another-unknown"))
            #expect(other.status == 503)
            #expect(other.code == "keys_unavailable")
            #expect(other.headers["retry-after"] != nil)
            let stillWaiting = waited.withLock { $0 == nil }
            #expect(stillWaiting, "the known kids were answered while the fetch hung")
            #expect(server.requestCount == fetches + 1, "single flight: no second fetch while one hangs")

            group.wait()
            let result = waited.withLock { $0 }
            #expect(result?.status == 503)
            #expect(result?.code == "keys_unavailable")
            #expect(result?.retryAfter != nil)
            #expect((result?.seconds ?? 99) < 13, "answered within the 10 s bound: \(result?.seconds ?? -1) s")
            print("hanging key endpoint: the unknown kid was answered 503 after \(String(format: "%.2f", result?.seconds ?? -1)) s")
        }
    }

    @Test("a flood of random kids: at most one fetch per interval; known kids keep being answered 200")
    func randomKidFlood() throws {
        try Self.withServer(interval: 1) { h, server in
            let template = try h.token(sub: "sub.flood")
            let flood = (0..<2000).map { i in
                (jti: "flood-\(i)", token: Self.withKid(template, "random-\(UInt64.random(in: 0...UInt64.max))"))
            }
            let known = try (0..<300).map { try h.token(sub: "sub.flood.known.\($0)") }
            let fetchesBefore = server.requestCount
            let sender = LoadSender(url: h.baseURL + "/apple/notifications", tokens: flood)
            let floodDone = Atomic<Bool>(false)
            let group = DispatchGroup()
            let started = Date()
            DispatchQueue.global().async(group: group) {
                sender.run(threads: 4, pause: 0.008)
                floodDone.store(true, ordering: .relaxed)
            }
            var latencies: [Double] = []
            var statuses: [Int: Int] = [:]
            for token in known {
                if floodDone.load(ordering: .relaxed) && latencies.count >= 50 { break }
                let t = DispatchTime.now()
                let reply = try h.post(token: token)
                latencies.append(Double(DispatchTime.now().uptimeNanoseconds - t.uptimeNanoseconds) / 1e6)
                statuses[reply.status, default: 0] += 1
            }
            group.wait()
            let elapsed = Date().timeIntervalSince(started)

            let outcomes = sender.outcomes.withLock { $0 }
            #expect(outcomes.count == flood.count)
            var floodCodes: [String: Int] = [:]
            for outcome in outcomes.values { floodCodes["\(outcome.status.map(String.init) ?? "none") \(outcome.code ?? "")", default: 0] += 1 }
            #expect(Set(floodCodes.keys).isSubset(of: ["401 unknown_kid", "503 keys_unavailable"]), "\(floodCodes)")

            let times = server.requestTimes.dropFirst(fetchesBefore)
            let fetches = times.count
            #expect(fetches <= Int(elapsed / Double(h.keyRefreshInterval)) + 1, "\(fetches) fetches in \(elapsed) s")
            for (a, b) in zip(times, times.dropFirst()) {
                #expect(b.timeIntervalSince(a) >= 0.9 * Double(h.keyRefreshInterval), "two fetches \(b.timeIntervalSince(a)) s apart")
            }

            #expect(statuses == [200: latencies.count], "\(statuses)")
            let sorted = latencies.sorted()
            let p50 = sorted[sorted.count / 2]
            let p99 = sorted[min(sorted.count - 1, Int(Double(sorted.count) * 0.99))]
            print(
                String(
                    format: "random-kid flood: %d requests in %.1f s (%@), %d key fetches; %d known-kid requests alongside: p50 %.1f ms, p99 %.1f ms",
                    flood.count, elapsed, "\(floodCodes)", fetches, latencies.count, p50, p99))
        }
    }
}

extension Thread {
    static func sleep(until date: Date) {
        let wait = date.timeIntervalSinceNow
        if wait > 0 { sleep(forTimeInterval: wait) }
    }
}
