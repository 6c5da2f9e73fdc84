/// When Apple's key set is fetched, and what a request naming an unknown `kid` is answered.
///
/// A pure state machine (no I/O, no clock): the key store feeds it events with the time read from
/// a monotonic clock and carries out the `Effect`s it returns.
/// Guarantees:
/// - single flight: at most one fetch in flight, however many unknown `kid`s arrive;
/// - at most one fetch start per `minInterval` (a flood of made-up `kid`s costs one fetch per
///   interval);
/// - `401 unknown_kid` only when a fetch that started at or after the `kid` was first seen has
///   completed successfully and still lacks it (a genuinely new key is never refused), and then
///   on every retry until a later fetch finds it (a made-up `kid` gets at most one `503`);
/// - a `503` always comes with a fetch owed in the background, so the retry finds the key.
///
/// When each unknown `kid` was first seen is kept in `sightings`, bounded in size (the oldest is
/// evicted) and in time; a `kid` a fetch found is forgotten (`forget(_:)`).
public struct KeyFetchPolicy: Sendable, Equatable {
    /// One key set fetch.
    public struct Fetch: Sendable, Equatable {
        /// Increasing from 1.
        public var id: UInt64
        public var startedAt: Deadline

        public init(id: UInt64, startedAt: Deadline) {
            self.id = id
            self.startedAt = startedAt
        }
    }

    /// A fetch that finished.
    public struct Completion: Sendable, Equatable {
        public var fetch: Fetch
        public var finishedAt: Deadline
        public var succeeded: Bool
    }

    /// What the key store must do next.
    public enum Effect: Sendable, Equatable {
        case none
        /// Start this fetch now, off the request threads, and report `fetchCompleted`.
        case startFetch(Fetch)
        /// Call `timerFired` at this time.
        case scheduleTimer(at: Deadline)
    }

    /// The answer for a request whose `kid` is not among the known keys.
    public enum Answer: Sendable, Equatable {
        /// 401 `unknown_kid`: a fetch that began after the request arrived succeeded without it.
        case unknownKid
        /// Hold the request (not its thread) until this fetch completes, then decide again
        /// with `mayWait: false`.
        case waitFor(fetchID: UInt64)
        /// 503 `keys_unavailable` with `Retry-After` in seconds (>= 1).
        case unavailable(retryAfter: Int)
    }

    /// An answer and the effect to carry out.
    public struct Decision: Sendable, Equatable {
        public var answer: Answer
        public var effect: Effect
    }

    /// The result of an explicit refresh request (start-up load, TTL refresh).
    public enum RefreshAction: Sendable, Equatable {
        /// Start this fetch and wait for it.
        case start(Fetch)
        /// A fetch is already in flight: wait for it.
        case join(Fetch)
        /// The minimum interval has not passed since the last fetch start.
        case rateLimited
    }

    /// What must pass between two fetch starts.
    public let minInterval: Duration
    /// The fetch in flight, if any.
    public private(set) var inFlight: Fetch?
    /// The most recent completed fetch.
    public private(set) var lastCompletion: Completion?
    /// The most recent successful fetch: the key set in use is the one it fetched.
    public private(set) var lastSuccess: Completion?
    /// When each unknown `kid` was first seen.
    public private(set) var sightings: UnknownKidSightings
    /// When the most recent fetch started.
    public private(set) var lastStart: Deadline?
    /// A request was answered 503 and a fetch starting after it is owed.
    public private(set) var fetchOwed = false
    /// The time an armed timer fires, if one is armed.
    public private(set) var timerAt: Deadline?
    private var lastID: UInt64 = 0

    /// - Parameters:
    ///   - sightingCapacity: unknown `kid`s remembered at once (the oldest is evicted).
    ///   - sightingLifetime: how long an unknown `kid`'s first sighting is remembered.
    public init(
        minInterval: Duration, sightingCapacity: Int = UnknownKidSightings.defaultCapacity,
        sightingLifetime: Duration = UnknownKidSightings.defaultLifetime
    ) {
        self.minInterval = max(.zero, minInterval)
        sightings = UnknownKidSightings(capacity: sightingCapacity, lifetime: sightingLifetime)
    }

    /// The earliest time the next fetch may start.
    public var nextAllowedStart: Deadline? { lastStart.map { $0.adding(minInterval) } }

    /// True when no fetch is in flight and the minimum interval has passed.
    public func mayStart(now: Deadline) -> Bool {
        guard inFlight == nil else { return false }
        guard let next = nextAllowedStart else { return true }
        return now >= next
    }

    /// A request that arrived at `arrivedAt` names `kid`, which no known key has.
    /// `mayWait` is false when deciding again after a wait (the answer is then never `waitFor`).
    /// The first request naming `kid` records when it was seen; every later one (retries
    /// included) is decided against that time, so a fetch that began after it and succeeded
    /// without the `kid` makes every retry a 401.
    public mutating func unknownKid(_ kid: String, arrivedAt: Deadline, now: Deadline, mayWait: Bool = true) -> Decision {
        let seenAt = sightings.record(kid, at: arrivedAt, now: now)
        if let success = lastSuccess, success.fetch.startedAt >= seenAt {
            return Decision(answer: .unknownKid, effect: .none)
        }
        if let fetch = inFlight {
            if fetch.startedAt >= seenAt && mayWait {
                return Decision(answer: .waitFor(fetchID: fetch.id), effect: .none)
            }
            return unavailable(now: now)
        }
        if mayWait && mayStart(now: now) {
            let fetch = start(now: now)
            return Decision(answer: .waitFor(fetchID: fetch.id), effect: .startFetch(fetch))
        }
        return unavailable(now: now)
    }

    /// `kids` are known now (a fetch found them): their sightings are dropped.
    public mutating func forget<S: Sequence<String>>(_ kids: S) {
        sightings.forget(kids)
    }

    /// An explicit refresh (start-up load, TTL expiry).
    public mutating func refreshRequested(now: Deadline) -> RefreshAction {
        if let fetch = inFlight { return .join(fetch) }
        guard mayStart(now: now) else { return .rateLimited }
        return .start(start(now: now))
    }

    /// The fetch with `id` finished.
    public mutating func fetchCompleted(id: UInt64, succeeded: Bool, now: Deadline) -> Effect {
        guard let fetch = inFlight, fetch.id == id else { return .none }
        inFlight = nil
        lastCompletion = Completion(fetch: fetch, finishedAt: now, succeeded: succeeded)
        if succeeded { lastSuccess = lastCompletion }
        return followUp(now: now)
    }

    /// The armed timer fired (a little early is fine: it is armed again).
    public mutating func timerFired(now: Deadline) -> Effect {
        timerAt = nil
        return followUp(now: now)
    }

    // MARK: - Implementation

    private mutating func start(now: Deadline) -> Fetch {
        lastID += 1
        let fetch = Fetch(id: lastID, startedAt: now)
        inFlight = fetch
        lastStart = now
        fetchOwed = false  // this fetch starts after every request answered 503 so far
        return fetch
    }

    /// 503, and a fetch owed so that the retry finds the key.
    private mutating func unavailable(now: Deadline) -> Decision {
        fetchOwed = true
        let effect = followUp(now: now)
        let wait = (nextAllowedStart ?? now).timeLeft(at: now).components
        let retryAfter = Int(clamping: wait.seconds) + (wait.attoseconds > 0 ? 1 : 0) + 1
        return Decision(answer: .unavailable(retryAfter: max(1, retryAfter)), effect: effect)
    }

    /// Starts or schedules the owed fetch.
    private mutating func followUp(now: Deadline) -> Effect {
        guard fetchOwed, inFlight == nil else { return .none }  // a completing fetch calls again
        if mayStart(now: now) { return .startFetch(start(now: now)) }
        guard let next = nextAllowedStart else { return .none }
        if let at = timerAt, at <= next { return .none }
        timerAt = next
        return .scheduleTimer(at: next)
    }
}

/// When each unknown `kid` was first seen (on the monotonic clock), for `KeyFetchPolicy`. Bounded:
/// at most `capacity` entries (recording one more evicts the oldest) and none older than
/// `lifetime`. A `kid` seen again after its entry went is seen for the first time again (one
/// more `503` at most, or a fetch of its own).
public struct UnknownKidSightings: Sendable, Equatable {
    public static let defaultCapacity = 4096
    /// One day.
    public static let defaultLifetime = Duration.seconds(86_400)

    struct Entry: Sendable, Equatable {
        var kid: String
        var at: Deadline
    }

    public let capacity: Int
    public let lifetime: Duration
    private var firstSeen: [String: Deadline] = [:]
    /// Entries in recording order (so oldest first); an entry whose `at` no longer matches
    /// `firstSeen` was forgotten and is skipped.
    private var order: [Entry] = []
    private var head = 0

    public init(capacity: Int = defaultCapacity, lifetime: Duration = defaultLifetime) {
        self.capacity = max(1, capacity)
        self.lifetime = max(.zero, lifetime)
    }

    /// Unknown `kid`s remembered.
    public var count: Int { firstSeen.count }

    /// When `kid` was first seen, if it is remembered.
    public func firstSeen(_ kid: String) -> Deadline? { firstSeen[kid] }

    /// Records `kid` as seen at `at` unless it is remembered already; returns its first sighting.
    /// Drops entries older than `lifetime` (at `now`) and, when full, the oldest one.
    public mutating func record(_ kid: String, at: Deadline, now: Deadline) -> Deadline {
        dropExpired(now: now)
        if let seen = firstSeen[kid] { return seen }
        while firstSeen.count >= capacity, let oldest = popOldest() {
            firstSeen[oldest.kid] = nil
        }
        firstSeen[kid] = at
        order.append(Entry(kid: kid, at: at))
        compact()
        return at
    }

    /// Forgets `kids` (known now).
    public mutating func forget<S: Sequence<String>>(_ kids: S) {
        for kid in kids { firstSeen[kid] = nil }
        compact()
    }

    private mutating func dropExpired(now: Deadline) {
        while head < order.count {
            let entry = order[head]
            if firstSeen[entry.kid] == entry.at {
                guard now > entry.at.adding(lifetime) else { return }
                firstSeen[entry.kid] = nil
            }
            head += 1
        }
    }

    /// The oldest live entry, removed from `order`.
    private mutating func popOldest() -> Entry? {
        while head < order.count {
            let entry = order[head]
            head += 1
            if firstSeen[entry.kid] == entry.at { return entry }
        }
        return nil
    }

    /// Keeps `order` under twice the capacity: forgotten and popped entries are dropped.
    private mutating func compact() {
        guard order.count - head > 2 * capacity || (head > 64 && head * 2 > order.count) else { return }
        order = order[head...].filter { firstSeen[$0.kid] == $0.at }
        head = 0
    }
}
