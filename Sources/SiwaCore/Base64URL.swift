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
        var values: [UInt8] = []
        values.reserveCapacity(text.utf8.count)
        for c in text.utf8 {
            let v = decodeTable[Int(c)]
            if v == 0xFF { return nil }
            values.append(v)
        }
        let remainder = values.count % 4
        if remainder == 1 { return nil }
        var out: [UInt8] = []
        out.reserveCapacity(values.count / 4 * 3 + 2)
        var i = 0
        while i + 4 <= values.count {
            let n = UInt32(values[i]) << 18 | UInt32(values[i + 1]) << 12 | UInt32(values[i + 2]) << 6 | UInt32(values[i + 3])
            out.append(UInt8(truncatingIfNeeded: n >> 16))
            out.append(UInt8(truncatingIfNeeded: n >> 8))
            out.append(UInt8(truncatingIfNeeded: n))
            i += 4
        }
        switch remainder {
        case 2:
            guard values[i + 1] & 0x0F == 0 else { return nil }
            out.append(values[i] << 2 | values[i + 1] >> 4)
        case 3:
            guard values[i + 2] & 0x03 == 0 else { return nil }
            out.append(values[i] << 2 | values[i + 1] >> 4)
            out.append((values[i + 1] & 0x0F) << 4 | values[i + 2] >> 2)
        default:
            break
        }
        return out
    }
}
