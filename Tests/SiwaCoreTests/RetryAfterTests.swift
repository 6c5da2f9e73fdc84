import Testing

@testable import SiwaCore

/// `Retry-After` in both its forms, and what a provider's rate-limit headers ask of a call and
/// of the provider's other calls.
@Suite struct RetryAfterTests {
    /// 2026-11-27 20:00:00 UTC.
    static let eight: Int64 = 1_795_809_600

    @Test("an HTTP-date in each of its three forms is read; anything else is not a date")
    func httpDate() {
        let now = Double(Self.eight)
        #expect(RetryAfter.httpDate("Sun, 06 Nov 1994 08:49:37 GMT", now: now) == 784_111_777)
        #expect(RetryAfter.httpDate("Sunday, 06-Nov-94 08:49:37 GMT", now: now) == 784_111_777)
        #expect(RetryAfter.httpDate("Sun Nov  6 08:49:37 1994", now: now) == 784_111_777)
        #expect(RetryAfter.httpDate("Fri, 27 Nov 2026 20:00:00 GMT", now: now) == Self.eight)
        #expect(RetryAfter.httpDate("Tue, 29 Feb 2000 00:00:00 GMT", now: now) == 951_782_400)
        // RFC 850's two-digit year: more than 50 years ahead means the century before.
        #expect(RetryAfter.httpDate("Friday, 27-Nov-26 20:00:00 GMT", now: now) == Self.eight)
        #expect(
            RetryAfter.httpDate("Sunday, 06-Nov-94 08:49:37 GMT", now: Double(RetryAfter.daysFromCivil(year: 2060, month: 1, day: 1) * 86_400))
                == RetryAfter.daysFromCivil(year: 2094, month: 11, day: 6) * 86_400 + 31_777)
        for bad in [
            "", "soon", "Sun, 6 Nov 1994 08:49:37 GMT", "Sun, 06 Nov 1994 08:49:37 UTC", "Sun, 06 Nov 1994 08:49 GMT",
            "Sun, 06 Foo 1994 08:49:37 GMT", "Sun, 31 Nov 1994 08:49:37 GMT", "Sun, 29 Feb 1900 00:00:00 GMT",
            "Sun, 06 Nov 1994 24:00:00 GMT", "Sun, 06 Nov 1994 08:60:00 GMT", "Xyz, 06 Nov 1994 08:49:37 GMT",
            "Sun, 06 Nov 94 08:49:37 GMT", "Sunday, 06-Nov-1994 08:49:37 GMT", "Sun Nov 6 08:49:37 94", "Sun, 0x Nov 1994 08:49:37 GMT",
        ] {
            #expect(RetryAfter.httpDate(bad, now: now) == nil, "\(bad)")
        }
    }

    @Test("Retry-After: seconds as such, a date less now; a past date is now; a bad value is ignored")
    func wait() {
        let now = Double(Self.eight)
        #expect(RetryAfter.wait(" 120 ", now: now) == .seconds(120))
        #expect(RetryAfter.wait("0", now: now) == .zero)
        #expect(RetryAfter.wait("Fri, 27 Nov 2026 20:01:30 GMT", now: now) == .seconds(90))
        #expect(RetryAfter.wait("Fri, 27 Nov 2026 20:00:00 GMT", now: now - 0.5) == .seconds(1))
        #expect(RetryAfter.wait("Sun, 06 Nov 1994 08:49:37 GMT", now: now) == .zero)
        #expect(RetryAfter.wait("-1", now: now) == nil)
        #expect(RetryAfter.wait("1.5", now: now) == nil)
        #expect(RetryAfter.wait("Fri, 27 Nov 2026 25:00:00 GMT", now: now) == nil)
        // Far off: said as it is (the schedule bounds it), never an overflow.
        #expect(RetryAfter.wait("99999999999999999999999", now: now) == .seconds(RetryAfter.longestSaid))
        #expect(RetryAfter.wait("Fri, 27 Nov 9999 20:00:00 GMT", now: now) == .seconds(RetryAfter.longestSaid))
    }

    @Test("rate-limit headers: the call waits for Retry-After, or for the reset of a spent window")
    func callWait() {
        func limit(_ headers: [String: String]) -> ProviderRateLimit { ProviderRateLimit(headers: headers, now: 1_000) }
        #expect(limit(["x-ratelimit-remaining": "0", "x-ratelimit-reset": "1030"]) == ProviderRateLimit(remaining: 0, reset: .seconds(30)))
        #expect(limit(["x-ratelimit-remaining": "0", "x-ratelimit-reset": "1030"]).callWait(status: 429) == .seconds(30))
        #expect(limit(["x-ratelimit-remaining": "3", "x-ratelimit-reset": "1030"]).callWait(status: 429) == nil)
        #expect(limit(["x-ratelimit-reset": "1030"]).callWait(status: 429) == .seconds(30))
        #expect(limit(["x-ratelimit-reset": "1030"]).callWait(status: 503) == nil)
        #expect(limit(["x-ratelimit-reset": "900", "x-ratelimit-remaining": "0"]).callWait(status: 429) == .zero)
        #expect(limit(["retry-after": "2", "x-ratelimit-remaining": "0", "x-ratelimit-reset": "1030"]).callWait(status: 429) == .seconds(2))
        #expect(limit(["x-ratelimit-remaining": "none", "x-ratelimit-reset": "later"]) == ProviderRateLimit())
    }

    @Test("a spent window pauses the provider until its reset, even after a success; a 429 for as long as it says")
    func providerWait() {
        let spent = ProviderRateLimit(remaining: 0, reset: .seconds(30))
        #expect(spent.providerWait(status: 200) == .seconds(30))
        #expect(ProviderRateLimit(remaining: 1, reset: .seconds(30)).providerWait(status: 200) == nil)
        #expect(ProviderRateLimit(retryAfter: .seconds(5)).providerWait(status: 429) == .seconds(5))
        #expect(ProviderRateLimit(retryAfter: .seconds(5)).providerWait(status: 503) == .seconds(5))
        #expect(ProviderRateLimit(retryAfter: .seconds(5)).providerWait(status: 500) == nil)
        #expect(ProviderRateLimit(retryAfter: .seconds(50), remaining: 0, reset: .seconds(30)).providerWait(status: 429) == .seconds(50))
        #expect(ProviderRateLimit().providerWait(status: 429) == nil)
    }
}
