/// Strict textual IP address parsing (internal helper for listen addresses and URL hosts).
enum IPAddress {
    /// Dotted quad, four decimal octets 0...255, no leading zeros (to avoid octal ambiguity).
    static func parseIPv4<S: StringProtocol>(_ text: S) -> [UInt8]? {
        let parts = text.utf8.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        guard parts.count == 4 else { return nil }
        var octets: [UInt8] = []
        for part in parts {
            guard (1...3).contains(part.count), part.allSatisfy(isDecimal) else { return nil }
            if part.count > 1, part.first == UInt8(ascii: "0") { return nil }
            let value = part.reduce(0) { $0 * 10 + Int($1 - UInt8(ascii: "0")) }
            guard value <= 255 else { return nil }
            octets.append(UInt8(value))
        }
        return octets
    }

    /// RFC 4291 text form (with optional `::` and trailing dotted quad), no zone id. 16 bytes.
    static func parseIPv6<S: StringProtocol>(_ text: S) -> [UInt8]? {
        let bytes = Array(text.utf8)
        guard !bytes.isEmpty, bytes.count <= 45 else { return nil }
        // Locate "::".
        var doubleColon: Int?
        var i = 0
        while i + 1 < bytes.count {
            if bytes[i] == UInt8(ascii: ":"), bytes[i + 1] == UInt8(ascii: ":") {
                if doubleColon != nil { return nil }
                doubleColon = i
                i += 2
            } else {
                i += 1
            }
        }
        func groups(_ slice: ArraySlice<UInt8>, allowIPv4Tail: Bool) -> [UInt8]? {
            if slice.isEmpty { return [] }
            let parts = slice.split(separator: UInt8(ascii: ":"), omittingEmptySubsequences: false)
            var out: [UInt8] = []
            for (index, part) in parts.enumerated() {
                if allowIPv4Tail, index == parts.count - 1, part.contains(UInt8(ascii: ".")) {
                    guard let v4 = parseIPv4(String(decoding: part, as: UTF8.self)) else { return nil }
                    out.append(contentsOf: v4)
                    continue
                }
                guard (1...4).contains(part.count) else { return nil }
                var value = 0
                for b in part {
                    guard let d = hexValue(b) else { return nil }
                    value = value << 4 | d
                }
                out.append(UInt8(value >> 8))
                out.append(UInt8(value & 0xFF))
            }
            return out
        }
        if let dc = doubleColon {
            guard let head = groups(bytes[..<dc], allowIPv4Tail: false),
                let tail = groups(bytes[(dc + 2)...], allowIPv4Tail: true),
                head.count + tail.count <= 14
            else { return nil }
            return head + [UInt8](repeating: 0, count: 16 - head.count - tail.count) + tail
        }
        guard let all = groups(bytes[...], allowIPv4Tail: true), all.count == 16 else { return nil }
        return all
    }

    /// True for 127.0.0.0/8, ::1, ::ffff:127.0.0.0/104 and "localhost" (case-insensitive).
    /// `host` is unbracketed.
    static func isLoopbackHost<S: StringProtocol>(_ host: S) -> Bool {
        if host.lowercased() == "localhost" { return true }
        if let v4 = parseIPv4(host) { return v4[0] == 127 }
        if let v6 = parseIPv6(host) {
            if v6 == [UInt8](repeating: 0, count: 15) + [1] { return true }
            if v6.prefix(12).elementsEqual([UInt8](repeating: 0, count: 10) + [0xFF, 0xFF]) { return v6[12] == 127 }
        }
        return false
    }

    /// True for 0.0.0.0 and ::.
    static func isUnspecified<S: StringProtocol>(_ host: S) -> Bool {
        if let v4 = parseIPv4(host) { return v4.allSatisfy { $0 == 0 } }
        if let v6 = parseIPv6(host) { return v6.allSatisfy { $0 == 0 } }
        return false
    }

    static func isDecimal(_ b: UInt8) -> Bool { b >= UInt8(ascii: "0") && b <= UInt8(ascii: "9") }

    static func hexValue(_ b: UInt8) -> Int? {
        switch b {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return Int(b - UInt8(ascii: "0"))
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return Int(b - UInt8(ascii: "a") + 10)
        case UInt8(ascii: "A")...UInt8(ascii: "F"): return Int(b - UInt8(ascii: "A") + 10)
        default: return nil
        }
    }

    /// Decimal port 0...65535 (1 to 5 digits).
    static func parsePort<S: StringProtocol>(_ text: S) -> UInt16? {
        let utf8 = text.utf8
        guard (1...5).contains(utf8.count), utf8.allSatisfy(isDecimal) else { return nil }
        let value = utf8.reduce(0) { $0 * 10 + Int($1 - UInt8(ascii: "0")) }
        return value <= 65_535 ? UInt16(value) : nil
    }
}
