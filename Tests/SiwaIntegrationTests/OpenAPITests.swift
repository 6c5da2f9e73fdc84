import Foundation
import SiwaCore
import SiwaDevTools
import SiwaFetch
import Testing

/// docs/openapi.yaml describes the admin listener; the binary serves it (as JSON) and the
/// listener's real answers match it. The schema checks run in Python (openapi-spec-validator,
/// jsonschema: installed by scripts/setup) through `scripts/openapi-check`.
@Suite(
    "OpenAPI description",
    .enabled(if: TestDatabase.isAvailable && OpenAPIChecker.runs, "needs SIWA_TEST_DATABASE_URL and python3 with openapi-spec-validator"))
struct OpenAPITests {
    typealias H = DeletionHarness
    typealias S = AppleTestSetup

    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// Runs python3 with `arguments`; its exit status and output (stdout and stderr).
    static func python(_ arguments: [String]) throws -> (status: Int32, output: String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3"] + arguments
        process.currentDirectoryURL = root
        let output = Pipe()
        process.standardOutput = output
        process.standardError = output
        try process.run()
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return (process.terminationStatus, String(decoding: data, as: UTF8.self))
    }

    /// Checks answer lines (`AdminAnswers.line`) against the description.
    static func check(_ lines: [String]) throws -> (status: Int32, output: String) {
        let file = NSTemporaryDirectory() + "siwa-openapi-\(UInt64.random(in: 0...UInt64.max)).jsonl"
        try lines.joined().write(toFile: file, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: file) }
        return try python(["scripts/openapi-check", "responses", file])
    }

    @Test("docs/openapi.yaml is valid OpenAPI 3.1 and docs/openapi.json is the same document")
    func documentIsValid() throws {
        let result = try Self.python(["scripts/openapi-check", "validate"])
        #expect(result.status == 0, "\(result.output)")
    }

    @Test("GET /openapi.json serves docs/openapi.json; the admin listener's answers, every status of the API, match the description")
    func answersMatch() throws {
        let h = try H()
        defer { h.stop() }
        var lines: [String] = []
        func call(_ method: String, _ path: String, headers: [String] = [], body: String? = nil) throws -> FetchResponse {
            let response = try Fetcher.perform(
                FetchRequest(
                    url: h.adminURL + path, method: method, headers: headers, body: body.map { Array($0.utf8) },
                    connectTimeout: .seconds(5), totalTimeout: .seconds(30), allowedSchemes: [.http]))
            lines.append(AdminAnswers.line(method: method, path: path, status: response.status, headers: response.headers, body: response.body))
            return response
        }
        let bearer = "Authorization: Bearer \(h.apiToken)", json = "Content-Type: application/json"

        let served = try call("GET", "/openapi.json")
        #expect(served.status == 200)
        #expect(served.body == Array(try Data(contentsOf: Self.root.appendingPathComponent("docs/openapi.json"))))
        #expect(try JSONParser.parse(served.body)["openapi"]?.stringValue == "3.1.0")
        #expect(try call("GET", "/healthz").status == 200)
        #expect(try call("GET", "/readyz").status == 200)
        #expect(try call("GET", "/metrics").status == 200)
        #expect(try call("POST", "/metrics", headers: [json], body: "{}").status == 405)

        // The API: every refusal before the body, then with it.
        #expect(try call("GET", "/apple/tokens").status == 405)
        #expect(try call("POST", "/apple/tokens", headers: [json], body: "{}").status == 401)
        #expect(try call("POST", "/apple/tokens", headers: [json, "Authorization: Bearer wrong-token-0123456789"], body: "{}").status == 401)
        #expect(try call("POST", "/apple/tokens", headers: [bearer, "Content-Type: text/plain"], body: "{}").status == 415)
        #expect(try call("POST", "/apple/tokens", headers: [bearer, json], body: "{").status == 400)
        #expect(try call("POST", "/apple/tokens", headers: [bearer, json], body: #"{"client_id":"\#(S.clientID)"}"#).status == 400)
        #expect(try call("POST", "/apple/tokens", headers: [bearer, json], body: H.exchangeBody(code: "c.unknown")).status == 400)
        let code = "c." + NotificationSigner.newJTI()
        h.fake.addCode(code, user: .init(sub: "001234.openapi.0001", email: "x1@privaterelay.appleid.com", isPrivateEmail: true))
        #expect(try call("POST", "/apple/tokens", headers: [bearer, json], body: H.exchangeBody(code: code)).status == 200)
        #expect(try call("POST", "/apple/refresh-tokens", headers: [bearer, json], body: #"{"client_id":"\#(S.clientID)"}"#).status == 400)
        h.fake.answerToken(.status(503, #"{"error":"temporarily_unavailable"}"#))
        #expect(try call("POST", "/apple/tokens", headers: [bearer, json], body: H.exchangeBody(code: "c.down")).status == 502)

        let result = try Self.check(lines)
        #expect(result.status == 0, "\(result.output)")
        #expect(result.output.contains("\(lines.count) recorded answers"), "\(result.output)")
    }

    @Test("the check fails on an answer the description does not document")
    func checkCanFail() throws {
        let line = { (method: String, path: String, status: Int, type: String, body: String) in
            AdminAnswers.line(method: method, path: path, status: status, headers: ["Content-Type": type], body: Array(body.utf8))
        }
        let cases = [
            line("POST", "/apple/tokens", 418, "application/json", #"{"error":"teapot"}"#): "status not documented",
            line("POST", "/apple/tokens", 400, "application/json", #"{"error":"made_up"}"#): "is not one of",
            line("POST", "/apple/tokens", 200, "application/json", #"{"sub":1}"#): "is not of type",
            line("POST", "/apple/tokens", 401, "text/plain", "no"): "content type",
            line("GET", "/nowhere", 200, "text/plain", "x"): "path not documented",
            line("GET", "/readyz", 503, "text/plain", "sleepy\n"): "is not one of",
        ]
        for (answer, problem) in cases {
            let result = try Self.check([answer])
            #expect(result.status == 1 && result.output.contains(problem), "\(answer): \(result.output)")
        }
    }
}

/// The Python side of the checks is installed (scripts/setup installs it).
enum OpenAPIChecker {
    /// The description checks run where their Python packages are (`scripts/setup` installs
    /// them), and always in CI (`TestDatabase.requirement`, the one reading of `CI` every gate
    /// shares: set and not `false`/`0`/`no`): there a missing package fails the checks instead
    /// of skipping them.
    static var runs: Bool {
        TestDatabase.isRequired
            || (try? OpenAPITests.python(["-c", "import openapi_spec_validator, jsonschema, yaml"]).status) == 0
    }
}
