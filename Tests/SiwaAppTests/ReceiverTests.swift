import Dispatch
import Foundation
import SiwaCore
import SiwaCrypto
import SiwaDevTools
import SiwaHTTP
import SiwaPostgres
import SiwaRuntime
import Testing

@testable import SiwaApp

/// The receiver's decisions in-process: real tokens signed with an RSA key made at test time,
/// a key store reading a `file://` key set, an in-memory outbox sink, a pinned clock; no sockets
/// and no database. The same answers are checked end to end over loopback by
/// ReceiverStatusTests and HostileInputTests (the integration tier).
@Suite("Receiver in-process")
struct ReceiverTests {
    typealias F = ReceiverFixture

    // MARK: Accepted, duplicate, ignored

    @Test("a valid notification is answered 200 accepted only once the sink has committed it")
    func acceptedAfterCommit() throws {
        let sink = MemorySink(.hold)
        let fixture = try F(sink: sink)
        let jti = NotificationSigner.newJTI()
        let before = Deadline.now
        let answer = fixture.post(token: try F.token(F.claims(sub: "000739.abc.0042", jti: jti)))

        #expect(answer.response == nil, "answered before the sink completed")
        #expect(sink.heldCount == 1)
        let submitted = try #require(sink.submissions.first)
        #expect(sink.submissions.count == 1)
        #expect(submitted.notification.jti == jti)
        #expect(submitted.notification.audience == F.audience)
        #expect(submitted.notification.issuedAt == F.now)
        #expect(submitted.notification.event.sub == "000739.abc.0042")
        #expect(submitted.notification.event.type == .consentRevoked)
        #expect(submitted.notification.event.eventTimeMillis == F.now * 1000)
        // The deadline is arrival + the commit timeout (5 s).
        #expect(submitted.deadline >= before.adding(.seconds(5)))
        #expect(submitted.deadline <= Deadline.now.adding(.seconds(5)))

        sink.complete(.committed(.accepted))
        #expect(answer.status == 200)
        #expect(answer.code == "accepted")
        #expect(answer.header("Content-Type") == "application/json")
        #expect(answer.header("Retry-After") == nil)
        #expect(answer.delivered.count == 1)
    }

    @Test("duplicate and ignored outcomes are answered 200 with their name", arguments: [InsertOutcome.duplicate, .ignored])
    func otherOutcomes(_ outcome: InsertOutcome) throws {
        let fixture = try F(sink: MemorySink(.answer(.committed(outcome))))
        let answer = fixture.post(token: try F.token(F.claims(type: outcome == .ignored ? "some-future-type" : "email-disabled")))
        #expect(answer.status == 200)
        #expect(answer.code == outcome.rawValue)
        #expect(fixture.sink.submissions.count == 1)
    }

    @Test("the logs of an accepted notification hold neither the token nor the sub")
    func logsHoldNoSecrets() throws {
        let fixture = try F()
        let sub = "000739.secret-subject.0001"
        let token = try F.token(F.claims(sub: sub))
        #expect(fixture.post(token: token).status == 200)
        let logs = fixture.logs.lines.joined(separator: "\n")
        #expect(logs.contains("notification accepted"))
        #expect(logs.contains(SubjectHash.of(sub)))
        #expect(!logs.contains(sub))
        #expect(!logs.contains(token.split(separator: ".")[2]))
    }

    // MARK: Verification failures: nothing is submitted

    struct Refusal: Sendable, CustomTestStringConvertible {
        var name: String
        var status: Int
        var code: String
        var token: @Sendable () throws -> String
        var testDescription: String { name }
    }

    static let refusals: [Refusal] = [
        Refusal(name: "bad signature", status: 401, code: "bad_signature") {
            // Signed by another key under the known kid.
            try F.token(signer: NotificationSigner(key: try RSAPrivateKey.generate(), kid: F.signer.kid))
        },
        Refusal(name: "alg none", status: 401, code: "unsupported_alg") {
            try F.signer.sign(claims: F.claims(), header: ["kid": .string(F.signer.kid), "alg": .string("none")])
        },
        Refusal(name: "wrong aud", status: 401, code: "wrong_audience") {
            try F.token(F.claims(audience: "com.example.other"))
        },
        Refusal(name: "wrong iss", status: 401, code: "wrong_issuer") {
            var claims = F.claims()
            claims["iss"] = .string("https://example.com")
            return try F.token(claims)
        },
        Refusal(name: "expired (issued two days before the pinned clock)", status: 401, code: "expired") {
            try F.token(F.claims(issuedAt: F.now - 2 * 86_400))
        },
        Refusal(name: "issued in the future", status: 401, code: "issued_in_future") {
            try F.token(F.claims(issuedAt: F.now + 3600))
        },
        Refusal(name: "missing iat", status: 401, code: "missing_iat") {
            var claims = F.claims()
            claims["iat"] = nil
            return try F.token(claims)
        },
        Refusal(name: "event_time in seconds", status: 400, code: "bad_event_time") {
            try F.token(F.claims(eventTimeMillis: F.now))
        },
        Refusal(name: "event_time long after iat", status: 400, code: "bad_event_time") {
            try F.token(F.claims(eventTimeMillis: (F.now + 7200) * 1000))
        },
        Refusal(name: "no jti", status: 400, code: "missing_jti") {
            var claims = F.claims()
            claims["jti"] = nil
            return try F.token(claims)
        },
        Refusal(name: "not a JWS", status: 400, code: "malformed_jws") { "abc.def" },
    ]

    @Test("a token that does not verify is refused with its reason and never submitted", arguments: refusals)
    func refused(_ refusal: Refusal) throws {
        let fixture = try F()
        let answer = fixture.post(token: try refusal.token())
        #expect(answer.status == refusal.status)
        #expect(answer.code == refusal.code)
        #expect(answer.header("Retry-After") == nil)
        #expect(fixture.sink.submissions.isEmpty)
    }

    static func unknownKidToken() throws -> String {
        try F.signer.sign(claims: F.claims(), header: ["kid": .string("not-published"), "alg": .string("RS256")])
    }

    @Test("an unknown kid waits for the key fetch it starts, then is refused 401 unknown_kid")
    func unknownKidAfterFetch() throws {
        let fixture = try F(keyRefreshInterval: 0)
        let answer = fixture.post(token: try Self.unknownKidToken())
        // Answered from the thread that finished the fetch.
        #expect(answer.wait(), "no answer after the key fetch")
        #expect(answer.status == 401)
        #expect(answer.code == "unknown_kid")
        #expect(fixture.sink.submissions.isEmpty)
    }

    @Test("an unknown kid while no fetch may start is answered 503 keys_unavailable with Retry-After")
    func unknownKidRateLimited() throws {
        // The key set was read just now; the next fetch may start only 10 s later.
        let fixture = try F(keyRefreshInterval: 10)
        let answer = fixture.post(token: try Self.unknownKidToken())
        #expect(answer.wait())
        #expect(answer.status == 503)
        #expect(answer.code == "keys_unavailable")
        let retryAfter = try #require(answer.header("Retry-After").flatMap(Int.init))
        #expect((1...11).contains(retryAfter))
        #expect(fixture.sink.submissions.isEmpty)
    }

    @Test(
        "bodies that are not Apple's envelope",
        arguments: [
            ("", "malformed_json"), ("[1]", "malformed_json"), ("{\"payload\":\"\"}", "missing_payload"),
            ("{\"other\":1}", "missing_payload"),
        ])
    func malformedBodies(_ body: String, _ code: String) throws {
        let fixture = try F()
        let answer = fixture.post(body: body)
        #expect(answer.status == 400)
        #expect(answer.code == code)
        #expect(fixture.sink.submissions.isEmpty)
    }

    @Test("the pinned clock decides: the same token is accepted now and expired two days later")
    func pinnedClock() throws {
        let token = try F.token()
        #expect(try F().post(token: token).status == 200)
        let later = try F(now: F.now + 2 * 86_400)
        let answer = later.post(token: token)
        #expect(answer.status == 401)
        #expect(answer.code == "expired")
    }

    // MARK: The sink's failures

    @Test("a full queue is answered 503 database_unavailable with Retry-After at once")
    func queueFull() throws {
        let fixture = try F(sink: MemorySink(.refuse), retryAfterSeconds: 7)
        let answer = fixture.post(token: try F.token())
        #expect(answer.status == 503)
        #expect(answer.code == "database_unavailable")
        #expect(answer.header("Retry-After") == "7")
        #expect(fixture.sink.submissions.count == 1)
    }

    @Test("a commit that timed out is answered 503 with Retry-After")
    func timedOut() throws {
        let fixture = try F(sink: MemorySink(.hold), retryAfterSeconds: 9)
        let answer = fixture.post(token: try F.token())
        #expect(answer.response == nil)
        fixture.sink.complete(.timedOut)
        #expect(answer.status == 503)
        #expect(answer.code == "database_unavailable")
        #expect(answer.header("Retry-After") == "9")
    }

    @Test("a database unavailable for the moment is answered 503 with Retry-After")
    func transientFailure() throws {
        let fixture = try F(sink: MemorySink(.answer(.unavailable(detail: "postgres connection_lost: gone"))))
        let answer = fixture.post(token: try F.token())
        #expect(answer.status == 503)
        #expect(answer.code == "database_unavailable")
        #expect(answer.header("Retry-After") == "7")
    }

    @Test("a row the database refused is answered 500 internal_error without Retry-After")
    func permanentFailure() throws {
        let fixture = try F(sink: MemorySink(.answer(.refused(detail: "postgres query_failed (42P01): relation"))))
        let answer = fixture.post(token: try F.token())
        #expect(answer.status == 500)
        #expect(answer.code == "internal_error")
        #expect(answer.header("Retry-After") == nil)
    }

    // MARK: Refused from the head, before the body

    @Test("head: wrong method 405 with Allow, wrong path 404, too large 413, wrong type 415")
    func headRefusals() throws {
        let fixture = try F(maxBody: 1000)
        let r = fixture.receiver
        func answer(_ head: HTTPRequestHead) -> (Int?, String?, [HTTPHeader]) {
            let response = r.head(head)
            let code = response.flatMap { try? JSONParser.parse($0.body) }?["error"]?.stringValue
            return (response?.status, code, response?.headers ?? [])
        }
        let get = answer(HTTPRequestHead(method: "GET", path: F.path))
        #expect(get.0 == 405)
        #expect(get.1 == "method_not_allowed")
        #expect(get.2.contains(HTTPHeader("Allow", "POST")))
        let wrongPath = answer(HTTPRequestHead(method: "POST", path: "/apple/other", contentType: "application/json"))
        #expect(wrongPath.0 == 404)
        #expect(wrongPath.1 == "not_found")
        let large = answer(HTTPRequestHead(method: "POST", path: F.path, contentType: "application/json", contentLength: 1001))
        #expect(large.0 == 413)
        #expect(large.1 == "body_too_large")
        let invalidLength = answer(HTTPRequestHead(method: "POST", path: F.path, contentType: "application/json", contentLength: -1))
        #expect(invalidLength.0 == 413)
        let text = answer(HTTPRequestHead(method: "POST", path: F.path, contentType: "text/plain", contentLength: 10))
        #expect(text.0 == 415)
        #expect(text.1 == "unsupported_media_type")
        // What may go on to the body.
        #expect(r.head(HTTPRequestHead(method: "POST", path: F.path, contentType: "application/json; charset=utf-8", contentLength: 1000)) == nil)
        #expect(r.head(HTTPRequestHead(method: "POST", path: F.path)) == nil)
        // A body that grew past the limit while streaming.
        let streamed = r.bodyTooLarge(HTTPRequestHead(method: "POST", path: F.path))
        #expect(streamed.status == 413)
        #expect(fixture.sink.submissions.isEmpty)
    }

    @Test("the in-process responder delivers once; later answers are ignored")
    func responderDeliversOnce() {
        let answer = Answer()
        answer.responder.respond(.json(200, "{\"status\":\"accepted\"}"))
        answer.responder.respond(.json(503, "{\"error\":\"shutting_down\"}"))
        #expect(answer.delivered.count == 1)
        #expect(answer.status == 200)
    }

    @Test("answers are counted in the metrics by status and reason")
    func metricsCount() throws {
        let fixture = try F()
        #expect(fixture.post(token: try F.token()).status == 200)
        #expect(fixture.post(token: try F.token(F.claims(audience: "x"))).status == 401)
        let text = fixture.metrics.render(gauges: [])
        #expect(text.contains("siwa_requests_total{status=\"200\",reason=\"accepted\"} 1\n"))
        #expect(text.contains("siwa_requests_total{status=\"401\",reason=\"wrong_audience\"} 1\n"))
    }
}
