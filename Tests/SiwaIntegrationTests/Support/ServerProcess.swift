import Foundation

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

    /// Starts `siwa-notify <arguments>` with `environment` added to ours.
    init(_ arguments: [String], environment: [String: String], standardError: StandardError = .logFile) throws {
        logPath = NSTemporaryDirectory() + "siwa-proc-\(UInt64.random(in: 0...UInt64.max)).log"
        _ = FileManager.default.createFile(atPath: logPath, contents: nil)
        process.executableURL = URL(fileURLWithPath: Self.binary)
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

    /// A loopback port that was free a moment ago.
    static func freePort() -> UInt16 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        _ = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        return UInt16(bigEndian: address.sin_port)
    }
}
