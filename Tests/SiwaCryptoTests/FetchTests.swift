import Foundation
import Synchronization
import Testing

@testable import SiwaFetch

/// A temporary file removed when the value goes away.
final class TempFile {
    let path: String
    init(bytes: [UInt8]) throws {
        path =
            FileManager.default.temporaryDirectory
            .appendingPathComponent("siwa-fetch-\(UUID().uuidString).bin").path
        try Data(bytes).write(to: URL(fileURLWithPath: path))
    }
    var url: String { "file://" + path }
    deinit { try? FileManager.default.removeItem(atPath: path) }
}

func expectFetchError(
    _ code: FetchError.Code, _ request: FetchRequest,
    sourceLocation: SourceLocation = #_sourceLocation
) -> FetchError? {
    do {
        let response = try Fetcher.perform(request)
        Issue.record("expected \(code), got status \(response.status)", sourceLocation: sourceLocation)
        return nil
    } catch {
        #expect(error.code == code, "\(error)", sourceLocation: sourceLocation)
        return error
    }
}

@Suite struct FileFetchTests {
    @Test func readsFile() throws {
        let content = Array("{\"keys\":[]}\n".utf8) + [0, 1, 2, 255]
        let file = try TempFile(bytes: content)
        let response = try Fetcher.perform(FetchRequest(url: file.url, allowedSchemes: [.file]))
        #expect(response.status == 200)
        #expect(response.body == content)
    }

    @Test func emptyFile() throws {
        let file = try TempFile(bytes: [])
        let response = try Fetcher.perform(FetchRequest(url: file.url, allowedSchemes: [.file]))
        #expect(response.status == 200)
        #expect(response.body.isEmpty)
    }

    @Test func missingFile() {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("siwa-missing-\(UUID().uuidString)").path
        let error = expectFetchError(.fileNotFound, FetchRequest(url: "file://" + path, allowedSchemes: [.file]))
        #expect(error?.curlCode == 37)
        #expect(error.map { !$0.description.contains(path) } ?? false)
    }

    @Test func responseCapExceeded() throws {
        let file = try TempFile(bytes: [UInt8](repeating: 0x61, count: 2 << 20))
        _ = expectFetchError(.responseTooLarge, FetchRequest(url: file.url, allowedSchemes: [.file]))
        _ = expectFetchError(
            .responseTooLarge,
            FetchRequest(url: file.url, maxResponseBytes: (2 << 20) - 1, allowedSchemes: [.file]))
    }

    @Test func responseExactlyAtCapSucceeds() throws {
        let content = [UInt8](repeating: 0x62, count: 300_000)
        let file = try TempFile(bytes: content)
        let response = try Fetcher.perform(FetchRequest(url: file.url, maxResponseBytes: 300_000, allowedSchemes: [.file]))
        #expect(response.body == content)
    }

    @Test func fileSchemeNeedsExplicitPermission() throws {
        let file = try TempFile(bytes: [1])
        let error = expectFetchError(.schemeNotAllowed, FetchRequest(url: file.url))
        #expect(error?.curlCode == 0)
        _ = expectFetchError(.schemeNotAllowed, FetchRequest(url: file.url, allowedSchemes: [.http, .https]))
    }
}

@Suite struct URLPolicyTests {
    @Test func httpRejectedWhenOnlyHTTPSAllowed() {
        // Port 9 on loopback: if the policy check failed we would get a
        // connection error instead of schemeNotAllowed.
        let error = expectFetchError(.schemeNotAllowed, FetchRequest(url: "http://127.0.0.1:9/x?token=secret"))
        #expect(error?.curlCode == 0)
        #expect(error?.description == "fetch error: schemeNotAllowed")
    }

    @Test func unknownSchemesRejected() {
        let all: Set<FetchScheme> = [.https, .http, .file]
        for url in ["ftp://127.0.0.1/x", "gopher://127.0.0.1/", "dict://127.0.0.1/", "ldap://127.0.0.1/"] {
            _ = expectFetchError(.schemeNotAllowed, FetchRequest(url: url, allowedSchemes: all))
        }
        _ = expectFetchError(.schemeNotAllowed, FetchRequest(url: "https://127.0.0.1:9/", allowedSchemes: []))
    }

    @Test func malformedURLsRejected() {
        for url in [
            "", "not a url", "127.0.0.1/path", "http://exa mple.com/", "https://example.com/\u{0}x",
            "https://example.com/\r\nX-Injected: 1", "http://[::1/",
        ] {
            let error = expectFetchError(.invalidURL, FetchRequest(url: url, allowedSchemes: [.http, .https]))
            #expect(error?.curlCode == 0)
        }
    }

    @Test func invalidMethodOrHeaderRejected() {
        let url = "https://127.0.0.1:9/"
        for method in ["", "GET /x HTTP/1.1\r\nHost: y\r\n\r\nGET", "GE T", "GET\n"] {
            let error = expectFetchError(.transferFailed, FetchRequest(url: url, method: method))
            #expect(error?.curlCode == 43)
        }
        for header in ["X-A: 1\r\nX-B: 2", "X-A: 1\n", "X-A: \u{0}"] {
            _ = expectFetchError(.transferFailed, FetchRequest(url: url, headers: [header]))
        }
    }

    @Test func timeoutConversion() {
        #expect(Fetcher.milliseconds(.seconds(5)) == 5000)
        #expect(Fetcher.milliseconds(.milliseconds(250)) == 250)
        #expect(Fetcher.milliseconds(.microseconds(1_000_100)) == 1001)
        #expect(Fetcher.milliseconds(.nanoseconds(1_999_999_999)) == 2000)
        #expect(Fetcher.milliseconds(.microseconds(86_399_999_500)) == 86_400_000)
        #expect(Fetcher.milliseconds(.seconds(Int64.max)) == 86_400_000)
        #expect(Fetcher.milliseconds(.microseconds(100)) == 1)
        #expect(Fetcher.milliseconds(.zero) == 1)
        #expect(Fetcher.milliseconds(.seconds(-3)) == 1)
        #expect(Fetcher.milliseconds(.nanoseconds(-1)) == 1)
    }

    @Test func initializeIsIdempotentAndThreadSafe() throws {
        let file = try TempFile(bytes: Array("fetched".utf8))
        let url = file.url
        let fetched = Atomic<Int>(0)
        // Initialise and fetch from 32 threads at once: every fetch works, the init succeeded once.
        DispatchQueue.concurrentPerform(iterations: 32) { _ in
            Fetcher.initialize()
            if let response = try? Fetcher.perform(FetchRequest(url: url, allowedSchemes: [.file])),
                response.status == 200 && response.body == Array("fetched".utf8)
            {
                fetched.add(1, ordering: .relaxed)
            }
        }
        Fetcher.initialize()
        #expect(fetched.load(ordering: .relaxed) == 32)
        #expect(throws: Never.self) { try Fetcher.checkGlobalInit() }
    }

    @Test func errorDescriptions() {
        let e = FetchError(code: .timedOut, curlCode: 28)
        #expect(e.description == "fetch error: timedOut (curl 28: Timeout was reached)")
        #expect(FetchError(code: .invalidURL).description == "fetch error: invalidURL")
    }
}

@Suite struct HTTPFetchTests {
    @Test func getParsesStatusHeadersAndBody() throws {
        let body = Array("{\"keys\":[{\"kid\":\"abc\"}]}".utf8)
        let server = try LoopbackServer { _ in
            httpResponse(
                headers: [
                    "Content-Type: application/json", "Cache-Control: max-age=3600, public",
                    "X-Dup: first", "x-dup: second", "X-Spaces:   padded   ",
                ],
                body: body)
        }
        defer { server.stop() }
        let response = try Fetcher.perform(
            FetchRequest(
                url: server.baseURL + "/auth/keys?x=1", headers: ["Accept: application/json"], allowedSchemes: [.http]))
        #expect(response.status == 200)
        #expect(response.body == body)
        #expect(response.headers["cache-control"] == "max-age=3600, public")
        #expect(response.headers["content-type"] == "application/json")
        #expect(response.headers["x-dup"] == "second")
        #expect(response.headers["x-spaces"] == "padded")
        #expect(response.headers["Cache-Control"] == nil)

        let requests = server.requests
        #expect(requests.count == 1)
        let request = try #require(requests.first.flatMap(HTTPRequest.init))
        #expect(request.requestLine == "GET /auth/keys?x=1 HTTP/1.1")
        #expect(request.header("user-agent") == "siwa-notify")
        #expect(request.header("accept") == "application/json")
        #expect(request.body.isEmpty)
    }

    @Test func uppercaseSchemeIsNormalised() throws {
        let server = try LoopbackServer { _ in httpResponse(body: [42]) }
        defer { server.stop() }
        let response = try Fetcher.perform(FetchRequest(url: "HTTP://127.0.0.1:\(server.port)/", allowedSchemes: [.http]))
        #expect(response.body == [42])
        _ = expectFetchError(.schemeNotAllowed, FetchRequest(url: "HTTP://127.0.0.1:\(server.port)/"))
    }

    @Test func nonSuccessStatusIsAResponseNotAnError() throws {
        let server = try LoopbackServer { _ in httpResponse(status: "503 Service Unavailable", headers: ["Retry-After: 7"], body: Array("busy".utf8))
        }
        defer { server.stop() }
        let response = try Fetcher.perform(FetchRequest(url: server.baseURL + "/", allowedSchemes: [.http]))
        #expect(response.status == 503)
        #expect(response.headers["retry-after"] == "7")
        #expect(response.body == Array("busy".utf8))
    }

    @Test func postSendsBodyAndHeaders() throws {
        // Binary body (with NULs) longer than curl's 1 KiB Expect threshold.
        let payload: [UInt8] = (0..<3000).map { UInt8(truncatingIfNeeded: $0 * 7) }
        let server = try LoopbackServer { raw in
            guard let req = HTTPRequest(raw),
                req.requestLine == "POST /notify HTTP/1.1",
                req.header("content-type") == "application/json",
                req.header("x-trace") == "t-1",
                req.body == payload
            else { return httpResponse(status: "400 Bad Request") }
            return httpResponse(status: "202 Accepted", body: Array("ok".utf8))
        }
        defer { server.stop() }
        let response = try Fetcher.perform(
            FetchRequest(
                url: server.baseURL + "/notify", method: "POST",
                headers: ["Content-Type: application/json", "X-Trace: t-1"], body: payload, allowedSchemes: [.http]))
        #expect(response.status == 202)
        #expect(response.body == Array("ok".utf8))
        let request = try #require(server.requests.first.flatMap(HTTPRequest.init))
        #expect(request.header("content-length") == "3000")
        #expect(request.header("expect") == nil)
        #expect(request.body == payload)
    }

    @Test func postWithoutBodySendsEmptyBody() throws {
        let server = try LoopbackServer { _ in httpResponse(status: "204 No Content") }
        defer { server.stop() }
        let response = try Fetcher.perform(FetchRequest(url: server.baseURL + "/", method: "POST", allowedSchemes: [.http]))
        #expect(response.status == 204)
        let request = try #require(server.requests.first.flatMap(HTTPRequest.init))
        #expect(request.requestLine == "POST / HTTP/1.1")
        #expect(request.header("content-length") == "0")
    }

    @Test func redirectsAreNotFollowed() throws {
        let server = try LoopbackServer { raw in
            if HTTPRequest(raw)?.requestLine.hasPrefix("GET /start ") == true {
                return httpResponse(status: "302 Found", headers: ["Location: /elsewhere"])
            }
            return httpResponse(body: Array("followed".utf8))
        }
        defer { server.stop() }
        let response = try Fetcher.perform(FetchRequest(url: server.baseURL + "/start", allowedSchemes: [.http]))
        #expect(response.status == 302)
        #expect(response.headers["location"] == "/elsewhere")
        #expect(server.requests.count == 1)
    }

    @Test func capExceededWithContentLength() throws {
        let server = try LoopbackServer { _ in httpResponse(body: [UInt8](repeating: 1, count: 5000)) }
        defer { server.stop() }
        let error = expectFetchError(
            .responseTooLarge,
            FetchRequest(url: server.baseURL + "/", maxResponseBytes: 4999, allowedSchemes: [.http]))
        #expect(error?.curlCode == 63)  // CURLE_FILESIZE_EXCEEDED: rejected from Content-Length
    }

    @Test func capExceededWhileStreamingAbortsFromWriteCallback() throws {
        // No Content-Length: only the write callback can enforce the cap.
        let server = try LoopbackServer { _ in
            httpResponse(body: [UInt8](repeating: 2, count: 3 << 20), contentLength: false)
        }
        defer { server.stop() }
        let start = Date()
        let error = expectFetchError(
            .responseTooLarge,
            FetchRequest(url: server.baseURL + "/", maxResponseBytes: 1 << 20, allowedSchemes: [.http]))
        #expect(error?.curlCode == 23)  // CURLE_WRITE_ERROR from our callback
        #expect(Date().timeIntervalSince(start) < 5)
    }

    @Test func silentServerTimesOut() throws {
        let server = try LoopbackServer { _ in nil }
        defer { server.stop() }
        let start = Date()
        let error = expectFetchError(
            .timedOut,
            FetchRequest(url: server.baseURL + "/slow?secret=1", totalTimeout: .seconds(1), allowedSchemes: [.http]))
        let elapsed = Date().timeIntervalSince(start)
        #expect(elapsed >= 0.9 && elapsed < 4, "elapsed \(elapsed)")
        #expect(error?.curlCode == 28)
        #expect(error.map { !$0.description.contains("secret") && !$0.description.contains("127.0.0.1") } ?? false)
        #expect(server.requests.count == 1)
    }

    @Test func closedPortCannotConnect() throws {
        let closed = try ClosedPort()
        let error = expectFetchError(
            .couldNotConnect,
            FetchRequest(url: "http://127.0.0.1:\(closed.port)/keys?token=abc", allowedSchemes: [.http]))
        #expect(error?.curlCode == 7)
        #expect(error.map { !$0.description.contains("token") && !$0.description.contains("\(closed.port)") } ?? false)
    }

    @Test func httpsToPlainServerFailsBecauseTLSIsAttempted() throws {
        let server = try LoopbackServer { _ in httpResponse(body: Array("plaintext".utf8)) }
        defer { server.stop() }
        do {
            let response = try Fetcher.perform(FetchRequest(url: "https://127.0.0.1:\(server.port)/", totalTimeout: .seconds(5)))
            Issue.record("https to a plaintext server succeeded with status \(response.status)")
        } catch {
            #expect(error.code == .tlsFailure || error.code == .transferFailed, "\(error)")
        }
        // The first byte curl sent was a TLS handshake record.
        let first = try #require(server.requests.first)
        #expect(first.first == 0x16)
    }

    @Test func concurrentTransfersKeepStateSeparate() throws {
        let server = try LoopbackServer { raw in
            let line = HTTPRequest(raw)?.requestLine ?? ""
            let path = line.split(separator: " ").dropFirst().first.map(String.init) ?? "?"
            return httpResponse(headers: ["X-Path: \(path)"], body: Array(path.utf8))
        }
        defer { server.stop() }
        let failures = Mutex(0)
        DispatchQueue.concurrentPerform(iterations: 16) { i in
            let path = "/item/\(i)"
            let ok: Bool
            do {
                let r = try Fetcher.perform(FetchRequest(url: server.baseURL + path, allowedSchemes: [.http]))
                ok = r.status == 200 && r.body == Array(path.utf8) && r.headers["x-path"] == path
            } catch {
                ok = false
            }
            if !ok { failures.withLock { $0 += 1 } }
        }
        #expect(failures.withLock { $0 } == 0)
        #expect(server.requests.count == 16)
    }
}

@Suite struct FetchSessionTests {
    @Test func keepsTheConnectionOpenBetweenTransfers() throws {
        let server = try LoopbackServer(keepAlive: true) { _ in httpResponse(status: "204 No Content", keepAlive: true) }
        defer { server.stop() }
        let session = FetchSession()
        for i in 0..<3 {
            let r = try session.perform(
                FetchRequest(
                    url: server.baseURL + "/hook", method: "POST", headers: ["X-N: \(i)"], body: Array("\(i)".utf8),
                    allowedSchemes: [.http]))
            #expect(r.status == 204)
        }
        #expect(server.requests.count == 3)
        #expect(server.connections == 1)
        // Every transfer sets its own options: the second request carried only its own header and body.
        let second = try #require(HTTPRequest(server.requests[1]))
        #expect(second.header("x-n") == "1" && second.body == Array("1".utf8))
    }

    @Test func connectsAgainWhenTheServerClosedTheConnection() throws {
        let server = try LoopbackServer { _ in httpResponse(body: Array("ok".utf8)) }  // Connection: close
        defer { server.stop() }
        let session = FetchSession()
        for _ in 0..<2 {
            let r = try session.perform(FetchRequest(url: server.baseURL + "/x", allowedSchemes: [.http]))
            #expect(r.status == 200 && r.body == Array("ok".utf8))
        }
        #expect(server.connections == 2)
    }

    @Test func aFailedTransferLeavesTheSessionUsable() throws {
        let server = try LoopbackServer(keepAlive: true) { _ in httpResponse(body: Array("ok".utf8), keepAlive: true) }
        defer { server.stop() }
        let session = FetchSession()
        // Rejected before curl runs, then refused by the policy, then a good one on the same handle.
        #expect(throws: FetchError.self) { try session.perform(FetchRequest(url: server.baseURL + "/x")) }
        #expect(throws: FetchError.self) {
            try session.perform(FetchRequest(url: server.baseURL + "/x", maxResponseBytes: 1, allowedSchemes: [.http]))
        }
        let r = try session.perform(FetchRequest(url: server.baseURL + "/x", allowedSchemes: [.http]))
        #expect(r.status == 200 && r.body == Array("ok".utf8))
    }
}
