import Foundation
import Logging
import SiwaApp
import SiwaCore
import Testing

/// One email service's client against its loopback fake over real HTTP, without the queue: what a
/// call does at each list, and what it hands the record when it stops half-way.
@Suite("Email sender clients")
struct SenderClientTests {
    static let address = "abc123@privaterelay.appleid.com"

    static func client(_ fake: FakeEmailService, scopes: [String]) throws -> SuppressionClient {
        let api: any SuppressionAPI
        let credential: SenderTransport.Credential
        switch fake.sender {
        case .postmark:
            api = PostmarkSuppressionAPI(streams: scopes)
            credential = .header(name: "X-Postmark-Server-Token", value: fake.credential)
        case .mailgun:
            api = MailgunSuppressionAPI(domains: scopes)
            credential = .basic(user: "api", password: fake.credential)
        case .sendgrid:
            api = SendGridSuppressionAPI()
            credential = .bearer(fake.credential)
        case .ses:
            api = SESSuppressionAPI()
            credential = .sigV4(SigV4.Credentials(accessKeyID: fake.credential, secretAccessKey: "s"), region: "eu-west-1", service: "ses")
        }
        return SuppressionClient(
            api: api, transport: try SenderTransport(url: fake.url, credential: credential),
            logger: Logger(label: "test") { _ in SwiftLogNoOpLogHandler() })
    }

    @Test(
        "a call that stops at its second list keeps what it added at the first; its retry takes that entry as its own",
        arguments: [EmailSender.postmark, .mailgun])
    func partial(_ sender: EmailSender) throws {
        let scopes = SenderFixture.scopes(sender)
        let fake = try FakeEmailService(sender, scopes: [scopes[0]], credential: "key")
        defer { fake.stop() }
        let client = try Self.client(fake, scopes: scopes)
        let first = client.apply(.suppress, address: Self.address, recorded: [])
        let added = SuppressionEntry(address: Self.address, scope: scopes[0])
        #expect(first.ledger == SuppressionLedger(added: [added]), "\(first)")
        guard case .refused(let failure) = first.outcome else {
            Issue.record("not refused: \(first.outcome)")
            return
        }
        #expect(failure.blame == .tenant && failure.progress == [.suppressed], "\(failure)")
        // The list exists now; the retry, told what the record holds.
        fake.change { $0.lists[scopes[1]] = [:] }
        let retry = client.apply(.suppress, address: Self.address, recorded: first.ledger.added)
        #expect(retry.outcome == .done([.suppressed], status: 200), "\(retry)")
        #expect(retry.ledger == SuppressionLedger(added: [SuppressionEntry(address: Self.address, scope: scopes[1])]))
        // Both are siwa-notify's: email-enabled lifts both.
        let lifted = client.apply(.unsuppress, address: Self.address, recorded: first.ledger.added + retry.ledger.added)
        #expect(lifted.outcome == .done([.unsuppressed], status: 200) && lifted.ledger.removed.count == 2, "\(lifted)")
        #expect(fake.entries(Self.address).isEmpty)
    }

    @Test("Postmark keeps a spam complaint: an erase says not_erasable and forgets it")
    func spamComplaint() throws {
        let fake = try FakeEmailService(.postmark, scopes: ["outbound"], credential: "key")
        defer { fake.stop() }
        fake.preset(Self.address, origin: .service)
        let client = try Self.client(fake, scopes: ["outbound"])
        let entry = SuppressionEntry(address: Self.address, scope: "outbound")
        let erased = client.apply(.erase, address: Self.address, recorded: [])
        #expect(erased.outcome == .done([.notErasable], status: 200) && erased.ledger.removed == [entry], "\(erased)")
        #expect(fake.entries(Self.address) == ["outbound": .service])
    }

    @Test("the start-up check: accepted; a refused credential blamed on the credential; no answer to be retried", arguments: EmailSender.allCases)
    func check(_ sender: EmailSender) throws {
        let fake = try FakeEmailService(sender, scopes: SenderFixture.scopes(sender), credential: "key")
        let client = try Self.client(fake, scopes: SenderFixture.scopes(sender))
        guard case .done = client.check() else {
            Issue.record("check did not pass: \(client.check())")
            return
        }
        fake.change { $0.refuseCredential = true }
        guard case .refused(let failure) = client.check() else {
            Issue.record("a refused credential passed")
            return
        }
        #expect(failure.blame == .credential, "\(failure)")
        fake.stop()
        guard case .retryLater = client.check() else {
            Issue.record("a service down is not to be retried: \(client.check())")
            return
        }
        // The probe asks of an address no one has, and nothing else.
        #expect(fake.requests.allSatisfy { $0.method == "GET" })
    }
}
