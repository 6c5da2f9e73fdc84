import Foundation
import Logging
import SiwaCore
import SiwaCrypto
import SiwaFetch
import SiwaRuntime
import Synchronization

/// Apple's signing keys, by `kid`: fetched from `SIWA_JWKS_URL` (libcurl), cached in memory and
/// persisted (the last good set survives a restart while Apple is unreachable), refreshed when the
/// TTL runs out (`Cache-Control: max-age`, else an hour) and when a token names an unknown `kid`.
///
/// Fetches run on a thread of their own, one at a time, at most one start per `minRefreshInterval`
/// (`KeyFetchPolicy` decides; a flood of made-up `kid`s cannot become a flood of fetches), and no
/// lock is held while one runs: known `kid`s are never delayed. An unknown `kid` is refused (401)
/// only after a fetch that began after it was first seen (and on every retry until a fetch finds
/// it); otherwise the request waits for the fetch it triggered, or is answered 503 with a fetch
/// owed so that the retry finds the key. A failed refresh keeps the old keys; while fetches
/// fail, the scheduled refresh backs off (`KeyRefreshBackoff`) and only the change of state
/// (failing, recovered) is logged at warning/notice level.
public final class KeyStore: Sendable {
    /// Where the last good key set is kept between runs.
    public struct Persistence: Sendable {
        public var load: @Sendable () -> String?
        public var save: @Sendable (String) -> Void
        public init(load: @escaping @Sendable () -> String?, save: @escaping @Sendable (String) -> Void) {
            self.load = load
            self.save = save
        }
    }

    /// What `check(kid:signingInput:signature:arrivedAt:mayWait:)` found.
    public enum Lookup: Sendable {
        /// The key was found (or definitely not found): the signature check result.
        case checked(SignatureCheck)
        /// 503 `keys_unavailable`; ask the client to retry after this many seconds.
        case unavailable(retryAfter: Int)
        /// A fetch that began after the request arrived is running: `wait` for it, then check
        /// again with `mayWait: false`.
        case wait(Ticket)
    }

    /// A fetch a request waits for.
    public struct Ticket: Sendable, Equatable {
        let fetchID: UInt64
    }

    /// The outcome of a fetch, handed to whoever waited for it.
    enum FetchResult: Sendable {
        case succeeded
        case failed(KeyStoreError)
        case timedOut
    }

    /// What a waiter waits for: a fetch (and every earlier one), or a policy timer (answered
    /// only at its deadline).
    enum Awaited: Sendable {
        case fetch(UInt64)
        case timer

        func answered(byFetch id: UInt64) -> Bool {
            if case .fetch(let awaited) = self { return awaited <= id }
            return false
        }
    }

    struct State {
        var keys: [String: RSAPublicKey] = [:]
        var loaded = false
        var expiresAt: Deadline?
        var policy: KeyFetchPolicy
        var backoff: KeyRefreshBackoff
        var lastError: KeyStoreError?
    }

    public let url: String
    public let minRefreshInterval: Duration
    /// How long one fetch may take in all (connect 5 s at most). Default 10 s.
    public let fetchTimeout: Duration
    /// Largest key set response accepted. 256 KiB.
    public static let maxResponseBytes = 256 * 1024
    /// TTL when the key set response has no `Cache-Control: max-age`.
    public static let defaultTTL = Duration.seconds(3600)
    private let extraKeys: [String: RSAPublicKey]
    private let persistence: Persistence?
    private let state: Mutex<State>
    private let logger: Logger
    private let metrics: Metrics?
    private let clock: any MonotonicClock
    /// Who waits for a fetch, and the policy's timers.
    private let waiters: DeadlineWaiters<Awaited, FetchResult>

    /// - Parameters:
    ///   - extraKeys: keys trusted besides the fetched set (the `--dev` key).
    ///   - minRefreshInterval: the least time between two fetch starts. Default 10 s.
    ///   - refreshBackoffLimit: the longest wait between two scheduled refreshes while fetches
    ///     fail (the first wait is `minRefreshInterval`, at least 1 s, then doubling). Default 5 min.
    public init(
        url: String, extraKeys: [String: RSAPublicKey] = [:], minRefreshInterval: Duration = .seconds(10),
        fetchTimeout: Duration = .seconds(10), refreshBackoffLimit: Duration = KeyRefreshBackoff.defaultMaxDelay,
        persistence: Persistence? = nil, logger: Logger, metrics: Metrics? = nil,
        clock: any MonotonicClock = SystemClock.shared
    ) {
        self.url = url
        self.fetchTimeout = fetchTimeout
        self.extraKeys = extraKeys
        self.minRefreshInterval = minRefreshInterval
        self.persistence = persistence
        self.logger = logger
        self.metrics = metrics
        self.clock = clock
        waiters = DeadlineWaiters(name: "siwa-keys-waits", timedOut: .timedOut, clock: clock)
        state = Mutex(
            State(
                policy: KeyFetchPolicy(minInterval: minRefreshInterval),
                backoff: KeyRefreshBackoff(baseDelay: max(.seconds(1), minRefreshInterval), maxDelay: refreshBackoffLimit)))
    }

    /// The store's monotonic clock: what `arrivedAt` is measured with.
    public func now() -> Deadline { clock.now }

    /// True once a key set is loaded (or extra keys are trusted).
    public var isLoaded: Bool {
        !extraKeys.isEmpty || state.withLock { $0.loaded }
    }

    /// Number of fetched keys held.
    public var keyCount: Int { state.withLock { $0.keys.count } }

    /// Time until the TTL runs out (nil before the first successful fetch).
    public var expiresIn: Duration? {
        let now = clock.now
        return state.withLock { $0.expiresAt.map { $0.timeLeft(at: now) } }
    }

    /// True when the scheduled refresh should run now: the TTL has run out (or, while fetches
    /// fail, the backoff has passed) and a fetch may start (none in flight, and the minimum
    /// interval has passed).
    public var isRefreshDue: Bool {
        let now = clock.now
        return state.withLock { s in
            s.policy.mayStart(now: now) && s.backoff.isDue(now: now, expiresAt: s.expiresAt)
        }
    }

    /// Key set fetches failed in a row (0 while they succeed).
    public var failedFetches: Int { state.withLock { $0.backoff.failures } }

    /// Loads the key set: fetched, or else the persisted last good one. Throws when neither works.
    public func load() throws {
        do {
            try refresh()
        } catch {
            guard let body = persistence?.load(), let keys = try? Self.parse(Array(body.utf8), logger: logger) else {
                throw error
            }
            state.withLock {
                $0.keys = keys
                $0.loaded = true
            }
            logger.warning("using the persisted key set until Apple's can be fetched", metadata: ["keys": "\(keys.count)"])
        }
    }

    /// Fetches the key set now (or joins the fetch in flight) and waits for it. Blocks the
    /// calling thread: not for request threads. Throws when it cannot be fetched, holds no usable
    /// key, or the minimum interval since the last fetch start has not passed.
    public func refresh() throws {
        let now = clock.now
        let action = state.withLock { $0.policy.refreshRequested(now: now) }
        let fetch: KeyFetchPolicy.Fetch
        switch action {
        case .rateLimited:
            throw KeyStoreError(message: "key set fetched less than \(minRefreshInterval) ago")
        case .join(let f):
            fetch = f
        case .start(let f):
            fetch = f
        }
        let done = WakeSignal()
        let outcome = Mutex<FetchResult>(.timedOut)
        wait(forFetch: fetch.id, until: .never) { result in
            outcome.withLock { $0 = result }
            done.stop()
        }
        if case .start(let f) = action { run(f) }
        done.wait(until: .never)
        switch outcome.withLock({ $0 }) {
        case .succeeded: return
        case .failed(let error): throw error
        case .timedOut: throw KeyStoreError(message: "key set fetch did not finish")
        }
    }

    /// The signature check for a request that arrived at `arrivedAt` (`now()`); never blocks.
    /// A known `kid` is verified at once. For an unknown one (see the type's description) the
    /// answer is `unknownKey`, `.unavailable` (503), or `.wait` for a fetch that began after
    /// the arrival (never when `mayWait` is false).
    public func check(kid: String, signingInput: [UInt8], signature: [UInt8], arrivedAt: Deadline, mayWait: Bool = true) -> Lookup {
        if let key = extraKeys[kid] {
            return .checked(key.verifyRS256(message: signingInput, signature: signature) ? .valid : .invalid)
        }
        let now = clock.now
        let (key, decision) = state.withLock { s -> (RSAPublicKey?, KeyFetchPolicy.Decision?) in
            if let key = s.keys[kid] { return (key, nil) }
            return (nil, s.policy.unknownKid(kid, arrivedAt: arrivedAt, now: now, mayWait: mayWait))
        }
        if let key {
            return .checked(key.verifyRS256(message: signingInput, signature: signature) ? .valid : .invalid)
        }
        guard let decision else { return .checked(.unknownKey) }
        if case .startFetch = decision.effect {
            // The sender's kid, escaped (no line break of theirs in a text log) but not quoted again:
            // the JSON log quotes it itself.
            let escaped = String(kid.prefix(64)).debugDescription.dropFirst().dropLast()
            logger.info("unknown kid, fetching the key set", metadata: ["kid": "\(escaped)"])
        }
        perform(decision.effect)
        switch decision.answer {
        case .unknownKid: return .checked(.unknownKey)
        case .unavailable(let retryAfter): return .unavailable(retryAfter: retryAfter)
        case .waitFor(let id): return .wait(Ticket(fetchID: id))
        }
    }

    /// Blocking variant of `check(kid:signingInput:signature:arrivedAt:mayWait:)` for callers
    /// off the request path (tools, tests): waits for the fetch an unknown `kid` needs.
    public func check(kid: String, signingInput: [UInt8], signature: [UInt8]) -> SignatureCheck {
        let arrivedAt = clock.now
        var lookup = check(kid: kid, signingInput: signingInput, signature: signature, arrivedAt: arrivedAt)
        if case .wait(let ticket) = lookup {
            let done = WakeSignal()
            wait(ticket, until: clock.now.adding(fetchTimeout + .seconds(1))) { done.stop() }
            done.wait(until: .never)
            lookup = check(kid: kid, signingInput: signingInput, signature: signature, arrivedAt: arrivedAt, mayWait: false)
        }
        switch lookup {
        case .checked(let result): return result
        case .unavailable, .wait: return .keysUnavailable
        }
    }

    /// Calls `then` (from another thread) once the ticket's fetch has completed, or after
    /// `deadline`, whichever comes first; exactly once. Then check again with `mayWait: false`.
    public func wait(_ ticket: Ticket, until deadline: Deadline, then: @escaping @Sendable () -> Void) {
        wait(forFetch: ticket.fetchID, until: deadline) { _ in then() }
    }

    // MARK: - Fetching

    private func wait(forFetch id: UInt64, until deadline: Deadline, notify: @escaping @Sendable (FetchResult) -> Void) {
        guard completion(of: id) == nil else { return notify(completion(of: id)!) }
        waiters.add(.fetch(id), until: deadline, answer: notify)
        // It may have completed meanwhile, its waiters answered before this one was added.
        if let result = completion(of: id) { waiters.answer(result) { $0.answered(byFetch: id) } }
    }

    /// The outcome of fetch `id`; nil while it runs.
    private func completion(of id: UInt64) -> FetchResult? {
        state.withLock { s in
            if s.policy.inFlight?.id == id { return nil }
            return s.policy.lastCompletion?.fetch.id == id && s.policy.lastCompletion?.succeeded == true
                ? .succeeded
                : .failed(s.lastError ?? KeyStoreError(message: "key set fetch failed"))
        }
    }

    /// Carries out a policy effect.
    private func perform(_ effect: KeyFetchPolicy.Effect) {
        switch effect {
        case .none:
            break
        case .startFetch(let fetch):
            run(fetch)
        case .scheduleTimer(let at):
            waiters.add(.timer, until: at) { [weak self] _ in
                guard let self else { return }
                let now = clock.now
                perform(state.withLock { $0.policy.timerFired(now: now) })
            }
        }
    }

    /// Runs `fetch` on a thread of its own (the policy starts one at a time); stores the keys,
    /// answers its waiters, carries out the follow-up.
    private func run(_ fetch: KeyFetchPolicy.Fetch) {
        _ = LoopThread(name: "siwa-keys-fetch") { [self] in
            var result: FetchResult
            var body: String?
            var loaded: [String: RSAPublicKey] = [:]
            var ttl = Duration.zero
            do {
                let (keys, text, maxAge) = try self.fetch()
                let now = clock.now
                state.withLock {
                    $0.keys = keys
                    $0.loaded = true
                    $0.expiresAt = now.adding(maxAge)
                    $0.lastError = nil
                }
                body = text
                loaded = keys
                ttl = maxAge
                result = .succeeded
                metrics?.keyRefresh(succeeded: true)
            } catch {
                let failure = error as? KeyStoreError ?? KeyStoreError(message: "\(error)")
                result = .failed(failure)
                state.withLock { $0.lastError = failure }
                metrics?.keyRefresh(succeeded: false)
            }
            let now = clock.now
            let succeeded = if case .succeeded = result { true } else { false }
            let (effect, transition, retryAt) = state.withLock {
                s -> (KeyFetchPolicy.Effect, KeyRefreshBackoff.Transition, Deadline?) in
                let effect = s.policy.fetchCompleted(id: fetch.id, succeeded: succeeded, now: now)
                s.policy.forget(loaded.keys)
                let transition = s.backoff.fetchCompleted(succeeded: succeeded, now: now)
                return (effect, transition, s.backoff.retryAt)
            }
            logOutcome(result, keys: loaded, ttl: ttl, transition: transition, retryIn: retryAt.map { $0.timeLeft(at: now) })
            waiters.answer(result) { $0.answered(byFetch: fetch.id) }
            perform(effect)
            if let body { persistence?.save(body) }
        }
    }

    /// One line per success; for failures only the change of state is a warning (later ones are
    /// debug lines), and the first success after failures says so.
    private func logOutcome(
        _ result: FetchResult, keys: [String: RSAPublicKey], ttl: Duration, transition: KeyRefreshBackoff.Transition,
        retryIn: Duration?
    ) {
        switch result {
        case .succeeded:
            var metadata: Logger.Metadata = [
                "keys": "\(keys.count)", "kids": "\(keys.keys.sorted().joined(separator: ","))", "ttl": "\(ttl.components.seconds)",
            ]
            if case .recovered(let failures) = transition {
                metadata["failed_fetches"] = "\(failures)"
                logger.notice("key set fetch recovered; key set loaded", metadata: metadata)
            } else {
                logger.info("key set loaded", metadata: metadata)
            }
        case .failed(let error):
            var metadata: Logger.Metadata = ["error": "\(error)"]
            if let retryIn { metadata["scheduled_retry_in"] = "\(Int(retryIn.inSeconds.rounded(.up)))" }
            if transition == .failing {
                logger.warning(
                    "key set refresh failing; keeping the current keys, retrying with backoff (logged again when it recovers)", metadata: metadata)
            } else {
                logger.debug("key set refresh failed again", metadata: metadata)
            }
        case .timedOut:
            break  // a waiter's outcome only, never a fetch's
        }
    }

    private func fetch() throws -> ([String: RSAPublicKey], String, Duration) {
        let scheme = FetchScheme(url: url) ?? .https
        let response = try Fetcher.perform(
            FetchRequest(
                url: url, connectTimeout: min(.seconds(5), fetchTimeout), totalTimeout: fetchTimeout,
                maxResponseBytes: Self.maxResponseBytes, allowedSchemes: [scheme]))
        guard response.status == 200 else {
            throw KeyStoreError(message: "key set endpoint answered HTTP \(response.status)")
        }
        let keys = try Self.parse(response.body, logger: logger)
        let ttl = Self.maxAge(response.headers["cache-control"]).map { Duration.seconds(min(max($0, 60), 86_400)) } ?? Self.defaultTTL
        return (keys, String(decoding: response.body, as: UTF8.self), ttl)
    }

    static func parse(_ body: [UInt8], logger: Logger) throws -> [String: RSAPublicKey] {
        var keys: [String: RSAPublicKey] = [:]
        for jwk in try JWKSet.parseRSAKeys(body) {
            do {
                keys[jwk.kid] = try RSAPublicKey(modulus: jwk.modulus, exponent: jwk.exponent)
            } catch {
                logger.warning("skipping unusable key", metadata: ["kid": "\(jwk.kid)", "error": "\(error)"])
            }
        }
        guard !keys.isEmpty else { throw KeyStoreError(message: "key set holds no usable RS256 key") }
        return keys
    }

    /// `max-age=N` of a Cache-Control header, in seconds.
    static func maxAge(_ header: String?) -> Double? {
        guard let header else { return nil }
        for directive in header.split(separator: ",") {
            let parts = directive.split(separator: "=", maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces) }
            if parts.count == 2, parts[0].lowercased() == "max-age", let n = Double(parts[1]), n >= 0 { return n }
        }
        return nil
    }
}

public struct KeyStoreError: Error, CustomStringConvertible, Sendable {
    public var message: String
    public var description: String { message }
}
