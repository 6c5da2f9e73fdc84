/// Lowercase hexadecimal text of bytes, and back.
public enum Hex {
    /// `[0x0a, 0xff]` → `"0aff"`.
    public static func encode(_ bytes: [UInt8]) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var out = [UInt8]()
        out.reserveCapacity(bytes.count * 2)
        for byte in bytes {
            out.append(digits[Int(byte >> 4)])
            out.append(digits[Int(byte & 0x0f)])
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// ASCII hex digits (either case, even count) → bytes; nil for anything else.
    public static func decode<C: Collection>(_ text: C) -> [UInt8]? where C.Element == UInt8 {
        guard text.count % 2 == 0 else { return nil }
        func nibble(_ c: UInt8) -> UInt8? {
            switch c {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): return c - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): return c - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): return c - UInt8(ascii: "A") + 10
            default: return nil
            }
        }
        var out: [UInt8] = []
        out.reserveCapacity(text.count / 2)
        var high: UInt8?
        for c in text {
            guard let n = nibble(c) else { return nil }
            if let h = high {
                out.append(h << 4 | n)
                high = nil
            } else {
                high = n
            }
        }
        return out
    }
}
