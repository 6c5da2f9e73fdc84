/// `SIWA_TRUSTED_PROXIES`: the proxies whose `X-Forwarded-For` is believed (IP addresses or
/// CIDR blocks, comma-separated; default none). Pure: the console passes the TCP peer and the
/// header's entries.
public struct TrustedProxies: Sendable, Equatable {
    struct Network: Sendable, Equatable {
        /// 4 bytes (IPv4) or 16 (IPv6).
        var bytes: [UInt8]
        var prefix: Int

        func contains(_ address: [UInt8]) -> Bool {
            guard address.count == bytes.count else { return false }
            var left = prefix
            for (a, b) in zip(address, bytes) where left > 0 {
                let mask: UInt8 = left >= 8 ? 0xFF : ~(0xFF >> UInt8(left))
                if a & mask != b & mask { return false }
                left -= 8
            }
            return true
        }
    }

    var networks: [Network]

    public static let none = TrustedProxies(networks: [])

    public var isEmpty: Bool { networks.isEmpty }

    /// `10.0.0.1, 10.1.0.0/16, fd00::/8`; an empty text is none.
    public static func parse(_ text: String) throws(ConfigurationError) -> TrustedProxies {
        var networks: [Network] = []
        for item in text.split(separator: ",") {
            let entry = item.trimmingSpaces
            if entry.isEmpty { continue }
            let parts = entry.split(separator: "/", maxSplits: 1, omittingEmptySubsequences: false)
            guard let bytes = address(parts[0]) else {
                throw ConfigurationError(variable: "SIWA_TRUSTED_PROXIES", problem: "\(entry) is not an IP address or CIDR block")
            }
            var prefix = bytes.count * 8
            if parts.count == 2 {
                guard let p = Int(parts[1]), parts[1].utf8.allSatisfy(IPAddress.isDecimal), (0...bytes.count * 8).contains(p) else {
                    throw ConfigurationError(
                        variable: "SIWA_TRUSTED_PROXIES", problem: "\(entry): the prefix length must be 0-\(bytes.count * 8)")
                }
                prefix = p
            }
            networks.append(Network(bytes: bytes, prefix: prefix))
        }
        return TrustedProxies(networks: networks)
    }

    /// True when `address` (an IP address's text) is in one of the networks.
    public func contains(_ address: String) -> Bool {
        guard let bytes = Self.address(address) else { return false }
        return networks.contains { $0.contains(bytes) }
    }

    /// The address a request came from: the TCP peer, unless the peer is a trusted proxy; then
    /// the right-most address of `X-Forwarded-For` (`forwardedFor`: the header's values in
    /// order) that is not a trusted proxy. Entries left of it were written by the client and
    /// prove nothing. An entry that is not an IP address ends the walk at the proxy that wrote it.
    public func clientAddress(peer: String?, forwardedFor: [String]) -> String? {
        guard let peer, contains(peer) else { return peer }
        var client = peer
        let hops = forwardedFor.flatMap { $0.split(separator: ",") }.map(\.trimmingSpaces)
        for hop in hops.reversed() {
            guard Self.address(hop) != nil else { return client }
            client = hop
            if !contains(hop) { return hop }
        }
        return client
    }

    /// An address's bytes: IPv4 as 4 bytes, IPv4-mapped IPv6 (`::ffff:a.b.c.d`, as a dual-stack
    /// listener reports IPv4 peers) as its IPv4 address.
    static func address<S: StringProtocol>(_ text: S) -> [UInt8]? {
        if let v4 = IPAddress.parseIPv4(text) { return v4 }
        guard let v6 = IPAddress.parseIPv6(text) else { return nil }
        if v6.prefix(12).elementsEqual([UInt8](repeating: 0, count: 10) + [0xFF, 0xFF]) { return Array(v6.suffix(4)) }
        return v6
    }
}
