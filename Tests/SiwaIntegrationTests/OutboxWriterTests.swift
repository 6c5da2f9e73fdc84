import Foundation
import SiwaCore
import SiwaDevTools
import Testing

@testable import SiwaApp

@Suite("Outbox writer: batched commits", .needsDatabase)
struct OutboxWriterTests {
    @Test("array literals escape quotes and backslashes and keep NULLs")
    func arrayLiteral() {
        #expect(SQLEncoding.array(["a", nil, #"b"c\d"#, ""] as [String?]) == #"{"a",NULL,"b\"c\\d",""}"#)
        #expect(SQLEncoding.array([String]()) == "{}")
    }

    @Test("the same notification 30 times at once: one accepted, 29 duplicates, one row")
    func concurrentDuplicates() throws {
        try TestHarness.with { h throws in
            let token = try h.token(type: "consent-revoked", sub: "sub.same")
            let sender = LoadSender(
                url: h.baseURL + "/apple/notifications",
                tokens: (0..<30).map { ("copy\($0)", token) })
            sender.run(threads: 8)
            let codes = sender.outcomes.withLock { $0.values.map { $0.code ?? "none" } }
            #expect(codes.filter { $0 == "accepted" }.count == 1)
            #expect(codes.filter { $0 == "duplicate" }.count == 29)
            #expect(try h.scalar("SELECT count(*) FROM siwa.events") == "1")
        }
    }

    @Test("many distinct notifications at once: each answered accepted and stored once, with odd characters intact")
    func concurrentDistinct() throws {
        try TestHarness.with { h throws in
            let tokens = try (0..<200).map { i in
                (
                    String(i),
                    try h.token(
                        type: i % 2 == 0 ? "email-enabled" : "email-disabled",
                        sub: "sub.\"quoted\\slash\".\(i)", email: "o'neil+\(i)@example.com")
                )
            }
            let sender = LoadSender(url: h.baseURL + "/apple/notifications", tokens: tokens)
            sender.run(threads: 8)
            #expect(sender.accepted.count == 200)
            #expect(try h.scalar("SELECT count(*) FROM siwa.events") == "200")
            #expect(try h.scalar("SELECT count(*) FROM siwa.events WHERE sub LIKE 'sub.\"quoted\\\\slash\".%' AND email LIKE 'o''neil+%'") == "200")
        }
    }

    @Test("a stored jti reused for another event, in batches with new rows: it is a duplicate, every other row stored")
    func storedJTIInBatches() throws {
        try TestHarness.with { h throws in
            let jti = NotificationSigner.newJTI()
            #expect(try h.post(token: try h.token(sub: "sub.first", jti: jti)).code == "accepted")
            // Every unique key is checked (ON CONFLICT without a target): a conflict on either is a
            // duplicate, and the rest of the batch is stored.
            var tokens = [("reused", try h.token(sub: "sub.other", jti: jti))]
            for i in 0..<60 { tokens.append(("new-\(i)", try h.token(sub: "sub.new.\(i)"))) }
            let sender = LoadSender(url: h.baseURL + "/apple/notifications", tokens: tokens.shuffled())
            sender.run(threads: 8)
            let outcomes = sender.outcomes.withLock { $0 }
            #expect(outcomes["reused"]?.code == "duplicate")
            #expect(outcomes.filter { $0.key.hasPrefix("new-") }.allSatisfy { $0.value.code == "accepted" })
            #expect(try h.scalar("SELECT count(*) FROM siwa.events") == "61")
            #expect(try h.scalar("SELECT count(*) FROM siwa.events WHERE sub = 'sub.other'") == "0")
        }
    }

    @Test("a row the database refuses fails alone: the rest of its batch is stored, and its copies are not called duplicates")
    func badRowFailsAlone() throws {
        try TestHarness.with { h throws in
            _ = try h.query("ALTER TABLE siwa.events ADD CONSTRAINT test_refuse CHECK (sub <> 'sub.refused')")
            let refused = try h.token(sub: "sub.refused")
            var tokens = [("refused-1", refused), ("refused-2", refused)]
            for i in 0..<60 { tokens.append(("ok-\(i)", try h.token(sub: "sub.fine.\(i)"))) }
            let sender = LoadSender(url: h.baseURL + "/apple/notifications", tokens: tokens.shuffled())
            sender.run(threads: 8)
            let outcomes = sender.outcomes.withLock { $0 }
            #expect(outcomes["refused-1"]?.status == 500)
            #expect(outcomes["refused-2"]?.status == 500)
            #expect(outcomes["refused-1"]?.code == "internal_error")
            #expect(outcomes.filter { $0.key.hasPrefix("ok-") }.allSatisfy { $0.value.code == "accepted" })
            #expect(try h.scalar("SELECT count(*) FROM siwa.events") == "60")
        }
    }
}
