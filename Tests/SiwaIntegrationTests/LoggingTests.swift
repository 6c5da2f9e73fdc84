import Foundation
import SiwaApp
import SiwaDevTools
import SiwaFetch
import Synchronization
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Logging never kills or stalls the server: the real binary with a stderr nobody reads or whose
/// reader went away, and the `LogWriter` queue against pipes the test controls.
@Suite("Logging never blocks or kills", .needsDatabase)
struct LoggingTests {
    static let signer = NotificationSigner(key: TestHarness.sharedKey, kid: "test-key-1")

    /// `serve` on a fresh database and a test JWKS, stderr to a pipe nobody reads, up and ready.
    static func startServer() throws -> (server: ServerProcess, conninfo: String, url: String, admin: String) {
        let conninfo = try TestDatabase.create()
        let jwks = NSTemporaryDirectory() + "siwa-logging-jwks-\(UInt32.random(in: 0...UInt32.max)).json"
        try signer.jwks.write(toFile: jwks, atomically: true, encoding: .utf8)
        let port = ServerProcess.freePort(), adminPort = ServerProcess.freePort()
        let server = try ServerProcess(
            ["serve"],
            environment: [
                "SIWA_DATABASE_URL": conninfo, "SIWA_AUDIENCES": TestHarness.audience, "SIWA_JWKS_URL": "file://" + jwks,
                "SIWA_LISTEN": "127.0.0.1:\(port)", "SIWA_ADMIN_LISTEN": "127.0.0.1:\(adminPort)", "SIWA_LOG_LEVEL": "info",
            ], standardError: .unreadPipe)
        let admin = "http://127.0.0.1:\(adminPort)"
        let ready = eventually(timeout: 30) {
            !server.process.isRunning || (try? Fetcher.perform(FetchRequest(url: admin + "/readyz", allowedSchemes: [.http])))?.status == 200
        }
        #expect(ready && server.process.isRunning, "serve did not become ready")
        return (server, conninfo, "http://127.0.0.1:\(port)/apple/notifications", admin)
    }

    static func tokens(_ n: Int, prefix: String) throws -> [(jti: String, token: String)] {
        let now = Int64(Date().timeIntervalSince1970) * 1000
        return try (0..<n).map { i in
            let jti = NotificationSigner.newJTI()
            let claims = NotificationSigner.claims(
                audience: TestHarness.audience, type: "consent-revoked",
                sub: "\(prefix).\(i)", eventTimeMillis: now - Int64(i), jti: jti)
            return (jti, try signer.sign(claims: claims))
        }
    }

    /// `siwa_log_lines_dropped_total` from the admin listener.
    static func droppedLines(_ admin: String) throws -> Double? {
        let body = String(decoding: try Fetcher.perform(FetchRequest(url: admin + "/metrics", allowedSchemes: [.http])).body, as: UTF8.self)
        return body.split(separator: "\n").first { $0.hasPrefix("siwa_log_lines_dropped_total ") }
            .flatMap { Double($0.split(separator: " ")[1]) }
    }

    @Test("stderr to a pipe nobody reads: 10,000 requests all answered, drops counted on /metrics, clean exit")
    func undrainedPipe() throws {
        let (server, conninfo, url, admin) = try Self.startServer()
        defer { server.terminate() }
        // 2,500 notifications sent 4 times each: 10,000 requests, ~20,000 log lines (receiver + worker)
        // against a 64 KiB pipe.
        let unique = try Self.tokens(2500, prefix: "pipe")
        let requests = (0..<4).flatMap { round in unique.map { (jti: "\($0.jti)#\(round)", token: $0.token) } }
        let sender = LoadSender(url: url, tokens: requests)
        let started = Date()
        sender.run(threads: 4)
        let seconds = Date().timeIntervalSince(started)
        let outcomes = sender.outcomes.withLock { $0 }
        #expect(outcomes.count == 10_000)
        #expect(
            outcomes.values.allSatisfy { $0.status == 200 && ($0.code == "accepted" || $0.code == "duplicate") },
            "\(Set(outcomes.values.map { "\($0.status ?? 0) \($0.code ?? "none")" }))")
        #expect(try TestDatabase.query(conninfo, "SELECT count(*) FROM siwa.events").scalar == "2500")
        let dropped = try Self.droppedLines(admin) ?? 0
        #expect(dropped > 0)
        #expect(server.process.isRunning)
        // Shutdown flushes with a bound: a stalled pipe does not hang the exit.
        #expect(server.terminate() == 0)
        print(
            "undrained stderr: 10000 requests in \(String(format: "%.1f", seconds)) s (\(Int(10_000 / seconds))/s), \(Int(dropped)) log lines dropped"
        )
    }

    @Test("stderr reader closed mid-run: no SIGPIPE death, requests after the close answered 200 and committed")
    func closedPipe() throws {
        let (server, conninfo, url, admin) = try Self.startServer()
        defer { server.terminate() }
        let before = LoadSender(url: url, tokens: try Self.tokens(50, prefix: "before"))
        before.run(threads: 2)
        #expect(before.accepted.count == 50)
        server.closeStandardErrorPipe()
        let after = LoadSender(url: url, tokens: try Self.tokens(200, prefix: "after"))
        after.run(threads: 4)
        #expect(after.accepted.count == 200)
        let list = "{" + after.accepted.sorted().joined(separator: ",") + "}"
        #expect(try TestDatabase.query(conninfo, "SELECT count(*) FROM siwa.events WHERE jti = ANY($1::text[])", [list]).scalar == "200")
        // The worker keeps applying (and logging into the void) too.
        #expect(
            eventually(timeout: 30) {
                (try? TestDatabase.query(conninfo, "SELECT count(*) FROM siwa.events WHERE status = 'done'").scalar) == "250"
            })
        #expect(server.process.isRunning)
        // The lines written after the close got EPIPE and were counted, not fatal.
        #expect(try Self.droppedLines(admin) ?? 0 > 0)
        #expect(server.terminate() == 0)
    }

    // MARK: LogWriter against pipes the test controls

    /// A pipe (close-on-exec, so no child process of a parallel test keeps an end open).
    static func makePipe() throws -> (read: Int32, write: Int32) {
        var fds: [Int32] = [-1, -1]
        guard pipe(&fds) == 0 else { throw CocoaError(.fileWriteUnknown) }
        for fd in fds { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
        return (fds[0], fds[1])
    }

    /// Shrinks the pipe to one page and fills it: the next blocking write waits for a reader.
    /// Returns how many filler bytes (`.`) are in the pipe.
    static func fill(_ fd: Int32) -> Int {
        _ = fcntl(fd, 1031 /* F_SETPIPE_SZ, a GNU name Glibc's module does not export */, 4096)
        let flags = fcntl(fd, F_GETFL)
        _ = fcntl(fd, F_SETFL, flags | O_NONBLOCK)
        let chunk = [UInt8](repeating: UInt8(ascii: "."), count: 512)
        var filled = 0
        while true {
            let n = write(fd, chunk, chunk.count)
            if n <= 0 { break }
            filled += n
        }
        _ = fcntl(fd, F_SETFL, flags)
        return filled
    }

    /// Reads everything until EOF on a thread; `result()` waits for it.
    final class Drain: Sendable {
        private let done = DispatchSemaphore(value: 0)
        private let bytes = Mutex<[UInt8]>([])

        init(_ fd: Int32) {
            Thread.detachNewThread { [self] in
                var buffer = [UInt8](repeating: 0, count: 65536)
                while true {
                    let n = read(fd, &buffer, buffer.count)
                    if n <= 0 { break }
                    bytes.withLock { $0.append(contentsOf: buffer[0..<n]) }
                }
                done.signal()
            }
        }

        func result() -> String {
            done.wait()
            return String(decoding: bytes.withLock { $0 }, as: UTF8.self)
        }
    }

    @Test("LogWriter: bounded queue drops and counts, one write(2) per batch, a notice once writes succeed again")
    func boundedQueue() throws {
        let (r, w) = try Self.makePipe()
        defer { close(r) }
        let filler = Self.fill(w)
        let writer = LogWriter(fileDescriptor: w, maxLines: 100)
        writer.enqueue("first\n")
        // The writer took "first" and is now blocked on the full pipe.
        #expect(eventually { writer.statistics.queuedLines == 0 })
        for i in 0..<150 { writer.enqueue("line \(i)\n") }  // never blocks
        var stats = writer.statistics
        #expect(stats.queuedLines == 100)
        #expect(stats.droppedLines == 50)
        #expect(writer.flush(timeout: .milliseconds(200)) == false, "flush is bounded on a stalled pipe")
        let drain = Drain(r)
        #expect(writer.flush(timeout: .seconds(30)))
        stats = writer.statistics
        #expect(stats.writtenLines == 101)
        #expect(stats.droppedLines == 50)
        #expect(stats.writeCalls == 2, "one write for \"first\", one for the notice and the 100 queued lines")
        writer.stop()
        close(w)
        let output = drain.result()
        #expect(output.prefix(filler) == String(repeating: ".", count: filler))
        let lines = output.dropFirst(filler).split(separator: "\n").map(String.init)
        #expect(lines.count == 102)
        #expect(lines.first == "first")
        #expect(lines.dropFirst().first?.contains("\"msg\":\"log lines dropped\"") == true)
        #expect(lines.dropFirst().first?.contains("\"dropped\":50") == true)
        #expect(Array(lines.dropFirst(2)) == (0..<100).map { "line \($0)" })
    }

    @Test("LogWriter: a closed reader gives EPIPE (no SIGPIPE), lines dropped and counted, announced on the next reader")
    func closedReader() throws {
        let (r, w) = try Self.makePipe()
        defer { close(w) }
        let writer = LogWriter(fileDescriptor: w)
        writer.noticeFormat = .text
        writer.enqueue("before")
        #expect(writer.flush(timeout: .seconds(30)))
        var buffer = [UInt8](repeating: 0, count: 4096)
        #expect(read(r, &buffer, buffer.count) == 7)
        close(r)
        for i in 0..<5 { writer.enqueue("lost \(i)\n") }
        #expect(writer.flush(timeout: .seconds(30)))
        #expect(writer.statistics.droppedLines == 5)
        // A new reader on the same descriptor number: writes succeed again.
        let (r2, w2) = try Self.makePipe()
        defer { close(r2) }
        #expect(dup2(w2, w) == w)
        _ = fcntl(w, F_SETFD, FD_CLOEXEC)
        close(w2)
        writer.enqueue("after\n")
        #expect(writer.flush(timeout: .seconds(30)))
        writer.stop()
        let n = read(r2, &buffer, buffer.count)
        let lines = String(decoding: buffer[0..<max(0, n)], as: UTF8.self).split(separator: "\n")
        #expect(lines.count == 2)
        #expect(lines.first?.contains("WARNING siwa-notify: log lines dropped dropped=5") == true)
        #expect(lines.last == "after")
        #expect(writer.statistics.droppedLines == 5)
        #expect(writer.statistics.writtenLines == 2)
    }

    @Test("LogWriter: a bad descriptor (EBADF) drops and counts; /metrics has the counter")
    func badDescriptor() throws {
        let writer = LogWriter(fileDescriptor: -1)
        for i in 0..<3 { writer.enqueue("line \(i)\n") }
        writer.enqueue("a text line whose message\nholds a newline\n")
        #expect(writer.flush(timeout: .seconds(30)))
        #expect(writer.statistics.droppedLines == 4)
        writer.stop()
        // The counter of this writer, as /metrics renders it.
        let text = Metrics(logWriter: writer).render(gauges: [])
        #expect(text.contains("# TYPE siwa_log_lines_dropped_total counter\nsiwa_log_lines_dropped_total 4\n"))
    }
}
