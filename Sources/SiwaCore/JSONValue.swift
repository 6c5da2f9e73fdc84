/// A parsed JSON value. Numbers are stored as `Double`.
public enum JSONValue: Sendable, Equatable {
    case null
    case bool(Bool)
    case number(Double)
    case string(String)
    case array([JSONValue])
    case object([String: JSONValue])

    /// The string, only for `.string`.
    public var stringValue: String? {
        if case .string(let s) = self { return s }
        return nil
    }

    /// The members, only for `.object`.
    public var objectValue: [String: JSONValue]? {
        if case .object(let o) = self { return o }
        return nil
    }

    /// The bool, only for `.bool`.
    public var boolValue: Bool? {
        if case .bool(let b) = self { return b }
        return nil
    }

    /// One of Apple's true/false flags (`is_private_email`, `email_verified`): a boolean, or the
    /// string `"true"` / `"false"` as Apple sends them in tokens; nil for anything else.
    public var appleFlag: Bool? {
        switch self {
        case .bool(let b): return b
        case .string("true"): return true
        case .string("false"): return false
        default: return nil
        }
    }

    /// The elements, only for `.array`.
    public var arrayValue: [JSONValue]? {
        if case .array(let a) = self { return a }
        return nil
    }

    /// The number as an integer, only for a `.number` that is integral and whose magnitude is at most 2^53.
    public var int64Value: Int64? {
        guard case .number(let d) = self else { return nil }
        return JSONValue.exactInteger(d)
    }

    /// The member named `key`; nil unless this is an object holding that key.
    public subscript(key: String) -> JSONValue? {
        if case .object(let o) = self { return o[key] }
        return nil
    }

    static let maxSafeInteger: Double = 9_007_199_254_740_992  // 2^53

    static func exactInteger(_ d: Double) -> Int64? {
        guard d.isFinite, d.rounded(.towardZero) == d, d.magnitude <= maxSafeInteger else { return nil }
        return Int64(d)
    }

    /// Compact JSON text: object keys sorted by their UTF-8 bytes, strings escaped per RFC 8259
    /// (control characters as `\u00XX`). Never emits `\u0000`: a NUL character in a programmatically
    /// built string is written as U+FFFD. Non-finite numbers (never produced by the parser) are written as `null`.
    public func serialized() -> String {
        var out: [UInt8] = []
        out.reserveCapacity(64)
        write(into: &out)
        return String(decoding: out, as: UTF8.self)
    }

    func write(into out: inout [UInt8]) {
        switch self {
        case .null:
            out.append(contentsOf: "null".utf8)
        case .bool(let b):
            out.append(contentsOf: (b ? "true" : "false").utf8)
        case .number(let d):
            JSONValue.writeNumber(d, into: &out)
        case .string(let s):
            JSONValue.writeString(s, into: &out)
        case .array(let a):
            out.append(UInt8(ascii: "["))
            for (i, v) in a.enumerated() {
                if i > 0 { out.append(UInt8(ascii: ",")) }
                v.write(into: &out)
            }
            out.append(UInt8(ascii: "]"))
        case .object(let o):
            out.append(UInt8(ascii: "{"))
            let keys = o.keys.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) }
            for (i, k) in keys.enumerated() {
                if i > 0 { out.append(UInt8(ascii: ",")) }
                JSONValue.writeString(k, into: &out)
                out.append(UInt8(ascii: ":"))
                o[k]!.write(into: &out)
            }
            out.append(UInt8(ascii: "}"))
        }
    }

    static func writeNumber(_ d: Double, into out: inout [UInt8]) {
        guard d.isFinite else {
            out.append(contentsOf: "null".utf8)
            return
        }
        if let i = exactInteger(d) {
            out.append(contentsOf: String(i).utf8)
        } else {
            // Swift's description is the shortest round-tripping form, e.g. "0.1", "1e+100", "5e-324".
            out.append(contentsOf: d.description.utf8)
        }
    }

    private static let hexDigits: [UInt8] = Array("0123456789abcdef".utf8)

    static func writeString(_ s: String, into out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        for byte in s.utf8 {
            switch byte {
            case UInt8(ascii: "\""):
                out.append(UInt8(ascii: "\\"))
                out.append(UInt8(ascii: "\""))
            case UInt8(ascii: "\\"):
                out.append(UInt8(ascii: "\\"))
                out.append(UInt8(ascii: "\\"))
            case 0x00:
                out.append(contentsOf: "\\ufffd".utf8)
            case 0x01..<0x20:
                out.append(contentsOf: "\\u00".utf8)
                out.append(hexDigits[Int(byte >> 4)])
                out.append(hexDigits[Int(byte & 0x0F)])
            default:
                out.append(byte)
            }
        }
        out.append(UInt8(ascii: "\""))
    }

    /// `text` as a quoted JSON string literal (same escaping as `serialized()`).
    public static func quoted(_ text: String) -> String {
        var out: [UInt8] = []
        writeString(text, into: &out)
        return String(decoding: out, as: UTF8.self)
    }
}
