import Foundation
import Testing

@testable import SiwaApp

/// The console's pure parts: escaping, masking, the cookie and session rules, the same-origin
/// and CSRF checks, the sign-in limit, the charts and the pages.
@Suite("Console: pure parts")
struct ConsoleUnitTests {
    @Test("HTML escaping covers the five characters that matter, in text and attributes")
    func escaping() {
        #expect(ConsoleHTML.escape("<script>alert('x')</script> & \"q\"") == "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &quot;q&quot;")
        #expect(ConsoleHTML.link("/console/users", [("q", "a b&c\"<"), ("empty", ""), ("none", nil)]) == "/console/users?q=a+b%26c%22%3C")
    }

    @Test("emails are masked to their first letter and domain, also inside a JSON text")
    func masking() {
        #expect(EmailMask.mask("jane@privaterelay.appleid.com") == "j•••@privaterelay.appleid.com")
        #expect(EmailMask.mask("no-at-sign") == "•••")
        let claims =
            #"{"events": "{\"type\":\"email-enabled\",\"email\":\"jane.doe+x@example.com\",\"sub\":\"000739.a\"}", "iss": "https://appleid.apple.com"}"#
        let masked = EmailMask.maskAll(in: claims)
        #expect(!masked.contains("jane.doe"))
        #expect(masked.contains(#"\"email\":\"j•••@example.com\""#))
        #expect(masked.contains("https://appleid.apple.com"), "only email-like words change")
    }

    @Test("the session cookie: HttpOnly, SameSite=Strict, Path=/console; Secure only when asked or over HTTPS")
    func cookie() {
        let token = ConsoleSecurity.newSessionToken()
        #expect(token.count == 64 && token != ConsoleSecurity.newSessionToken())
        #expect(ConsoleSecurity.sessionCookie(token, secure: false) == "siwa_console=\(token); Path=/console; HttpOnly; SameSite=Strict")
        #expect(ConsoleSecurity.sessionCookie(token, secure: true).hasSuffix("; SameSite=Strict; Secure"))
        #expect(ConsoleSecurity.clearedCookie(secure: false).contains("Max-Age=0"))
        #expect(ConsoleSecurity.sessionToken(cookieHeader: "a=b; siwa_console=\(token); c=d") == token)
        #expect(ConsoleSecurity.sessionToken(cookieHeader: "siwa_console=\(token.uppercased())") == nil)
        #expect(ConsoleSecurity.sessionToken(cookieHeader: "siwa_console=abc") == nil)
        #expect(ConsoleSecurity.sessionToken(cookieHeader: nil) == nil)

        #expect(ConsoleSecurity.secureCookie(configured: nil, forwardedProto: nil, origin: "http://127.0.0.1:9090") == false)
        #expect(ConsoleSecurity.secureCookie(configured: nil, forwardedProto: "https", origin: nil) == true)
        #expect(ConsoleSecurity.secureCookie(configured: nil, forwardedProto: nil, origin: "https://ops.example") == true)
        #expect(ConsoleSecurity.secureCookie(configured: true, forwardedProto: nil, origin: nil) == true)
        #expect(ConsoleSecurity.secureCookie(configured: false, forwardedProto: "https", origin: nil) == false)
    }

    @Test("same origin: Origin (or, without it, Referer) must name the request's host")
    func sameOrigin() {
        let host = "127.0.0.1:9090"
        #expect(ConsoleSecurity.isSameOrigin(origin: "http://127.0.0.1:9090", referer: nil, host: host))
        #expect(ConsoleSecurity.isSameOrigin(origin: "https://127.0.0.1:9090", referer: nil, host: host))
        #expect(!ConsoleSecurity.isSameOrigin(origin: "http://127.0.0.1:9091", referer: nil, host: host))
        #expect(!ConsoleSecurity.isSameOrigin(origin: "http://127.0.0.1:9090.evil.example", referer: nil, host: host))
        #expect(!ConsoleSecurity.isSameOrigin(origin: "null", referer: "http://127.0.0.1:9090/console", host: host))
        #expect(ConsoleSecurity.isSameOrigin(origin: nil, referer: "http://127.0.0.1:9090/console/failures", host: host))
        #expect(!ConsoleSecurity.isSameOrigin(origin: nil, referer: "http://127.0.0.1:9090.evil.example/console", host: host))
        #expect(!ConsoleSecurity.isSameOrigin(origin: nil, referer: nil, host: host))
        #expect(!ConsoleSecurity.isSameOrigin(origin: "http://127.0.0.1:9090", referer: nil, host: nil))
    }

    @Test("the CSRF token is the session's own, compared whole")
    func csrf() {
        let a = ConsoleSecurity.newSessionToken(), b = ConsoleSecurity.newSessionToken()
        let token = ConsoleSecurity.csrfToken(forSession: a)
        #expect(ConsoleSecurity.csrfMatches(presented: token, session: a))
        #expect(!ConsoleSecurity.csrfMatches(presented: token, session: b))
        #expect(!ConsoleSecurity.csrfMatches(presented: String(token.dropLast()), session: a))
        #expect(!ConsoleSecurity.csrfMatches(presented: token + "0", session: a))
        #expect(!ConsoleSecurity.csrfMatches(presented: nil, session: a))
        #expect(!ConsoleSecurity.csrfMatches(presented: "", session: a))
    }

    @Test("operator tokens: random, recognisable, stored and fingerprinted by hash only, compared whole")
    func operatorTokens() {
        let token = ConsoleSecurity.newOperatorToken()
        #expect(token.hasPrefix("siwa_console_") && token.count == "siwa_console_".count + 64)
        #expect(token != ConsoleSecurity.newOperatorToken())
        let stored = ConsoleSecurity.storedHash(ofOperatorToken: token)
        #expect(stored.count == 64 && !stored.contains(token))
        let fingerprint = ConsoleSecurity.fingerprint(ofToken: token)
        #expect(fingerprint.hasPrefix("sha256:") && fingerprint.count == 23 && !token.contains(fingerprint.dropFirst(7)))
    }

    @Test("operator names: 1-63 of a-z 0-9 . _ -, starting with a letter or digit")
    func operatorNames() {
        for good in ["alice", "jane.doe", "on-call_2", "0", String(repeating: "a", count: 63)] {
            #expect(ConsoleSecurity.isValidOperatorName(good), "\(good)")
        }
        for bad in ["", "Alice", ".hidden", "-x", "_x", "a b", "a/b", "a@b", "é", "a\n", String(repeating: "a", count: 64)] {
            #expect(!ConsoleSecurity.isValidOperatorName(bad), "\(bad)")
        }
    }

    @Test("sign-in attempts: 10 per key in 5 minutes, then refused until the window passes; every key of an attempt counts")
    func limiter() {
        var limiter = SignInLimiter()
        var admitted: [Bool] = []
        for i in 0..<10 { admitted.append(limiter.admit(["address:10.0.0.1"], now: 1000 + Double(i))) }
        #expect(admitted == Array(repeating: true, count: 10))
        let eleventh = limiter.admit(["address:10.0.0.1"], now: 1010)
        #expect(!eleventh)
        #expect(limiter.retryAfter(["address:10.0.0.1"], now: 1010) == 290)
        let other = limiter.admit(["address:10.0.0.2"], now: 1010)
        #expect(other)
        let later = limiter.admit(["address:10.0.0.1"], now: 1300)
        #expect(later, "the first attempt left the window")
        let again = limiter.admit(["address:10.0.0.1"], now: 1300.5)
        #expect(!again)

        // An operator's name counts across addresses; a refused attempt is recorded under no key.
        var named = SignInLimiter()
        for i in 0..<10 { _ = named.admit(["address:10.0.1.\(i)", "operator:alice"], now: 1000) }
        let alice = named.admit(["address:10.0.2.1", "operator:alice"], now: 1001)
        #expect(!alice)
        #expect(named.retryAfter(["address:10.0.2.1", "operator:alice"], now: 1001) == 299)
        let bob = named.admit(["address:10.0.2.1", "operator:bob"], now: 1001)
        #expect(bob, "the refused attempt was not counted against its address")
    }

    @Test("the overview's automatic refresh is marked with the header the handler recognises")
    func refreshMarked() {
        #expect(ConsoleAssets.js.contains("\"\(ConsoleHandler.refreshHeader)\": \"1\""))
        #expect(!ConsoleAssets.js.contains("location.reload"))
        #expect(ConsoleHandler.keptHeaders.contains(ConsoleHandler.refreshHeader))
    }

    @Test("chart: ticks of 1/2/5 × 10ⁿ, axes with the unit, names escaped, a stable color per type")
    func chart() {
        #expect(ConsoleChart.ticks(peak: 0) == [0, 1])
        #expect(ConsoleChart.ticks(peak: 17) == [0, 5, 10, 15, 20])
        #expect(ConsoleChart.ticks(peak: 730) == [0, 200, 400, 600, 800])
        #expect(ConsoleChart.label(2000) == "2k" && ConsoleChart.label(2.5) == "2.5")
        let start = 1_800_000_000.0 - 1_800_000_000.0.truncatingRemainder(dividingBy: 3600)
        let chart = ConsoleChart(
            title: "Received <per> minute", unit: "events/min", buckets: (0..<60).map { start + Double($0) * 60 }, bucketSeconds: 60,
            series: [.init(name: "<b>x</b>", values: [3] + Array(repeating: 0, count: 59), color: 2)])
        let svg = chart.svg()
        #expect(svg.contains(">events/min</text>"))
        #expect(svg.contains("Received &lt;per&gt; minute") && !svg.contains("<b>x</b>") && svg.contains("&lt;b&gt;x&lt;/b&gt;"))
        #expect(svg.contains("class=\"s2\""))
        #expect(svg.components(separatedBy: "<rect").count == 2, "one bar for the one non-zero value")
        // The buckets start at 08:00 UTC (1.8e9 s is a whole hour): a label every 10 minutes.
        let labels = ["08:00", "08:10", "08:20", "08:30", "08:40", "08:50"]
        #expect(labels.allSatisfy { svg.contains(">\($0)</text>") }, "time labels on the x axis: \(svg)")
        #expect(svg.components(separatedBy: "text-anchor=\"middle\"").count == labels.count + 1, "six time labels")
        #expect(ConsoleChart.color(of: "email-disabled") == 0 && ConsoleChart.color(of: "account-delete") == 3)
    }

    @Test("pages: the user page masks emails unless revealed, escapes what the database holds, and asks for the sub again")
    func userPage() {
        let nav = ConsoleHTML.Nav(csrf: "c5rf", operatorName: "alice", current: "/console/users")
        let user = ConsolePages.User(
            sub: "000739.<x>",
            account: ConsoleRow(values: ["apple_sub": "000739.<x>", "status": "active", "email": "jane@privaterelay.appleid.com"]),
            apps: [ConsoleRow(values: ["aud": "app\"><script>", "status": "active", "email": "jane@privaterelay.appleid.com"])], sessions: [],
            events: [], revocations: [], forwards: [])
        let masked = ConsolePages.user(
            user, reveal: false, error: nil, notice: nil, features: .init(inAppDeletion: true, forwarding: false), nav: nav)
        #expect(masked.contains("j•••@privaterelay.appleid.com") && !masked.contains("jane@"))
        #expect(!masked.contains("<script>") && !masked.contains("000739.<x>"))
        #expect(masked.contains("name=\"confirm\"") && masked.contains("Reveal emails") && masked.contains("value=\"c5rf\""))
        let shown = ConsolePages.user(user, reveal: true, error: nil, notice: nil, features: .init(inAppDeletion: true, forwarding: false), nav: nav)
        #expect(shown.contains("jane@privaterelay.appleid.com") && !shown.contains("Reveal emails"))
    }

    @Test("pages: the user page lists the provider calls with the provider's status and error code, escaped")
    func userPageProviderCalls() {
        let nav = ConsoleHTML.Nav(csrf: "c5rf", operatorName: "alice", current: "/console/users")
        var user = ConsolePages.User(sub: "000739.x", account: nil, apps: [], sessions: [], events: [], revocations: [], forwards: [])
        let none = ConsolePages.user(user, reveal: false, error: nil, notice: nil, features: .init(inAppDeletion: false, forwarding: false), nav: nav)
        #expect(!none.contains("Provider calls"))
        user.providerCalls = [
            ConsoleRow(values: [
                "target": "cognito", "effect": "unlink", "event_type": "account-delete", "state": "pending", "attempts": "3",
                "last_status": "503", "last_reason": "http_503<b>", "actions": "signed_out", "updated": "2026-11-27 21:00:00",
            ])
        ]
        let page = ConsolePages.user(user, reveal: false, error: nil, notice: nil, features: .init(inAppDeletion: false, forwarding: false), nav: nav)
        #expect(page.contains("Provider calls") && page.contains("cognito") && page.contains("503") && page.contains("signed_out"))
        #expect(!page.contains("http_503<b>") && page.contains("http_503&lt;b&gt;"))
    }

    @Test("times typed in the filters are UTC")
    func times() {
        #expect(ConsolePages.parseTime("2026-11-24") == 1_795_478_400)
        #expect(ConsolePages.parseTime("2026-11-24 13:05").map { Int($0.rounded()) } == 1_795_478_400 + 13 * 3600 + 300)
        #expect(ConsolePages.parseTime("2026-11-24T13:05:00Z").map { Int($0.rounded()) } == 1_795_478_400 + 13 * 3600 + 300)
        #expect(ConsolePages.parseTime("yesterday") == nil)
    }
}
