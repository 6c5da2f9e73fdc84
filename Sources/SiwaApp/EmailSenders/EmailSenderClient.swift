import Foundation
import Logging
import SiwaCore
import SiwaCrypto
import SiwaFetch
import SiwaRuntime

/// What one sender call gave: its outcome, and what it changed in siwa-notify's record of the
/// suppressions it added (written with the outcome, whatever the outcome).
public struct SenderResult: Sendable, Equatable {
    public var outcome: ProviderOutcome
    public var ledger: SuppressionLedger

    public init(_ outcome: ProviderOutcome, ledger: SuppressionLedger = SuppressionLedger()) {
        self.outcome = outcome
        self.ledger = ledger
    }
}

/// An email service's suppression API, as the call queue (`siwa.provider_calls`) uses it: the same
/// queue, pacing, retries and replay as the hosted providers. Each call blocks its thread
/// (libcurl); nothing is retried inside. Logs name the service, the operation and the outcome,
/// never an address or a credential.
public protocol EmailSenderClient: Sendable {
    var sender: EmailSender { get }

    /// The start-up check: the credential is accepted and every list (stream, domain) exists.
    func check() -> ProviderOutcome

    /// Applies `effect` to `address` (for `erase`, nil when siwa-notify had none);
    /// `recorded`: the suppressions siwa-notify's record says it added, of the address (or, for
    /// `erase`, of the user).
    func apply(_ effect: SenderEffect, address: String?, recorded: [SuppressionEntry]) -> SenderResult

    /// Until when (since the Unix epoch) the service asked not to be called (its rate limit).
    func pausedUntil() -> Duration
}

/// How a request reaches a service: its base address, its credential, its limits.
public struct SenderTransport: Sendable {
    public enum Credential: Sendable {
        /// `Authorization: Bearer` (SendGrid).
        case bearer(String)
        /// A header of the service's own (Postmark's `X-Postmark-Server-Token`).
        case header(name: String, value: String)
        /// HTTP Basic (Mailgun's `api:<key>`).
        case basic(user: String, password: String)
        /// AWS Signature Version 4 (SES).
        case sigV4(SigV4.Credentials, region: String, service: String)
        /// None (a test's fake).
        case none
    }

    let base: String
    let host: String
    let credential: Credential
    let options: ProviderHTTPOptions
    let clock: WallClock
    private let scheme: FetchScheme

    /// - Throws: an unusable `url` as a `ConfigurationError` whose `variable` is `url`.
    public init(
        url: String, credential: Credential, options: ProviderHTTPOptions = ProviderHTTPOptions(), clock: WallClock = .system
    )
        throws(ConfigurationError)
    {
        if let problem = EmailSenders.problem(withURL: url) { throw ConfigurationError(variable: "url", problem: problem) }
        base = ProviderAnswer.base(url)
        host = String(base.drop { $0 != "/" }.dropFirst(2))
        self.credential = credential
        self.options = options
        self.clock = clock
        scheme = url.lowercased().hasPrefix("http://") ? .http : .https
        Fetcher.initialize()
    }

    /// Sends `request`; the status when the service answered, the answer classified by `api`.
    func send(_ request: SenderRequest, api: any SuppressionAPI, pause: ProviderPause) -> (status: Int?, answer: ProviderAnswer) {
        var url = base + request.path
        let query = request.query.map { ($0.name, $0.value) }
        if !query.isEmpty { url += "?" + FormURLEncoding.encode(query).replacingOccurrences(of: "+", with: "%20") }
        var headers: [(String, String)] = [("Accept", "application/json")]
        var body: [UInt8] = []
        if let json = request.json {
            headers.append(("Content-Type", "application/json"))
            body = json
        } else if let form = request.form {
            headers.append(("Content-Type", FormURLEncoding.contentType))
            body = Array(FormURLEncoding.encode(form.map { ($0.name, $0.value) }).utf8)
        }
        switch credential {
        case .bearer(let token): headers.append(("Authorization", "Bearer \(token)"))
        case .header(let name, let value): headers.append((name, value))
        case .basic(let user, let password):
            headers.append(("Authorization", "Basic " + Data("\(user):\(password)".utf8).base64EncodedString()))
        case .sigV4(let credentials, let region, let service):
            // AWS signs each path segment encoded once more (every service but S3).
            let signedPath = request.path.split(separator: "/", omittingEmptySubsequences: false).map { SigV4.uriEncode(String($0)) }
                .joined(separator: "/")
            let signed = SigV4.sign(
                SigV4.Request(method: request.method, path: signedPath, query: query, headers: [("Host", host)] + headers, body: body),
                credentials: credentials, region: region, service: service, amzDate: SigV4.amzDate(unixSeconds: clock.unixSeconds),
                sha256: SHA256.hash, hmac: HMACSHA256.authenticate)
            headers += signed.headers
        case .none: break
        }
        do {
            let response = try Fetcher.perform(
                FetchRequest(
                    url: url, method: request.method, headers: headers.map { "\($0.0): \($0.1)" },
                    body: request.json != nil || request.form != nil ? body : nil, connectTimeout: options.connectTimeout,
                    totalTimeout: options.timeout, maxResponseBytes: options.maxResponseBytes, allowedSchemes: [scheme]))
            let now = clock.sinceEpoch.inSeconds
            pause.note(ProviderRateLimit(headers: response.headers, now: now), status: response.status, now: now)
            return (response.status, api.classify(status: response.status, headers: response.headers, body: response.body, now: now))
        } catch {
            switch error.code {
            case .invalidURL, .schemeNotAllowed, .fileNotFound:
                return (nil, .failed(.refused(ProviderFailure(reason: error.code.rawValue, blame: .request))))
            default:
                return (nil, .failed(.retryLater(ProviderFailure(reason: error.code.rawValue))))
            }
        }
    }
}

/// The one client of the four services: the effects' steps over `SuppressionAPI`'s requests.
public final class SuppressionClient: EmailSenderClient {
    public let api: any SuppressionAPI
    private let transport: SenderTransport
    private let logger: Logger
    private let pause = ProviderPause()

    public var sender: EmailSender { api.sender }

    public init(api: any SuppressionAPI, transport: SenderTransport, logger: Logger) {
        self.api = api
        self.transport = transport
        self.logger = logger
    }

    public func pausedUntil() -> Duration { pause.value }

    public func check() -> ProviderOutcome {
        var status = 0
        for probe in api.probes() {
            let result = send(probe)
            switch result.answer {
            case .success, .notFound: status = result.status ?? status
            case .failed(let outcome): return outcome
            }
        }
        return .done([], status: status)
    }

    public func apply(_ effect: SenderEffect, address: String?, recorded: [SuppressionEntry]) -> SenderResult {
        var steps = Steps()
        let failure: ProviderOutcome?
        switch effect {
        case .suppress:
            guard let address else { return SenderResult(.refused(ProviderFailure(reason: "no_address", blame: .request))) }
            failure = suppress(address, recorded: Set(recorded), into: &steps)
        case .unsuppress:
            guard let address else { return SenderResult(.refused(ProviderFailure(reason: "no_address", blame: .request))) }
            failure = unsuppress(address, recorded: Set(recorded), into: &steps)
        case .erase:
            failure = erase(address, recorded: recorded, into: &steps)
        }
        if let failure { return SenderResult(failure.reached(steps.actions), ledger: steps.ledger) }
        // Nothing of the address at the service: recorded as an unknown address, not an error.
        if !steps.found { return SenderResult(.userNotFound(status: steps.status), ledger: steps.ledger) }
        return SenderResult(.done(steps.actions, status: steps.status), ledger: steps.ledger)
    }

    /// What the steps of one call did so far.
    struct Steps {
        var actions: [ProviderAction] = []
        var status = 0
        var ledger = SuppressionLedger()
        /// The service had the address somewhere (or now has it).
        var found = false

        mutating func did(_ action: ProviderAction) {
            found = true
            if !actions.contains(action) { actions.append(action) }
        }
    }

    /// On each list: looked up; put on it when absent (recorded as siwa-notify's); left as it is
    /// when present (the service's or the user's, unless the record says an earlier try added it).
    private func suppress(_ address: String, recorded: Set<SuppressionEntry>, into steps: inout Steps) -> ProviderOutcome? {
        for scope in api.scopes {
            let entry = SuppressionEntry(address: address, scope: scope)
            let presence: SuppressionPresence
            switch lookup(entry, into: &steps) {
            case .success(let p): presence = p
            case .failure(let stop): return stop.outcome
            }
            if case .present = presence {
                steps.did(recorded.contains(entry) ? .suppressed : .alreadySuppressed)
                continue
            }
            let added = send(api.add(entry))
            switch added.answer {
            case .success(let body):
                guard let applied = api.applied(body: body) else { return malformed(added.status) }
                guard applied else { return .refused(ProviderFailure(status: added.status, reason: "not_applied", blame: .request)) }
                steps.status = added.status ?? steps.status
                steps.ledger.added.append(entry)
                steps.did(.suppressed)
            case .notFound: return .refused(ProviderFailure(status: 404, reason: "http_404", blame: .request))
            case .failed(let outcome): return outcome
            }
        }
        return nil
    }

    /// On each list: siwa-notify's own entry removed; any other looked up and left (`not_ours`).
    private func unsuppress(_ address: String, recorded: Set<SuppressionEntry>, into steps: inout Steps) -> ProviderOutcome? {
        for scope in api.scopes {
            let entry = SuppressionEntry(address: address, scope: scope)
            if recorded.contains(entry) {
                if let stop = remove(entry, done: .unsuppressed, into: &steps) { return stop }
                continue
            }
            switch lookup(entry, into: &steps) {
            case .success(.present): steps.did(.notOurs)
            case .success(.absent): break
            case .failure(let stop): return stop.outcome
            }
        }
        return nil
    }

    /// Every entry siwa-notify recorded for the user, and the address's entry on each list
    /// (whoever made it: the user is gone), deleted where the API deletes it.
    private func erase(_ address: String?, recorded: [SuppressionEntry], into steps: inout Steps) -> ProviderOutcome? {
        var entries = recorded
        if let address {
            for scope in api.scopes where !entries.contains(SuppressionEntry(address: address, scope: scope)) {
                entries.append(SuppressionEntry(address: address, scope: scope))
            }
        }
        for entry in entries {
            if let stop = remove(entry, done: .erased, into: &steps) { return stop }
        }
        return nil
    }

    struct Stop: Error {
        var outcome: ProviderOutcome
    }

    private func lookup(_ entry: SuppressionEntry, into steps: inout Steps) -> Result<SuppressionPresence, Stop> {
        let looked = send(api.lookup(entry))
        switch looked.answer {
        case .success(let body):
            guard let presence = api.presence(body: body) else { return .failure(Stop(outcome: malformed(looked.status))) }
            steps.status = looked.status ?? steps.status
            return .success(presence)
        case .notFound:
            steps.status = 404
            return .success(.absent)
        case .failed(let outcome): return .failure(Stop(outcome: outcome))
        }
    }

    /// Removes `entry`; siwa-notify's record of it ends whatever the service kept (gone, or an
    /// entry the API cannot delete, which is no longer siwa-notify's to lift).
    private func remove(_ entry: SuppressionEntry, done action: ProviderAction, into steps: inout Steps) -> ProviderOutcome? {
        let removed = send(api.remove(entry))
        switch removed.answer {
        case .success(let body):
            guard let applied = api.applied(body: body) else { return malformed(removed.status) }
            steps.status = removed.status ?? steps.status
            steps.did(applied ? action : .notErasable)
        case .notFound:
            steps.status = 404
        case .failed(let outcome): return outcome
        }
        steps.ledger.removed.append(entry)
        return nil
    }

    private func malformed(_ status: Int?) -> ProviderOutcome { .retryLater(ProviderFailure(status: status, reason: "malformed_response")) }

    private func send(_ request: SenderRequest) -> (status: Int?, answer: ProviderAnswer) {
        let result = transport.send(request, api: api, pause: pause)
        var metadata: Logger.Metadata = ["target": "\(sender.rawValue)", "operation": "\(request.operation)"]
        switch result.answer {
        case .success:
            metadata["outcome"] = "done"
            logger.debug("email service call", metadata: metadata)
        case .notFound:
            metadata["outcome"] = "not_found"
            logger.debug("email service call", metadata: metadata)
        case .failed(.retryLater(let failure)):
            metadata["outcome"] = "retry_later"
            metadata["reason"] = "\(failure)"
            logger.warning("email service call failed (retried)", metadata: metadata)
        case .failed(let outcome):
            metadata["outcome"] = "refused"
            if case .refused(let failure) = outcome { metadata["reason"] = "\(failure)" }
            logger.error("email service refused the call", metadata: metadata)
        }
        return result
    }
}
