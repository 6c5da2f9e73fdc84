import Foundation
import Logging
import Synchronization

/// swift-log handler writing one line per event (JSON or text, see `LogLineFormatter`) to a
/// `LogSink`: by default the stderr `LogWriter`, which never blocks the caller. Only `main`
/// bootstraps it; libraries just take a `Logger`.
public struct LineLogHandler: LogHandler {
    public typealias Format = LogLineFormatter.Format

    public var logLevel: Logger.Level
    public var metadata: Logger.Metadata = [:]
    private let formatter: LogLineFormatter
    private let sink: LogSink

    public init(label: String, level: Logger.Level, format: Format, sink: LogSink = .standardError) {
        self.formatter = LogLineFormatter(label: label, format: format)
        self.logLevel = level
        self.sink = sink
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    public func log(event: LogEvent) {
        var fields = metadata
        if let extra = event.metadata { fields.merge(extra) { _, new in new } }
        sink.write(formatter.line(level: event.level, message: event.message.description, metadata: fields))
    }
}

/// Where log lines go: a `LogWriter` (stderr by default), or a buffer (tests grep captured logs
/// for secrets).
public final class LogSink: Sendable {
    private let writer: LogWriter?
    private let buffer = Mutex<[String]>([])

    private init(writer: LogWriter?) {
        self.writer = writer
    }

    /// Lines go to `LogWriter.standardError`.
    public static let standardError = LogSink(writer: .standardError)

    /// A sink that keeps lines in memory.
    public static func capturing() -> LogSink { LogSink(writer: nil) }

    /// Lines go to `writer`.
    public static func writer(_ writer: LogWriter) -> LogSink { LogSink(writer: writer) }

    /// Lines captured so far (empty unless `capturing()`).
    public var lines: [String] { buffer.withLock { $0 } }

    func write(_ line: String) {
        if let writer {
            writer.enqueue(line)
        } else {
            buffer.withLock { $0.append(line) }
        }
    }
}

extension Logger.Level {
    /// Parses `SIWA_LOG_LEVEL` values.
    public init?(configValue: String) {
        self.init(rawValue: configValue.lowercased())
    }
}
