/// A host and port to listen on: `0.0.0.0:8080`, `127.0.0.1:0`, `[::1]:9090`, `localhost:80`.
public struct ListenAddress: Sendable, Equatable, CustomStringConvertible {
    /// IPv4 dotted quad, IPv6 address without brackets (lowercased), or `localhost`.
    public var host: String
    public var port: UInt16

    public init(host: String, port: UInt16) {
        self.host = host
        self.port = port
    }

    /// Parses `host:port` where host is an IPv4 dotted quad, a bracketed IPv6 address or
    /// `localhost` (case-insensitive), and port is 0...65535. Returns nil otherwise.
    public static func parse(_ text: String) -> ListenAddress? {
        let utf8 = Array(text.utf8)
        if utf8.first == UInt8(ascii: "[") {
            guard let close = utf8.firstIndex(of: UInt8(ascii: "]")),
                close + 1 < utf8.count, utf8[close + 1] == UInt8(ascii: ":")
            else { return nil }
            let host = String(decoding: utf8[1..<close], as: UTF8.self)
            guard IPAddress.parseIPv6(host) != nil,
                let port = IPAddress.parsePort(String(decoding: utf8[(close + 2)...], as: UTF8.self))
            else { return nil }
            return ListenAddress(host: host.lowercased(), port: port)
        }
        guard let colon = utf8.lastIndex(of: UInt8(ascii: ":")) else { return nil }
        let host = String(decoding: utf8[..<colon], as: UTF8.self)
        guard let port = IPAddress.parsePort(String(decoding: utf8[(colon + 1)...], as: UTF8.self)) else { return nil }
        if host.lowercased() == "localhost" { return ListenAddress(host: "localhost", port: port) }
        guard IPAddress.parseIPv4(host) != nil else { return nil }
        return ListenAddress(host: host, port: port)
    }

    /// True for 127.0.0.0/8, ::1 (also ::ffff:127.x.x.x) and localhost.
    public var isLoopback: Bool { IPAddress.isLoopbackHost(host) }

    /// True for the wildcard addresses 0.0.0.0 and ::.
    public var isUnspecified: Bool { IPAddress.isUnspecified(host) }

    /// `host:port`, with IPv6 hosts in brackets.
    public var description: String {
        host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)"
    }
}
