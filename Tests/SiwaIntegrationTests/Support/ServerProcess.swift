import Foundation
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// The real `siwa-notify` binary run as a child process (for kill -9, scale-out and signals).
final class ServerProcess {
    let process = Process()
    let logPath: String

    /// Where the child's stderr goes.
    enum StandardError {
        /// A log file (`log`, `waitForLog`).
        case logFile
        /// A pipe the test never reads (it fills after 64 KiB); `closeStandardErrorPipe()` closes
        /// its read end (the child's next write gets EPIPE). `log` stays empty.
        case unreadPipe
    }

    /// The read end of the `unreadPipe` (close-on-exec: no other child inherits it); -1 once closed.
    private var stderrReader: Int32 = -1

    static var binary: String {
        let candidates = [
            URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("siwa-notify").path,
            URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
                .deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent(".build/debug/siwa-notify").path,
        ]
        return candidates.first { FileManager.default.isExecutableFile(atPath: $0) } ?? candidates[0]
    }

    /// Starts `siwa-notify <arguments>` with `environment` added to ours (`binary`: another
    /// release's, for the upgrade tests).
    init(
        _ arguments: [String], environment: [String: String], standardError: StandardError = .logFile, binary: String = ServerProcess.binary
    )
        throws
    {
        logPath = NSTemporaryDirectory() + "siwa-proc-\(UInt64.random(in: 0...UInt64.max)).log"
        _ = FileManager.default.createFile(atPath: logPath, contents: nil)
        process.executableURL = URL(fileURLWithPath: binary)
        process.arguments = arguments
        process.environment = ProcessInfo.processInfo.environment.merging(environment) { _, new in new }
        process.standardOutput = FileHandle.nullDevice
        process.standardInput = FileHandle.nullDevice
        switch standardError {
        case .logFile:
            process.standardError = FileHandle(forWritingAtPath: logPath)
            try process.run()
        case .unreadPipe:
            var fds: [Int32] = [-1, -1]
            guard pipe(&fds) == 0 else { throw CocoaError(.fileWriteUnknown) }
            for fd in fds { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
            let writer = FileHandle(fileDescriptor: fds[1], closeOnDealloc: true)
            process.standardError = writer
            stderrReader = fds[0]
            do {
                try process.run()
            } catch {
                closeStandardErrorPipe()
                throw error
            }
            try? writer.close()  // the child has its own copy
        }
    }

    /// Closes the read end of the `unreadPipe` (no-op otherwise or when already closed).
    func closeStandardErrorPipe() {
        if stderrReader >= 0 { close(stderrReader) }
        stderrReader = -1
    }

    var log: String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }

    /// Waits until the log contains `text`.
    func waitForLog(_ text: String, timeout: Double = 30) -> Bool {
        eventually(timeout: timeout) { log.contains(text) || !process.isRunning }
            && log.contains(text)
    }

    func signal(_ sig: Int32) {
        if process.isRunning { kill(process.processIdentifier, sig) }
    }

    /// SIGKILL and reap.
    func kill9() {
        signal(SIGKILL)
        process.waitUntilExit()
    }

    /// SIGTERM, wait for a graceful exit; returns the exit status.
    @discardableResult
    func terminate(timeout: Double = 30) -> Int32 {
        signal(SIGTERM)
        if !eventually(timeout: timeout, { !process.isRunning }) { kill9() }
        process.waitUntilExit()
        return process.terminationStatus
    }

    deinit {
        if process.isRunning { kill9() }
        closeStandardErrorPipe()
        try? FileManager.default.removeItem(atPath: logPath)
    }

    /// A loopback port for a child process to listen on, free a moment ago. Taken below the
    /// kernel's ephemeral range (which every outgoing connection of the parallel tests draws
    /// from, so a port from it can be taken again before the child binds it) and never the same
    /// twice in this test process.
    static func freePort() -> UInt16 {
        let ephemeralStart =
            (try? String(contentsOfFile: "/proc/sys/net/ipv4/ip_local_port_range", encoding: .utf8))
            .flatMap { $0.split(whereSeparator: { $0 == " " || $0 == "\t" }).first.flatMap { Int($0) } } ?? 32768
        let low = 10_000
        let span = max(1000, ephemeralStart - low)
        while true {
            let port = UInt16(
                low
                    + portCounter.withLock { n -> Int in
                        if n < 0 { n = Int.random(in: 0..<span) }
                        n = (n + 1) % span
                        return n
                    })
            if isBindable(port) { return port }
        }
    }

    private static let portCounter = Mutex(-1)

    private static func isBindable(_ port: UInt16) -> Bool {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var reuse: Int32 = 1
        _ = setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &reuse, socklen_t(MemoryLayout<Int32>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        } == 0
    }
}
