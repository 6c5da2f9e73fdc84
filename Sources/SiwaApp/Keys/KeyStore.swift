import Foundation
import Logging
import SiwaCore
import SiwaCrypto
import SiwaFetch
import Synchronization

/// Apple's signing keys, by `kid`: fetched from `SIWA_JWKS_URL` (libcurl), cached in memory and
/// persisted (the last good set survives a restart while Apple is unreachable), refreshed when the
/// TTL runs out (`Cache-Control: max-age`, else an hour) and when a token names an unknown `kid` —
/// at most once per `minRefreshInterval`, so a flood of made-up `kid`s cannot become a flood of
/// fetches. A failed refresh keeps the old keys.
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

    struct State {
        var keys: [String: RSAPublicKey] = [:]
        var loadedAt: Date?
        var expiresAt: Date?
        var lastAttempt: Date?
        var lastAttemptFailed = false
    }

    public let url: String
    public let minRefreshInterval: Double
    /// Total seconds one fetch may take (connect 5 s at most). Default 10.
    public let fetchTimeout: Double
    /// Largest key set response accepted. 256 KiB.
    public static let maxResponseBytes = 256 * 1024
    /// TTL when the key set response has no `Cache-Control: max-age`.
    public static let defaultTTL: Double = 3600
    private let extraKeys: [String: RSAPublicKey]
    private let persistence: Persistence?
    private let state = Mutex(State())
    private let refreshLock = Mutex(())
    private let logger: Logger
    private let metrics: Metrics?

    /// - Parameter extraKeys: keys trusted besides the fetched set (the `--dev` key).
    public init(url: String, extraKeys: [String: RSAPublicKey] = [:], minRefreshInterval: Double = 10,
                fetchTimeout: Double = 10, persistence: Persistence? = nil, logger: Logger, metrics: Metrics? = nil) {
        self.url = url
        self.fetchTimeout = fetchTimeout
        self.extraKeys = extraKeys
        self.minRefreshInterval = minRefreshInterval
        self.persistence = persistence
        self.logger = logger
        self.metrics = metrics
    }

    /// True once a key set is loaded (or extra keys are trusted).
    public var isLoaded: Bool {
        !extraKeys.isEmpty || state.withLock { $0.loadedAt != nil }
    }

    /// Number of fetched keys held.
    public var keyCount: Int { state.withLock { $0.keys.count } }

    /// Seconds until the TTL runs out (nil before the first successful fetch).
    public var expiresIn: Double? { state.withLock { $0.expiresAt.map { $0.timeIntervalSinceNow } } }

    /// Seconds since the key set was loaded (nil when none is).
    public var age: Double? { state.withLock { $0.loadedAt.map { Date().timeIntervalSince($0) } } }

    /// True when the TTL has run out (and a refresh is allowed by the minimum interval).
    public var isRefreshDue: Bool {
        state.withLock { s in
            if let last = s.lastAttempt, Date().timeIntervalSince(last) < minRefreshInterval { return false }
            guard let expires = s.expiresAt else { return true }
            return Date() >= expires
        }
    }

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
                $0.loadedAt = Date()
            }
            logger.warning("using the persisted key set until Apple's can be fetched", metadata: ["keys": "\(keys.count)"])
        }
    }

    /// Fetches the key set now. Throws when it cannot be fetched or holds no usable key.
    public func refresh() throws {
        try refreshLock.withLock { _ in try fetchAndStore() }
    }

    /// For an unknown `kid`: fetches unless another thread already did within the minimum
    /// interval (checked again under the lock, so a burst of made-up `kid`s costs one fetch and
    /// the others use its result). Returns false when the key set could not be fetched.
    private func refreshIfStillDue() -> Bool {
        refreshLock.withLock { _ in
            let recent = state.withLock { s -> Bool? in
                guard let last = s.lastAttempt, Date().timeIntervalSince(last) < minRefreshInterval else { return nil }
                return !s.lastAttemptFailed
            }
            if let recent { return recent }
            return (try? fetchAndStore()) != nil
        }
    }

    /// Call with `refreshLock` held.
    private func fetchAndStore() throws {
        state.withLock { $0.lastAttempt = Date() }
        do {
            let (keys, body, ttl) = try fetch()
            state.withLock {
                $0.keys = keys
                $0.loadedAt = Date()
                $0.expiresAt = Date().addingTimeInterval(ttl)
                $0.lastAttemptFailed = false
            }
            persistence?.save(body)
            metrics?.keyRefresh(succeeded: true)
            logger.info("key set loaded", metadata: ["keys": "\(keys.count)", "kids": "\(keys.keys.sorted().joined(separator: ","))", "ttl": "\(Int(ttl))"])
        } catch {
            state.withLock { $0.lastAttemptFailed = true }
            metrics?.keyRefresh(succeeded: false)
            logger.warning("key set refresh failed", metadata: ["error": "\(error)"])
            throw error
        }
    }

    /// The signature check the verifier calls: finds the key (refreshing once for an unknown
    /// `kid` when allowed) and verifies RS256.
    public func check(kid: String, signingInput: [UInt8], signature: [UInt8]) -> SignatureCheck {
        if let key = extraKeys[kid] ?? state.withLock({ $0.keys[kid] }) {
            return key.verifyRS256(message: signingInput, signature: signature) ? .valid : .invalid
        }
        let due = state.withLock { s -> Bool in
            guard let last = s.lastAttempt else { return true }
            return Date().timeIntervalSince(last) >= minRefreshInterval
        }
        if due {
            logger.info("unknown kid, refreshing key set", metadata: ["kid": "\(String(kid.prefix(64)).debugDescription)"])
            if !refreshIfStillDue() {
                return .keysUnavailable
            }
        } else if state.withLock({ $0.lastAttemptFailed }) {
            return .keysUnavailable
        }
        guard let key = state.withLock({ $0.keys[kid] }) else { return .unknownKey }
        return key.verifyRS256(message: signingInput, signature: signature) ? .valid : .invalid
    }

    private func fetch() throws -> ([String: RSAPublicKey], String, Double) {
        let scheme = FetchScheme(url: url) ?? .https
        let response = try Fetcher.perform(FetchRequest(url: url, connectTimeout: min(5, fetchTimeout), totalTimeout: fetchTimeout,
                                                        maxResponseBytes: Self.maxResponseBytes, allowedSchemes: [scheme]))
        guard response.status == 200 else {
            throw KeyStoreError(message: "key set endpoint answered HTTP \(response.status)")
        }
        let keys = try Self.parse(response.body, logger: logger)
        let ttl = Self.maxAge(response.headers["cache-control"]).map { min(max($0, 60), 86_400) } ?? Self.defaultTTL
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
