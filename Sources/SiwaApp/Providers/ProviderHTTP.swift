import Foundation
import Logging
import SiwaCore
import SiwaFetch
import SiwaRuntime

/// Limits of one call to a hosted provider's JSON admin API.
public struct ProviderHTTPOptions: Sendable {
    /// A whole call. Default 10 s.
    public var timeout: Duration = .seconds(10)
    /// Connecting. Default 5 s.
    public var connectTimeout: Duration = .seconds(5)
    /// Largest answer read. Default 1 MiB.
    public var maxResponseBytes: Int = 1 << 20

    public init() {}
}

/// One JSON admin API (Auth0's, Clerk's): calls under its base address, each answer classified
/// (`ProviderAnswer`) and logged by operation and outcome, never with a path, a query, a body
/// or a header (they hold user ids and credentials).
struct ProviderHTTP: Sendable {
    struct Request {
        var operation: String
        var method: String
        var path: String
        var query: [(String, String)] = []
        var bearer: String?
        /// A form body (`application/x-www-form-urlencoded`).
        var form: [(String, String)]?
        /// A JSON body (`application/json`), when there is no form.
        var json: JSONValue?
        /// A refusal the caller expects and handles (Auth0's plan refusing an Enterprise
        /// endpoint): logged at info, not as an error.
        var expectedRefusal: (@Sendable (ProviderOutcome) -> Bool)?
    }

    let provider: HostedProvider
    let base: String
    let options: ProviderHTTPOptions
    let logger: Logger
    let clock: WallClock
    /// What the answers said of the rate limit.
    let pause = ProviderPause()
    private let scheme: FetchScheme

    /// - Throws: an unusable `url` as a `ConfigurationError` whose `variable` is `url`.
    init(
        provider: HostedProvider, url: String, options: ProviderHTTPOptions, logger: Logger, clock: WallClock
    ) throws(ConfigurationError) {
        if let problem = ProviderAnswer.problem(withURL: url) { throw ConfigurationError(variable: "url", problem: problem) }
        self.provider = provider
        self.base = ProviderAnswer.base(url)
        self.options = options
        self.logger = logger
        self.clock = clock
        self.scheme = url.lowercased().hasPrefix("http://") ? .http : .https
        Fetcher.initialize()
    }

    /// Sends `request`; the status when the provider answered, and the answer classified
    /// with `code` (reads the provider's error code of a body) and `blame`.
    func send(
        _ request: Request, code: ([UInt8]) -> String?, blame: (Int, [UInt8]) -> ProviderBlame? = { _, _ in nil }
    ) -> (status: Int?, answer: ProviderAnswer) {
        var url = base + request.path
        if !request.query.isEmpty { url += "?" + FormURLEncoding.encode(request.query).replacingOccurrences(of: "+", with: "%20") }
        var headers = ["Accept: application/json"]
        if let bearer = request.bearer { headers.append("Authorization: Bearer \(bearer)") }
        var body: [UInt8]?
        if let form = request.form {
            headers.append("Content-Type: \(FormURLEncoding.contentType)")
            body = Array(FormURLEncoding.encode(form).utf8)
        } else if let json = request.json {
            headers.append("Content-Type: application/json")
            body = Array(json.serialized().utf8)
        }
        let result: (status: Int?, answer: ProviderAnswer)
        do {
            let response = try Fetcher.perform(
                FetchRequest(
                    url: url, method: request.method, headers: headers, body: body, connectTimeout: options.connectTimeout,
                    totalTimeout: options.timeout, maxResponseBytes: options.maxResponseBytes, allowedSchemes: [scheme]))
            let now = clock.sinceEpoch.inSeconds
            pause.note(ProviderRateLimit(headers: response.headers, now: now), status: response.status, now: now)
            result = (
                response.status,
                ProviderAnswer.classify(
                    status: response.status, headers: response.headers, body: response.body, code: code(response.body), now: now,
                    blame: blame)
            )
        } catch {
            switch error.code {
            case .invalidURL, .schemeNotAllowed, .fileNotFound:
                result = (nil, .failed(.refused(ProviderFailure(reason: error.code.rawValue, blame: .request))))
            default:
                result = (nil, .failed(.retryLater(ProviderFailure(reason: error.code.rawValue))))
            }
        }
        log(request.operation, result.answer, expected: request.expectedRefusal)
        return result
    }

    private func log(_ operation: String, _ answer: ProviderAnswer, expected: (@Sendable (ProviderOutcome) -> Bool)?) {
        var metadata: Logger.Metadata = ["provider": "\(provider.rawValue)", "operation": "\(operation)"]
        switch answer {
        case .success:
            metadata["outcome"] = "done"
            logger.debug("provider call", metadata: metadata)
        case .notFound:
            metadata["outcome"] = "not_found"
            logger.info("provider call", metadata: metadata)
        case .failed(.retryLater(let failure)):
            metadata["outcome"] = "retry_later"
            metadata["reason"] = "\(failure)"
            logger.warning("provider call failed, will retry", metadata: metadata)
        case .failed(let outcome):
            metadata["outcome"] = "refused"
            if case .refused(let failure) = outcome { metadata["reason"] = "\(failure)" }
            if expected?(outcome) == true {
                logger.info("provider refused the call, as it may", metadata: metadata)
            } else {
                logger.error("provider refused the call", metadata: metadata)
            }
        }
    }
}

/// The steps of one effect, each adding what it did, ending at the first that does not succeed.
struct ProviderSteps {
    var actions: [ProviderAction] = []
    var status = 0

    /// `.done` with the actions so far.
    var done: ProviderOutcome { .done(actions, status: status) }

    /// Records a removal's answer as `action`; a 404 means already gone (removed meanwhile or
    /// by an earlier try). The outcome to end with when it failed.
    mutating func removal(_ result: (status: Int?, answer: ProviderAnswer), done action: ProviderAction) -> ProviderOutcome? {
        switch result.answer {
        case .success:
            actions.append(action)
            status = result.status ?? status
        case .notFound:
            actions.append(.alreadyDone)
            status = 404
        case .failed(let outcome): return outcome
        }
        return nil
    }
}
