import Foundation
import SiwaApp
import SiwaCore
import SiwaTestSupport
import Synchronization
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

    @Test(
        "a forward sender stopped with two POSTs out records the answer that comes within the grace and leaves the other leased; the next run sends that one again (same webhook-id), never the answered one"
    )
    func stopRecordsWhatAnswersWithinTheGrace() throws {
        let receiver = try WebhookReceiver(secrets: [ForwardingTests.secret])
        defer { receiver.stop() }
        // First attempts: one answered 200 a second after it came, the other held past the grace.
        let firsts = Atomic<Int>(0)
        receiver.answer { _, earlier in
            guard earlier == 0 else { return .status(200) }
            return firsts.add(1, ordering: .relaxed).newValue == 1 ? .delayed(200, seconds: 1) : .hang
        }
        let file = NSTemporaryDirectory() + "siwa-forward-stop-\(UInt64.random(in: 0...UInt64.max))"
        try ForwardingTests.secret.write(toFile: file, atomically: true, encoding: .utf8)
        let forwarding = ForwardingConfiguration(url: receiver.url, secretFile: file)
        var options = ForwardSender.Options()
        options.pollInterval = .milliseconds(100)
        options.stopGrace = .seconds(4)
        let h = try TestHarness(forwarding: forwarding, forwardOptions: options)
        for k in 1...2 {
            #expect(try h.post(token: h.token(type: "consent-revoked", sub: "000739.fwd.stop\(k)")).status == 200)
        }
        #expect(eventually(timeout: 20) { receiver.deliveries.count == 2 })
        h.stop()
        #expect(try h.scalar("SELECT count(*) FROM siwa.forwards WHERE status = 'delivered' AND attempts = 1") == "1")
        #expect(try h.scalar("SELECT count(*) FROM siwa.forwards WHERE status = 'pending' AND attempts = 0 AND lease_until > now()") == "1")

        // The next run, once the lease has run out.
        _ = try h.query("UPDATE siwa.forwards SET lease_until = now() WHERE status = 'pending'")
        let next = try TestHarness(conninfo: h.conninfo, forwarding: forwarding, forwardOptions: options)
        defer { next.stop() }
        #expect(eventually(timeout: 20) { (try? next.scalar("SELECT count(*) FROM siwa.forwards WHERE status = 'delivered'")) == "2" })
        let sent = Dictionary(grouping: try ForwardingTests.deliveriesAfterALaterOne(h.conninfo, receiver), by: { $0.id ?? "" }).mapValues(\.count)
        #expect(sent.values.sorted() == [1, 2], "\(sent)")
        #expect(try next.scalar("SELECT string_agg(attempts::text, ',') FROM siwa.forwards WHERE id NOT LIKE 'msg_later_%'") == "1,1")
    }
}
