import Foundation
import Logging
import SiwaCore
import SiwaCrypto
import SiwaFetch
import Synchronization

/// Apple's signing keys, by `kid`: fetched from `SIWA_JWKS_URL` (libcurl), cached in memory,
/// refreshed when a token names an unknown `kid` — at most once per `minRefreshInterval`, so a
/// flood of made-up `kid`s cannot turn into a flood of fetches. A failed refresh keeps the old keys.
public final class KeyStore: Sendable {
    struct State {
        var keys: [String: RSAPublicKey] = [:]
        var loadedAt: Date?
        var lastAttempt: Date?
        var lastAttemptFailed = false
    }

    public let url: String
    public let minRefreshInterval: Double
    private let extraKeys: [String: RSAPublicKey]
    private let state = Mutex(State())
    private let refreshLock = Mutex(())
    private let logger: Logger
    private let metrics: Metrics?

    /// - Parameter extraKeys: keys trusted besides the fetched set (the `--dev` key).
    public init(url: String, extraKeys: [String: RSAPublicKey] = [:], minRefreshInterval: Double = 10,
                logger: Logger, metrics: Metrics? = nil) {
        self.url = url
        self.extraKeys = extraKeys
        self.minRefreshInterval = minRefreshInterval
        self.logger = logger
        self.metrics = metrics
    }

    /// True once a key set is loaded (or extra keys are trusted).
    public var isLoaded: Bool {
        !extraKeys.isEmpty || state.withLock { $0.loadedAt != nil }
    }

    /// Number of fetched keys held.
    public var keyCount: Int { state.withLock { $0.keys.count } }

    /// Fetches the key set now. Throws when it cannot be fetched or holds no usable key.
    public func refresh() throws {
        try refreshLock.withLock { _ in
            state.withLock { $0.lastAttempt = Date() }
            do {
                let keys = try fetch()
                state.withLock {
                    $0.keys = keys
                    $0.loadedAt = Date()
                    $0.lastAttemptFailed = false
                }
                metrics?.keyRefresh(succeeded: true)
                logger.info("key set loaded", metadata: ["keys": "\(keys.count)", "kids": "\(keys.keys.sorted().joined(separator: ","))"])
            } catch {
                state.withLock { $0.lastAttemptFailed = true }
                metrics?.keyRefresh(succeeded: false)
                logger.warning("key set refresh failed", metadata: ["error": "\(error)"])
                throw error
            }
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
            logger.info("unknown kid, refreshing key set", metadata: ["kid": "\(kid.prefix(64))"])
            if (try? refresh()) == nil {
                return .keysUnavailable
            }
        } else if state.withLock({ $0.lastAttemptFailed }) {
            return .keysUnavailable
        }
        guard let key = state.withLock({ $0.keys[kid] }) else { return .unknownKey }
        return key.verifyRS256(message: signingInput, signature: signature) ? .valid : .invalid
    }

    private func fetch() throws -> [String: RSAPublicKey] {
        let scheme: FetchScheme = url.hasPrefix("file://") ? .file : (url.hasPrefix("http://") ? .http : .https)
        let response = try Fetcher.perform(FetchRequest(url: url, connectTimeout: 5, totalTimeout: 10,
                                                        maxResponseBytes: 256 * 1024, allowedSchemes: [scheme]))
        guard response.status == 200 else {
            throw KeyStoreError(message: "key set endpoint answered HTTP \(response.status)")
        }
        var keys: [String: RSAPublicKey] = [:]
        for jwk in try JWKSet.parseRSAKeys(response.body) {
            do {
                keys[jwk.kid] = try RSAPublicKey(modulus: jwk.modulus, exponent: jwk.exponent)
            } catch {
                logger.warning("skipping unusable key", metadata: ["kid": "\(jwk.kid)", "error": "\(error)"])
            }
        }
        guard !keys.isEmpty else { throw KeyStoreError(message: "key set holds no usable RS256 key") }
        return keys
    }
}

public struct KeyStoreError: Error, CustomStringConvertible, Sendable {
    public var message: String
    public var description: String { message }
}
