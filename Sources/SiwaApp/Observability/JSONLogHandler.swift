import Foundation
import Logging
import Synchronization

/// swift-log handler writing one line per event on stderr: a JSON object (`json`) or
/// `key=value` text (`text`). Only `main` bootstraps it; libraries just take a `Logger`.
public struct JSONLogHandler: LogHandler {
    public enum Format: String, Sendable { case json, text }

    public var logLevel: Logger.Level
    public var metadata: Logger.Metadata = [:]
    private let label: String
    private let format: Format
    private let sink: LogSink

    public init(label: String, level: Logger.Level, format: Format, sink: LogSink = .standardError) {
        self.label = label
        self.logLevel = level
        self.format = format
        self.sink = sink
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    public func log(event: LogEvent) {
        var fields = metadata
        if let extra = event.metadata { fields.merge(extra) { _, new in new } }
        let time = Self.timestamp()
        let line: String
        switch format {
        case .json:
            var parts = ["\"ts\":\(Self.quote(time))", "\"level\":\(Self.quote(event.level.rawValue))",
                         "\"logger\":\(Self.quote(label))", "\"msg\":\(Self.quote(event.message.description))"]
            for key in fields.keys.sorted() {
                parts.append("\(Self.quote(key)):\(Self.json(fields[key]!))")
            }
            line = "{" + parts.joined(separator: ",") + "}\n"
        case .text:
            var parts = [time, event.level.rawValue.uppercased(), label + ":", event.message.description]
            for key in fields.keys.sorted() {
                parts.append("\(key)=\(fields[key]!)")
            }
            line = parts.joined(separator: " ") + "\n"
        }
        sink.write(line)
    }

    /// RFC 3339 UTC with milliseconds, e.g. `2026-11-21T23:32:58.836Z` (gmtime_r: no shared
    /// formatter, safe on any thread).
    static func timestamp(_ date: Date = Date()) -> String {
        let seconds = date.timeIntervalSince1970
        var t = time_t(seconds.rounded(.down))
        let millis = Int((seconds - Double(t)) * 1000)
        var parts = tm()
        gmtime_r(&t, &parts)
        func pad(_ v: Int32, _ width: Int) -> String {
            let s = String(v)
            return String(repeating: "0", count: max(0, width - s.count)) + s
        }
        return "\(pad(parts.tm_year + 1900, 4))-\(pad(parts.tm_mon + 1, 2))-\(pad(parts.tm_mday, 2))T"
            + "\(pad(parts.tm_hour, 2)):\(pad(parts.tm_min, 2)):\(pad(parts.tm_sec, 2)).\(pad(Int32(millis), 3))Z"
    }

    private static func json(_ value: Logger.Metadata.Value) -> String {
        switch value {
        case .string(let s): return quote(s)
        case .stringConvertible(let c):
            if let n = c as? any BinaryInteger { return "\(n)" }
            if let d = c as? Double, d.isFinite { return "\(d)" }
            if let b = c as? Bool { return b ? "true" : "false" }
            return quote(c.description)
        case .array(let values): return "[" + values.map(json).joined(separator: ",") + "]"
        case .dictionary(let dict):
            return "{" + dict.keys.sorted().map { "\(quote($0)):\(json(dict[$0]!))" }.joined(separator: ",") + "}"
        }
    }

    static func quote(_ s: String) -> String {
        var out = "\""
        for scalar in s.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            default:
                if scalar.value < 0x20 {
                    out += String(format: "\\u%04x", scalar.value)
                } else {
                    out.unicodeScalars.append(scalar)
                }
            }
        }
        return out + "\""
    }
}

/// Where log lines go: stderr, or a buffer (tests grep captured logs for secrets).
public final class LogSink: Sendable {
    private let capturing: Bool
    private let buffer = Mutex<[String]>([])

    private init(capturing: Bool) {
        self.capturing = capturing
    }

    public static let standardError = LogSink(capturing: false)

    /// A sink that keeps lines in memory.
    public static func capturing() -> LogSink { LogSink(capturing: true) }

    /// Lines captured so far (empty for stderr).
    public var lines: [String] { buffer.withLock { $0 } }

    func write(_ line: String) {
        if capturing {
            buffer.withLock { $0.append(line) }
        } else {
            FileHandle.standardError.write(Data(line.utf8))
        }
    }
}

extension Logger.Level {
    /// Parses `SIWA_LOG_LEVEL` values.
    public init?(configValue: String) {
        self.init(rawValue: configValue.lowercased())
    }
}
