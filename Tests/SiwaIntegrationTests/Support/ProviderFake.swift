import Foundation
import SiwaCore
import SiwaHTTP
import Synchronization
import Testing

/// A loopback stand-in for a hosted provider's JSON API, on the project's HTTP server: the
/// route set with `route(_:)` answers each request (unless `answer(_:)` gives another answer),
/// and every request with its answer is recorded, so that a test can check them against the
/// provider's published OpenAPI description (`ProviderOpenAPI`).
final class ProviderFake: HTTPHandler {
    struct Seen: Sendable {
        var method: String
        var path: String
        var query: [HTTPHeader]
        var contentType: String?
        var authorization: String?
        var body: [UInt8]
        var answer: HTTPResponse
        /// When it arrived.
        var at = Date()

        /// The query argument `name`.
        func argument(_ name: String) -> String? { query.first { $0.name == name }?.value }

        /// The form body's field `name`.
        func field(_ name: String) -> String? {
            FormURLEncoding.decode(body)?.first { $0.0 == name }?.1
        }

        /// One line for `scripts/provider-openapi requests`.
        var line: String {
            let answerType = answer.headers.first { $0.name.lowercased() == "content-type" }?.value
            let fields: [String: JSONValue] = [
                "method": .string(method), "path": .string(path),
                "query": .array(query.map { .array([.string($0.name), .string($0.value)]) }),
                "content_type": contentType.map(JSONValue.string) ?? .null, "body": .string(String(decoding: body, as: UTF8.self)),
                "status": .number(Double(answer.status)), "response_content_type": answerType.map(JSONValue.string) ?? .null,
                "response_body": .string(String(decoding: answer.body, as: UTF8.self)),
            ]
            return JSONValue.object(fields).serialized() + "\n"
        }
    }

    private let server = Mutex<HTTPServer?>(nil)
    private let seen = Mutex<[Seen]>([])
    private let routes = Mutex<@Sendable (HTTPRequest) -> HTTPResponse>({ _ in HTTPResponse(status: 404) })
    private let override = Mutex<@Sendable (HTTPRequest) -> HTTPResponse?>({ _ in nil })
    private let reshaping = Mutex<@Sendable (HTTPRequest, HTTPResponse) -> HTTPResponse>({ $1 })
    private let boundPort = Atomic<Int>(0)

    /// The provider's own answers.
    func route(_ route: @escaping @Sendable (HTTPRequest) -> HTTPResponse) { routes.withLock { $0 = route } }

    /// Answers the requests `answer` matches with its answer instead (nil: the provider's own).
    func answer(_ answer: @escaping @Sendable (HTTPRequest) -> HTTPResponse?) { override.withLock { $0 = answer } }

    /// Changes the provider's own answers after they took effect (a lost answer, rate-limit
    /// headers); `{ $1 }` restores them.
    func reshape(_ reshape: @escaping @Sendable (HTTPRequest, HTTPResponse) -> HTTPResponse) { reshaping.withLock { $0 = reshape } }

    init() throws {
        var configuration = HTTPServerConfiguration(host: "127.0.0.1", port: 0, threads: 2)
        configuration.readsQuery = true
        let s = try HTTPServer(configuration: configuration, handler: self)
        boundPort.store(Int(s.port), ordering: .relaxed)
        server.withLock { $0 = s }
    }

    var url: String { "http://127.0.0.1:\(boundPort.load(ordering: .relaxed))" }
    var requests: [Seen] { seen.withLock { $0 } }

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
        let answer = override.withLock { $0 }(request) ?? reshaping.withLock { $0 }(request, routes.withLock { $0 }(request))
        let head = request.head
        seen.withLock {
            $0.append(
                Seen(
                    method: head.method, path: head.path, query: head.query, contentType: head.contentType, authorization: head.authorization,
                    body: request.body, answer: answer))
        }
        responder.respond(answer)
    }
}

/// Recorded requests checked against a provider's OpenAPI description (the used subset, kept
/// under Fixtures/providers/ with its source) by `scripts/provider-openapi`.
enum ProviderOpenAPI {
    static let fixtures = OpenAPITests.root.appendingPathComponent("Tests/SiwaIntegrationTests/Fixtures/providers")

    /// Checks `requests` against the fixtures named; records an issue with the script's output
    /// when any does not match.
    /// `extraStatus`: answer statuses the provider documents elsewhere than in its description.
    static func expectValid(
        _ requests: [ProviderFake.Seen], specs: [String], extraStatus: [Int] = [], sourceLocation: SourceLocation = #_sourceLocation
    ) throws {
        let file = NSTemporaryDirectory() + "siwa-provider-\(UInt64.random(in: 0...UInt64.max)).jsonl"
        try requests.map(\.line).joined().write(toFile: file, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: file) }
        let arguments =
            specs.flatMap { ["--spec", fixtures.appendingPathComponent($0).path] } + extraStatus.flatMap { ["--allow-status", "\($0)"] }
        let result = try OpenAPITests.python(["scripts/provider-openapi", "requests"] + arguments + [file])
        #expect(result.status == 0, "\(result.output)", sourceLocation: sourceLocation)
    }
}
