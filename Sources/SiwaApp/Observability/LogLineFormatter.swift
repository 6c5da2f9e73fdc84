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

    /// One line for `message` at `level`, with `metadata` in key order, stamped `date`. JSON is
    /// written as UTF-8 bytes into one buffer (the worker logs a line per event: string
    /// interpolation and joins cost more than the rest of the line).
    public func line(level: Logger.Level, message: String, metadata: Logger.Metadata, date: Date = Date()) -> String {
        switch format {
        case .json:
            var out: [UInt8] = []
            out.reserveCapacity(160 + message.utf8.count + 48 * metadata.count)
            out.append(contentsOf: #"{"ts":""#.utf8)
            Self.appendTimestamp(date, to: &out)
            out.append(contentsOf: #"","level":"#.utf8)
            Self.appendQuoted(level.rawValue, to: &out)
            out.append(contentsOf: #","logger":"#.utf8)
            Self.appendQuoted(label, to: &out)
            out.append(contentsOf: #","msg":"#.utf8)
            Self.appendQuoted(message, to: &out)
            for key in metadata.keys.sorted() {
                out.append(UInt8(ascii: ","))
                Self.appendQuoted(key, to: &out)
                out.append(UInt8(ascii: ":"))
                Self.appendJSON(metadata[key]!, to: &out)
            }
            out.append(contentsOf: "}\n".utf8)
            return String(decoding: out, as: UTF8.self)
        case .text:
            var parts = [Self.timestamp(date), level.rawValue.uppercased(), label + ":", message]
            for key in metadata.keys.sorted() {
                parts.append("\(key)=\(metadata[key]!)")
            }
            return parts.joined(separator: " ") + "\n"
        }
    }

    /// RFC 3339 UTC with milliseconds, e.g. `2026-11-21T23:32:58.836Z` (gmtime_r: no shared
    /// formatter, safe on any thread).
    static func timestamp(_ date: Date = Date()) -> String {
        var out: [UInt8] = []
        appendTimestamp(date, to: &out)
        return String(decoding: out, as: UTF8.self)
    }

    private static func appendTimestamp(_ date: Date, to out: inout [UInt8]) {
        let seconds = date.timeIntervalSince1970
        var t = time_t(seconds.rounded(.down))
        let millis = Int((seconds - Double(t)) * 1000)
        var parts = tm()
        gmtime_r(&t, &parts)
        appendDigits(Int(parts.tm_year) + 1900, width: 4, to: &out)
        out.append(UInt8(ascii: "-"))
        appendDigits(Int(parts.tm_mon) + 1, width: 2, to: &out)
        out.append(UInt8(ascii: "-"))
        appendDigits(Int(parts.tm_mday), width: 2, to: &out)
        out.append(UInt8(ascii: "T"))
        appendDigits(Int(parts.tm_hour), width: 2, to: &out)
        out.append(UInt8(ascii: ":"))
        appendDigits(Int(parts.tm_min), width: 2, to: &out)
        out.append(UInt8(ascii: ":"))
        appendDigits(Int(parts.tm_sec), width: 2, to: &out)
        out.append(UInt8(ascii: "."))
        appendDigits(millis, width: 3, to: &out)
        out.append(UInt8(ascii: "Z"))
    }

    /// `value` in decimal, zero-padded to `width` digits (wider values whole).
    private static func appendDigits(_ value: Int, width: Int, to out: inout [UInt8]) {
        var limit = 1
        for _ in 0..<width { limit *= 10 }
        guard value >= 0 && value < limit else {
            out.append(contentsOf: String(value).utf8)
            return
        }
        var divisor = limit / 10
        while divisor > 0 {
            out.append(UInt8(ascii: "0") + UInt8(value / divisor % 10))
            divisor /= 10
        }
    }

    private static func appendJSON(_ value: Logger.Metadata.Value, to out: inout [UInt8]) {
        switch value {
        case .string(let s): appendQuoted(s, to: &out)
        case .stringConvertible(let c):
            if let n = c as? any BinaryInteger {
                out.append(contentsOf: "\(n)".utf8)
            } else if let d = c as? Double, d.isFinite {
                out.append(contentsOf: "\(d)".utf8)
            } else if let b = c as? Bool {
                out.append(contentsOf: (b ? "true" : "false").utf8)
            } else {
                appendQuoted(c.description, to: &out)
            }
        case .array(let values):
            out.append(UInt8(ascii: "["))
            for (i, element) in values.enumerated() {
                if i > 0 { out.append(UInt8(ascii: ",")) }
                appendJSON(element, to: &out)
            }
            out.append(UInt8(ascii: "]"))
        case .dictionary(let dict):
            out.append(UInt8(ascii: "{"))
            for (i, key) in dict.keys.sorted().enumerated() {
                if i > 0 { out.append(UInt8(ascii: ",")) }
                appendQuoted(key, to: &out)
                out.append(UInt8(ascii: ":"))
                appendJSON(dict[key]!, to: &out)
            }
            out.append(UInt8(ascii: "}"))
        }
    }

    /// `s` as a JSON string: `"` and `\` escaped, control characters as `\n`, `\r`, `\t` or
    /// `\u00xx`; every other byte as it is (UTF-8 is valid JSON).
    private static func appendQuoted(_ s: String, to out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        for byte in s.utf8 {
            switch byte {
            case UInt8(ascii: "\""), UInt8(ascii: "\\"):
                out.append(UInt8(ascii: "\\"))
                out.append(byte)
            case UInt8(ascii: "\n"): out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "n")])
            case UInt8(ascii: "\r"): out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "r")])
            case UInt8(ascii: "\t"): out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "t")])
            case 0..<0x20:
                out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "u"), UInt8(ascii: "0"), UInt8(ascii: "0")])
                out.append(UInt8(ascii: "0") + byte >> 4)
                let low = byte & 0xF
                out.append(low < 10 ? UInt8(ascii: "0") + low : UInt8(ascii: "a") + low - 10)
            default:
                out.append(byte)
            }
        }
        out.append(UInt8(ascii: "\""))
    }
}
