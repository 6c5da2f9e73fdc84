import Foundation
import SiwaCore
import SiwaTestSupport
import Testing

/// The real binary killed -9 while a forward is in flight: the forward is delivered at least
/// once afterwards, with the same `webhook-id`.
@Suite("Forwarding crash safety", .serialized, .needsDatabase)
struct ForwardingCrashTests {
    @Test("work killed -9 mid-POST: the lease expires, the next process sends it again, same webhook-id")
    func killSenderMidDelivery() throws {
        let env = try CrashSafetyTests.Environment()
        let receiver = try WebhookReceiver(secrets: [ForwardingTests.secret])
        defer { receiver.stop() }
        // The first attempt never gets an answer: the sender is killed while it waits.
        receiver.answer { _, earlier in earlier == 0 ? .hang : .status(200) }
        let secrets = NSTemporaryDirectory() + "siwa-forward-crash-\(UInt64.random(in: 0...UInt64.max))"
        try ForwardingTests.secret.write(toFile: secrets, atomically: true, encoding: .utf8)
        let forwarding = ["SIWA_FORWARD_URL": receiver.url, "SIWA_FORWARD_SECRET_FILE": secrets]
        _ = try TestDatabase.query(
            env.conninfo,
            """
            INSERT INTO siwa.events (jti, aud, sub, type, event_time, status, claims)
            VALUES ('crash-1', '\(TestHarness.audience)', '000739.fwd.crash', 'consent-revoked', now() - interval '1 minute', 'pending', '{}')
            """)
        let (first, _) = try env.start("work", environment: forwarding)
        #expect(first.waitForLog("forwarding on", timeout: 20), "\(first.log.suffix(500))")
        #expect(eventually(timeout: 20) { receiver.deliveries.count == 1 })
        first.kill9()
        #expect(try env.count("SELECT count(*) FROM siwa.forwards WHERE status = 'pending' AND lease_until > now()") == 1)

        let (second, _) = try env.start("work", environment: forwarding)
        defer { _ = second.terminate() }
        // The lease (10 s timeout + 5 s) expires, then the second process sends it again.
        #expect(eventually(timeout: 40) { (try? env.count("SELECT count(*) FROM siwa.forwards WHERE status = 'delivered'")) == 1 })
        let ds = receiver.deliveries
        #expect(ds.count == 2)
        #expect(Set(ds.compactMap(\.id)).count == 1)
        #expect(ds.allSatisfy { $0.verified == [true] })
        #expect(try env.count("SELECT count(*) FROM siwa.forwards") == 1)
    }
}
