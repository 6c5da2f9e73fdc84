import Glibc

/// Where event times are read: the Unix time put in a token's `iat` and `exp`, a webhook's
/// timestamp, the moment a notification's `iat` is checked against. The system's real-time clock
/// in the product, a fixed or moved one in tests. Never for a timeout, a pace or a budget: those
/// are on the `MonotonicClock`, which a change of the system time does not move.
public struct WallClock: Sendable {
    private let read: @Sendable () -> Duration

    /// A clock that reads `sinceEpoch`: the time since 1970-01-01T00:00:00Z.
    public init(sinceEpoch: @escaping @Sendable () -> Duration) {
        read = sinceEpoch
    }

    /// The system's real-time clock (`CLOCK_REALTIME`).
    public static let system = WallClock {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        return .seconds(ts.tv_sec) + .nanoseconds(ts.tv_nsec)
    }

    /// A clock that stays at `unixSeconds`.
    public static func fixed(unixSeconds: Int64) -> WallClock {
        WallClock { .seconds(unixSeconds) }
    }

    /// The time since the Unix epoch.
    public var sinceEpoch: Duration { read() }

    /// Whole seconds since the Unix epoch.
    public var unixSeconds: Int64 { sinceEpoch.components.seconds }

    /// Whole milliseconds since the Unix epoch.
    public var unixMilliseconds: Int64 {
        let (seconds, attoseconds) = sinceEpoch.components
        return seconds * 1000 + attoseconds / 1_000_000_000_000_000
    }
}
