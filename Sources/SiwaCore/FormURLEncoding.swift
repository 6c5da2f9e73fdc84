/// `application/x-www-form-urlencoded` bodies (WHATWG URL standard §5): what Apple's
/// `/auth/token` and `/auth/revoke` take.
public enum FormURLEncoding {
    /// The MIME type, for a `Content-Type` header.
    public static let contentType = "application/x-www-form-urlencoded"

    /// `name=value&...` in the given order. Bytes other than `A-Z a-z 0-9 * - . _` are
    /// percent-encoded (uppercase hex); a space becomes `+`.
    public static func encode(_ fields: [(String, String)]) -> String {
        var out: [UInt8] = []
        for (i, (name, value)) in fields.enumerated() {
            if i > 0 { out.append(UInt8(ascii: "&")) }
            append(name, to: &out)
            out.append(UInt8(ascii: "="))
            append(value, to: &out)
        }
        return String(decoding: out, as: UTF8.self)
    }

    private static let hexDigits = Array("0123456789ABCDEF".utf8)

    private static func append(_ text: String, to out: inout [UInt8]) {
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
                UInt8(ascii: "0")...UInt8(ascii: "9"),
                UInt8(ascii: "*"), UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"):
                out.append(byte)
            case UInt8(ascii: " "):
                out.append(UInt8(ascii: "+"))
            default:
                out.append(UInt8(ascii: "%"))
                out.append(hexDigits[Int(byte >> 4)])
                out.append(hexDigits[Int(byte & 0x0F)])
            }
        }
    }

    /// Parses a body into its fields in order (`+` is a space; empty segments between `&` are
    /// skipped; a segment without `=` is a name with an empty value). nil for a `%` not followed
    /// by two hex digits or a name/value that is not valid UTF-8.
    public static func decode(_ body: [UInt8]) -> [(String, String)]? {
        var fields: [(String, String)] = []
        for segment in body.split(separator: UInt8(ascii: "&"), omittingEmptySubsequences: true) {
            let parts = segment.split(separator: UInt8(ascii: "="), maxSplits: 1, omittingEmptySubsequences: false)
            guard let name = unescape(parts[0]),
                let value = parts.count > 1 ? unescape(parts[1]) : ""
            else { return nil }
            fields.append((name, value))
        }
        return fields
    }

    /// `decode` into a dictionary; nil if malformed or if a name repeats (ambiguous).
    public static func decodeUnique(_ body: [UInt8]) -> [String: String]? {
        guard let fields = decode(body) else { return nil }
        var out: [String: String] = [:]
        for (name, value) in fields {
            guard out.updateValue(value, forKey: name) == nil else { return nil }
        }
        return out
    }

    private static func unescape(_ bytes: ArraySlice<UInt8>) -> String? {
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count)
        var i = bytes.startIndex
        while i < bytes.endIndex {
            let b = bytes[i]
            if b == UInt8(ascii: "+") {
                out.append(UInt8(ascii: " "))
                i += 1
            } else if b == UInt8(ascii: "%") {
                guard i + 2 < bytes.endIndex,
                    let hi = hexValue(bytes[i + 1]), let lo = hexValue(bytes[i + 2])
                else { return nil }
                out.append(hi << 4 | lo)
                i += 3
            } else {
                out.append(b)
                i += 1
            }
        }
        return String(validating: out, as: UTF8.self)
    }

    private static func hexValue(_ c: UInt8) -> UInt8? {
        switch c {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return c - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return c - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): return c - UInt8(ascii: "A") + 10
        default: return nil
        }
    }
}
