import Foundation
import Logging

/// Turns one log event into one line ending in `\n`: a JSON object (`json`) or `key=value`
/// text (`text`). Pure formatting: no I/O, safe on any thread.
public struct LogLineFormatter: Sendable {
    /// The line format (`SIWA_LOG_FORMAT`, default `json`).
    public enum Format: String, Sendable { case json, text }

    /// The logger label written in every line.
    public let label: String
    /// JSON or text.
    public let format: Format

    public init(label: String, format: Format) {
        self.label = label
        self.format = format
    }

    /// One line for `message` at `level`, with `metadata` in key order, stamped `date`.
    public func line(level: Logger.Level, message: String, metadata: Logger.Metadata, date: Date = Date()) -> String {
        let time = Self.timestamp(date)
        switch format {
        case .json:
            var parts = [
                "\"ts\":\(Self.quote(time))", "\"level\":\(Self.quote(level.rawValue))",
                "\"logger\":\(Self.quote(label))", "\"msg\":\(Self.quote(message))",
            ]
            for key in metadata.keys.sorted() {
                parts.append("\(Self.quote(key)):\(Self.json(metadata[key]!))")
            }
            return "{" + parts.joined(separator: ",") + "}\n"
        case .text:
            var parts = [time, level.rawValue.uppercased(), label + ":", message]
            for key in metadata.keys.sorted() {
                parts.append("\(key)=\(metadata[key]!)")
            }
            return parts.joined(separator: " ") + "\n"
        }
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
