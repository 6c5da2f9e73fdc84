import Foundation
import SiwaCore
import SiwaDevTools
import Testing

@testable import SiwaApp

@Suite("Observability: metrics, health, logs", .needsDatabase)
struct ObservabilityTests {
    struct Sample: Decodable, Equatable {
        var name: String
        var labels: [String: String]
        var value: Double
    }

    /// Parses the exposition with the reference parser (Python's prometheus_client, from the
    /// Debian package python3-prometheus-client installed by scripts/setup).
    static func parse(_ text: String) throws -> [Sample] {
        let script = """
            import json, sys
            from prometheus_client.parser import text_string_to_metric_families
            out = []
            for family in text_string_to_metric_families(sys.stdin.read()):
                for s in family.samples:
                    out.append({"name": s.name, "labels": s.labels, "value": s.value})
            print(json.dumps(out))
            """
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        process.arguments = ["-c", script]
        let input = Pipe(), output = Pipe(), errors = Pipe()
        process.standardInput = input
        process.standardOutput = output
        process.standardError = errors
        try process.run()
        input.fileHandleForWriting.write(Data(text.utf8))
        try input.fileHandleForWriting.close()
        let data = output.fileHandleForReading.readDataToEndOfFile()
        let problems = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            throw TestDatabase.Missing.Parse(description: "prometheus parser failed: \(problems)")
        }
        return try JSONDecoder().decode([Sample].self, from: data)
    }

    static func value(_ samples: [Sample], _ name: String, _ labels: [String: String] = [:]) -> Double? {
        samples.first { sample in sample.name == name && labels.allSatisfy { k, v in sample.labels[k] == v } }?.value
    }

    @Test("/metrics parses with a real Prometheus parser and its counters move with requests")
    func metricsMove() throws {
        try TestHarness.with { h throws in
            #expect(try h.post(token: try h.token(type: "consent-revoked", sub: "sub.m1")).code == "accepted")
            #expect(try h.post(token: String(try h.token(sub: "sub.m2").dropLast(4)) + "AAAA").code == "bad_signature")
            #expect(try h.send(body: "{}", path: "/nope").status == 404)
            #expect(try h.waitForWorker())
            // The worker counts an event once its transaction has committed: poll for it.
            var samples: [Sample] = []
            _ = try eventually(timeout: 5) {
                samples = try Self.parse(try h.admin("/metrics").body)
                // The database gauges are a snapshot refreshed in the background: once it saw the worker's commit.
                return Self.value(samples, "siwa_events_total", ["outcome": "applied", "type": "consent-revoked"]) == 1
                    && Self.value(samples, "siwa_outbox_backlog") == 0
            }
            #expect(Self.value(samples, "siwa_requests_total", ["status": "200", "reason": "accepted"]) == 1)
            #expect(Self.value(samples, "siwa_requests_total", ["status": "401", "reason": "bad_signature"]) == 1)
            #expect(Self.value(samples, "siwa_requests_total", ["status": "404", "reason": "not_found"]) == 1)
            #expect(Self.value(samples, "siwa_events_total", ["outcome": "applied", "type": "consent-revoked"]) == 1)
            #expect(Self.value(samples, "siwa_verification_seconds_count") == 2)
            #expect(Self.value(samples, "siwa_commit_seconds_count") == 1)
            #expect(Self.value(samples, "siwa_commit_seconds_bucket", ["le": "+Inf"]) == 1)
            #expect(Self.value(samples, "siwa_outbox_backlog") == 0)
            #expect(Self.value(samples, "siwa_outbox_dead") == 0)
            #expect(Self.value(samples, "siwa_key_refreshes_total", ["result": "success"]) ?? 0 >= 1)
            #expect(Self.value(samples, "siwa_db_pool_open") ?? 0 >= 1)
            #expect(Self.value(samples, "siwa_writer_queue") == 0)
            #expect(Self.value(samples, "siwa_writer_pool_open") == 1)

            #expect(try h.post(token: try h.token(type: "email-disabled", sub: "sub.m3")).code == "accepted")
            #expect(try h.waitForWorker())
            _ = try eventually(timeout: 5) {
                samples = try Self.parse(try h.admin("/metrics").body)
                return Self.value(samples, "siwa_events_total", ["outcome": "applied", "type": "email-disabled"]) == 1
            }
            #expect(Self.value(samples, "siwa_requests_total", ["status": "200", "reason": "accepted"]) == 2)
            #expect(Self.value(samples, "siwa_events_total", ["outcome": "applied", "type": "email-disabled"]) == 1)
        }
    }

    @Test("log timestamps are RFC 3339 UTC with milliseconds")
    func timestamps() {
        #expect(LogLineFormatter.timestamp(Date(timeIntervalSince1970: 1_752_572_190.719)) == "2025-07-15T09:36:30.719Z")
        #expect(LogLineFormatter.timestamp(Date(timeIntervalSince1970: 0)) == "1970-01-01T00:00:00.000Z")
    }

    @Test("healthz and readyz; the admin listener is not the public one")
    func health() throws {
        try TestHarness.with { h throws in
            #expect(try h.admin("/healthz").status == 200)
            #expect(try h.admin("/readyz").status == 200)
            #expect(h.app.adminPort != h.app.publicPort)
            #expect(try h.send(body: "", method: "GET", path: "/healthz").status == 404)
            #expect(try h.send(body: "", method: "GET", path: "/metrics").status == 404)
        }
    }

    @Test("logs: one JSON object per line, no tokens, emails or raw subs")
    func logsLeakNothing() throws {
        try TestHarness.with { h throws in
            let email = "secret.person@privaterelay.appleid.com"
            let sub = "000739.5ecret5ub.0001"
            let good = try h.token(type: "email-enabled", sub: sub, email: email, isPrivateEmail: true)
            #expect(try h.post(token: good).code == "accepted")
            #expect(try h.post(token: good).code == "duplicate")
            #expect(try h.post(token: String(good.dropLast(4)) + "AAAA").code == "bad_signature")
            let expired = try h.signer.sign(
                claims: {
                    var c = NotificationSigner.claims(audience: TestHarness.audience, type: "email-disabled", sub: sub, email: email)
                    c["exp"] = .number(1)
                    return c
                }())
            #expect(try h.post(token: expired).code == "expired")
            #expect(try h.waitForWorker())
            let lines = h.logs.lines
            #expect(lines.count >= 5)
            for line in lines {
                #expect((try? JSONParser.parse(line)) != nil, "not one JSON object: \(line)")
                #expect(!line.contains(email))
                #expect(!line.contains("5ecret5ub"))
                #expect(!line.contains(String(good.prefix(30))))
                #expect(!line.contains(String(good.split(separator: ".")[2].prefix(20))))
            }
            let accepted = lines.first { $0.contains("notification accepted") } ?? ""
            #expect(accepted.contains("\"sub_hash\":\"\(SubjectHash.of(sub))\""))
            #expect(accepted.contains("\"jti\""))
            #expect(accepted.contains("\"request_id\""))
            #expect(lines.contains { $0.contains("\"reason\":\"bad_signature\"") })
        }
    }
}

extension TestDatabase.Missing {
    struct Parse: Error, CustomStringConvertible { var description: String }
}
