import Foundation
import SiwaCrypto
import Synchronization

/// The console's security decisions, pure (no I/O, clock passed in): the cookie, the session's
/// life, the CSRF token, the same-origin check, the sign-in rate limit.
enum ConsoleSecurity {
    static let cookieName = "siwa_console"
    /// A session ends after this long without a request (8 h), and this long after its sign-in
    /// whatever its activity (12 h): the limits siwa.console_live_session applies.
    static let idleLimitSeconds: Double = 8 * 3600
    static let lifetimeSeconds: Double = 12 * 3600

    /// A fresh session token: 32 random bytes, hex.
    static func newSessionToken() -> String { Hex.encode(SecureRandom.bytes(32)) }

    /// The session's CSRF token, derived from the session token (so nothing else is stored, and
    /// only the holder of the cookie can know it).
    static func csrfToken(forSession token: String) -> String {
        Hex.encode(HMACSHA256.authenticate(key: Array(token.utf8), message: Array("siwa-console-csrf".utf8)))
    }

    /// The fingerprint recorded for an operator's token: never the token, enough to tell tokens apart.
    static func fingerprint(ofToken token: String) -> String {
        "sha256:" + String(SHA256.hexDigest(token).prefix(16))
    }

    /// A new operator token: 32 random bytes, hex, after a prefix that says what it opens (and
    /// that secret scanners can match).
    static func newOperatorToken() -> String { "siwa_console_" + Hex.encode(SecureRandom.bytes(32)) }

    /// What the database keeps of an operator's token: its SHA-256.
    static func storedHash(ofOperatorToken token: String) -> String { SHA256.hexDigest("console-operator:" + token) }

    /// An operator's name: 1 to 63 of `a-z`, `0-9`, `.`, `_`, `-`, starting with a letter or digit
    /// (as `siwa.console_operators` checks): it goes into logs, the audit trail and a page as is.
    static func isValidOperatorName(_ name: String) -> Bool {
        let bytes = Array(name.utf8)
        guard (1...63).contains(bytes.count), let first = bytes.first, isNameStart(first) else { return false }
        return bytes.allSatisfy { isNameStart($0) || $0 == UInt8(ascii: ".") || $0 == UInt8(ascii: "_") || $0 == UInt8(ascii: "-") }
    }

    static let operatorNameRule = "1 to 63 characters: lowercase letters, digits, '.', '_', '-', starting with a letter or digit"

    private static func isNameStart(_ b: UInt8) -> Bool {
        (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(b) || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(b)
    }

    /// `Set-Cookie` for a new session.
    static func sessionCookie(_ token: String, secure: Bool) -> String {
        "\(cookieName)=\(token); Path=/console; HttpOnly; SameSite=Strict" + (secure ? "; Secure" : "")
    }

    /// `Set-Cookie` that removes the session cookie.
    static func clearedCookie(secure: Bool) -> String {
        "\(cookieName)=; Path=/console; Max-Age=0; HttpOnly; SameSite=Strict" + (secure ? "; Secure" : "")
    }

    /// The session token from a `Cookie` header (nil when absent or not 64 hex digits).
    static func sessionToken(cookieHeader: String?) -> String? {
        guard let cookieHeader else { return nil }
        for part in cookieHeader.split(separator: ";") {
            let pair = part.trimmingCharacters(in: .whitespaces)
            guard pair.hasPrefix(cookieName + "=") else { continue }
            let value = String(pair.dropFirst(cookieName.count + 1))
            guard value.utf8.count == 64, value.utf8.allSatisfy(isLowerHex) else { return nil }
            return value
        }
        return nil
    }

    /// The cookie's `Secure` flag: `SIWA_CONSOLE_SECURE_COOKIE` when set, else whether the
    /// request came over HTTPS (as a TLS-terminating proxy says, or as the browser's `Origin`).
    static func secureCookie(configured: Bool?, forwardedProto: String?, origin: String?) -> Bool {
        if let configured { return configured }
        if forwardedProto?.lowercased().split(separator: ",").first?.trimmingCharacters(in: .whitespaces) == "https" { return true }
        return origin?.lowercased().hasPrefix("https://") == true
    }

    /// A state change is accepted only from a page of this console: `Origin` (or, without it,
    /// `Referer`) names the host the request was sent to. Neither header, `Origin: null`, or
    /// another host: refused.
    static func isSameOrigin(origin: String?, referer: String?, host: String?) -> Bool {
        guard let host = host?.lowercased(), !host.isEmpty else { return false }
        if let origin {
            let o = origin.lowercased()
            return o == "http://" + host || o == "https://" + host
        }
        if let referer {
            let r = referer.lowercased()
            return ["http://", "https://"].contains { scheme in
                r == scheme + host || r.hasPrefix(scheme + host + "/") || r.hasPrefix(scheme + host + "?")
            }
        }
        return false
    }

    /// The form's CSRF token equals the session's (compared in constant time).
    static func csrfMatches(presented: String?, session token: String) -> Bool {
        guard let presented else { return false }
        return constantTimeEquals(csrfToken(forSession: token), presented)
    }

    /// Every byte position up to the longer length is compared; a length difference counts too.
    static func constantTimeEquals(_ a: String, _ b: String) -> Bool {
        let x = Array(a.utf8), y = Array(b.utf8)
        var difference = UInt(bitPattern: x.count ^ y.count)
        for i in 0..<max(x.count, y.count) {
            difference |= UInt((i < x.count ? x[i] : 0) ^ (i < y.count ? y[i] : 0))
        }
        return difference == 0
    }

    private static func isLowerHex(_ b: UInt8) -> Bool {
        (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(b) || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains(b)
    }
}

/// Sign-in attempts per key (a client address, an operator's name): at most `limit` in any
/// `window` seconds (a sliding log). Pure: the caller passes the clock. Keys not seen for a
/// window are forgotten, and at most `maxKeys` are tracked (the oldest go first), so a flood
/// cannot grow it.
struct SignInLimiter: Sendable {
    var limit = 10
    var window: Double = 300
    var maxKeys = 10_000
    private var attempts: [String: [Double]] = [:]

    init(limit: Int = 10, window: Double = 300) {
        self.limit = limit
        self.window = window
    }

    /// Records an attempt at `now` under every key; false when any key is over the limit (then
    /// recorded under none: a client that keeps trying is let in again once its window has passed).
    mutating func admit(_ keys: [String], now: Double) -> Bool {
        var recent: [String: [Double]] = [:]
        for key in keys { recent[key] = (attempts[key] ?? []).filter { now - $0 < window } }
        guard recent.values.allSatisfy({ $0.count < limit }) else {
            for (key, times) in recent { attempts[key] = times }
            return false
        }
        for (key, times) in recent { attempts[key] = times + [now] }
        if attempts.count > maxKeys { prune(now: now) }
        return true
    }

    /// True when a key has `limit` attempts or more within the window (recorded by `record`).
    func isOver(_ key: String, now: Double) -> Bool {
        (attempts[key] ?? []).filter { now - $0 < window }.count >= limit
    }

    /// Records an attempt at `now` under `key` (a failed sign-in of a name), whatever the count.
    mutating func record(_ key: String, now: Double) {
        attempts[key] = (attempts[key] ?? []).filter { now - $0 < window } + [now]
        if attempts.count > maxKeys { prune(now: now) }
    }

    /// Seconds until every key may try again (0 when they may now).
    func retryAfter(_ keys: [String], now: Double) -> Double {
        keys.map { key in
            let times = (attempts[key] ?? []).filter { now - $0 < window }
            guard times.count >= limit, let oldest = times.first else { return 0 }
            return max(0, window - (now - oldest))
        }.max() ?? 0
    }

    private mutating func prune(now: Double) {
        attempts = attempts.filter { _, times in times.contains { now - $0 < window } }
        while attempts.count > maxKeys, let oldest = attempts.min(by: { ($0.value.last ?? 0) < ($1.value.last ?? 0) }) {
            attempts[oldest.key] = nil
        }
    }
}

/// Emails shown masked (`j•••@privaterelay.appleid.com`) unless an operator reveals one.
enum EmailMask {
    static func mask(_ email: String) -> String {
        guard let at = email.lastIndex(of: "@") else { return "•••" }
        let local = email[..<at]
        return (local.first.map(String.init) ?? "") + "•••" + email[at...]
    }

    /// Every email-like word of `text` (e.g. a JSON document) masked.
    static func maskAll(in text: String) -> String {
        let chars = Array(text)
        var out = ""
        var i = 0
        while i < chars.count {
            guard chars[i] == "@" else {
                out.append(chars[i])
                i += 1
                continue
            }
            // The local part already copied: the run of email characters before the `@`.
            var start = out.endIndex
            while start > out.startIndex, isLocal(out[out.index(before: start)]) { start = out.index(before: start) }
            var end = i + 1
            while end < chars.count, isDomain(chars[end]) { end += 1 }
            let local = out[start...]
            if !local.isEmpty && end > i + 1 {
                let first = local.first!
                out.removeSubrange(start...)
                out.append(first)
                out += "•••"
            }
            out += String(chars[i..<end])
            i = end
        }
        return out
    }

    private static func isLocal(_ c: Character) -> Bool {
        c.isASCII && (c.isLetter || c.isNumber || "._%+-".contains(c))
    }

    private static func isDomain(_ c: Character) -> Bool {
        c.isASCII && (c.isLetter || c.isNumber || ".-".contains(c))
    }
}
