import Foundation
import SiwaApp
import SiwaCore
import SiwaCrypto
import SiwaDevTools
import SiwaTestSupport
import Testing

/// Every row of the contract's HTTP table, over real HTTP on loopback, against a real database.
@Suite(
    "Public listener: status codes and reason codes", .needsDatabase
)
struct ReceiverStatusTests {
    @Test("valid notification: 200 accepted only after the row is committed")
    func acceptedIsCommitted() throws {
        try TestHarness.with { h throws in
            let token = try h.token(type: "consent-revoked", sub: "sub.accepted")
            let reply = try h.post(token: token)
            #expect(reply.status == 200)
            #expect(reply.code == "accepted")
            #expect(reply.headers["content-type"] == "application/json")
            // The answer came after the commit: a fresh connection sees the row at once.
            #expect(try h.scalar("SELECT count(*) FROM siwa.events WHERE sub = 'sub.accepted'") == "1")
            #expect(try h.scalar("SELECT claims->>'iss' FROM siwa.events WHERE sub = 'sub.accepted'") == "https://appleid.apple.com")
        }
    }

    @Test("same jti again: 200 duplicate, nothing new stored")
    func duplicateJTI() throws {
        try TestHarness.with { h throws in
            let token = try h.token(sub: "sub.dup")
            #expect(try h.post(token: token).code == "accepted")
            let again = try h.post(token: token)
            #expect(again.status == 200)
            #expect(again.code == "duplicate")
            // Re-signed retry: new jti, same (sub, type, event_time).
            let resigned = try h.signer.sign(
                claims: {
                    var c = try JSONParser.parse(Array(Base64URL.decode(token.split(separator: ".")[1])!)).objectValue!
                    c["jti"] = .string(NotificationSigner.newJTI())
                    return c
                }())
            let third = try h.post(token: resigned)
            #expect(third.status == 200)
            #expect(third.code == "duplicate")
            #expect(try h.scalar("SELECT count(*) FROM siwa.events") == "1")
        }
    }

    @Test("a stored jti with other claims: 200 duplicate, nothing new stored")
    func storedJTIOtherClaims() throws {
        try TestHarness.with { h throws in
            let jti = NotificationSigner.newJTI()
            #expect(try h.post(token: try h.token(sub: "sub.jti.first", jti: jti)).code == "accepted")
            // Apple signs a token once; one reusing a stored jti for another event is still a
            // duplicate: the insert checks every unique key, not the dedupe key alone.
            #expect(try h.post(token: try h.token(sub: "sub.jti.second", jti: jti)).code == "duplicate")
            #expect(try h.scalar("SELECT string_agg(sub, ',') FROM siwa.events") == "sub.jti.first")
        }
    }

    @Test("unknown type: 200 ignored, stored for the record, never applied")
    func unknownTypeIgnored() throws {
        try TestHarness.with { h throws in
            let reply = try h.post(token: try h.token(type: "password-changed", sub: "sub.unknown"))
            #expect(reply.status == 200)
            #expect(reply.code == "ignored")
            #expect(try h.scalar("SELECT status FROM siwa.events WHERE sub = 'sub.unknown'") == "ignored")
            // A known event sent after it, applied: the worker has been past the ignored one.
            #expect(try h.post(token: try h.token(type: "consent-revoked", sub: "sub.known")).code == "accepted")
            #expect(try h.waitForWorker(timeout: 20))
            #expect(try h.scalar("SELECT status FROM siwa.accounts WHERE apple_sub = 'sub.known'") == "consent_revoked")
            #expect(try h.scalar("SELECT count(*) FROM siwa.accounts WHERE apple_sub = 'sub.unknown'") == "0")
            #expect(try h.scalar("SELECT status FROM siwa.events WHERE sub = 'sub.unknown'") == "ignored")
        }
    }

    @Test("the account-deleted spelling is the account-delete type")
    func accountDeletedSpelling() throws {
        try TestHarness.with { h throws in
            #expect(try h.post(token: try h.token(type: "account-deleted", sub: "sub.spelling")).code == "accepted")
            #expect(try h.scalar("SELECT type FROM siwa.events WHERE sub = 'sub.spelling'") == "account-delete")
        }
    }

    @Test("malformed requests: 400 with a reason code, nothing stored")
    func badRequests() throws {
        try TestHarness.with { h throws in
            let key = h.signer
            func signed(_ claims: [String: JSONValue]) throws -> String {
                NotificationSigner.body(token: try key.sign(claims: claims))
            }
            var base = NotificationSigner.claims(audience: TestHarness.audience, type: "consent-revoked", sub: "sub.bad")
            let cases: [(String, String, String)] = [
                ("empty body", "", "malformed_json"),
                ("not JSON", "{payload:", "malformed_json"),
                ("JSON array", "[1,2]", "malformed_json"),
                ("no payload", #"{"token":"a.b.c"}"#, "missing_payload"),
                ("payload not a string", #"{"payload":42}"#, "missing_payload"),
                ("not a compact JWS", #"{"payload":"abc.def"}"#, "malformed_jws"),
                ("non-base64url characters", #"{"payload":"a*b.c$d.e+f"}"#, "malformed_jws"),
                (
                    "claims not JSON",
                    NotificationSigner.body(
                        token: Base64URL.encode(Array(#"{"alg":"RS256","kid":"test-key-1"}"#.utf8)) + "." + Base64URL.encode(Array("not json".utf8))
                            + ".AAAA"), "malformed_claims"
                ),
                (
                    "events not JSON",
                    try {
                        base["events"] = .string("{nope")
                        return try signed(base)
                    }(), "malformed_events"
                ),
                (
                    "events missing sub",
                    try {
                        base["events"] = .string(#"{"type":"consent-revoked","event_time":1}"#)
                        return try signed(base)
                    }(), "missing_sub"
                ),
                (
                    "events missing type",
                    try {
                        base["events"] = .string(#"{"sub":"x","event_time":1}"#)
                        return try signed(base)
                    }(), "missing_type"
                ),
            ]
            for (name, body, reason) in cases {
                let reply = try h.send(body: body)
                #expect(reply.status == 400, "\(name)")
                #expect(reply.code == reason, "\(name): \(reply.body)")
            }
            #expect(try h.scalar("SELECT count(*) FROM siwa.events") == "0")
        }
    }

    @Test("untrusted tokens: 401 with a reason code, nothing stored")
    func unauthorized() throws {
        try TestHarness.with { h throws in
            let now = Int64(Date().timeIntervalSince1970)
            let claims = NotificationSigner.claims(audience: TestHarness.audience, type: "consent-revoked", sub: "sub.401")
            let good = try h.signer.sign(claims: claims)
            let parts = good.split(separator: ".").map(String.init)
            let other = NotificationSigner(key: try RSAPrivateKey.generate(), kid: "test-key-1")
            func with(_ change: (inout [String: JSONValue]) -> Void) throws -> String {
                var c = claims
                change(&c)
                return try h.signer.sign(claims: c)
            }
            let headerNone = Base64URL.encode(Array(#"{"alg":"none","kid":"test-key-1"}"#.utf8))
            let headerHS = Base64URL.encode(Array(#"{"alg":"HS256","kid":"test-key-1"}"#.utf8))
            let hsInput = headerHS + "." + parts[1]
            let hsSignature = HMACSHA256.authenticate(key: TestHarness.sharedKey.modulus, message: Array(hsInput.utf8))
            var tampered = try JSONParser.parse(Array(Base64URL.decode(parts[1])!)).objectValue!
            tampered["aud"] = .string(TestHarness.audience + ".evil")
            let cases: [(String, String, String)] = [
                ("signature by another key", try other.sign(claims: claims), "bad_signature"),
                (
                    "tampered claims", parts[0] + "." + Base64URL.encode(Array(JSONValue.object(tampered).serialized().utf8)) + "." + parts[2],
                    "bad_signature"
                ),
                ("alg none", headerNone + "." + parts[1] + ".", "unsupported_alg"),
                ("HS256 keyed with the RSA modulus", hsInput + "." + Base64URL.encode(hsSignature), "unsupported_alg"),
                ("kid missing", try h.signer.sign(claims: claims, header: ["alg": .string("RS256")]), "missing_kid"),
                (
                    "kid unknown after a refresh", try h.signer.sign(claims: claims, header: ["alg": .string("RS256"), "kid": .string("nope")]),
                    "unknown_kid"
                ),
                ("wrong iss", try with { $0["iss"] = .string("https://evil.example") }, "wrong_issuer"),
                ("aud not configured", try with { $0["aud"] = .string("com.other.app") }, "wrong_audience"),
                ("exp passed", try with { $0["exp"] = .number(Double(now - 3600)) }, "expired"),
                ("iat in the future", try with { $0["iat"] = .number(Double(now + 3600)) }, "issued_in_future"),
            ]
            for (name, token, reason) in cases {
                // A definite unknown_kid needs a key fetch that began after the request arrived.
                if reason == "unknown_kid" { h.waitForKeyFetchWindow() }
                let reply = try h.post(token: token)
                #expect(reply.status == 401, "\(name)")
                #expect(reply.code == reason, "\(name): \(reply.body)")
            }
            #expect(try h.scalar("SELECT count(*) FROM siwa.events") == "0")
        }
    }

    @Test("method, path and content type: 405 with Allow, 404, 415; no content type is accepted")
    func routing() throws {
        try TestHarness.with { h throws in
            let get = try h.send(body: "", method: "GET")
            #expect(get.status == 405)
            #expect(get.headers["allow"] == "POST")
            #expect(get.code == "method_not_allowed")
            let put = try h.send(body: "{}", method: "PUT")
            #expect(put.status == 405)
            let other = try h.send(body: NotificationSigner.body(token: try h.token()), path: "/other")
            #expect(other.status == 404)
            #expect(other.code == "not_found")
            let form = try h.send(body: NotificationSigner.body(token: try h.token()), contentType: "application/x-www-form-urlencoded")
            #expect(form.status == 415)
            #expect(form.code == "unsupported_media_type")
            let none = try h.send(body: NotificationSigner.body(token: try h.token(sub: "sub.noct")), contentType: nil)
            #expect(none.status == 200, "\(none.body)")
            let parameters = try h.send(
                body: NotificationSigner.body(token: try h.token(sub: "sub.param")), contentType: "Application/JSON; charset=utf-8")
            #expect(parameters.status == 200)
            #expect(try h.scalar("SELECT count(*) FROM siwa.events") == "2")
        }
    }

    @Test("bodies over the limit: 413 with Content-Length and when streamed chunked")
    func bodyLimit() throws {
        try TestHarness.with(maxBody: 4096) { h throws in
            let raw = RawHTTP(port: h.app.publicPort!)
            // Announced too large: refused on the headers, the body is never read.
            let announced = try raw.exchange(
                "POST /apple/notifications HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 10000000\r\n\r\n")
            #expect(RawHTTP.status(announced) == 413)
            #expect(announced.contains("body_too_large"))
            // Chunked, no Content-Length: counted while streaming.
            let chunk = [UInt8](repeating: UInt8(ascii: "a"), count: 1024)
            var body: [UInt8] = []
            for _ in 0..<8 {
                body += Array("400\r\n".utf8) + chunk + Array("\r\n".utf8)
            }
            body += Array("0\r\n\r\n".utf8)
            let streamed = try raw.exchange(
                "POST /apple/notifications HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n",
                body: body)
            #expect(RawHTTP.status(streamed) == 413, "\(streamed.prefix(80))")
            // Exactly at the limit is read (and then judged on its content); one byte more is not.
            func padded(_ sub: String, to size: Int) throws -> String {
                let body = NotificationSigner.body(token: try h.token(sub: sub))
                return body + String(repeating: " ", count: size - body.utf8.count)
            }
            let atLimit = try h.send(body: try padded("sub.limit", to: 4096))
            #expect(atLimit.status == 200, "\(atLimit.body)")
            let over = try h.send(body: try padded("sub.over", to: 4097))
            #expect(over.status == 413)
            #expect(over.code == "body_too_large")
            #expect(try h.scalar("SELECT count(*) FROM siwa.events") == "1")
        }
    }

    @Test("error bodies never echo the token or an email")
    func errorBodiesLeakNothing() throws {
        try TestHarness.with { h throws in
            let token = try h.token(type: "email-disabled", sub: "sub.leak", email: "leak@privaterelay.appleid.com")
            let broken = String(token.dropLast(3)) + "AAA"
            let reply = try h.post(token: broken)
            #expect(reply.status == 401)
            #expect(!reply.body.contains("leak@"))
            #expect(!reply.body.contains(String(token.prefix(20))))
            #expect(reply.body == #"{"error":"bad_signature"}"#)
        }
    }
}
