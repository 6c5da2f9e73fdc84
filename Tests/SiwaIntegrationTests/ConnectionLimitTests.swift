import Foundation
import SiwaApp
import SiwaCore
import SiwaDevTools
import Synchronization
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Idle and slow (slowloris) clients are cut off by the connection timeout (3 s in the harness),
/// and idle connections do not keep the listener from answering real notifications.
@Suite(
    "Public listener: connection timeout and idle connections",
    .needsDatabase)
struct ConnectionLimitTests {
    /// The harness's `connectionTimeout`.
    static let timeout = 3.0
    /// Cut off no later than this after the last byte of the attack started (timeout + slack).
    static let cutOffWithin = 8.5

    @Test("an idle connection that sends nothing is closed within the timeout")
    func idleConnectionIsClosed() throws {
        try TestHarness.with { h throws in
            let outcome = try SlowClient(port: h.app.publicPort!).run(prefix: [], dribble: nil)
            print("idle connection: closed \(outcome.closed) after \(String(format: "%.2f", outcome.elapsed)) s")
            #expect(outcome.closed, "idle connection still open after \(outcome.elapsed) s")
            #expect(outcome.elapsed < Self.cutOffWithin, "idle connection closed after \(outcome.elapsed) s")
            #expect(outcome.elapsed > Self.timeout - 1.5, "idle connection closed suspiciously early: \(outcome.elapsed) s")
            #expect(outcome.status != 200)
        }
    }

    @Test("half a request line, then silence: closed within the timeout")
    func halfRequestLineIsClosed() throws {
        try TestHarness.with { h throws in
            let outcome = try SlowClient(port: h.app.publicPort!).run(prefix: Array("POST /apple/notif".utf8), dribble: nil)
            print(
                "half request line: closed \(outcome.closed) after \(String(format: "%.2f", outcome.elapsed)) s, status \(outcome.status.map(String.init) ?? "none")"
            )
            #expect(outcome.closed, "half request line still open after \(outcome.elapsed) s")
            #expect(outcome.elapsed < Self.cutOffWithin, "half request line closed after \(outcome.elapsed) s")
            #expect(outcome.status == nil || (400..<500).contains(outcome.status!))
        }
    }

    @Test("slowloris: one header byte every 2 s is cut off within ~3–8 s, not kept alive by the drip")
    func headerDripIsCutOff() throws {
        try TestHarness.with { h throws in
            let prefix = Array("POST /apple/notifications HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ".utf8)
            let outcome = try SlowClient(port: h.app.publicPort!).run(prefix: prefix, dribble: UInt8(ascii: "a"))
            print(
                "slowloris header drip: closed \(outcome.closed) after \(String(format: "%.2f", outcome.elapsed)) s, \(outcome.bytesSent) bytes sent")
            #expect(outcome.closed, "header drip kept the connection open for \(outcome.elapsed) s")
            #expect(outcome.elapsed < Self.cutOffWithin, "header drip cut off only after \(outcome.elapsed) s")
            #expect(outcome.status == nil || (400..<500).contains(outcome.status!))
            #expect(try h.scalar("SELECT count(*) FROM siwa.events") == "0")
        }
    }

    @Test("slow body: one body byte every 2 s is cut off within ~3–8 s")
    func bodyDripIsCutOff() throws {
        try TestHarness.with { h throws in
            let prefix = Array(
                "POST /apple/notifications HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 60000\r\n\r\n".utf8)
            let outcome = try SlowClient(port: h.app.publicPort!).run(prefix: prefix, dribble: UInt8(ascii: " "))
            print("slow body drip: closed \(outcome.closed) after \(String(format: "%.2f", outcome.elapsed)) s, \(outcome.bytesSent) bytes sent")
            #expect(outcome.closed, "body drip kept the connection open for \(outcome.elapsed) s")
            #expect(outcome.elapsed < Self.cutOffWithin, "body drip cut off only after \(outcome.elapsed) s")
            #expect(outcome.status == nil || (400..<500).contains(outcome.status!))
            #expect(try h.scalar("SELECT count(*) FROM siwa.events") == "0")
        }
    }

    @Test("300 idle connections open: valid notifications still answered 200; the idle ones are then cut off, none early")
    func servesWhileManyConnectionsIdle() throws {
        try TestHarness.with { h throws in
            let port = h.app.publicPort!
            let raw = RawHTTP(port: port)
            var idle: [Int32] = []
            var openedAt: [Int32: Date] = [:]
            let opened = Date()
            for i in 0..<300 {
                let fd = try raw.connect()
                idle.append(fd)
                // Half of them start a request and stall; half send nothing at all.
                if i % 2 == 0 { RawHTTP.write(fd, Array("POST /apple/notifications HTTP/1.1\r\nHost: x\r\n".utf8)) }
                openedAt[fd] = Date()
            }
            // Watched from now on, whatever the rest of the test takes: when each is closed.
            let watcher = CloseWatcher(idle, limit: 60)
            defer {
                _ = watcher.wait()
                idle.forEach { close($0) }
            }
            print("opened 300 idle connections in \(String(format: "%.3f", Date().timeIntervalSince(opened))) s")

            let runner = HostileRunner(harness: h)
            var latencies: [Double] = []
            for n in 0..<5 {
                let body = Array(NotificationSigner.body(token: try h.token(sub: "000739.idle.\(n)")).utf8)
                let start = Date()
                let reply = try runner.exchange(HostileCase(name: "valid #\(n)", body: body, status: 200, reason: ""), timeout: 30)
                latencies.append(Date().timeIntervalSince(start))
                #expect(reply.status == 200, "valid #\(n) while 300 connections idle: \(reply.summary)")
                #expect(reply.body == #"{"status":"accepted"}"#, "valid #\(n)")
            }
            print(
                "latency with 300 idle connections: " + latencies.map { String(format: "%.1f ms", $0 * 1000) }.joined(separator: ", ")
                    + "; \(300 - watcher.closedCount) idle connections still open \(String(format: "%.2f", Date().timeIntervalSince(opened))) s after opening"
            )
            #expect(try h.scalar("SELECT count(*) FROM siwa.events") == "5")

            // Then the timeout cuts every idle one off — and none before its time: an idle
            // connection refused or dropped early would be seen closed sooner than the timeout
            // after it was opened (a slow machine only makes it later).
            let closedAt = watcher.wait()
            print(
                "\(closedAt.count) of 300 idle connections closed by the server; last \(String(format: "%.2f", (closedAt.values.max() ?? opened).timeIntervalSince(opened))) s after opening"
            )
            #expect(closedAt.count == 300, "\(300 - closedAt.count) idle connections still open after 60 s")
            let early = idle.filter { fd in
                guard let closed = closedAt[fd], let open = openedAt[fd] else { return false }
                return closed.timeIntervalSince(open) < Self.timeout - 1.5
            }
            #expect(early.isEmpty, "\(early.count) idle connections were closed before the connection timeout")

            // And the listener still serves.
            let after = try runner.exchange(
                HostileCase(
                    name: "valid after the idle flood",
                    body: Array(NotificationSigner.body(token: try h.token(sub: "000739.idle.after")).utf8),
                    status: 200, reason: ""), timeout: 30)
            #expect(after.status == 200, "valid after the idle flood: \(after.summary)")
        }
    }
}

/// Watches connections from a thread of its own until the server has closed each (or `limit`
/// seconds pass), recording when each was first seen closed (never before it was).
final class CloseWatcher: Sendable {
    private final class Record: Sendable {
        let closedAt = Mutex<[Int32: Date]>([:])
    }

    private let record = Record()
    private let finished = DispatchSemaphore(value: 0)

    init(_ fds: [Int32], limit: Double) {
        Thread.detachNewThread { [record, finished] in
            let deadline = Date().addingTimeInterval(limit)
            var open = fds
            while !open.isEmpty && Date() < deadline {
                let closed = Set(open.filter { SlowClient.isClosed($0) })
                let seen = Date()
                if !closed.isEmpty {
                    record.closedAt.withLock { for fd in closed { $0[fd] = seen } }
                    open.removeAll { closed.contains($0) }
                }
                if !open.isEmpty { Thread.sleep(forTimeInterval: 0.05) }
            }
            finished.signal()
        }
    }

    /// How many were seen closed so far.
    var closedCount: Int { record.closedAt.withLock { $0.count } }

    /// Waits until every connection was seen closed or the limit passed; when each closed.
    func wait() -> [Int32: Date] {
        finished.wait()
        finished.signal()  // later calls return at once
        return record.closedAt.withLock { $0 }
    }
}

/// A client that sends `prefix`, then optionally one byte every 2 s, and watches for the server
/// closing the connection (EOF, reset, or a failed write).
struct SlowClient {
    let port: UInt16
    /// Give up watching after this long.
    var limit = 14.0
    var interval = 2.0

    struct Outcome {
        var closed: Bool
        var elapsed: Double
        var status: Int?
        var bytesSent: Int
    }

    func run(prefix: [UInt8], dribble: UInt8?) throws -> Outcome {
        let fd = try RawHTTP(port: port).connect()
        defer { close(fd) }
        let start = Date()
        var sent = 0
        if !prefix.isEmpty {
            guard RawHTTP.write(fd, prefix) else { return Outcome(closed: true, elapsed: 0, status: nil, bytesSent: 0) }
            sent += prefix.count
        }
        var received: [UInt8] = []
        var nextDrip = start.addingTimeInterval(interval)
        while Date().timeIntervalSince(start) < limit {
            let wait = dribble == nil ? 0.1 : max(0, min(0.1, nextDrip.timeIntervalSinceNow))
            var pfd = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            let ready = poll(&pfd, 1, Int32(wait * 1000))
            if ready > 0 {
                var buffer = [UInt8](repeating: 0, count: 4096)
                let n = recv(fd, &buffer, buffer.count, Int32(MSG_DONTWAIT))
                if n > 0 {
                    received.append(contentsOf: buffer[0..<n])
                    continue
                }
                if n == 0 || (errno != EAGAIN && errno != EINTR) {
                    return Outcome(
                        closed: true, elapsed: Date().timeIntervalSince(start),
                        status: RawHTTP.status(String(decoding: received, as: UTF8.self)), bytesSent: sent)
                }
            }
            if let byte = dribble, Date() >= nextDrip {
                if !RawHTTP.write(fd, [byte]) {
                    return Outcome(
                        closed: true, elapsed: Date().timeIntervalSince(start),
                        status: RawHTTP.status(String(decoding: received, as: UTF8.self)), bytesSent: sent)
                }
                sent += 1
                nextDrip = Date().addingTimeInterval(interval)
            }
        }
        return Outcome(
            closed: false, elapsed: Date().timeIntervalSince(start),
            status: RawHTTP.status(String(decoding: received, as: UTF8.self)), bytesSent: sent)
    }

    /// True when the peer has closed `fd` (readable with EOF or an error). Never blocks.
    static func isClosed(_ fd: Int32) -> Bool {
        var pfd = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        guard poll(&pfd, 1, 0) > 0 else { return false }
        if pfd.revents & Int16(POLLERR | POLLHUP) != 0 { return true }
        var byte: UInt8 = 0
        let n = recv(fd, &byte, 1, Int32(MSG_DONTWAIT | MSG_PEEK))
        return n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)
    }
}
