/// One request to an email service's API, as pure data: the transport adds the base address and
/// the credential. Holds an address in `path` or `body`: never logged (the transport logs
/// `operation` only).
public struct SenderRequest: Sendable, Equatable {
    public struct Pair: Sendable, Equatable {
        public var name: String
        public var value: String
        public init(_ name: String, _ value: String) {
            self.name = name
            self.value = value
        }
    }

    /// What it does, for logs (`lookup`, `add`, `remove`, `check`).
    public var operation: String
    public var method: String
    /// Percent-encoded, under the service's base address.
    public var path: String
    public var query: [Pair] = []
    /// A JSON body.
    public var json: [UInt8]?
    /// A form body.
    public var form: [Pair]?

    public init(operation: String, method: String, path: String, query: [Pair] = [], json: [UInt8]? = nil, form: [Pair]? = nil) {
        self.operation = operation
        self.method = method
        self.path = path
        self.query = query
        self.json = json
        self.form = form
    }
}

/// Whether an address is on a suppression list, by the answer to a lookup.
public enum SuppressionPresence: Sendable, Equatable {
    case absent
    /// On the list. `removable`: the service's API can take it off (Postmark keeps a spam
    /// complaint).
    case present(removable: Bool)
}

/// One email service's suppression API as pure decisions: the requests for an entry, and what
/// their answers say. The clients (SiwaApp) send them and keep siwa-notify's record.
public protocol SuppressionAPI: Sendable {
    var sender: EmailSender { get }
    /// The lists an address is suppressed on: Postmark's streams, Mailgun's domains; `[""]` where
    /// the account has one list.
    var scopes: [String] { get }
    func lookup(_ entry: SuppressionEntry) -> SenderRequest
    func add(_ entry: SuppressionEntry) -> SenderRequest
    func remove(_ entry: SuppressionEntry) -> SenderRequest
    /// The start-up check's requests: the credential is accepted and each list exists. They ask
    /// about an address no one has (`probeAddress`): the answer needs no other permission than
    /// the effects' own.
    func probes() -> [SenderRequest]
    /// A lookup's 2xx answer; nil: not understood.
    func presence(body: [UInt8]) -> SuppressionPresence?
    /// Whether an add's or a removal's 2xx answer says it took effect (Postmark answers 200 with a
    /// per-address `Failed`); nil: not understood.
    func applied(body: [UInt8]) -> Bool?
    /// The error code of an answer's body (a short token; nil when none).
    func errorCode(status: Int, body: [UInt8]) -> String?
    /// Who is at fault for a refusal, where the status alone does not say (a Mailgun domain or a
    /// Postmark stream that does not exist is the configuration's).
    func blame(status: Int, body: [UInt8]) -> ProviderBlame?
    /// Any answer (headers lowercased) at `now` (Unix seconds, for a dated `Retry-After`).
    func classify(status: Int, headers: [String: String], body: [UInt8], now: Double) -> ProviderAnswer
}

extension SuppressionAPI {
    public func presence(body: [UInt8]) -> SuppressionPresence? { .present(removable: true) }
    public func applied(body: [UInt8]) -> Bool? { true }
    public func blame(status: Int, body: [UInt8]) -> ProviderBlame? { nil }

    /// An answer classified: a 404 is `.notFound` (the address is not there) unless `blame` names
    /// who is at fault (a list that does not exist); otherwise as the hosted providers' answers.
    public func classify(status: Int, headers: [String: String], body: [UInt8], now: Double) -> ProviderAnswer {
        if status == 404, let who = blame(status: status, body: body) {
            return .failed(.refused(ProviderFailure(status: status, reason: errorCode(status: status, body: body) ?? "http_404", blame: who)))
        }
        return ProviderAnswer.classify(
            status: status, headers: headers, body: body, code: errorCode(status: status, body: body), now: now,
            blame: { blame(status: $0, body: $1) })
    }

    public func probes() -> [SenderRequest] {
        scopes.map {
            var r = lookup(SuppressionEntry(address: EmailSenders.probeAddress, scope: $0))
            r.operation = "check"
            return r
        }
    }

    /// The body's `field` when it is a short token (never free text: it could quote an address).
    func token(_ field: String, _ body: [UInt8]) -> String? {
        guard let value = (try? JSONParser.parse(body))?[field] else { return nil }
        if let s = value.stringValue { return ProviderAnswer.safeCode(s) }
        if let n = value.int64Value { return String(n) }
        return nil
    }
}

/// What the four services share.
public enum EmailSenders {
    /// The address the start-up check asks about: `.invalid` is reserved (RFC 2606), no one has it.
    public static let probeAddress = "siwa-notify-check@example.invalid"

    /// The service's default base address.
    public static func defaultURL(_ sender: EmailSender, region: String? = nil) -> String {
        switch sender {
        case .ses: return "https://email.\(region ?? "us-east-1").amazonaws.com"
        case .sendgrid: return "https://api.sendgrid.com"
        case .postmark: return "https://api.postmarkapp.com"
        case .mailgun: return "https://api.mailgun.net"
        }
    }

    /// nil if `url` may be a service's base: scheme and host (and port) only, `https://`, or
    /// `http://` to a loopback host; siwa-notify appends the API's paths.
    public static func problem(withURL url: String) -> String? {
        if let problem = ForwardingConfiguration.problem(withURL: url) { return problem }
        let rest = url.dropFirst(url.lowercased().hasPrefix("https://") ? 8 : 7)
        var path = Substring(rest.drop { $0 != "/" })
        while path.hasSuffix("/") { path = path.dropLast() }
        if !path.isEmpty || rest.contains("?") || rest.contains("#") {
            return "must be the service's scheme and host only (https://api.eu.sendgrid.com): siwa-notify appends the API's paths"
        }
        return nil
    }

    static func json(_ object: [String: JSONValue]) -> [UInt8] { Array(JSONValue.object(object).serialized().utf8) }
}

/// Amazon SES v2, the account-level suppression list (botocore's `sesv2` model). An address
/// siwa-notify suppresses is put with reason `BOUNCE`: the list accepts `BOUNCE` or `COMPLAINT`
/// only, and the relay rejecting every message is a permanent failure, which is what SES records
/// as a bounce. An entry SES made itself carries the message that caused it (`Attributes`).
public struct SESSuppressionAPI: SuppressionAPI {
    public let sender = EmailSender.ses
    public let scopes = [""]
    public static let service = "ses"
    public static let reason = "BOUNCE"
    static let root = "/v2/email/suppression/addresses"

    public init() {}

    public func lookup(_ entry: SuppressionEntry) -> SenderRequest {
        SenderRequest(operation: "lookup", method: "GET", path: Self.root + "/" + SigV4.uriEncode(entry.address))
    }

    public func add(_ entry: SuppressionEntry) -> SenderRequest {
        SenderRequest(
            operation: "add", method: "PUT", path: Self.root,
            json: EmailSenders.json(["EmailAddress": .string(entry.address), "Reason": .string(Self.reason)]))
    }

    public func remove(_ entry: SuppressionEntry) -> SenderRequest {
        SenderRequest(operation: "remove", method: "DELETE", path: Self.root + "/" + SigV4.uriEncode(entry.address))
    }

    public func presence(body: [UInt8]) -> SuppressionPresence? {
        guard (try? JSONParser.parse(body))?["SuppressedDestination"]?["EmailAddress"]?.stringValue != nil else { return nil }
        return .present(removable: true)
    }

    public func errorCode(status: Int, body: [UInt8]) -> String? { CognitoAnswer.errorType(headers: [:], body: body) }

    /// AWS's error types (`x-amzn-ErrorType`), as Cognito's: a 404 (`NotFoundException`) is an
    /// address not on the list.
    public func classify(status: Int, headers: [String: String], body: [UInt8], now: Double) -> ProviderAnswer {
        if status == 404 { return .notFound }
        switch CognitoAnswer.classify(status: status, headers: headers, body: body, now: now) {
        case .done(let bytes, _): return .success(bytes)
        case .userNotFound: return .notFound
        case .retryLater(let failure): return .failed(.retryLater(failure))
        case .refused(let failure): return .failed(.refused(failure))
        }
    }
}

/// SendGrid's global suppressions (twilio/sendgrid-oai, `tsg_suppressions_v3`). A lookup of an
/// address that is not suppressed answers `{}`; a removal answers 204 whether or not it was.
/// SendGrid records no origin: siwa-notify's record decides what it added.
public struct SendGridSuppressionAPI: SuppressionAPI {
    public let sender = EmailSender.sendgrid
    public let scopes = [""]
    static let root = "/v3/asm/suppressions/global"

    public init() {}

    public func lookup(_ entry: SuppressionEntry) -> SenderRequest {
        SenderRequest(operation: "lookup", method: "GET", path: Self.root + "/" + ProviderAnswer.pathSegment(entry.address))
    }

    public func add(_ entry: SuppressionEntry) -> SenderRequest {
        SenderRequest(
            operation: "add", method: "POST", path: Self.root, json: EmailSenders.json(["recipient_emails": .array([.string(entry.address)])]))
    }

    public func remove(_ entry: SuppressionEntry) -> SenderRequest {
        SenderRequest(operation: "remove", method: "DELETE", path: Self.root + "/" + ProviderAnswer.pathSegment(entry.address))
    }

    public func presence(body: [UInt8]) -> SuppressionPresence? {
        guard let object = try? JSONParser.parse(body), case .object = object else { return nil }
        return object["recipient_email"]?.stringValue == nil ? .absent : .present(removable: true)
    }

    public func errorCode(status: Int, body: [UInt8]) -> String? {
        // {"errors":[{"field":…,"message":…}]}: free text only.
        nil
    }
}

/// Postmark's suppressions of each message stream (Postmark publishes no machine-readable
/// description: its API reference, "Suppressions API"). Adds and removals answer 200 with a
/// per-address `Status` (`Suppressed`, `Deleted`, `Failed`); a `SpamComplaint` cannot be deleted.
public struct PostmarkSuppressionAPI: SuppressionAPI {
    public let sender = EmailSender.postmark
    public let scopes: [String]

    public init(streams: [String]) { scopes = streams }

    static func root(_ stream: String) -> String { "/message-streams/\(ProviderAnswer.pathSegment(stream))/suppressions" }
    static func list(_ address: String) -> [UInt8] { EmailSenders.json(["Suppressions": .array([.object(["EmailAddress": .string(address)])])]) }

    public func lookup(_ entry: SuppressionEntry) -> SenderRequest {
        SenderRequest(
            operation: "lookup", method: "GET", path: Self.root(entry.scope) + "/dump", query: [.init("EmailAddress", entry.address)])
    }

    public func add(_ entry: SuppressionEntry) -> SenderRequest {
        SenderRequest(operation: "add", method: "POST", path: Self.root(entry.scope), json: Self.list(entry.address))
    }

    public func remove(_ entry: SuppressionEntry) -> SenderRequest {
        SenderRequest(operation: "remove", method: "POST", path: Self.root(entry.scope) + "/delete", json: Self.list(entry.address))
    }

    public func presence(body: [UInt8]) -> SuppressionPresence? {
        guard let list = (try? JSONParser.parse(body))?["Suppressions"]?.arrayValue else { return nil }
        guard let first = list.first else { return .absent }
        return .present(removable: first["SuppressionReason"]?.stringValue != "SpamComplaint")
    }

    public func applied(body: [UInt8]) -> Bool? {
        guard let status = (try? JSONParser.parse(body))?["Suppressions"]?.arrayValue?.first?["Status"]?.stringValue else { return nil }
        return status != "Failed"
    }

    public func errorCode(status: Int, body: [UInt8]) -> String? { token("ErrorCode", body).map { "postmark_\($0)" } }

    /// 10: the token is wrong; 1226: the stream does not exist.
    public func blame(status: Int, body: [UInt8]) -> ProviderBlame? {
        switch token("ErrorCode", body) {
        case "10": return .credential
        case "1226": return .tenant
        default: return nil
        }
    }
}

/// Mailgun's unsubscribes of each sending domain (Mailgun publishes no machine-readable
/// description: its API reference, "Unsubscribe"). HTTP Basic `api:<key>`; a lookup of an
/// address not on the list answers 404, as does a domain Mailgun does not know (`Domain not
/// found`): the message tells them apart.
public struct MailgunSuppressionAPI: SuppressionAPI {
    public let sender = EmailSender.mailgun
    public let scopes: [String]

    public init(domains: [String]) { scopes = domains }

    static func root(_ domain: String) -> String { "/v3/\(ProviderAnswer.pathSegment(domain))/unsubscribes" }

    public func lookup(_ entry: SuppressionEntry) -> SenderRequest {
        SenderRequest(operation: "lookup", method: "GET", path: Self.root(entry.scope) + "/" + ProviderAnswer.pathSegment(entry.address))
    }

    public func add(_ entry: SuppressionEntry) -> SenderRequest {
        SenderRequest(operation: "add", method: "POST", path: Self.root(entry.scope), form: [.init("address", entry.address), .init("tag", "*")])
    }

    public func remove(_ entry: SuppressionEntry) -> SenderRequest {
        SenderRequest(operation: "remove", method: "DELETE", path: Self.root(entry.scope) + "/" + ProviderAnswer.pathSegment(entry.address))
    }

    public func errorCode(status: Int, body: [UInt8]) -> String? { status == 404 && Self.domainNotFound(body) ? "domain_not_found" : nil }

    public func blame(status: Int, body: [UInt8]) -> ProviderBlame? { status == 404 && Self.domainNotFound(body) ? .tenant : nil }

    /// A 404 for the domain rather than the address.
    public static func domainNotFound(_ body: [UInt8]) -> Bool {
        guard let message = (try? JSONParser.parse(body))?["message"]?.stringValue else { return false }
        return message.lowercased().hasPrefix("domain not found")
    }
}
