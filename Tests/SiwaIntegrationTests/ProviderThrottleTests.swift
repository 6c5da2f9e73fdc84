import Foundation
import SiwaApp
import SiwaCore
import SiwaHTTP
import Synchronization
import Testing

/// A provider's "too many requests" over sockets: the real receiver, worker and provider sender
/// against the Clerk fake, which refuses one request with 429 and `Retry-After`.
@Suite("Provider throttle: a 429 holds the target's calls", .serialized, .needsDatabase)
struct ProviderThrottleIntegrationTests {
    @Test("after a 429 with Retry-After: 2, no request reaches the provider for 2 s; then every call is made")
    func heldUntilRetryAfter() throws {
        let fixture = try ClerkFixture()
        defer { fixture.stop() }
        let subs = (1...6).map { String(format: "001234.%032x.%04d", $0, $0) }
        for sub in subs { try fixture.addAppleUser(sub: sub) }
        let h = try TestHarness { config, options in
            fixture.configure(&config)
            options.providers.concurrency = 1
            options.providers.pollInterval = .milliseconds(100)
            options.providers.schedule = ProviderCallSchedule(
                retryFor: .seconds(3600), backoff: RetryPolicy(maxAttempts: .max, baseDelay: .milliseconds(200), maxDelay: .milliseconds(400)))
        }
        defer { h.stop() }
        // When each request came, and when the 429 was answered (after the start-up check).
        let arrivals = Mutex<[Date]>([])
        let refusedAt = Mutex<Date?>(nil)
        fixture.instance.fake.answer { _ in
            let now = Date()
            arrivals.withLock { $0.append(now) }
            return refusedAt.withLock { at -> HTTPResponse? in
                guard at == nil else { return nil }
                at = now
                var answer = FakeClerk.error(429, "too_many_requests", "Too many requests")
                answer.headers.append(HTTPHeader("Retry-After", "2"))
                return answer
            }
        }
        for (k, sub) in subs.enumerated() {
            let reply = try h.post(token: try h.token(type: "consent-revoked", sub: sub, eventTimeMillis: 1_750_000_000_000 + Int64(k)))
            #expect(reply.status == 200, "\(reply.body)")
        }
        for sub in subs { #expect(try ProviderCallTests.settled(h, sub: sub).map(\.state) == ["done"]) }
        let refused = try #require(refusedAt.withLock { $0 }, "no request was refused")
        let after = arrivals.withLock { $0 }.filter { $0 > refused }
        #expect(!after.isEmpty)
        let firstAfter = after.min().map { $0.timeIntervalSince(refused) } ?? 0
        #expect(firstAfter >= 1.9, "a request came \(firstAfter) s after the 429 with Retry-After: 2")
    }
}
