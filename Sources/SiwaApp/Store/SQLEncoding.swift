import SiwaCrypto

/// The one place where Swift values become PostgreSQL text parameters and SQL time expressions.
enum SQLEncoding {
    /// `{"a","b\"c",NULL}`: a text array literal, every element quoted, `"` and `\` escaped
    /// (built on UTF-8 bytes). Bind it as `$n::text[]` (or `::bigint[]`, `::boolean[]`).
    static func array(_ values: [String?]) -> String {
        var out: [UInt8] = [UInt8(ascii: "{")]
        out.reserveCapacity(values.reduce(2) { $0 + ($1?.utf8.count ?? 4) + 3 })
        for (i, value) in values.enumerated() {
            if i > 0 { out.append(UInt8(ascii: ",")) }
            guard let value else {
                out.append(contentsOf: "NULL".utf8)
                continue
            }
            out.append(UInt8(ascii: "\""))
            appendEscaped(value, to: &out)
            out.append(UInt8(ascii: "\""))
        }
        out.append(UInt8(ascii: "}"))
        return String(decoding: out, as: UTF8.self)
    }

    /// `value`'s UTF-8 with `"` and `\` escaped, copied in runs between them (the claims JSON of
    /// a notification is ~600 bytes, most of it plain).
    private static func appendEscaped(_ value: String, to out: inout [UInt8]) {
        var value = value
        value.withUTF8 { bytes in
            var runStart = 0
            for (i, byte) in bytes.enumerated() where byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") {
                out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[runStart..<i]))
                out.append(UInt8(ascii: "\\"))
                runStart = i
            }
            out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[runStart...]))
        }
    }

    static func array(_ values: [String]) -> String { array(values.map { Optional($0) }) }
    static func array(_ values: [Int64?]) -> String { array(values.map { $0.map(String.init) }) }
    static func array(_ values: [Int64]) -> String { array(values.map { Optional(String($0)) }) }
    static func array(_ values: [Bool?]) -> String { array(values.map { $0.map(bool) }) }

    static func bool(_ value: Bool) -> String { value ? "true" : "false" }

    /// `\x0a1b…`: bytes as a `bytea` text parameter (hex format).
    static func bytea(_ bytes: [UInt8]) -> String { "\\x" + Hex.encode(bytes) }

    /// The bytes of a `bytea` column in hex output format (`\x…`); nil if it is not that.
    static func bytes(fromBytea text: String) -> [UInt8]? {
        let utf8 = Array(text.utf8)
        guard utf8.count >= 2, utf8[0] == UInt8(ascii: "\\"), utf8[1] == UInt8(ascii: "x") else { return nil }
        return Hex.decode(utf8.dropFirst(2))
    }

    /// SQL: a `bigint` expression of milliseconds since the epoch as `timestamptz`. Every
    /// operand has the exact type of a pg_catalog operator (float8 * interval), so no operator
    /// planted in `public` fits better.
    static func timestamp(millis expression: String) -> String {
        "(timestamptz 'epoch' + (\(expression))::float8 * interval '1 millisecond')"
    }

    /// SQL: a `timestamptz` expression as `bigint` milliseconds since the epoch (numeric *
    /// numeric: exact types, as above).
    static func millis(_ expression: String) -> String {
        "(extract(epoch FROM \(expression))::numeric * 1000::numeric)::bigint"
    }
}
