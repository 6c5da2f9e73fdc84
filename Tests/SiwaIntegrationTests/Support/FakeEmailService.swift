import Foundation
import SiwaCore
import SiwaHTTP
import Synchronization
import Testing

/// A loopback stand-in for one email service's suppression API (SES v2, SendGrid, Postmark or
/// Mailgun), on the project's HTTP server: its lists, what put each entry there, its credential
/// check, and an outage, a throttle or a refused credential on demand. Every request is recorded
/// with its answer (`ProviderFake.Seen`), to be checked against the service's published
/// description where one exists (`ProviderOpenAPI`). Answers are shaped as the services document
/// them: SES v2 per botocore's `sesv2` model, SendGrid per twilio/sendgrid-oai, Postmark and
/// Mailgun per their API references (they publish no machine-readable description).
final class FakeEmailService: HTTPHandler, @unchecked Sendable {
    /// Who put an entry on a list.
    enum Origin: String, Sendable {
        /// siwa-notify's own call.
        case api
        /// The service itself (a bounce, a complaint).
        case service
        /// The recipient (an unsubscribe).
        case user
    }

    struct State {
        /// scope → address → who put it there.
        var lists: [String: [String: Origin]] = [:]
        var down = false
        var refuseCredential = false
        /// The next requests answered 429 with the service's rate-limit headers.
        var throttled = 0
        /// Seconds the 429 asks to wait.
        var throttleSeconds = 1
    }

    let sender: EmailSender
    /// The credential the service accepts: an API key, a token, an AWS access key id.
    let credential: String
    let scopes: [String]
    private let state = Mutex(State())
    private let seen = Mutex<[ProviderFake.Seen]>([])
    private let server = Mutex<HTTPServer?>(nil)
    private let boundPort = Atomic<Int>(0)

    init(_ sender: EmailSender, scopes: [String] = [""], credential: String = "good-key") throws {
        self.sender = sender
        self.scopes = scopes
        self.credential = credential
        state.withLock { s in for scope in scopes { s.lists[scope] = [:] } }
        var configuration = HTTPServerConfiguration(host: "127.0.0.1", port: 0, threads: 2)
        configuration.readsQuery = true
        configuration.keptHeaders = ["X-Postmark-Server-Token"]
        let s = try HTTPServer(configuration: configuration, handler: self)
        boundPort.store(Int(s.port), ordering: .relaxed)
        server.withLock { $0 = s }
    }

    var url: String { "http://127.0.0.1:\(boundPort.load(ordering: .relaxed))" }
    var requests: [ProviderFake.Seen] { seen.withLock { $0 } }

    func change(_ body: (inout State) -> Void) { state.withLock { body(&$0) } }

    /// The lists `address` is on, and who put it there.
    func entries(_ address: String) -> [String: Origin] {
        state.withLock { s in
            var out: [String: Origin] = [:]
            for (scope, list) in s.lists { if let o = list[address] { out[scope] = o } }
            return out
        }
    }

    /// Puts `address` on every list, as the service or the user would.
    func preset(_ address: String, origin: Origin) {
        state.withLock { s in for scope in scopes { s.lists[scope]?[address] = origin } }
    }

    func stop() {
        let s = server.withLock { s -> HTTPServer? in
            defer { s = nil }
            return s
        }
        s?.shutdown(grace: .zero)
    }

    func head(_ head: HTTPRequestHead) -> HTTPResponse? { nil }
    func bodyTooLarge(_ head: HTTPRequestHead) -> HTTPResponse { HTTPResponse(status: 413) }

    func handle(_ request: HTTPRequest, responder: HTTPResponder) {
        let answer = answer(request)
        let head = request.head
        seen.withLock {
            $0.append(
                ProviderFake.Seen(
                    method: head.method, path: head.path, query: head.query, contentType: head.contentType,
                    authorization: head.authorization, body: request.body, answer: answer))
        }
        responder.respond(answer)
    }

    // MARK: - Answers

    static func json(_ status: Int, _ value: JSONValue, headers: [HTTPHeader] = []) -> HTTPResponse {
        HTTPResponse(
            status: status, headers: [HTTPHeader("Content-Type", "application/json")] + headers, body: Array(value.serialized().utf8))
    }

    private func answer(_ request: HTTPRequest) -> HTTPResponse {
        let head = request.head
        let s = state.withLock { $0 }
        if s.down { return HTTPResponse(status: 503, body: Array("Service Unavailable".utf8)) }
        guard authorized(head), !s.refuseCredential else { return refused() }
        let throttled = state.withLock { s -> Bool in
            guard s.throttled > 0 else { return false }
            s.throttled -= 1
            return true
        }
        if throttled { return throttle(s.throttleSeconds) }
        let parts = head.path.split(separator: "/", omittingEmptySubsequences: false).map(String.init)
        switch sender {
        case .ses: return ses(head.method, parts, request.body)
        case .sendgrid: return sendgrid(head.method, parts, request.body)
        case .postmark: return postmark(head.method, parts, head.query, request.body)
        case .mailgun: return mailgun(head.method, parts, request.body)
        }
    }

    private func authorized(_ head: HTTPRequestHead) -> Bool {
        switch sender {
        case .ses: return head.authorization?.hasPrefix("AWS4-HMAC-SHA256 Credential=\(credential)/") == true
        case .sendgrid: return head.authorization == "Bearer \(credential)"
        case .postmark: return head.headers.first { $0.name.lowercased() == "x-postmark-server-token" }?.value == credential
        case .mailgun: return head.authorization == "Basic " + Data("api:\(credential)".utf8).base64EncodedString()
        }
    }

    private func refused() -> HTTPResponse {
        switch sender {
        case .ses:
            return Self.json(
                403, .object(["message": .string("The security token included in the request is invalid.")]),
                headers: [HTTPHeader("x-amzn-ErrorType", "UnrecognizedClientException:http://internal.amazon.com/coral/com.amazon.coral.service/")])
        case .sendgrid:
            return Self.json(401, .object(["errors": .array([.object(["field": .null, "message": .string("authorization required")])])]))
        case .postmark:
            return Self.json(
                401,
                .object([
                    "ErrorCode": .number(10),
                    "Message": .string("The Server Token you provided in the X-Postmark-Server-Token request header was invalid."),
                ]))
        case .mailgun:
            return HTTPResponse(status: 401, body: Array("Forbidden".utf8))
        }
    }

    private func throttle(_ seconds: Int) -> HTTPResponse {
        let reset = Int(Date().timeIntervalSince1970) + seconds
        switch sender {
        case .ses:
            return Self.json(
                429, .object(["message": .string("Maximum sending rate exceeded.")]),
                headers: [HTTPHeader("x-amzn-ErrorType", "TooManyRequestsException:"), HTTPHeader("Retry-After", "\(seconds)")])
        case .sendgrid:
            return Self.json(
                429, .object(["errors": .array([.object(["field": .null, "message": .string("too many requests")])])]),
                headers: [
                    HTTPHeader("X-RateLimit-Limit", "600"), HTTPHeader("X-RateLimit-Remaining", "0"), HTTPHeader("X-RateLimit-Reset", "\(reset)"),
                ])
        case .postmark:
            return Self.json(
                429, .object(["ErrorCode": .number(429), "Message": .string("Rate limit exceeded.")]),
                headers: [HTTPHeader("Retry-After", "\(seconds)")])
        case .mailgun:
            return Self.json(429, .object(["message": .string("Too many requests")]), headers: [HTTPHeader("Retry-After", "\(seconds)")])
        }
    }

    private func has(_ scope: String, _ address: String) -> Origin? { state.withLock { $0.lists[scope]?[address] } }
    private func put(_ scope: String, _ address: String, _ origin: Origin?) { state.withLock { $0.lists[scope]?[address] = origin } }

    /// SES v2: `/v2/email/suppression/addresses[/{EmailAddress}]`.
    private func ses(_ method: String, _ parts: [String], _ body: [UInt8]) -> HTTPResponse {
        let notFound = Self.json(
            404, .object(["message": .string("Email address is not on the suppression list.")]),
            headers: [HTTPHeader("x-amzn-ErrorType", "NotFoundException:")])
        guard parts.count >= 5, parts[1...4] == ["v2", "email", "suppression", "addresses"] else { return notFound }
        if parts.count == 5, method == "PUT" {
            guard let b = try? JSONParser.parse(body), let address = b["EmailAddress"]?.stringValue,
                let reason = b["Reason"]?.stringValue, ["BOUNCE", "COMPLAINT"].contains(reason)
            else {
                return Self.json(
                    400, .object(["message": .string("Invalid input.")]), headers: [HTTPHeader("x-amzn-ErrorType", "BadRequestException:")])
            }
            put("", address, .api)
            return Self.json(200, .object([:]))
        }
        guard parts.count == 6 else { return notFound }
        let address = parts[5]
        switch method {
        case "GET":
            guard let origin = has("", address) else { return notFound }
            var destination: [String: JSONValue] = [
                "EmailAddress": .string(address), "Reason": .string("BOUNCE"), "LastUpdateTime": .number(1_750_000_000),
            ]
            if origin != .api { destination["Attributes"] = .object(["MessageId": .string("0100-msg"), "FeedbackId": .string("0100-fb")]) }
            return Self.json(200, .object(["SuppressedDestination": .object(destination)]))
        case "DELETE":
            guard has("", address) != nil else { return notFound }
            put("", address, nil)
            return Self.json(200, .object([:]))
        default: return notFound
        }
    }

    /// SendGrid: `/v3/asm/suppressions/global[/{email}]`.
    private func sendgrid(_ method: String, _ parts: [String], _ body: [UInt8]) -> HTTPResponse {
        guard parts.count >= 5, parts[1...4] == ["v3", "asm", "suppressions", "global"] else { return HTTPResponse(status: 404) }
        if parts.count == 5, method == "POST" {
            let emails = (try? JSONParser.parse(body))?["recipient_emails"]?.arrayValue?.compactMap(\.stringValue) ?? []
            for e in emails { put("", e, .api) }
            return Self.json(201, .object(["recipient_emails": .array(emails.map(JSONValue.string))]))
        }
        guard parts.count == 6 else { return HTTPResponse(status: 404) }
        let address = parts[5]
        switch method {
        case "GET":
            return has("", address) == nil ? Self.json(200, .object([:])) : Self.json(200, .object(["recipient_email": .string(address)]))
        case "DELETE":
            put("", address, nil)
            return HTTPResponse(status: 204)
        default: return HTTPResponse(status: 404)
        }
    }

    /// Postmark: `/message-streams/{stream}/suppressions[/dump|/delete]`.
    private func postmark(_ method: String, _ parts: [String], _ query: [HTTPHeader], _ body: [UInt8]) -> HTTPResponse {
        guard parts.count >= 4, parts[1] == "message-streams", parts[3] == "suppressions" else { return HTTPResponse(status: 404) }
        let stream = parts[2]
        guard state.withLock({ $0.lists[stream] != nil }) else {
            return Self.json(
                422, .object(["ErrorCode": .number(1226), "Message": .string("The message stream for the provided 'ID' was not found.")]))
        }
        let listed = (try? JSONParser.parse(body))?["Suppressions"]?.arrayValue?.compactMap { $0["EmailAddress"]?.stringValue } ?? []
        switch (method, parts.count > 4 ? parts[4] : "") {
        case ("GET", "dump"):
            let address = query.first { $0.name == "EmailAddress" }?.value ?? ""
            guard let origin = has(stream, address) else { return Self.json(200, .object(["Suppressions": .array([])])) }
            let (reason, from) =
                origin == .api
                ? ("ManualSuppression", "Customer") : origin == .user ? ("ManualSuppression", "Recipient") : ("SpamComplaint", "Recipient")
            return Self.json(
                200,
                .object([
                    "Suppressions": .array([
                        .object([
                            "EmailAddress": .string(address), "SuppressionReason": .string(reason), "Origin": .string(from),
                            "CreatedAt": .string("2026-11-28T10:00:00-05:00"),
                        ])
                    ])
                ]))
        case ("POST", ""):
            for a in listed where has(stream, a) == nil { put(stream, a, .api) }
            return Self.json(
                200,
                .object([
                    "Suppressions": .array(listed.map { .object(["EmailAddress": .string($0), "Status": .string("Suppressed"), "Message": .null]) })
                ]))
        case ("POST", "delete"):
            var out: [JSONValue] = []
            for a in listed {
                // A spam complaint cannot be deleted through the API.
                if has(stream, a) == .service {
                    out.append(
                        .object([
                            "EmailAddress": .string(a), "Status": .string("Failed"),
                            "Message": .string("You do not have the required authority to change this suppression."),
                        ]))
                } else {
                    put(stream, a, nil)
                    out.append(.object(["EmailAddress": .string(a), "Status": .string("Deleted"), "Message": .null]))
                }
            }
            return Self.json(200, .object(["Suppressions": .array(out)]))
        default: return HTTPResponse(status: 404)
        }
    }

    /// Mailgun: `/v3/{domain}/unsubscribes[/{address}]`.
    private func mailgun(_ method: String, _ parts: [String], _ body: [UInt8]) -> HTTPResponse {
        guard parts.count >= 4, parts[1] == "v3", parts[3] == "unsubscribes" else { return HTTPResponse(status: 404) }
        let domain = parts[2]
        guard state.withLock({ $0.lists[domain] != nil }) else { return Self.json(404, .object(["message": .string("Domain not found: \(domain)")])) }
        let missing = Self.json(404, .object(["message": .string("Address not found in unsubscribers table")]))
        if parts.count == 4, method == "POST" {
            guard let address = FormURLEncoding.decode(body)?.first(where: { $0.0 == "address" })?.1 else {
                return Self.json(400, .object(["message": .string("'address' parameter is missing")]))
            }
            if has(domain, address) == nil { put(domain, address, .api) }
            return Self.json(200, .object(["message": .string("Address has been added to the unsubscribes table"), "address": .string(address)]))
        }
        guard parts.count == 5 else { return HTTPResponse(status: 404) }
        let address = parts[4]
        switch method {
        case "GET":
            guard has(domain, address) != nil else { return missing }
            return Self.json(
                200, .object(["address": .string(address), "tags": .array([.string("*")]), "created_at": .string("Fri, 28 Nov 2026 10:00:00 UTC")]))
        case "DELETE":
            guard has(domain, address) != nil else { return missing }
            put(domain, address, nil)
            return Self.json(200, .object(["message": .string("Unsubscribe event has been removed"), "address": .string(address)]))
        default: return HTTPResponse(status: 404)
        }
    }
}
