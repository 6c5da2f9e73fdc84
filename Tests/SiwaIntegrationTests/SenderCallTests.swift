import Foundation
import SiwaApp
import SiwaCore
import SiwaPostgres
import Testing

/// An email service as a test runs it: its loopback fake and the configuration pointing at it.
final class SenderFixture: @unchecked Sendable {
    let sender: EmailSender
    let fake: FakeEmailService
    private let directory: URL
    private let keyFile: String

    static func scopes(_ sender: EmailSender) -> [String] {
        switch sender {
        case .ses, .sendgrid: return [""]
        case .postmark: return ["outbound", "broadcast"]
        case .mailgun: return ["mg.example.com", "news.example.com"]
        }
    }

    init(_ sender: EmailSender) throws {
        self.sender = sender
        fake = try FakeEmailService(sender, scopes: Self.scopes(sender), credential: sender == .ses ? "AKIDSENDERTEST" : "key-\(sender.rawValue)")
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("siwa-sender-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        keyFile = directory.appendingPathComponent("key").path
        try Data((fake.credential + "\n").utf8).write(to: URL(fileURLWithPath: keyFile))
    }

    func configure(_ config: inout ServerConfiguration) {
        config.emailSenders.targets.append(sender)
        switch sender {
        case .ses:
            config.emailSenders.ses = .init(
                region: "eu-west-1", credentials: .environment(SigV4.Credentials(accessKeyID: fake.credential, secretAccessKey: "secret")),
                url: fake.url)
        case .sendgrid: config.emailSenders.sendgrid = .init(apiKeyFile: keyFile, url: fake.url)
        case .postmark: config.emailSenders.postmark = .init(serverTokenFile: keyFile, streams: Self.scopes(sender), url: fake.url)
        case .mailgun: config.emailSenders.mailgun = .init(apiKeyFile: keyFile, domains: Self.scopes(sender), url: fake.url)
        }
    }

    /// The requests recorded, checked against the service's published description (SES: botocore's
    /// sesv2 model; SendGrid: twilio/sendgrid-oai). Postmark and Mailgun publish none.
    func validate() throws {
        switch sender {
        case .ses:
            try ProviderOpenAPI.expectValid(fake.requests, specs: [], senders: ["sesv2-suppression.json"])
        case .sendgrid:
            // SendGrid's description says in words that a lookup of an address not suppressed
            // answers `{}`, while its schema requires `recipient_email`: those answers are left out.
            let checked = fake.requests.filter { !($0.method == "GET" && $0.answer.body == Array("{}".utf8)) }
            try ProviderOpenAPI.expectValid(checked, specs: [], senders: ["sendgrid-global-suppressions.json"])
        case .postmark, .mailgun: break
        }
    }

    func stop() {
        fake.stop()
        try? FileManager.default.removeItem(at: directory)
    }
}

extension ProviderOpenAPI {
    /// As `expectValid(_:specs:)`, with fixtures of Fixtures/senders/.
    static func expectValid(
        _ requests: [ProviderFake.Seen], specs: [String], senders: [String], sourceLocation: SourceLocation = #_sourceLocation
    ) throws {
        guard !requests.isEmpty else { return }
        let file = NSTemporaryDirectory() + "siwa-sender-\(UInt64.random(in: 0...UInt64.max)).jsonl"
        try requests.map(\.line).joined().write(toFile: file, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: file) }
        let dir = OpenAPITests.root.appendingPathComponent("Tests/SiwaIntegrationTests/Fixtures/senders")
        let arguments = senders.flatMap { ["--spec", dir.appendingPathComponent($0).path] }
        let result = try OpenAPITests.python(["scripts/provider-openapi", "requests"] + arguments + [file])
        #expect(result.status == 0, "\(result.output)", sourceLocation: sourceLocation)
    }
}

/// The email services end to end: notifications through the real receiver and worker, each effect
/// queued in `siwa.provider_calls` in the worker's transaction and made by the call sender against
/// a loopback fake of the service. Every service runs the same matrix.
@Suite("Email sender calls", .serialized, .needsDatabase)
struct SenderCallTests {
    static let senders = EmailSender.allCases

    static let apple = "001234.aaaa0000bbbb1111cccc2222dddd3333.0001"
    static let other = "001234.99998888777766665555444433332222.0003"
    static let relay = "abc123xyz@privaterelay.appleid.com"
    static let otherRelay = "zzz987qqq@private.icloud.com"

    static func harness(_ fixtures: [SenderFixture], retryFor: Duration = .seconds(3600), allAddresses: Bool = false) throws -> TestHarness {
        try TestHarness { config, options in
            for f in fixtures { f.configure(&config) }
            config.emailSenders.allAddresses = allAddresses
            options.providers.pollInterval = .milliseconds(100)
            options.providers.schedule = ProviderCallSchedule(
                retryFor: retryFor, backoff: RetryPolicy(maxAttempts: .max, baseDelay: .milliseconds(200), maxDelay: .milliseconds(400)))
        }
    }

    struct Row: Equatable, CustomStringConvertible {
        var target: String
        var effect: String
        var state: String
        var actions: String?
        var attempts: Int
        var description: String { "\(target) \(effect) \(state) [\(actions ?? "nil")] x\(attempts)" }
    }

    static func calls(_ h: TestHarness, sub: String) throws -> [Row] {
        try h.query("SELECT target, effect, state, actions, attempts FROM siwa.provider_calls WHERE apple_sub = $1 ORDER BY id", [sub]).rows
            .map { r in Row(target: r[0] ?? "", effect: r[1] ?? "", state: r[2] ?? "", actions: r[3], attempts: Int(r[4] ?? "0") ?? 0) }
    }

    static func settled(_ h: TestHarness, sub: String, count: Int, timeout: Double = 20) throws -> [Row] {
        let done = try eventually(timeout: timeout) {
            let rows = try calls(h, sub: sub)
            return try h.waitForWorker(timeout: timeout) && rows.count >= count && rows.allSatisfy { $0.state != "pending" }
        }
        let rows = try calls(h, sub: sub)
        #expect(done, "calls not settled after \(timeout) s: \(rows)")
        return rows
    }

    func post(_ h: TestHarness, _ type: String, sub: String, at t: Int64, email: String? = nil, isPrivate: Bool? = nil) throws {
        let reply = try h.post(token: try h.token(type: type, sub: sub, eventTimeMillis: t, email: email, isPrivateEmail: isPrivate))
        #expect(reply.status == 200, "\(reply.body)")
    }

    static func everywhere(_ f: SenderFixture, _ origin: FakeEmailService.Origin) -> [String: FakeEmailService.Origin] {
        Dictionary(uniqueKeysWithValues: SenderFixture.scopes(f.sender).map { ($0, origin) })
    }

    @Test("all four at once: disabled suppresses at each, enabled lifts only siwa-notify's, account-delete leaves no record")
    func allFour() throws {
        let fixtures = try EmailSender.allCases.map(SenderFixture.init)
        defer { for f in fixtures { f.stop() } }
        // The other user's address is already suppressed by the service or its recipient.
        for f in fixtures { f.fake.preset(Self.otherRelay, origin: .user) }
        let h = try Self.harness(fixtures)
        defer { h.stop() }
        try post(h, "email-disabled", sub: Self.apple, at: 1_750_000_001_000, email: Self.relay, isPrivate: true)
        try post(h, "email-disabled", sub: Self.other, at: 1_750_000_001_000, email: Self.otherRelay, isPrivate: true)
        #expect(try Self.settled(h, sub: Self.apple, count: 4).map(\.actions) == ["suppressed", "suppressed", "suppressed", "suppressed"])
        #expect(try Self.settled(h, sub: Self.other, count: 4).map(\.actions) == Array(repeating: "already_suppressed", count: 4))
        for f in fixtures { #expect(f.fake.entries(Self.relay) == Self.everywhere(f, .api), "\(f.sender)") }
        #expect(try h.scalar("SELECT count(*) FROM siwa.email_suppressions WHERE apple_sub = $1", [Self.apple]) == "6")
        #expect(try h.scalar("SELECT count(*) FROM siwa.email_suppressions WHERE apple_sub = $1", [Self.other]) == "0")

        try post(h, "email-enabled", sub: Self.apple, at: 1_750_000_002_000, email: Self.relay, isPrivate: true)
        try post(h, "email-enabled", sub: Self.other, at: 1_750_000_002_000, email: Self.otherRelay, isPrivate: true)
        #expect(try Self.settled(h, sub: Self.apple, count: 8).suffix(4).map(\.actions) == Array(repeating: "unsuppressed", count: 4))
        #expect(try Self.settled(h, sub: Self.other, count: 8).suffix(4).map(\.actions) == Array(repeating: "not_ours", count: 4))
        for f in fixtures {
            #expect(f.fake.entries(Self.relay).isEmpty, "\(f.sender)")
            #expect(f.fake.entries(Self.otherRelay) == Self.everywhere(f, .user), "\(f.sender): the recipient's own suppression stays")
        }

        try post(h, "email-disabled", sub: Self.apple, at: 1_750_000_003_000, email: Self.relay, isPrivate: true)
        #expect(try Self.settled(h, sub: Self.apple, count: 12).suffix(4).allSatisfy { $0.actions == "suppressed" })
        // user-report lists each call (which service, what, its outcome) and never the address or a credential.
        let report = try #require(try UserReport.json(sub: Self.apple, conninfo: h.conninfo))
        for f in fixtures {
            #expect(report.contains(#""target": "\#(f.sender.rawValue)""#) || report.contains(#""target":"\#(f.sender.rawValue)""#), "\(report)")
            #expect(!report.contains(f.fake.credential))
        }
        #expect(!report.contains(Self.relay) && report.contains("unsuppressed"), "\(report)")
        // Logs name the service and the operation: no address, no credential.
        let logs = h.logs.lines.joined(separator: "\n")
        #expect(logs.contains("sendgrid"))
        #expect(!logs.contains(Self.relay) && !logs.contains(Self.otherRelay), "an address in the logs")
        for f in fixtures { #expect(!logs.contains(f.fake.credential), "\(f.sender)'s credential in the logs") }
        try post(h, "account-delete", sub: Self.apple, at: 1_750_000_004_000)
        let erased = try Self.settled(h, sub: Self.apple, count: 16).suffix(4)
        #expect(erased.allSatisfy { $0.effect == "erase" && $0.state == "done" && $0.actions == "erased" }, "\(erased)")
        for f in fixtures { #expect(f.fake.entries(Self.relay).isEmpty, "\(f.sender)") }
        // Nothing of the address is kept: not the record, not the calls.
        #expect(try h.scalar("SELECT count(*) FROM siwa.email_suppressions WHERE apple_sub = $1", [Self.apple]) == "0")
        #expect(try h.scalar("SELECT count(*) FROM siwa.provider_calls WHERE apple_sub = $1 AND email IS NOT NULL", [Self.apple]) == "0")
        let metrics = try h.admin("/metrics").body
        for f in fixtures {
            #expect(metrics.contains(#"siwa_provider_calls_total{target="\#(f.sender.rawValue)",outcome="done"} 6"#), "\(metrics)")
            try f.validate()
        }
    }

    @Test("email-enabled lifts only siwa-notify's suppression; one the service made stays", arguments: senders)
    func onlyOurs(_ sender: EmailSender) throws {
        let f = try SenderFixture(sender)
        defer { f.stop() }
        f.fake.preset(Self.otherRelay, origin: .service)
        let h = try Self.harness([f])
        defer { h.stop() }
        try post(h, "email-disabled", sub: Self.other, at: 1_750_000_001_000, email: Self.otherRelay, isPrivate: true)
        try post(h, "email-enabled", sub: Self.other, at: 1_750_000_002_000, email: Self.otherRelay, isPrivate: true)
        let rows = try Self.settled(h, sub: Self.other, count: 2)
        #expect(rows.map(\.actions) == ["already_suppressed", "not_ours"], "\(rows)")
        #expect(f.fake.entries(Self.otherRelay) == Self.everywhere(f, .service))
        try f.validate()
    }

    @Test("account-delete erases siwa-notify's entries and the address's own where the API deletes them", arguments: senders)
    func accountDelete(_ sender: EmailSender) throws {
        let f = try SenderFixture(sender)
        defer { f.stop() }
        let h = try Self.harness([f])
        defer { h.stop() }
        try post(h, "email-disabled", sub: Self.apple, at: 1_750_000_001_000, email: Self.relay, isPrivate: true)
        #expect(try Self.settled(h, sub: Self.apple, count: 1).map(\.actions) == ["suppressed"])
        try post(h, "account-delete", sub: Self.apple, at: 1_750_000_002_000)
        let rows = try Self.settled(h, sub: Self.apple, count: 2)
        #expect(rows.last == Row(target: sender.rawValue, effect: "erase", state: "done", actions: "erased", attempts: 1), "\(rows)")
        #expect(f.fake.entries(Self.relay).isEmpty)
        #expect(try h.scalar("SELECT count(*) FROM siwa.email_suppressions") == "0")
        #expect(try h.scalar("SELECT count(*) FROM siwa.provider_calls WHERE email IS NOT NULL") == "0")
        // Deletion is final: a later event queues nothing.
        try post(h, "email-disabled", sub: Self.apple, at: 1_750_000_003_000, email: Self.relay, isPrivate: true)
        #expect(try Self.settled(h, sub: Self.apple, count: 2).count == 2)
        // The recipient's own unsubscribe of a deleted user's address goes too: the user is gone.
        f.fake.preset(Self.otherRelay, origin: .user)
        try post(h, "email-disabled", sub: Self.other, at: 1_750_000_001_000, email: Self.otherRelay, isPrivate: true)
        #expect(try Self.settled(h, sub: Self.other, count: 1).map(\.actions) == ["already_suppressed"])
        try post(h, "account-delete", sub: Self.other, at: 1_750_000_002_000)
        #expect(try Self.settled(h, sub: Self.other, count: 2).last?.actions == "erased")
        #expect(f.fake.entries(Self.otherRelay).isEmpty)
        try f.validate()
    }

    @Test("an in-app deletion erases what siwa-notify added", arguments: [EmailSender.postmark])
    func inAppDeletion(_ sender: EmailSender) throws {
        let f = try SenderFixture(sender)
        defer { f.stop() }
        let h = try Self.harness([f])
        defer { h.stop() }
        try post(h, "email-disabled", sub: Self.apple, at: 1_750_000_001_000, email: Self.relay, isPrivate: true)
        #expect(try Self.settled(h, sub: Self.apple, count: 1).map(\.actions) == ["suppressed"])
        _ = try h.query("SELECT siwa.request_deletion($1, $2)", [Self.apple, TestHarness.audience])
        let rows = try Self.settled(h, sub: Self.apple, count: 2)
        #expect(rows.last?.effect == "erase" && rows.last?.state == "done", "\(rows)")
        #expect(f.fake.entries(Self.relay).isEmpty)
    }

    @Test("stale and duplicate events, non-relay addresses: nothing queued; other users untouched", arguments: senders)
    func staleDuplicateAndNonRelay(_ sender: EmailSender) throws {
        let f = try SenderFixture(sender)
        defer { f.stop() }
        let h = try Self.harness([f])
        defer { h.stop() }
        let token = try h.token(type: "email-disabled", sub: Self.apple, eventTimeMillis: 1_750_000_002_000, email: Self.relay, isPrivateEmail: true)
        #expect(try h.post(token: token).status == 200)
        #expect(try h.post(token: token).status == 200)
        #expect(try h.waitForWorker())
        // Older than the applied email-disabled: stale, lifts nothing.
        try post(h, "email-enabled", sub: Self.apple, at: 1_750_000_001_000, email: Self.relay, isPrivate: true)
        // A real address (not the relay's): left alone.
        try post(h, "email-disabled", sub: Self.other, at: 1_750_000_001_000, email: "someone@example.com", isPrivate: false)
        let rows = try Self.settled(h, sub: Self.apple, count: 1)
        #expect(rows.map(\.effect) == ["suppress"], "\(rows)")
        #expect(try Self.calls(h, sub: Self.other).isEmpty)
        #expect(f.fake.entries("someone@example.com").isEmpty)
        #expect(f.fake.entries(Self.relay) == Self.everywhere(f, .api))
    }

    @Test("SIWA_EMAIL_SENDERS_ALL_ADDRESSES=true: a real address is kept in step too")
    func allAddresses() throws {
        let f = try SenderFixture(.sendgrid)
        defer { f.stop() }
        let h = try Self.harness([f], allAddresses: true)
        defer { h.stop() }
        try post(h, "email-disabled", sub: Self.other, at: 1_750_000_001_000, email: "someone@example.com", isPrivate: false)
        #expect(try Self.settled(h, sub: Self.other, count: 1).map(\.actions) == ["suppressed"])
    }

    @Test("an address the service does not know is recorded as such, not an error", arguments: senders)
    func unknownAddress(_ sender: EmailSender) throws {
        let f = try SenderFixture(sender)
        defer { f.stop() }
        let h = try Self.harness([f])
        defer { h.stop() }
        try post(h, "email-enabled", sub: Self.apple, at: 1_750_000_001_000, email: Self.relay, isPrivate: true)
        let rows = try Self.settled(h, sub: Self.apple, count: 1)
        #expect(rows.map(\.state) == ["user_unknown"] && rows.first?.attempts == 1, "\(rows)")
        let metrics = try h.admin("/metrics").body
        #expect(metrics.contains(#"siwa_provider_calls_total{target="\#(sender.rawValue)",outcome="user_unknown"} 1"#), "\(metrics)")
        try f.validate()
    }

    @Test("down then back, a 429 with its headers, a refused credential then accepted: nothing lost", arguments: senders)
    func downThrottledRefused(_ sender: EmailSender) throws {
        let f = try SenderFixture(sender)
        defer { f.stop() }
        let h = try Self.harness([f])
        defer { h.stop() }
        f.fake.change { $0.down = true }
        try post(h, "email-disabled", sub: Self.apple, at: 1_750_000_001_000, email: Self.relay, isPrivate: true)
        #expect(try h.waitForWorker())
        #expect(try eventually(timeout: 10) { (try Self.calls(h, sub: Self.apple).first?.attempts ?? 0) >= 2 })
        #expect(try Self.calls(h, sub: Self.apple).map(\.state) == ["pending"])
        #expect(try h.scalar("SELECT last_status FROM siwa.provider_calls WHERE apple_sub = $1", [Self.apple]) == "503")
        let report = try OutboxAdmin.status(conninfo: h.conninfo)
        #expect(report.providerCalls?.first { $0.target == sender.rawValue }?.waiting == 1, "\(report)")
        // Back, but throttled once: the call waits as the 429 says, then goes.
        f.fake.change {
            $0.down = false
            $0.throttled = 1
            $0.throttleSeconds = 1
        }
        let rows = try Self.settled(h, sub: Self.apple, count: 1)
        #expect(rows.map(\.state) == ["done"] && rows[0].attempts >= 3, "\(rows)")
        let seen = f.fake.requests.filter { $0.answer.status != 503 }
        if let throttled = seen.firstIndex(where: { $0.answer.status == 429 }), throttled + 1 < seen.count {
            #expect(seen[throttled + 1].at.timeIntervalSince(seen[throttled].at) >= 0.9, "the 429's wait not honoured")
        } else {
            Issue.record("no 429 answered, or nothing after it")
        }
        // A refused credential: kept with its reason, done once accepted.
        f.fake.change { $0.refuseCredential = true }
        try post(h, "email-disabled", sub: Self.other, at: 1_750_000_001_000, email: Self.otherRelay, isPrivate: true)
        #expect(
            try eventually(timeout: 10) {
                (try h.scalar("SELECT last_reason FROM siwa.provider_calls WHERE apple_sub = $1", [Self.other]) ?? "").hasSuffix("[credential]")
            })
        f.fake.change { $0.refuseCredential = false }
        #expect(try Self.settled(h, sub: Self.other, count: 1).map(\.state) == ["done"])
        #expect(f.fake.entries(Self.otherRelay) == Self.everywhere(f, .api))
    }

    @Test("a dead call is made again by replay", arguments: senders)
    func replay(_ sender: EmailSender) throws {
        let f = try SenderFixture(sender)
        defer { f.stop() }
        let h = try Self.harness([f], retryFor: .seconds(1))
        defer { h.stop() }
        f.fake.change { $0.down = true }
        try post(h, "email-disabled", sub: Self.apple, at: 1_750_000_001_000, email: Self.relay, isPrivate: true)
        #expect(try Self.settled(h, sub: Self.apple, count: 1).map(\.state) == ["dead"])
        f.fake.change { $0.down = false }
        #expect(try OutboxAdmin.replayProviderCalls(target: sender.rawValue, conninfo: h.conninfo) == 1)
        #expect(try Self.settled(h, sub: Self.apple, count: 1).map(\.state) == ["done"])
        #expect(f.fake.entries(Self.relay) == Self.everywhere(f, .api))
    }

    @Test("the start stops with one line naming the variable: refused credential, unknown list, unreachable", arguments: senders)
    func refusedStart(_ sender: EmailSender) throws {
        let f = try SenderFixture(sender)
        defer { f.stop() }
        func startError(_ change: @escaping (inout ServerConfiguration) -> Void = { _ in }) -> String {
            do {
                let h = try TestHarness { config, _ in
                    f.configure(&config)
                    change(&config)
                }
                h.stop()
                return "started"
            } catch {
                return "\(error)"
            }
        }
        #expect(startError() == "started")
        f.fake.change { $0.refuseCredential = true }
        let refused = startError()
        let variable = sender == .ses ? "AWS_ACCESS_KEY_ID" : EmailSenderConfiguration().credentialVariable(of: sender)
        #expect(refused.hasPrefix("\(variable): \(sender.rawValue) refused the credential"), "\(refused)")
        f.fake.change { $0.refuseCredential = false }
        switch sender {
        case .postmark:
            let wrong = startError { $0.emailSenders.postmark?.streams = ["outbound", "nothere"] }
            #expect(wrong.hasPrefix("SIWA_POSTMARK_STREAMS: postmark does not know it"), "\(wrong)")
        case .mailgun:
            let wrong = startError { $0.emailSenders.mailgun?.domains = ["mg.nothere.com"] }
            #expect(wrong.hasPrefix("SIWA_MAILGUN_DOMAINS: mailgun does not know it"), "\(wrong)")
        case .ses, .sendgrid: break
        }
        f.fake.stop()
        let down = startError()
        #expect(down.hasPrefix("SIWA_\(sender.rawValue.uppercased())_URL: \(sender.rawValue) did not answer"), "\(down)")
    }
}
