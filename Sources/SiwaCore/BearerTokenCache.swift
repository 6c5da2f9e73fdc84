/// A cached bearer token and when to renew it: before it expires, with `margin` seconds left
/// (at most a tenth of its lifetime), so no call goes out with a token about to die.
public struct BearerTokenCache: Sendable, Equatable {
    public struct Entry: Sendable, Equatable {
        public var token: String
        public var renewAt: Double
    }

    /// Seconds before expiry a token is renewed. Default 300.
    public var margin: Double
    public private(set) var entry: Entry?

    public init(margin: Double = 300) {
        self.margin = margin
    }

    /// The cached token while `now` is before its renewal time.
    public func valid(now: Double) -> String? {
        guard let entry, now < entry.renewAt else { return nil }
        return entry.token
    }

    /// Caches `token`, obtained at `now`, living `lifetime` seconds.
    public mutating func store(_ token: String, now: Double, lifetime: Double) {
        entry = Entry(token: token, renewAt: now + lifetime - min(margin, lifetime / 10))
    }

    /// Forgets the token (Apple refused it: 401).
    public mutating func invalidate() { entry = nil }
}
