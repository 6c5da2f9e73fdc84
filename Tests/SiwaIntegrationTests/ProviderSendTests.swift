import Foundation
import SiwaCore
import SiwaHTTP
import SiwaRuntime
import Synchronization
import Testing

/// How the provider sender paces, orders and records calls beyond the shared matrix
/// (`ProviderCallTests`): a provider's rate limit pauses it, a user's calls go one at a time, and
/// an unlink or deletion that finds its work already done says so.
@Suite("Provider sending", .serialized, .needsDatabase)
struct ProviderSendTests {
    typealias Row = ProviderCallTests.Row
    static let apple = ProviderCallTests.apple
    static let linked = ProviderCallTests.linked
    static let other = ProviderCallTests.other
    static let unknown = ProviderCallTests.unknown

    func post(_ h: TestHarness, _ type: String, sub: String, at t: Int64) throws {
        let reply = try h.post(token: try h.token(type: type, sub: sub, eventTimeMillis: t))
        #expect(reply.status == 200, "\(reply.body)")
    }

    /// The requests that name `sub` in their path or query.
    static func requests(_ fake: ProviderFake, naming sub: String) -> [ProviderFake.Seen] {
        fake.requests.filter { seen in seen.path.contains(sub) || seen.query.contains { $0.value.contains(sub) } }
    }

    /// The real time moved on by `offset`, counting its reads: the provider sender's clock,
    /// which the test moves past a rate-limit reset instead of waiting for it.
    final class MovedWallClock: Sendable {
        let offset = Atomic<Int64>(0)
        let reads = Atomic<Int>(0)
        /// Unix seconds on this clock, not counted as a read.
        var seconds: Double { Date().timeIntervalSince1970 + Double(offset.load(ordering: .relaxed)) }
        var clock: WallClock {
            WallClock { [self] in
                reads.add(1, ordering: .relaxed)
                return WallClock.system.sinceEpoch + .seconds(offset.load(ordering: .relaxed))
            }
        }
    }

    @Test("Auth0 says its window is spent (x-ratelimit-remaining 0): no call goes out before x-ratelimit-reset")
    func rateLimitPausesProvider() throws {
        let fixture = try Auth0Fixture()
        defer { fixture.stop() }
        try fixture.addAppleUser(sub: Self.apple)
        try fixture.addAppleUser(sub: Self.other)
        let time = MovedWallClock()
        let h = try ProviderCallTests.harness(fixture, wallClock: time.clock)
        defer { h.stop() }
        // Every answer until the reset, an hour ahead on the sender's clock, says the window is
        // spent, the successes too: no runner is slow enough to reach it before the test moves it.
        let reset = (time.seconds + 3600).rounded(.up)
        fixture.tenant.fake.reshape { _, answer in
            guard time.seconds < reset else { return answer }
            var spent = answer
            spent.headers += [
                HTTPHeader("X-RateLimit-Limit", "10"), HTTPHeader("X-RateLimit-Remaining", "0"),
                HTTPHeader("X-RateLimit-Reset", String(Int64(reset))),
            ]
            return spent
        }
        try post(h, "consent-revoked", sub: Self.apple, at: 1_750_000_000_000)
        #expect(try ProviderCallTests.settled(h, sub: Self.apple).map(\.state) == ["done"])
        try post(h, "consent-revoked", sub: Self.other, at: 1_750_000_000_000)
        #expect(try eventually(timeout: 20) { try ProviderCallTests.calls(h, sub: Self.other).map(\.state) == ["pending"] })
        // The sender's claims read its clock each round: rounds ran with the call queued.
        let reads = time.reads.load(ordering: .relaxed)
        #expect(eventually(timeout: 20) { time.reads.load(ordering: .relaxed) >= reads + 5 }, "the sender claimed no more")
        #expect(Self.requests(fixture.tenant.fake, naming: Self.other).isEmpty, "a call went out before the reset")
        let moved = Date()
        time.offset.add(3600, ordering: .relaxed)
        #expect(try ProviderCallTests.settled(h, sub: Self.other).map(\.state) == ["done"])
        let first = Self.requests(fixture.tenant.fake, naming: Self.other).map(\.at).min() ?? .distantPast
        #expect(first >= moved, "a call went out before the sender's clock passed the reset")
    }

    @Test("a user's second call waits while the first is retried; another user's call goes meanwhile")
    func perUserOrder() throws {
        let fixture = try ClerkFixture()
        defer { fixture.stop() }
        try fixture.addLinkedUser(sub: Self.linked)
        try fixture.addAppleUser(sub: Self.other)
        let h = try ProviderCallTests.harness(fixture)
        defer { h.stop() }
        let holding = Atomic<Bool>(true)
        let held = Self.linked
        fixture.instance.fake.answer { request in
            guard holding.load(ordering: .relaxed), request.head.query.contains(where: { $0.value == held }) else { return nil }
            return FakeClerk.error(503, "service_unavailable", "The service is unavailable")
        }
        try post(h, "consent-revoked", sub: Self.linked, at: 1_750_000_000_000)
        try post(h, "account-delete", sub: Self.linked, at: 1_750_000_001_000)
        #expect(try eventually(timeout: 15) { (try ProviderCallTests.calls(h, sub: Self.linked).first?.attempts ?? 0) >= 3 })
        try post(h, "consent-revoked", sub: Self.other, at: 1_750_000_000_000)
        #expect(try ProviderCallTests.settled(h, sub: Self.other).map(\.state) == ["done"])
        let waiting = try ProviderCallTests.calls(h, sub: Self.linked)
        #expect(waiting.map(\.effect) == ["end_sessions", "unlink"], "\(waiting)")
        #expect(waiting.map(\.state) == ["pending", "pending"] && waiting.last?.attempts == 0, "\(waiting)")
        holding.store(false, ordering: .relaxed)
        let rows = try ProviderCallTests.settled(h, sub: Self.linked)
        #expect(rows.last == Row(effect: "unlink", state: "done", actions: "signed_out,unlinked", attempts: 1), "\(rows)")
        #expect(rows.first?.state == "done" && rows.first?.actions == "signed_out", "\(rows)")
        // The unlink's first request came after the sign-out's last one.
        let requests = Self.requests(fixture.instance.fake, naming: "user_\(Self.linked.suffix(4))")
        let unlinkAt = requests.firstIndex { $0.method == "DELETE" } ?? -1
        #expect(unlinkAt > 0 && requests[..<unlinkAt].allSatisfy { $0.method != "DELETE" })
    }

    @Test(
        "an unlink or deletion whose answer was lost is already done when tried again, not a user unknown",
        arguments: [AccountDeletePolicy.unlink, .deleteUser])
    func lostAnswer(_ policy: AccountDeletePolicy) throws {
        let fixture = try ClerkFixture()
        defer { fixture.stop() }
        // Unlinked: a user with a password; deleted: an Apple-only one.
        let sub = policy == .unlink ? Self.linked : Self.apple
        try policy == .unlink ? fixture.addLinkedUser(sub: sub) : fixture.addAppleUser(sub: sub)
        let h = try ProviderCallTests.harness(fixture, policy: policy)
        defer { h.stop() }
        let lost = Atomic<Int>(0)
        fixture.instance.fake.reshape { request, answer in
            guard request.head.method == "DELETE", answer.status == 200, lost.add(1, ordering: .relaxed).newValue == 1 else { return answer }
            return FakeClerk.error(503, "service_unavailable", "The service is unavailable")
        }
        try post(h, "account-delete", sub: sub, at: 1_750_000_000_000)
        let effect = policy == .unlink ? "unlink" : "delete_user"
        #expect(try ProviderCallTests.settled(h, sub: sub) == [Row(effect: effect, state: "done", actions: "already_done", attempts: 2)])
        #expect(lost.load(ordering: .relaxed) == 1)
    }

    @Test("an unlink that finds no user at its first attempt is a user unknown, even after an earlier call found them")
    func unlinkAfterEarlierCall() throws {
        let fixture = try ClerkFixture()
        defer { fixture.stop() }
        try fixture.addLinkedUser(sub: Self.linked)
        let h = try ProviderCallTests.harness(fixture)
        defer { h.stop() }
        try post(h, "consent-revoked", sub: Self.linked, at: 1_750_000_000_000)
        #expect(try ProviderCallTests.settled(h, sub: Self.linked).map(\.state) == ["done"])
        // Someone removed the user at Clerk meanwhile.
        _ = fixture.instance.state.withLock { $0.users.removeValue(forKey: "user_\(Self.linked.suffix(4))") }
        try post(h, "account-delete", sub: Self.linked, at: 1_750_000_001_000)
        try post(h, "account-delete", sub: Self.unknown, at: 1_750_000_001_000)
        #expect(
            try ProviderCallTests.settled(h, sub: Self.linked).last == Row(effect: "unlink", state: "user_unknown", actions: nil, attempts: 1))
        #expect(try ProviderCallTests.settled(h, sub: Self.unknown) == [Row(effect: "unlink", state: "user_unknown", actions: nil, attempts: 1)])
    }
}
