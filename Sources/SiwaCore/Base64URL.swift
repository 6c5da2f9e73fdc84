/// Unpadded base64url (RFC 4648 §5), as used by JWS and JWK.
public enum Base64URL {
    private static let alphabet: [UInt8] = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)

    private static let decodeTable: [UInt8] = {
        var table = [UInt8](repeating: 0xFF, count: 256)
        for (i, c) in alphabet.enumerated() { table[Int(c)] = UInt8(i) }
        return table
    }()

    /// Encodes `bytes` without padding.
    public static func encode<S: Sequence>(_ bytes: S) -> String where S.Element == UInt8 {
        let input = Array(bytes)
        var out: [UInt8] = []
        out.reserveCapacity((input.count * 4 + 2) / 3)
        var i = 0
        while i + 3 <= input.count {
            let n = UInt32(input[i]) << 16 | UInt32(input[i + 1]) << 8 | UInt32(input[i + 2])
            out.append(alphabet[Int((n >> 18) & 63)])
            out.append(alphabet[Int((n >> 12) & 63)])
            out.append(alphabet[Int((n >> 6) & 63)])
            out.append(alphabet[Int(n & 63)])
            i += 3
        }
        switch input.count - i {
        case 1:
            let n = UInt32(input[i]) << 16
            out.append(alphabet[Int((n >> 18) & 63)])
            out.append(alphabet[Int((n >> 12) & 63)])
        case 2:
            let n = UInt32(input[i]) << 16 | UInt32(input[i + 1]) << 8
            out.append(alphabet[Int((n >> 18) & 63)])
            out.append(alphabet[Int((n >> 12) & 63)])
            out.append(alphabet[Int((n >> 6) & 63)])
        default:
            break
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// Strict decoding: alphabet `A-Z a-z 0-9 - _` only; no `=` padding, no whitespace;
    /// length % 4 != 1; unused trailing bits must be zero. Returns nil otherwise.
    /// The empty string decodes to no bytes.
    public static func decode<S: StringProtocol>(_ text: S) -> [UInt8]? {
        if let decoded = text.utf8.withContiguousStorageIfAvailable({ decode(bytes: $0) }) { return decoded }
        return Array(text.utf8).withUnsafeBufferPointer { decode(bytes: $0) }
    }

    /// `decode(_:)` on the encoded text's bytes (e.g. a segment of a token, without making a
    /// `String` of it first). One pass, four characters at a time, written straight into the
    /// result's storage (no append per byte: a token's ~1 KB is decoded on every request).
    public static func decode(bytes: UnsafeBufferPointer<UInt8>) -> [UInt8]? {
        let remainder = bytes.count % 4
        if remainder == 1 { return nil }
        let whole = bytes.count - remainder
        let capacity = whole / 4 * 3 + (remainder == 0 ? 0 : remainder - 1)
        var valid = true
        let decoded = decodeTable.withUnsafeBufferPointer { table in
            [UInt8](unsafeUninitializedCapacity: capacity) { out, initialized in
                var i = 0, o = 0
                while i < whole {
                    let a = table[Int(bytes[i])], b = table[Int(bytes[i + 1])]
                    let c = table[Int(bytes[i + 2])], d = table[Int(bytes[i + 3])]
                    // Valid values are 0...63; the table marks anything else 0xFF.
                    if (a | b | c | d) & 0xC0 != 0 {
                        valid = false
                        break
                    }
                    let n = UInt32(a) << 18 | UInt32(b) << 12 | UInt32(c) << 6 | UInt32(d)
                    out[o] = UInt8(truncatingIfNeeded: n >> 16)
                    out[o + 1] = UInt8(truncatingIfNeeded: n >> 8)
                    out[o + 2] = UInt8(truncatingIfNeeded: n)
                    i += 4
                    o += 3
                }
                if valid {
                    switch remainder {
                    case 2:
                        let a = table[Int(bytes[i])], b = table[Int(bytes[i + 1])]
                        if a != 0xFF, b != 0xFF, b & 0x0F == 0 {
                            out[o] = a << 2 | b >> 4
                            o += 1
                        } else {
                            valid = false
                        }
                    case 3:
                        let a = table[Int(bytes[i])], b = table[Int(bytes[i + 1])], c = table[Int(bytes[i + 2])]
                        if a != 0xFF, b != 0xFF, c != 0xFF, c & 0x03 == 0 {
                            out[o] = a << 2 | b >> 4
                            out[o + 1] = (b & 0x0F) << 4 | c >> 2
                            o += 2
                        } else {
                            valid = false
                        }
                    default:
                        break
                    }
                }
                // Only the bytes written count (a failed decode returns nil anyway).
                initialized = o
            }
        }
        return valid ? decoded : nil
    }
}
