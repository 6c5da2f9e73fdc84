import Foundation
import Logging
import SiwaCore
import SiwaRuntime
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// Writes log lines to a file descriptor without ever blocking the code that logs.
///
/// Lines go into a bounded in-memory queue (default 10,000 lines or 4 MiB, whichever comes first)
/// drained by one writer thread, which writes everything queued with one `write(2)` per batch.
/// When the queue is full, or a write fails (EPIPE: the reader closed; EBADF...), lines are dropped
/// and counted (`siwa_log_lines_dropped_total`); the first batch written after drops starts with
/// one `log lines dropped` line carrying the count. Only the writer thread can block (on a pipe
/// nobody drains); that only fills the queue. The writer thread blocks SIGPIPE for itself, so a
/// closed pipe gives EPIPE there and never kills the process.
public final class LogWriter: Sendable {
    /// Queue bound in lines (default 10,000).
    public static let defaultMaxLines = 10_000
    /// Queue bound in bytes (default 4 MiB).
    public static let defaultMaxBytes = 4 << 20

    /// The process's stderr (the writer thread starts on first use).
    public static let standardError = LogWriter(fileDescriptor: STDERR_FILENO)

    /// Counters since the writer was made.
    public struct Statistics: Sendable, Equatable {
        /// Lines dropped: queue full, or the write failed.
        public var droppedLines: UInt64
        /// Lines written in full.
        public var writtenLines: UInt64
        /// `write(2)` system calls made.
        public var writeCalls: UInt64
        /// Lines waiting in the queue.
        public var queuedLines: Int
    }

    private struct State {
        var buffer: [UInt8] = []
        var lines = 0
        var accepted: UInt64 = 0  // lines queued, ever
        var finished: UInt64 = 0  // queued lines the writer wrote or dropped
        var dropped: UInt64 = 0
        var unreported: UInt64 = 0  // drops not yet announced by a notice line
        var written: UInt64 = 0
        var writeCalls: UInt64 = 0
        var idle = false  // the writer waits for `wake`
        var stopping = false
        var noticeFormat: LogLineFormatter.Format = .json
    }

    private let fd: Int32
    private let maxLines: Int
    private let maxBytes: Int
    private let state = Mutex(State())
    /// Woken when a line comes to an idle writer (or at stop).
    private let wake = WakeSignal()
    /// Broadcast (under its lock) after the writer finished a batch: what `flush` waits on.
    private let batchFinished = Condition()

    /// Starts the writer thread for `fileDescriptor` (not owned: never closed here).
    public init(fileDescriptor: Int32, maxLines: Int = LogWriter.defaultMaxLines, maxBytes: Int = LogWriter.defaultMaxBytes) {
        fd = fileDescriptor
        self.maxLines = max(1, maxLines)
        self.maxBytes = max(1, maxBytes)
        _ = LoopThread(name: "siwa-log-writer") { [self] in run() }
    }

    /// Format of the `log lines dropped` notice (set it to the handler's format; default `json`).
    public var noticeFormat: LogLineFormatter.Format {
        get { state.withLock { $0.noticeFormat } }
        set { state.withLock { $0.noticeFormat = newValue } }
    }

    public var statistics: Statistics {
        state.withLock {
            Statistics(droppedLines: $0.dropped, writtenLines: $0.written, writeCalls: $0.writeCalls, queuedLines: $0.lines)
        }
    }

    /// Queues one line (a newline is added if missing). Never blocks on I/O: a full queue drops the
    /// line and counts it.
    public func enqueue(_ line: String) {
        let needsNewline = line.utf8.last != UInt8(ascii: "\n")
        let size = line.utf8.count + (needsNewline ? 1 : 0)
        let signal = state.withLock { s -> Bool in
            guard !s.stopping, s.lines < maxLines, s.buffer.count + size <= maxBytes else {
                s.dropped += 1
                s.unreported += 1
                return false
            }
            s.buffer.append(contentsOf: line.utf8)
            if needsNewline { s.buffer.append(UInt8(ascii: "\n")) }
            s.lines += 1
            s.accepted += 1
            guard s.idle else { return false }
            s.idle = false
            return true
        }
        if signal { wake.wake() }
    }

    /// Waits until every line queued before the call was written (or dropped), at most
    /// `timeout`; false on timeout (a stalled reader). Call before exiting.
    @discardableResult
    public func flush(timeout: Duration) -> Bool {
        let target = state.withLock { $0.accepted }
        let deadline = Deadline(after: timeout)
        batchFinished.lock()
        defer { batchFinished.unlock() }
        while state.withLock({ $0.finished }) < target {
            if deadline.hasPassed(at: .now) { return false }
            batchFinished.waitLocked(until: deadline)
        }
        return true
    }

    /// Lets the writer thread end once the queue is empty; later lines are dropped. (Tests; the
    /// stderr writer lives as long as the process.)
    public func stop() {
        let signal = state.withLock { s -> Bool in
            s.stopping = true
            guard s.idle else { return false }
            s.idle = false
            return true
        }
        if signal { wake.wake() }
    }

    private enum Step {
        case write(lines: Int, notice: UInt64, format: LogLineFormatter.Format)
        case wait
        case stop
    }

    private func run() {
        var blocked = sigset_t()
        sigemptyset(&blocked)
        sigaddset(&blocked, SIGPIPE)
        pthread_sigmask(SIG_BLOCK, &blocked, nil)
        var batch: [UInt8] = []
        while true {
            batch.removeAll(keepingCapacity: batch.capacity <= 1 << 20)
            let step = state.withLock { s -> Step in
                if s.lines == 0 {
                    if s.stopping { return .stop }
                    s.idle = true
                    return .wait
                }
                swap(&batch, &s.buffer)
                defer {
                    s.lines = 0
                    s.unreported = 0
                }
                return .write(lines: s.lines, notice: s.unreported, format: s.noticeFormat)
            }
            switch step {
            case .stop:
                return
            case .wait:
                wake.wait(until: .never)
            case .write(let lines, let notice, let format):
                var noticeSize = 0
                if notice > 0 {
                    let line = LogLineFormatter(label: "siwa-notify", format: format)
                        .line(level: .warning, message: "log lines dropped", metadata: ["dropped": .stringConvertible(notice)])
                    noticeSize = line.utf8.count
                    batch.insert(contentsOf: line.utf8, at: 0)
                }
                let (written, calls) = writeAll(batch)
                var lost = UInt64(batch[written...].reduce(0) { $1 == UInt8(ascii: "\n") ? $0 + 1 : $0 })
                var reannounce: UInt64 = 0
                if written < noticeSize {
                    lost -= 1  // the notice itself: announce its count again later
                    reannounce = notice
                }
                lost = min(lost, UInt64(lines))  // a text-format message may hold its own newlines
                state.withLock { s in
                    s.writeCalls += calls
                    s.finished += UInt64(lines)
                    s.written += UInt64(lines) - lost
                    s.dropped += lost
                    s.unreported += lost + reannounce
                }
                batchFinished.withLock { batchFinished.broadcast() }
            }
        }
    }

    /// Writes `bytes` (retrying partial writes and EINTR); returns how many were written and the
    /// number of `write(2)` calls. Stops at the first error.
    private func writeAll(_ bytes: [UInt8]) -> (written: Int, calls: UInt64) {
        bytes.withUnsafeBytes { raw -> (Int, UInt64) in
            var offset = 0
            var calls: UInt64 = 0
            while offset < raw.count {
                let n = write(fd, raw.baseAddress! + offset, raw.count - offset)
                calls += 1
                if n > 0 {
                    offset += n
                } else if n < 0 && errno == EINTR {
                    continue
                } else if n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) {
                    var waiter = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
                    _ = poll(&waiter, 1, 1000)  // someone made it non-blocking: wait, on this thread only
                } else {
                    break
                }
            }
            return (offset, calls)
        }
    }
}
