import Testing

@testable import SiwaCore

/// The pure parts of app transfers and paced calls to Apple: the list format, Apple's answers,
/// the 60-day window, the pacer, the retry delays, the bearer-token cache.
@Suite struct TransferCoreTests {
    @Test func listLinesRoundTripAndCarryOnlyTheIdentifier() throws {
        let line = TransferList.line("000000.abc.0000")
        #expect(line == #"{"transfer_sub":"000000.abc.0000"}"#)
        #expect(try TransferList.parse(line: Substring(line)) == "000000.abc.0000")
        #expect(try TransferList.parse(line: "  000000.abc.0000\r") == "000000.abc.0000")
        #expect(try TransferList.parse(line: "") == nil)
        #expect(try TransferList.parse(line: "# a comment") == nil)
        #expect(throws: TransferList.LineError.unexpectedMember) {
            try TransferList.parse(line: #"{"transfer_sub":"t.1","sub":"001.secret"}"#)
        }
        #expect(throws: TransferList.LineError.malformedLine) { try TransferList.parse(line: #"{"transfer_sub":1}"#) }
        #expect(throws: TransferList.LineError.malformedLine) { try TransferList.parse(line: "two words") }
    }

    @Test func wholeListsAreDeduplicatedAndErrorsNameTheLine() throws {
        #expect(try TransferList.parse("t.1\n{\"transfer_sub\":\"t.2\"}\n\nt.1\n") == ["t.1", "t.2"])
        #expect(throws: TransferListError(line: 3, reason: .malformedLine)) { try TransferList.parse("t.1\nt.2\n{oops\n") }
    }

    @Test func applesAnswersParse() throws {
        let token = try AppleAccessToken.parse(Array(#"{"access_token":"a1","token_type":"Bearer","expires_in":3600}"#.utf8))
        #expect(token == AppleAccessToken(token: "a1", expiresIn: 3600))
        #expect(throws: AppleResponseError.malformedField) { try AppleAccessToken.parse(Array(#"{"access_token":"a1"}"#.utf8)) }
        #expect(throws: AppleResponseError.malformedJSON) { try AppleAccessToken.parse(Array("nope".utf8)) }
        #expect(try AppleTransferSub.parse(Array(#"{"transfer_sub":"t.1"}"#.utf8)) == "t.1")
        #expect(throws: AppleResponseError.malformedField) { try AppleTransferSub.parse(Array(#"{"transfer_sub":""}"#.utf8)) }
        let user = try AppleMigratedUser.parse(Array(#"{"sub":"002.x","email":"e@privaterelay.appleid.com","is_private_email":"true"}"#.utf8))
        #expect(user == AppleMigratedUser(sub: "002.x", email: "e@privaterelay.appleid.com", isPrivateEmail: true))
        #expect(try AppleMigratedUser.parse(Array(#"{"sub":"002.y","is_private_email":false}"#.utf8)).isPrivateEmail == false)
        #expect(throws: AppleResponseError.malformedField) { try AppleMigratedUser.parse(Array(#"{"email":"e@x"}"#.utf8)) }
    }

    @Test func sixtyDayWindow() {
        let day = 86_400.0
        #expect(TransferWindow.daysLeft(start: 0, now: 0) == 60)
        #expect(TransferWindow.daysLeft(start: 0, now: 0.5 * day) == 60)
        #expect(TransferWindow.daysLeft(start: 0, now: 59.5 * day) == 1)
        #expect(TransferWindow.daysLeft(start: 0, now: 60 * day) == 0)
        #expect(TransferWindow.daysLeft(start: 0, now: 90 * day) == 0)
    }

    @Test func pacerSpacesCallsEvenWithoutBurstsAfterIdle() {
        /// The moment `seconds` after the monotonic clock's origin.
        func at(_ seconds: Double) -> Deadline { Deadline(uptimeNanoseconds: UInt64(seconds * 1e9)) }
        var pacer = RatePacer(perSecond: 4)
        #expect(pacer.spacing == .milliseconds(250))
        let slots = (0..<8).map { _ in pacer.reserve(now: at(100)) }
        #expect(slots == [100, 100.25, 100.5, 100.75, 101, 101.25, 101.5, 101.75].map(at))
        // After ten idle seconds the next call goes at once, and the one after waits a full spacing.
        #expect(pacer.reserve(now: at(112)) == at(112))
        #expect(pacer.reserve(now: at(112)) == at(112.25))
        pacer.hold(until: at(120))
        #expect(pacer.reserve(now: at(113)) == at(120))
    }

    @Test func retryHonorsRetryAfterAndBacksOff() {
        let retry = AppleRetry(policy: RetryPolicy(maxAttempts: 3, baseDelay: .seconds(1), maxDelay: .seconds(60)), maxRetryAfter: .seconds(600))
        #expect(retry.delay(afterAttempts: 1, retryAfter: nil, jitter: 0) == .milliseconds(500))
        #expect(retry.delay(afterAttempts: 3, retryAfter: nil, jitter: 0.999) > .milliseconds(3900))
        #expect(retry.delay(afterAttempts: 1, retryAfter: .seconds(30), jitter: 0) == .seconds(30))
        #expect(retry.delay(afterAttempts: 1, retryAfter: .seconds(86_400), jitter: 0) == .seconds(600))
        #expect(!retry.isExhausted(attempts: 2) && retry.isExhausted(attempts: 3))
    }

    @Test func bearerTokenRenewedBeforeItExpires() {
        var cache = BearerTokenCache()
        #expect(cache.valid(now: .zero) == nil)
        cache.store("a1", now: .seconds(1000), lifetime: .seconds(3600))
        #expect(cache.valid(now: .seconds(1000 + 3299)) == "a1")
        #expect(cache.valid(now: .seconds(1000 + 3300)) == nil)  // five minutes left: renew
        cache.store("a2", now: .zero, lifetime: .seconds(60))  // a short-lived token keeps 90% of its life
        #expect(cache.valid(now: .seconds(53)) == "a2" && cache.valid(now: .seconds(54)) == nil)
        cache.invalidate()
        #expect(cache.valid(now: .zero) == nil)
    }
}
