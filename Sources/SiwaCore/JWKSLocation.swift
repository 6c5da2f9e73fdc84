/// Which JWKS URLs are acceptable.
public enum JWKSLocation {
    /// nil if allowed; otherwise the problem. `https://` to any host; `http://` only to a loopback
    /// host (localhost, 127.x.x.x, [::1]); `file://` with an absolute path; anything else is rejected.
    /// Credentials in the URL (`user@host`), whitespace and control characters are rejected.
    public static func problem(with url: String) -> String? {
        guard !url.isEmpty else { return "must not be empty" }
        guard url.utf8.allSatisfy({ $0 > 0x20 && $0 != 0x7F }) else {
            return "must not contain whitespace or control characters"
        }
        let lower = url.lowercased()
        if lower.hasPrefix("file://") {
            let path = url.utf8.dropFirst(7)
            guard path.first == UInt8(ascii: "/"), path.count > 1 else {
                return "a file:// URL must name an absolute path (file:///path/to/keys.json)"
            }
            return nil
        }
        let isHTTPS = lower.hasPrefix("https://")
        let isHTTP = lower.hasPrefix("http://")
        guard isHTTPS || isHTTP else { return "must be an https:// URL (or http:// to a loopback host, or file://)" }
        let rest = url.utf8.dropFirst(isHTTPS ? 8 : 7)
        let authority = Array(rest.prefix(while: { $0 != UInt8(ascii: "/") && $0 != UInt8(ascii: "?") && $0 != UInt8(ascii: "#") }))
        guard !authority.contains(UInt8(ascii: "@")) else { return "must not contain credentials" }
        guard let host = hostOfAuthority(authority) else { return "has an invalid host or port" }
        if isHTTP, !IPAddress.isLoopbackHost(host) {
            return "http:// is only allowed to a loopback host (localhost, 127.0.0.1, [::1]); use https://"
        }
        return nil
    }

    /// Host (unbracketed) of `host[:port]` or `[v6][:port]`; nil if empty or malformed.
    static func hostOfAuthority(_ authority: [UInt8]) -> String? {
        guard !authority.isEmpty else { return nil }
        var hostPart: ArraySlice<UInt8>
        var portPart: ArraySlice<UInt8>?
        if authority.first == UInt8(ascii: "[") {
            guard let close = authority.firstIndex(of: UInt8(ascii: "]")) else { return nil }
            hostPart = authority[1..<close]
            guard IPAddress.parseIPv6(String(decoding: hostPart, as: UTF8.self)) != nil else { return nil }
            let after = authority[(close + 1)...]
            if !after.isEmpty {
                guard after.first == UInt8(ascii: ":") else { return nil }
                portPart = after.dropFirst()
            }
        } else {
            if let colon = authority.firstIndex(of: UInt8(ascii: ":")) {
                hostPart = authority[..<colon]
                portPart = authority[(colon + 1)...]
            } else {
                hostPart = authority[...]
            }
            guard !hostPart.isEmpty,
                hostPart.allSatisfy({ b in
                    (b >= 0x61 && b <= 0x7A) || (b >= 0x41 && b <= 0x5A) || IPAddress.isDecimal(b)
                        || b == UInt8(ascii: "-") || b == UInt8(ascii: ".")
                })
            else { return nil }
        }
        if let portPart, !portPart.isEmpty {
            guard IPAddress.parsePort(String(decoding: portPart, as: UTF8.self)) != nil else { return nil }
        }
        return String(decoding: hostPart, as: UTF8.self)
    }
}
