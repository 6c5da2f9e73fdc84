import Testing

@testable import SiwaCore

/// The Standard Webhooks scheme, with a test MAC: SiwaCore takes the HMAC as a function (the
/// real one, OpenSSL's, is checked against the spec's vector in SiwaCryptoTests). Here a fake
/// MAC that records what it was given shows what is signed and how headers are shaped.
@Suite struct StandardWebhookTests {
    /// "MAC" = key bytes followed by the message (what was signed, visible).
    static func transparent(_ key: [UInt8], _ message: [UInt8]) -> [UInt8] { key + message }

    @Test("the signed content is id.timestamp.body, one v1 signature per key, space-separated")
    func signatureShape() {
        let body = Array(#"{"a":1}"#.utf8)
        let header = StandardWebhook.signature(id: "msg_7", timestamp: 1_700_000_000, body: body, keys: [[1], [2]], mac: Self.transparent)
        let parts = header.split(separator: " ").map(String.init)
        #expect(parts.count == 2)
        #expect(parts.allSatisfy { $0.hasPrefix("v1,") })
        #expect(Base64.decode(parts[0].dropFirst(3)) == [1] + Array(#"msg_7.1700000000.{"a":1}"#.utf8))
        #expect(Base64.decode(parts[1].dropFirst(3)) == [2] + Array(#"msg_7.1700000000.{"a":1}"#.utf8))
    }

    @Test("verification accepts any one matching v1 signature and ignores other versions and junk")
    func verification() {
        let body = Array("{}".utf8)
        let good = StandardWebhook.signature(id: "msg_1", timestamp: 5, body: body, keys: [[9]], mac: Self.transparent)
        let verify = { (header: String, key: [UInt8]) in
            StandardWebhook.verify(signatureHeader: header, id: "msg_1", timestamp: 5, body: body, key: key, mac: Self.transparent)
        }
        #expect(verify(good, [9]))
        #expect(verify("v1,bm9wZQ== " + good, [9]))
        #expect(verify("v1a,xyz " + good + " v2,abc", [9]))
        #expect(!verify(good, [8]))
        #expect(!verify("v2," + good.dropFirst(3), [9]))
        #expect(!verify("", [9]))
        #expect(!verify("v1,!!!", [9]))
        #expect(!StandardWebhook.verify(signatureHeader: good, id: "msg_2", timestamp: 5, body: body, key: [9], mac: Self.transparent))
        #expect(!StandardWebhook.verify(signatureHeader: good, id: "msg_1", timestamp: 6, body: body, key: [9], mac: Self.transparent))
        #expect(!StandardWebhook.verify(signatureHeader: good, id: "msg_1", timestamp: 5, body: body + [0x20], key: [9], mac: Self.transparent))
    }

    @Test("secret files: whsec_<base64> lines, 24 to 64 byte keys; problems name the line, never the secret")
    func secretFiles() throws {
        let file = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\n\n# next key\n  whsec_" + Base64.encode([UInt8](repeating: 7, count: 32)) + "  \n"
        let keys = try StandardWebhookSecret.parse(file: file).get()
        #expect(keys.count == 2)
        #expect(keys[0].count == 24)
        #expect(keys[1] == [UInt8](repeating: 7, count: 32))
        func problem(_ text: String) -> String? {
            if case .failure(let p) = StandardWebhookSecret.parse(file: text) { return p.description }
            return nil
        }
        #expect(problem("") == "holds no secret (one whsec_<base64> a line)")
        #expect(problem("# only a comment\n") != nil)
        #expect(problem("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\nMfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw") == "line 2 is not whsec_<base64>")
        #expect(problem("whsec_not base64!") == "line 1 is not whsec_<base64>")
        #expect(problem("whsec_" + Base64.encode([1, 2, 3]))?.hasPrefix("line 1: the key is 3 bytes") == true)
        #expect(problem("whsec_" + Base64.encode([UInt8](repeating: 1, count: 65)))?.hasPrefix("line 1: the key is 65 bytes") == true)
        #expect(problem("whsec_secretsecret")?.contains("secretsecret") == false)
    }

    @Test func standardBase64() {
        #expect(Base64.encode([]) == "")
        #expect(Base64.encode([0xfb, 0xff]) == "+/8=")
        #expect(Base64.encode(Array("foob".utf8)) == "Zm9vYg==")
        #expect(Base64.decode("Zm9vYg==") == Array("foob".utf8))
        #expect(Base64.decode("Zm9vYg") == Array("foob".utf8))
        #expect(Base64.decode("+/8=") == [0xfb, 0xff])
        #expect(Base64.decode("-_8=") == nil)
        #expect(Base64.decode("Zm9v Yg==") == nil)
        #expect(Base64.decode("Zm=9") == nil)
    }

    @Test("payload as README’s forwarding section says: type, timestamp, data; email only on email events")
    func payload() throws {
        let email = ForwardMessage(
            id: "msg_42", type: .emailDisabled, sub: "000739.a\"b", audience: "com.example.app", eventTimeMillis: 1_752_572_190_719,
            source: .apple, email: "x@privaterelay.appleid.com", isPrivateEmail: true)
        let text = String(decoding: email.body(), as: UTF8.self)
        #expect(
            text
                == #"{"type":"email-disabled","timestamp":"2025-07-15T09:36:30.719Z","data":{"sub":"000739.a\"b","aud":"com.example.app","event_time":1752572190719,"source":"apple","email":"x@privaterelay.appleid.com","is_private_email":true}}"#
        )
        let parsed = try JSONParser.parse(email.body())
        #expect(parsed["data"]?["sub"]?.stringValue == "000739.a\"b")

        var revoked = email
        revoked.type = .consentRevoked
        revoked.source = .inApp
        #expect(
            String(decoding: revoked.body(), as: UTF8.self)
                == #"{"type":"consent-revoked","timestamp":"2025-07-15T09:36:30.719Z","data":{"sub":"000739.a\"b","aud":"com.example.app","event_time":1752572190719,"source":"in-app"}}"#
        )
        var erased = email
        erased.email = nil
        #expect(!String(decoding: erased.body(), as: UTF8.self).contains("\"email\""))
        #expect(ForwardMessage.id(forEvent: 17) == "msg_17")
    }

    @Test func iso8601() {
        #expect(ForwardMessage.iso8601(millis: 0) == "1970-01-01T00:00:00.000Z")
        #expect(ForwardMessage.iso8601(millis: 951_782_400_001) == "2000-02-29T00:00:00.001Z")
        #expect(ForwardMessage.iso8601(millis: 1_546_300_799_999) == "2018-12-31T23:59:59.999Z")
        #expect(ForwardMessage.iso8601(millis: -1) == "1969-12-31T23:59:59.999Z")
        #expect(ForwardMessage.iso8601(millis: 4_102_444_800_000) == "2100-01-01T00:00:00.000Z")
    }

    @Test("retries back off with jitter until SIWA_FORWARD_RETRY_FOR, the last one at the deadline, then dead")
    func schedule() {
        let s = ForwardSchedule(retryFor: .seconds(3 * 86_400))
        #expect(s.next(afterAttempts: 1, age: .seconds(0.1), jitter: 0) == .retry(after: .seconds(0.5)))
        #expect(s.next(afterAttempts: 3, age: .seconds(10), jitter: 0.5) == .retry(after: .seconds(3)))
        #expect(s.next(afterAttempts: 30, age: .seconds(1000), jitter: 0.999) < .retry(after: .seconds(3600)))
        #expect(s.next(afterAttempts: 30, age: .seconds(3 * 86_400 - 60), jitter: 0.9) == .retry(after: .seconds(60)))
        #expect(s.next(afterAttempts: 31, age: .seconds(3 * 86_400), jitter: 0) == .dead)
        #expect(s.next(afterAttempts: 1, age: .seconds(4 * 86_400), jitter: 0) == .dead)
    }
}

extension ForwardSchedule.Next {
    static func < (a: Self, b: Self) -> Bool {
        if case .retry(let x) = a, case .retry(let y) = b { return x < y }
        return false
    }
}
