/// Verifies Apple's server-to-server notification tokens against a `VerificationPolicy`.
///
/// Checks, first failure wins: structure, `alg` == RS256, `kid`, signature (via the caller's
/// closure, called exactly once and only after the earlier checks passed), `iss`, `aud`, `exp`,
/// `iat`, `jti`, `events`. Header members other than `alg` and `kid` are ignored.
///
/// Bounds on what a correctly signed token may say:
/// - `iat` is required (`missing_iat`) and may lie at most the clock skew in the future
///   (`issued_in_future`); `exp`/`iat` that are not integral numbers are `malformed_claims`.
/// - `exp` is optional; a token without it expires at `iat` + `defaultLifetimeSeconds` (86,400 s,
///   the lifetime of Apple's real tokens), plus the clock skew, like an explicit `exp`.
/// - the event's `event_time` (milliseconds) must lie in [`minEventTimeMillis` (2019-01-01),
///   `iat` * 1000 + `maxEventTimeAfterIssueMillis` (1 h)] (`bad_event_time`, checked in the `events`
///   step after the event's shape). A value in seconds, a negative one, or one of 2^53 and beyond is
///   out of bounds; a non-integral number, or not a number at all, is `malformed_events`.
/// All arithmetic on claim values saturates; no input makes it trap.
public struct NotificationVerifier: Sendable {
    public var policy: VerificationPolicy

    /// Lengths: `TokenLimits`, shared with `IDTokenVerifier`.
    public static let maxJTILength = TokenLimits.maxJTILength
    public static let maxSubLength = TokenLimits.maxSubLength
    public static let maxTypeLength = TokenLimits.maxTypeLength
    public static let maxEmailLength = TokenLimits.maxEmailLength
    /// Lifetime of a token without `exp`, counted from `iat`, in seconds (86,400: Apple's tokens
    /// carry `exp` = `iat` + 86,400).
    public static let defaultLifetimeSeconds: Int64 = 86_400
    /// Earliest accepted `event_time`: 2019-01-01T00:00:00Z in milliseconds (before Sign in with
    /// Apple existed; catches seconds sent as milliseconds, zero and negative values).
    public static let minEventTimeMillis: Int64 = 1_546_300_800_000
    /// How far `event_time` may lie after `iat`, in milliseconds (1 h): an event is not signed
    /// long before it happens.
    public static let maxEventTimeAfterIssueMillis: Int64 = 3_600_000

    public init(policy: VerificationPolicy) {
        self.policy = policy
    }

    /// Body `{"payload":"..."}` -> token. Errors: `.malformedJSON`, `.missingPayload`.
    public func extractToken(fromBody body: [UInt8]) throws(RejectReason) -> String {
        // Apple's body, read without building a JSON tree; anything else takes the full parser.
        if let token = Self.plainPayload(body) { return token }
        guard !body.isEmpty, let object = (try? JSONParser.parse(body))?.objectValue else {
            throw .malformedJSON
        }
        guard let token = object["payload"]?.stringValue, !token.isEmpty else { throw .missingPayload }
        return token
    }

    /// The token of a body that is exactly `{"payload":"<token>"}` (JSON whitespace allowed between
    /// the tokens) with a non-empty token of base64url characters and dots; nil for any other
    /// body. What the full parser would return for such a body, without its tree and hashing.
    static func plainPayload(_ body: [UInt8]) -> String? {
        body.withUnsafeBufferPointer { b -> String? in
            var cursor = PlainCursor(bytes: b)
            guard cursor.skip("{"), cursor.skip("\"payload\""), cursor.skip(":"), cursor.skip("\"") else { return nil }
            let start = cursor.index
            // A table, not comparisons: base64url text defeats the branch predictor.
            tokenByteTable.withUnsafeBufferPointer { table in
                while cursor.index < b.count, table[Int(b[cursor.index])] { cursor.index += 1 }
            }
            let end = cursor.index
            // The closing quote right after the token (no whitespace inside the string).
            guard end > start, end < b.count, b[end] == UInt8(ascii: "\"") else { return nil }
            cursor.index += 1
            guard cursor.skip("}") else { return nil }
            cursor.skipSpace()
            guard cursor.index == b.count else { return nil }
            return String(decoding: UnsafeBufferPointer(rebasing: b[start..<end]), as: UTF8.self)
        }
    }

    private static let tokenByteTable: [Bool] = (0..<256).map { isTokenByte(UInt8($0)) }

    /// `A-Z a-z 0-9 - _ .`: the bytes of a compact JWS.
    static func isTokenByte(_ c: UInt8) -> Bool {
        let letter = c | 0x20
        return (letter >= UInt8(ascii: "a") && letter <= UInt8(ascii: "z"))
            || (c >= UInt8(ascii: "0") && c <= UInt8(ascii: "9"))
            || c == UInt8(ascii: "-") || c == UInt8(ascii: "_") || c == UInt8(ascii: ".")
    }

    /// Steps over JSON whitespace and exact literals of a body.
    private struct PlainCursor {
        let bytes: UnsafeBufferPointer<UInt8>
        var index = 0

        mutating func skipSpace() {
            while index < bytes.count {
                switch bytes[index] {
                case 0x20, 0x09, 0x0A, 0x0D: index += 1
                default: return
                }
            }
        }

        /// Whitespace, then `literal`; false (position unspecified) when it is not there.
        mutating func skip(_ literal: StaticString) -> Bool {
            skipSpace()
            let count = literal.utf8CodeUnitCount
            guard bytes.count - index >= count else { return false }
            for k in 0..<count where bytes[index + k] != literal.utf8Start[k] { return false }
            index += count
            return true
        }
    }

    /// Full verification of a compact JWS. `now` is Unix time in seconds.
    public func verify(
        token: String, now: Int64,
        checkSignature: (_ kid: String, _ signingInput: [UInt8], _ signature: [UInt8]) -> SignatureCheck
    ) throws(RejectReason) -> VerifiedNotification {
        try run(token: token, now: now, checkSignature: checkSignature, record: nil)
    }

    /// `extractToken(fromBody:)` followed by `verify(token:now:checkSignature:)`.
    public func verify(
        body: [UInt8], now: Int64,
        checkSignature: (_ kid: String, _ signingInput: [UInt8], _ signature: [UInt8]) -> SignatureCheck
    ) throws(RejectReason) -> VerifiedNotification {
        let token = try extractToken(fromBody: body)
        return try verify(token: token, now: now, checkSignature: checkSignature)
    }

    /// Same checks as `verify`, reporting every step in order; stops at the first failure.
    public func inspect(
        token: String, now: Int64,
        checkSignature: (_ kid: String, _ signingInput: [UInt8], _ signature: [UInt8]) -> SignatureCheck
    ) -> [InspectionStep] {
        var steps: [InspectionStep] = []
        _ = try? run(token: token, now: now, checkSignature: checkSignature) { steps.append($0) }
        return steps
    }

    // MARK: - Implementation

    private struct Recorder {
        let record: ((InspectionStep) -> Void)?

        func pass(_ name: String, _ detail: @autoclosure () -> String) {
            record?(InspectionStep(name: name, passed: true, reason: nil, detail: detail()))
        }

        func fail(_ name: String, _ reason: RejectReason, _ detail: @autoclosure () -> String) -> RejectReason {
            record?(InspectionStep(name: name, passed: false, reason: reason, detail: detail()))
            return reason
        }
    }

    private func run(
        token: String, now: Int64,
        checkSignature: (_ kid: String, _ signingInput: [UInt8], _ signature: [UInt8]) -> SignatureCheck,
        record: ((InspectionStep) -> Void)?
    ) throws(RejectReason) -> VerifiedNotification {
        let r = Recorder(record: record)

        // (1)-(5): structure, alg, kid, signature, crit, issuer: the prelude shared with id_tokens.
        let signed: SignedJWS
        do {
            signed = try SignedJWS.verify(token: token, issuer: policy.issuer, checkSignature: checkSignature) { step in
                switch step {
                case .structure(let bytes):
                    r.pass("structure", "3 segments; header and claims are JSON objects; signature \(bytes) bytes")
                case .algorithm: r.pass("header", "alg is \"RS256\"")
                case .key(let kid): r.pass("key", "kid \(JSONValue.quoted(kid)) is a known key")
                case .signature: r.pass("signature", "RS256 signature is valid")
                case .issuer(let issuer): r.pass("issuer", "iss is \(JSONValue.quoted(issuer))")
                }
            }
        } catch {
            throw fail(error, r)
        }
        let jws = signed.jws, kid = signed.kid, issuer = signed.issuer
        let claims = jws.claims

        // (6) audience
        guard let audience = claims["aud"]?.stringValue,
            policy.audiences.containsExactly(audience)
        else {
            let expected = policy.audiences.sorted().map { JSONValue.quoted($0) }.joined(separator: ", ")
            throw r.fail("audience", .wrongAudience, "aud is \(Self.describe(claims["aud"])), expected one of [\(expected)]")
        }
        if !VerificationPolicy.key(kid, maySignFor: audience, in: policy.keyAudiences) {
            let expected = (policy.keyAudiences[kid] ?? []).sorted().map { JSONValue.quoted($0) }.joined(separator: ", ")
            throw r.fail(
                "audience", .wrongAudience,
                "aud is \(JSONValue.quoted(audience)), but key \(JSONValue.quoted(kid)) is trusted only for [\(expected)]")
        }
        r.pass("audience", "aud is \(JSONValue.quoted(audience))")

        let skew = policy.clockSkewSeconds

        // (7) expiry. Without `exp`, the token expires `defaultLifetimeSeconds` after `iat`; when
        // `iat` is missing or not an integral number, the issued-at step below rejects the token.
        var expiresAt: Int64?
        if let exp = claims["exp"] {
            guard let value = exp.int64Value else {
                throw r.fail("expiry", .malformedClaims, "exp is \(Self.describe(exp)), expected an integral number")
            }
            if now > Self.saturatingAdd(value, skew) {
                throw r.fail(
                    "expiry", .expired, "exp \(value) (\(Self.formatUTC(value))) is before now \(now) (\(Self.formatUTC(now))) minus \(skew)s skew")
            }
            expiresAt = value
            r.pass("expiry", "exp \(value) (\(Self.formatUTC(value)))")
        } else if let iat = claims["iat"]?.int64Value {
            let implied = Self.saturatingAdd(iat, Self.defaultLifetimeSeconds)
            if now > Self.saturatingAdd(implied, skew) {
                throw r.fail(
                    "expiry", .expired,
                    "no exp claim; iat + \(Self.defaultLifetimeSeconds)s = \(implied) (\(Self.formatUTC(implied))) is before now \(now) (\(Self.formatUTC(now))) minus \(skew)s skew"
                )
            }
            r.pass("expiry", "no exp claim; expires at iat + \(Self.defaultLifetimeSeconds)s = \(implied) (\(Self.formatUTC(implied)))")
        } else {
            r.pass("expiry", "no exp claim; the expiry follows from iat (checked next)")
        }

        // (8) issued-at: required.
        guard let iat = claims["iat"] else {
            throw r.fail("issued-at", .missingIAT, "iat is missing, expected the integral Unix time the token was issued")
        }
        guard let issuedAt = iat.int64Value else {
            throw r.fail("issued-at", .malformedClaims, "iat is \(Self.describe(iat)), expected an integral number")
        }
        if issuedAt > Self.saturatingAdd(now, skew) {
            throw r.fail(
                "issued-at", .issuedInFuture,
                "iat \(issuedAt) (\(Self.formatUTC(issuedAt))) is after now \(now) (\(Self.formatUTC(now))) plus \(skew)s skew")
        }
        r.pass("issued-at", "iat \(issuedAt) (\(Self.formatUTC(issuedAt)))")

        // (9) jti
        guard let jti = claims["jti"]?.stringValue, !jti.isEmpty, jti.unicodeScalars.count <= Self.maxJTILength else {
            throw r.fail(
                "jti", .missingJTI,
                "jti is \(Self.describe(claims["jti"], limit: 40)), expected a non-empty string of at most \(Self.maxJTILength) characters")
        }
        r.pass("jti", "jti is \(JSONValue.quoted(jti))")

        // (10) events: the shape first, then event_time against its bounds.
        let fields: EventFields
        do {
            fields = try Self.parseEventFields(claims["events"])
        } catch {
            throw r.fail("events", error, error.summary)
        }
        if let problem = Self.eventTimeProblem(fields.eventTime, issuedAt: issuedAt) {
            throw r.fail("events", .badEventTime, Self.describe(problem, eventTime: fields.eventTime, issuedAt: issuedAt))
        }
        let event = fields.event
        r.pass("events", Self.describe(event))

        return VerifiedNotification(
            jti: jti, issuer: issuer, audience: audience,
            issuedAt: issuedAt, expiresAt: expiresAt, event: event,
            claimsJSON: jws.claimsText.isEmpty ? JSONValue.object(claims).serialized() : jws.claimsText)
    }

    /// The reason and inspection step of a prelude failure.
    private func fail(_ failure: SignedJWS.Failure, _ r: Recorder) -> RejectReason {
        switch failure {
        case .structure(let reason):
            return r.fail("structure", reason, reason.summary)
        case .algorithm(let alg):
            return r.fail("header", .unsupportedAlgorithm, "alg is \(Self.describe(alg)), expected \"RS256\"")
        case .missingKid(let kid):
            return r.fail("key", .missingKid, "kid is \(Self.describe(kid)), expected a non-empty string")
        case .signature(let kid, .invalid):
            return r.fail("signature", .badSignature, "RS256 signature does not verify with key \(JSONValue.quoted(kid))")
        case .signature(let kid, .unknownKey):
            return r.fail("key", .unknownKid, "no known key has kid \(JSONValue.quoted(kid))")
        case .signature(_, .keysUnavailable), .signature(_, .valid):
            return r.fail("key", .keysUnavailable, "the key set is unavailable")
        case .crit:
            return r.fail("header", .malformedHeader, "crit lists extensions this receiver does not understand")
        case .issuer(let iss):
            return r.fail("issuer", .wrongIssuer, "iss is \(Self.describe(iss)), expected \(JSONValue.quoted(policy.issuer))")
        }
    }

    /// Parses the `events` claim (an object, or a string holding a JSON object) and checks its
    /// `event_time` against the bounds for a token issued at `issuedAt` (Unix seconds).
    static func parseEvent(_ value: JSONValue?, issuedAt: Int64) throws(RejectReason) -> AppleEvent {
        let fields = try parseEventFields(value)
        if eventTimeProblem(fields.eventTime, issuedAt: issuedAt) != nil { throw .badEventTime }
        return fields.event
    }

    /// The event's members, shape-checked; `eventTime` is the integral JSON number as sent, not yet
    /// bounds-checked.
    struct EventFields {
        var eventTime: Double
        /// The event; its `eventTimeMillis` is meaningful only once `eventTime` passed the bounds.
        var event: AppleEvent
    }

    /// Shape checks of the `events` claim, in order: object, `sub`, `type`, `event_time` an integral
    /// number (any magnitude), `email`, `is_private_email`.
    static func parseEventFields(_ value: JSONValue?) throws(RejectReason) -> EventFields {
        let object: [String: JSONValue]
        switch value {
        case .object(let o)?:
            object = o
        case .string(let text)?:
            guard let o = (try? JSONParser.parse(text))?.objectValue else { throw .malformedEvents }
            object = o
        default:
            throw .malformedEvents
        }
        guard let sub = object["sub"]?.stringValue, !sub.isEmpty else { throw .missingSub }
        guard sub.unicodeScalars.count <= maxSubLength else { throw .malformedEvents }
        guard let type = object["type"]?.stringValue, !type.isEmpty else { throw .missingType }
        guard type.unicodeScalars.count <= maxTypeLength else { throw .malformedEvents }
        guard case .number(let eventTime)? = object["event_time"], eventTime.isFinite,
            eventTime.rounded(.towardZero) == eventTime
        else { throw .malformedEvents }
        var email: String?
        if let value = object["email"] {
            guard let s = value.stringValue, s.unicodeScalars.count <= maxEmailLength else { throw .malformedEvents }
            email = s
        }
        var isPrivateEmail: Bool?
        if let value = object["is_private_email"] {
            guard let flag = value.appleFlag else { throw .malformedEvents }
            isPrivateEmail = flag
        }
        // Exact for |eventTime| <= 2^53; larger magnitudes are out of bounds and never used.
        let millis = JSONValue.exactInteger(eventTime) ?? 0
        return EventFields(
            eventTime: eventTime,
            event: AppleEvent(
                type: EventType(rawValue: type), sub: sub, eventTimeMillis: millis,
                email: email, isPrivateEmail: isPrivateEmail))
    }

    /// Why an integral `event_time` is out of bounds.
    enum EventTimeProblem: Equatable {
        /// Before `minEventTimeMillis` (also: negative, or seconds instead of milliseconds).
        case beforeMinimum
        /// After `iat` * 1000 + `maxEventTimeAfterIssueMillis` (`limit`), or beyond 2^53.
        case afterIssue(limit: Int64)
    }

    /// The accepted `event_time` range is [`minEventTimeMillis`, `iat` * 1000 +
    /// `maxEventTimeAfterIssueMillis`] (empty when `iat` is before 2019); saturating, never traps.
    static func eventTimeProblem(_ eventTime: Double, issuedAt: Int64) -> EventTimeProblem? {
        let (product, overflow) = issuedAt.multipliedReportingOverflow(by: 1000)
        let issuedMillis = overflow ? (issuedAt > 0 ? Int64.max : Int64.min) : product
        let limit = saturatingAdd(issuedMillis, maxEventTimeAfterIssueMillis)
        guard let millis = JSONValue.exactInteger(eventTime) else {
            // Integral but beyond ±2^53 (the caller checked integrality).
            return eventTime < 0 ? .beforeMinimum : .afterIssue(limit: limit)
        }
        if millis < minEventTimeMillis { return .beforeMinimum }
        if millis > limit { return .afterIssue(limit: limit) }
        return nil
    }

    /// Inspection detail for an out-of-bounds `event_time`: the value and the bound, nothing else
    /// of the event.
    static func describe(_ problem: EventTimeProblem, eventTime: Double, issuedAt: Int64) -> String {
        let value = JSONValue.number(eventTime).serialized()
        switch problem {
        case .beforeMinimum:
            var text = "event_time \(value) is before 2019-01-01T00:00:00Z (\(minEventTimeMillis) ms)"
            // Seconds sent where milliseconds belong land in [2019-01-01, iat + 1 h] once multiplied.
            if let millis = JSONValue.exactInteger(eventTime), millis > 0,
                eventTimeProblem(Double(millis) * 1000, issuedAt: issuedAt) == nil
            {
                text += "; it looks like seconds, expected milliseconds"
            }
            return text
        case .afterIssue(let limit):
            return "event_time \(value) is after iat \(issuedAt) + \(maxEventTimeAfterIssueMillis / 1000)s = \(limit) ms (\(formatUTC(limit / 1000)))"
        }
    }

    // MARK: - Helpers

    static func saturatingAdd(_ a: Int64, _ b: Int64) -> Int64 { TokenLimits.saturatingAdd(a, b) }

    /// A short human description of a claim value (strings shown quoted, truncated to `limit` characters).
    static func describe(_ value: JSONValue?, limit: Int = 100) -> String {
        guard let value else { return "missing" }
        switch value {
        case .null: return "null"
        case .bool(let b): return "the boolean \(b)"
        case .number: return "the number \(value.serialized())"
        case .string(let s):
            if s.isEmpty { return "an empty string" }
            if s.unicodeScalars.count > limit {
                var t = String.UnicodeScalarView()
                t.append(contentsOf: s.unicodeScalars.prefix(limit))
                return JSONValue.quoted(String(t)) + "… (\(s.unicodeScalars.count) characters)"
            }
            return JSONValue.quoted(s)
        case .array(let a): return "an array of \(a.count) elements"
        case .object: return "an object"
        }
    }

    static func describe(_ event: AppleEvent) -> String {
        var parts = [
            "type \(JSONValue.quoted(event.type.rawValue))\(event.type.isKnown ? "" : " (unknown, will be ignored)")",
            "sub \(JSONValue.quoted(event.sub))",
            "event_time \(event.eventTimeMillis) (\(formatUTC(event.eventTimeMillis / 1000)))",
        ]
        if let email = event.email { parts.append("email \(JSONValue.quoted(email))") }
        if let p = event.isPrivateEmail { parts.append("is_private_email \(p)") }
        return parts.joined(separator: ", ")
    }

    /// Formats Unix seconds as `YYYY-MM-DDTHH:MM:SSZ` (proleptic Gregorian, UTC), without Foundation.
    public static func formatUTC(_ seconds: Int64) -> String {
        // Keep within a range where the arithmetic cannot overflow (years -9999...9999 roughly).
        guard seconds > -315_000_000_000, seconds < 253_402_300_800 else { return "out of range" }
        var days = seconds / 86_400
        var rem = seconds % 86_400
        if rem < 0 {
            rem += 86_400
            days -= 1
        }
        // Howard Hinnant's civil_from_days.
        let z = days + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let doe = z - era * 146_097
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365
        var year = yoe + era * 400
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
        let mp = (5 * doy + 2) / 153
        let day = doy - (153 * mp + 2) / 5 + 1
        let month = mp < 10 ? mp + 3 : mp - 9
        if month <= 2 { year += 1 }
        func pad(_ v: Int64, _ width: Int) -> String {
            let s = String(v.magnitude)
            return (v < 0 ? "-" : "") + String(repeating: "0", count: max(0, width - s.count)) + s
        }
        return "\(pad(year, 4))-\(pad(month, 2))-\(pad(day, 2))T\(pad(rem / 3600, 2)):\(pad(rem % 3600 / 60, 2)):\(pad(rem % 60, 2))Z"
    }
}
