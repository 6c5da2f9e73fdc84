import Foundation
import SiwaApp
import SiwaCore
import SiwaCrypto
import SiwaPostgres
import SiwaTestSupport
import Testing

/// Forwarding (README "Forwarding to your app") end to end: notifications through the real receiver and worker, the
/// sender POSTing over loopback to a libmicrohttpd receiver that checks every signature with
/// the Standard Webhooks reference algorithm, a real PostgreSQL.
@Suite("Forwarding", .serialized, .needsDatabase)
struct ForwardingTests {
    static let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
    static let secondSecret = "whsec_" + Base64.encode([UInt8](repeating: 0x5a, count: 32))

    /// A harness forwarding to `url`, signing with `secrets`, with quick retries.
    /// The deliveries once a forward queued now (another user's) has been delivered and recorded:
    /// the sender claims due rows oldest first, so anything it would send again has gone out by
    /// then (that later one left out).
    static func deliveriesAfterALaterOne(
        _ conninfo: String, _ receiver: WebhookReceiver, aud: String = TestHarness.audience
    ) throws -> [WebhookReceiver.Delivery] {
        let id = "msg_later_\(UInt32.random(in: 0...UInt32.max))"
        _ = try TestDatabase.query(
            conninfo,
            "INSERT INTO siwa.forwards (id, sub, aud, type, event_time, source) VALUES ($1, '000739.fwd.later', $2, 'consent-revoked', now(), 'apple')",
            [id, aud])
        let delivered = try eventually(timeout: 30) {
            try TestDatabase.query(conninfo, "SELECT status FROM siwa.forwards WHERE id = $1", [id]).scalar == "delivered"
        }
        #expect(delivered, "a forward queued later was never delivered")
        return receiver.deliveries.filter { $0.id != id }
    }

    static func harness(url: String, secrets: [String] = [secret], timeout: Double = 10) throws -> TestHarness {
        let file = NSTemporaryDirectory() + "siwa-forward-secrets-\(UInt64.random(in: 0...UInt64.max))"
        try secrets.joined(separator: "\n").write(toFile: file, atomically: true, encoding: .utf8)
        var options = ForwardSender.Options()
        options.backoff = RetryPolicy(maxAttempts: .max, baseDelay: .milliseconds(100), maxDelay: .milliseconds(200))
        options.pollInterval = .milliseconds(100)
        options.timeout = .seconds(timeout)
        return try TestHarness(
            forwarding: ForwardingConfiguration(url: url, secretFile: file), forwardOptions: options)
    }

    @Test("forward-test: a signed sample the reference verifier accepts with every secret (exit 0); a 500 or nobody listening: exit 1 with one line")
    func forwardTestCommand() throws {
        let receiver = try WebhookReceiver(secrets: [Self.secret, Self.secondSecret])
        defer { receiver.stop() }
        let file = NSTemporaryDirectory() + "siwa-forward-test-\(UInt64.random(in: 0...UInt64.max))"
        try (Self.secret + "\n" + Self.secondSecret + "\n").write(toFile: file, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: file) }
        let env = ["SIWA_FORWARD_URL": receiver.url, "SIWA_FORWARD_SECRET_FILE": file, "SIWA_AUDIENCES": "com.example.app"]
        func lines(_ output: String) -> [Substring] { output.split(separator: "\n") }

        let ok = try OperatorCommandTests.run(["forward-test"], environment: env)
        #expect(ok.status == 0 && lines(ok.output).count == 1, "\(ok.output)")
        let d = try #require(receiver.deliveries.first)
        #expect(receiver.deliveries.count == 1)
        #expect(d.verified == [true, true], "signed with both secrets, each verified by the spec's algorithm")
        let id = try #require(d.id)
        #expect(id.hasPrefix("msg_test_") && ok.output.contains(id) && ok.output.contains("200"), "\(ok.output)")
        let json = try #require(d.json)
        #expect(json["type"]?.stringValue == "consent-revoked" && json["data"]?["aud"]?.stringValue == "com.example.app")
        #expect(json["data"]?["sub"]?.stringValue != nil && json["data"]?["event_time"]?.int64Value != nil)

        receiver.answer { _, _ in .status(500) }
        let refused = try OperatorCommandTests.run(["forward-test"], environment: env)
        #expect(refused.status != 0 && lines(refused.output).count == 1 && refused.output.contains("500"), "\(refused.output)")
        #expect(receiver.deliveries.count == 2)

        receiver.stop()
        let down = try OperatorCommandTests.run(["forward-test"], environment: env)
        #expect(down.status != 0 && lines(down.output).count == 1, "\(down.output)")
        #expect(down.output.contains("no answer"), "\(down.output)")
        print(
            "forward-test: \(ok.output.trimmingCharacters(in: .newlines)) | \(refused.output.trimmingCharacters(in: .newlines)) | \(down.output.trimmingCharacters(in: .newlines))"
        )
    }

    @Test("every siwa_ metric that deploy/prometheus-alerts.yml uses is exported by /metrics (forwarding on)")
    func alertRulesUseExportedMetrics() throws {
        let receiver = try WebhookReceiver(secrets: [Self.secret])
        defer { receiver.stop() }
        let h = try Self.harness(url: receiver.url)
        defer { h.stop() }
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let rules = try String(contentsOf: root.appendingPathComponent("deploy/prometheus-alerts.yml"), encoding: .utf8)
        // The metric names in the rules' expressions.
        let expressions = rules.split(separator: "\n").filter { $0.trimmingCharacters(in: .whitespaces).hasPrefix("expr:") }
        var used: Set<String> = []
        for line in expressions {
            var name = ""
            for c in line + " " {
                if c.isLetter || c.isNumber || c == "_" {
                    name.append(c)
                } else {
                    if name.hasPrefix("siwa_") { used.insert(name) }
                    name = ""
                }
            }
        }
        #expect(used.count >= 10, "\(used.sorted())")
        // What /metrics declares (`# TYPE name kind`; a histogram's samples are name_bucket, _sum, _count).
        var exported: Set<String> = []
        #expect(eventually { (try? h.admin("/metrics"))?.body.contains("siwa_forward_backlog ") == true })
        for line in try h.admin("/metrics").body.split(separator: "\n") where line.hasPrefix("# TYPE ") {
            let parts = line.split(separator: " ")
            guard parts.count == 4 else { continue }
            exported.insert(String(parts[2]))
            if parts[3] == "histogram" { exported.formUnion(["_bucket", "_sum", "_count"].map { parts[2] + $0 }) }
        }
        let missing = used.subtracting(exported)
        #expect(missing.isEmpty, "alert rules use metrics /metrics does not export: \(missing.sorted())")
        print("alert rules: \(used.count) siwa_ metrics used, all among the \(exported.count) /metrics declares")
    }

    static func forwards(
        _ h: TestHarness, _ sql: String = "SELECT id, status, attempts, coalesce(email, '') FROM siwa.forwards ORDER BY seq"
    ) throws
        -> [[String]]
    {
        try h.query(sql).rows.map { $0.map { $0 ?? "" } }
    }

    @Test("an applied event is POSTed once, signed, with the contract's payload and headers; stale and unknown ones are not")
    func deliversSignedPayload() throws {
        let receiver = try WebhookReceiver(secrets: [Self.secret])
        defer { receiver.stop() }
        let h = try Self.harness(url: receiver.url)
        defer { h.stop() }
        let sub = "000739.fwd.0001"
        let t = Int64(Date().timeIntervalSince1970 * 1000) - 60_000
        #expect(
            try h.post(
                token: h.token(type: "email-disabled", sub: sub, eventTimeMillis: t, email: "a@privaterelay.appleid.com", isPrivateEmail: true)
            ).status == 200)
        #expect(try h.waitForWorker())
        // Older than what the account reflects: stale, no forward. Unknown types: ignored, none.
        #expect(
            try h.post(
                token: h.token(type: "email-enabled", sub: sub, eventTimeMillis: t - 1000, email: "a@privaterelay.appleid.com", isPrivateEmail: true)
            ).status == 200)
        #expect(try h.post(token: h.token(type: "something-new", sub: sub, eventTimeMillis: t)).status == 200)
        #expect(try h.waitForWorker())
        #expect(eventually { receiver.deliveries.count >= 1 && (try? h.scalar("SELECT status FROM siwa.forwards")) == "delivered" })
        let eventID = try h.scalar("SELECT id FROM siwa.events WHERE type = 'email-disabled'") ?? ""
        let d = try #require(receiver.deliveries.first)
        #expect(d.id == "msg_\(eventID)")
        #expect(d.contentType == "application/json")
        #expect(d.verified == [true])
        #expect(d.signature?.hasPrefix("v1,") == true)
        let ts = Int64(d.timestamp ?? "") ?? 0
        #expect(abs(ts - Int64(Date().timeIntervalSince1970)) < 60)
        let json = try #require(d.json)
        #expect(json["type"]?.stringValue == "email-disabled")
        #expect(json["timestamp"]?.stringValue == ForwardMessage.iso8601(millis: t))
        #expect(json["data"]?["sub"]?.stringValue == sub)
        #expect(json["data"]?["aud"]?.stringValue == TestHarness.audience)
        #expect(json["data"]?["event_time"]?.int64Value == t)
        #expect(json["data"]?["source"]?.stringValue == "apple")
        #expect(json["data"]?["email"]?.stringValue == "a@privaterelay.appleid.com")
        #expect(json["data"]?["is_private_email"]?.boolValue == true)
        #expect(try Self.forwards(h).count == 1)
        #expect(try h.scalar("SELECT delivery_ms IS NOT NULL AND delivered_at IS NOT NULL AND attempts = 1 FROM siwa.forwards") == "t")
        // Observability: /metrics and status.
        let metrics = try h.admin("/metrics").body
        #expect(metrics.contains("siwa_forwards_total{outcome=\"delivered\",type=\"email-disabled\"} 1"))
        #expect(metrics.contains("siwa_forward_delivery_seconds_count 1"))
        // The database gauges are a snapshot refreshed in the background.
        #expect(eventually { (try? h.admin("/metrics"))?.body.contains("siwa_forward_backlog 0") == true })
        let report = try OutboxAdmin.status(conninfo: h.conninfo, forwarding: true)
        #expect(report.forwards?.deliveredLastHour == 1)
        // The dashboard view, read as siwa_dashboard: the delivery latency of the last hour.
        let dashboard = try PostgresConnection(conninfo: h.conninfo, applicationName: "dashboard")
        try dashboard.execute("SET ROLE siwa_dashboard")
        let view = try dashboard.execute(
            """
            SELECT pending, dead, delivered_last_hour, delivery_latency_p50_seconds AS p50, delivery_latency_p99_seconds AS p99
            FROM siwa.forward_backlog
            """)
        #expect(view.rows.first.map { Array($0.prefix(3)) } == ["0", "0", "1"], "\(view.rows)")
        let p50 = view.value(0, "p50").flatMap(Double.init), p99 = view.value(0, "p99").flatMap(Double.init)
        // One delivery: p50 = p99 = its queued-to-delivered time (which siwa_dashboard may not read itself).
        let latency = try h.scalar("SELECT extract(epoch FROM delivered_at - created_at)::double precision FROM siwa.forwards").flatMap(Double.init)
        #expect(p50 != nil && p50 == p99 && p50 == latency, "\(view.rows) \(latency ?? -1)")
        #expect(throws: PostgresError.self) { try dashboard.execute("SELECT count(*) FROM siwa.forwards") }
        print("forward_backlog as siwa_dashboard: delivered_last_hour 1, latency p50 \(p50 ?? -1) s, p99 \(p99 ?? -1) s")
        #expect(report.forwards?.deliveryP99Millis != nil)
        #expect(OutboxAdmin.render(report).contains("forwards delivered (1h)"))
        #expect(try Self.deliveriesAfterALaterOne(h.conninfo, receiver).count == 1, "delivered again")
    }

    @Test("an in-app deletion is forwarded as account-delete with source in-app; a sign-in is not forwarded")
    func inAppDeletionForwarded() throws {
        let receiver = try WebhookReceiver(secrets: [Self.secret])
        defer { receiver.stop() }
        let h = try Self.harness(url: receiver.url)
        defer { h.stop() }
        let sub = "000739.fwd.inapp"
        _ = try h.query(
            """
            INSERT INTO siwa.events (jti, aud, sub, type, event_time, claims)
            VALUES ('siwa-sign-in-test', $2, $1, 'sign-in', now() - interval '1 minute', '{"source":"sign-in"}')
            """, [sub, TestHarness.audience])
        #expect(try h.waitForWorker())
        _ = try h.query("SELECT siwa.request_deletion($1, $2)", [sub, TestHarness.audience])
        #expect(eventually { receiver.deliveries.count >= 1 && (try? h.scalar("SELECT status FROM siwa.forwards")) == "delivered" })
        #expect(receiver.deliveries.count == 1, "the sign-in is not forwarded")
        let json = try #require(receiver.deliveries.first?.json)
        #expect(json["type"]?.stringValue == "account-delete")
        #expect(json["data"]?["source"]?.stringValue == "in-app")
        #expect(json["data"]?["sub"]?.stringValue == sub && json["data"]?["aud"]?.stringValue == TestHarness.audience)
        #expect(receiver.deliveries.first?.verified == [true])
    }

    @Test("a 500 is retried with the same webhook-id and a fresh signature until a 2xx")
    func retriedAfterServerError() throws {
        let receiver = try WebhookReceiver(secrets: [Self.secret])
        defer { receiver.stop() }
        receiver.answer { _, earlier in earlier < 2 ? .status(500) : .status(204) }
        let h = try Self.harness(url: receiver.url)
        defer { h.stop() }
        #expect(try h.post(token: h.token(type: "consent-revoked", sub: "000739.fwd.0002")).status == 200)
        #expect(eventually { (try? h.scalar("SELECT status FROM siwa.forwards")) == "delivered" })
        let ds = receiver.deliveries
        #expect(ds.count == 3)
        #expect(Set(ds.map(\.id)).count == 1)
        #expect(ds.allSatisfy { $0.verified == [true] })
        #expect(ds.map(\.answered) == [500, 500, 204])
        #expect(try h.scalar("SELECT attempts FROM siwa.forwards") == "3")
        #expect(try h.admin("/metrics").body.contains("siwa_forwards_total{outcome=\"failed\",type=\"consent-revoked\"} 2"))
    }

    @Test("a receiver that does not answer within the timeout is retried, same id")
    func hangingReceiverTimesOut() throws {
        let receiver = try WebhookReceiver(secrets: [Self.secret])
        defer { receiver.stop() }
        receiver.answer { _, earlier in earlier == 0 ? .hang : .status(200) }
        let h = try Self.harness(url: receiver.url, timeout: 1)
        defer { h.stop() }
        #expect(try h.post(token: h.token(type: "consent-revoked", sub: "000739.fwd.0003")).status == 200)
        #expect(eventually(timeout: 15) { (try? h.scalar("SELECT status FROM siwa.forwards")) == "delivered" })
        let ds = receiver.deliveries
        #expect(ds.count == 2)
        #expect(ds.first?.id == ds.last?.id)
        #expect(try h.scalar("SELECT attempts FROM siwa.forwards") == "2")
    }

    @Test("a connection closed without an answer fails the attempt; after SIWA_FORWARD_RETRY_FOR it is dead; replay --forwards sends it again")
    func closedConnectionThenDeadThenReplay() throws {
        let closing = try ClosingListener()
        defer { closing.stop() }
        let h = try Self.harness(url: closing.url)
        defer { h.stop() }
        #expect(try h.post(token: h.token(type: "consent-revoked", sub: "000739.fwd.0004")).status == 200)
        #expect(eventually { closing.closedConnections >= 2 })
        #expect(eventually { (try? h.scalar("SELECT status FROM siwa.forwards")) == "failed" })
        let error = try h.scalar("SELECT last_error FROM siwa.forwards") ?? ""
        #expect(error.hasPrefix("fetch error"), "\(error)")
        // Queued longer ago than SIWA_FORWARD_RETRY_FOR (3 days): the next failure makes it dead.
        _ = try h.query("UPDATE siwa.forwards SET retry_since = now() - interval '3 days 1 minute'")
        #expect(eventually { (try? h.scalar("SELECT status FROM siwa.forwards")) == "dead" })
        #expect(try h.scalar("SELECT count(*) FROM siwa.dead_forwards") == "1")
        #expect(eventually { (try? h.admin("/metrics"))?.body.contains("siwa_forward_dead 1") == true })
        #expect(try OutboxAdmin.replayForwards(type: nil, conninfo: h.conninfo) == 1)
        #expect(try h.scalar("SELECT status || ' ' || attempts FROM siwa.forwards") != "dead 0")
        #expect(eventually { closing.closedConnections >= 4 })
    }

    @Test("per sub, a later forward is never sent before an earlier one is delivered; other subs are not held up")
    func perSubOrder() throws {
        let receiver = try WebhookReceiver(secrets: [Self.secret])
        defer { receiver.stop() }
        let slow = "000739.fwd.slow", other = "000739.fwd.other"
        let t = Int64(Date().timeIntervalSince1970 * 1000) - 60_000
        receiver.answer { d, earlier in
            d.json?["data"]?["sub"]?.stringValue == slow && d.json?["type"]?.stringValue == "email-disabled" && earlier < 3
                ? .status(500) : .status(200)
        }
        let h = try Self.harness(url: receiver.url)
        defer { h.stop() }
        #expect(
            try h.post(
                token: h.token(type: "email-disabled", sub: slow, eventTimeMillis: t, email: "s@privaterelay.appleid.com", isPrivateEmail: true)
            ).status == 200)
        #expect(try h.waitForWorker())
        #expect(
            try h.post(
                token: h.token(type: "email-enabled", sub: slow, eventTimeMillis: t + 1, email: "s@privaterelay.appleid.com", isPrivateEmail: true)
            ).status == 200)
        #expect(try h.post(token: h.token(type: "consent-revoked", sub: slow, eventTimeMillis: t + 2)).status == 200)
        #expect(try h.post(token: h.token(type: "consent-revoked", sub: other, eventTimeMillis: t)).status == 200)
        #expect(eventually(timeout: 20) { (try? h.scalar("SELECT count(*) FROM siwa.forwards WHERE status = 'delivered'")) == "4" })
        let ds = receiver.deliveries
        let slowTypes = ds.filter { $0.json?["data"]?["sub"]?.stringValue == slow }.map { $0.json?["type"]?.stringValue ?? "" }
        #expect(slowTypes == ["email-disabled", "email-disabled", "email-disabled", "email-disabled", "email-enabled", "consent-revoked"])
        // The other user's forward went out while the slow one's first was being retried.
        let otherIndex = ds.firstIndex { $0.json?["data"]?["sub"]?.stringValue == other } ?? 99
        let firstSuccess = ds.firstIndex { $0.answered == 200 && $0.json?["data"]?["sub"]?.stringValue == slow } ?? -1
        #expect(otherIndex < firstSuccess)
    }

    @Test("rotation: every secret signs; a receiver holding either one verifies")
    func rotation() throws {
        let receiver = try WebhookReceiver(secrets: [Self.secret, Self.secondSecret])
        defer { receiver.stop() }
        let h = try Self.harness(url: receiver.url, secrets: [Self.secondSecret, Self.secret])
        defer { h.stop() }
        #expect(try h.post(token: h.token(type: "consent-revoked", sub: "000739.fwd.0006")).status == 200)
        #expect(eventually { receiver.deliveries.count == 1 })
        let d = try #require(receiver.deliveries.first)
        #expect(d.signature?.split(separator: " ").count == 2)
        #expect(d.verified == [true, true])
    }

    @Test("an account-delete erases the email of the user's forwards not yet delivered (and of delivered ones)")
    func accountDeleteErasesEmail() throws {
        let receiver = try WebhookReceiver(secrets: [Self.secret])
        defer { receiver.stop() }
        receiver.answer { _, _ in .status(503) }
        let h = try Self.harness(url: receiver.url)
        defer { h.stop() }
        let sub = "000739.fwd.0007"
        let t = Int64(Date().timeIntervalSince1970 * 1000) - 60_000
        #expect(
            try h.post(
                token: h.token(type: "email-disabled", sub: sub, eventTimeMillis: t, email: "gone@privaterelay.appleid.com", isPrivateEmail: true)
            ).status == 200)
        #expect(eventually { receiver.deliveries.count >= 1 })
        #expect(try h.scalar("SELECT email FROM siwa.forwards") == "gone@privaterelay.appleid.com")
        #expect(try h.post(token: h.token(type: "account-delete", sub: sub, eventTimeMillis: t + 1)).status == 200)
        #expect(try h.waitForWorker())
        #expect(try h.scalar("SELECT count(*) FROM siwa.forwards WHERE email IS NOT NULL") == "0")
        #expect(try h.scalar("SELECT count(*) FROM siwa.forwards") == "2")
        receiver.answer { _, _ in .status(200) }
        #expect(eventually(timeout: 15) { (try? h.scalar("SELECT count(*) FROM siwa.forwards WHERE status = 'delivered'")) == "2" })
        let delivered = receiver.deliveries.filter { $0.answered == 200 }
        #expect(delivered.map { $0.json?["type"]?.stringValue ?? "" } == ["email-disabled", "account-delete"])
        #expect(delivered.allSatisfy { !$0.text.contains("gone@") })
        #expect(receiver.deliveries.first?.text.contains("gone@") == true)
    }

    @Test("an effect that rolls back (the hook raised) queues nothing; applied on retry, it is queued once")
    func rolledBackEffectQueuesNothing() throws {
        let receiver = try WebhookReceiver(secrets: [Self.secret])
        defer { receiver.stop() }
        let h = try Self.harness(url: receiver.url)
        defer { h.stop() }
        try h.replaceHook("RAISE EXCEPTION 'not yet';")
        #expect(try h.post(token: h.token(type: "consent-revoked", sub: "000739.fwd.0008")).status == 200)
        #expect(eventually { (try? h.scalar("SELECT attempts FROM siwa.events")).flatMap { Int($0) } ?? 0 >= 1 })
        #expect(try h.scalar("SELECT status FROM siwa.events") == "failed")
        #expect(try h.scalar("SELECT count(*) FROM siwa.forwards") == "0")
        try h.replaceHook("NULL;")
        #expect(eventually(timeout: 15) { (try? h.scalar("SELECT status FROM siwa.forwards")) == "delivered" })
        #expect(try h.scalar("SELECT count(*) FROM siwa.forwards") == "1")
        #expect(try Self.deliveriesAfterALaterOne(h.conninfo, receiver).count == 1, "delivered again")
    }
}
