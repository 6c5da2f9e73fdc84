/// A cached bearer token and when to renew it: before it expires, with `margin` left (at most a
/// tenth of its lifetime), so no call goes out with a token about to die. Its moments are the
/// wall clock's time since the Unix epoch (`WallClock.sinceEpoch`), the clock the token's
/// issuer dates it by.
public struct BearerTokenCache: Sendable, Equatable {
    public struct Entry: Sendable, Equatable {
        public var token: String
        public var renewAt: Duration
    }

    /// How long before expiry a token is renewed. Default 300 s.
    public var margin: Duration
    public private(set) var entry: Entry?

    public init(margin: Duration = .seconds(300)) {
        self.margin = margin
    }

    /// The cached token while `now` is before its renewal time.
    public func valid(now: Duration) -> String? {
        guard let entry, now < entry.renewAt else { return nil }
        return entry.token
    }

    /// Caches `token`, obtained at `now`, living `lifetime`.
    public mutating func store(_ token: String, now: Duration, lifetime: Duration) {
        entry = Entry(token: token, renewAt: now + lifetime - min(margin, lifetime / 10))
    }

    /// Forgets the token (Apple refused it: 401).
    public mutating func invalidate() { entry = nil }
}
