// The `verifier` fuzz target: request body -> verified notification -> account decision.
//
// Built by `scripts/fuzz` with swiftc directly, in ONE module together with Sources/SiwaCore/*.swift
// (so internal helpers such as `NotificationVerifier.formatUTC` are reachable), with
// `-sanitize=fuzzer,address -parse-as-library -enable-experimental-feature Extern`; the libFuzzer
// entry points are in FuzzMain.swift. See Fuzz/README.md for the invariants checked here.
//
// Every input is treated as an HTTP request body (the corpus files and crash artifacts are plain
// bodies). A structure-aware custom mutator (bottom of this file) decodes the JWS inside
// `{"payload":"..."}`, mutates the header / claims / events JSON or the signature, and re-encodes
// it, so the fuzzer reaches the claims and event checks instead of stalling on base64.

// MARK: - Fixed configuration

enum FuzzSetup {
    static let now: Int64 = 1_752_572_200 // 2025-07-15T09:36:40Z, matches the corpus
    static let audiences: Set<String> = ["de.lunaone.sign-in-with-apple-example", "com.example.app"]
    static let policy = VerificationPolicy(audiences: audiences)
    static let verifier = NotificationVerifier(policy: policy)

    /// Account states every verified event is applied to (nil: a never-seen sub).
    static let states: [AccountState?] = [
        nil,
        .new,
        AccountState(status: .active, email: "x@privaterelay.appleid.com", isPrivateEmail: true, emailForwarding: true,
                     lastEventTime: 1_752_572_190_719, emailEventTime: 1_752_572_190_719, statusEventTime: nil),
        AccountState(status: .consentRevoked, email: "a@example.com", isPrivateEmail: false, emailForwarding: false,
                     lastEventTime: 1_752_572_190_719, emailEventTime: 1_752_572_190_000, statusEventTime: 1_752_572_190_719),
        AccountState(status: .active, lastEventTime: .max, emailEventTime: .max, statusEventTime: .max),
        AccountState(status: .active, lastEventTime: .min, emailEventTime: .min, statusEventTime: .min),
        AccountState(status: .deleted, lastEventTime: 1_752_572_190_719, statusEventTime: 1_752_572_190_719),
        AccountState(status: .deleted, email: "left@over.example", isPrivateEmail: true, emailForwarding: true),
    ]

    /// Reasons `verify` may throw at all (transport-level reasons must never come out of it).
    static let verifyReasons: Set<RejectReason> = [
        .malformedJSON, .missingPayload, .malformedJWS, .malformedHeader, .malformedClaims, .missingJTI,
        .malformedEvents, .missingSub, .missingType, .unsupportedAlgorithm, .missingKid, .unknownKid,
        .badSignature, .wrongIssuer, .wrongAudience, .expired, .issuedInFuture, .missingIAT, .badEventTime, .keysUnavailable,
    ]
    /// Reasons possible before the signature closure is called.
    static let preSignatureReasons: Set<RejectReason> = [
        .malformedJSON, .missingPayload, .malformedJWS, .malformedHeader, .malformedClaims, .unsupportedAlgorithm, .missingKid,
    ]
    /// Reasons possible after a `.valid` signature.
    static let postSignatureReasons: Set<RejectReason> = [
        .wrongIssuer, .wrongAudience, .malformedClaims, .expired, .issuedInFuture, .missingIAT, .missingJTI,
        .malformedEvents, .missingSub, .missingType, .badEventTime,
    ]
    static let stepNames = ["structure", "header", "key", "signature", "issuer", "audience", "expiry", "issued-at", "jti", "events"]
}

// MARK: - Entry point

enum VerifierTarget {
    static func initialize() {
        // formatUTC at and around the edges of its documented range, and of days/eras.
        for s: Int64 in [-315_000_000_000, -315_000_000_001, -314_999_999_999, 253_402_300_800, 253_402_300_799, 253_402_300_801,
                         0, -1, 1, 86_399, 86_400, -86_400, -86_401, 951_782_400, 4_107_542_400, -62_135_596_800, -62_135_596_801,
                         -62_167_219_200, .min, .max] {
            FuzzChecks.checkUTC(s)
        }
    }

    static func testOneInput(_ body: [UInt8]) {
        FuzzChecks.json(body)
        FuzzChecks.base64(body)
        FuzzChecks.verifier(body)
        FuzzChecks.jwks(body)
        FuzzChecks.formatUTC(body)
    }
}

struct SignatureCall: Equatable {
    var kid: String
    var signingInput: [UInt8]
    var signature: [UInt8]
}

enum FuzzChecks {
    // MARK: JSON

    /// Any value the parser accepts serializes to text that parses back to an equal value, and that
    /// text is a fixed point of parse+serialize.
    @discardableResult
    static func json(_ bytes: [UInt8]) -> JSONValue? {
        guard let value = try? JSONParser.parse(bytes) else { return nil }
        roundTrip(value)
        return value
    }

    static func roundTrip(_ value: JSONValue, maxDepth: Int = 32) {
        let text = value.serialized()
        precondition(!text.utf8.contains(0), "invariant: serialized() emitted a raw NUL")
        let again: JSONValue
        do {
            again = try JSONParser.parse(text, maxDepth: maxDepth)
        } catch {
            preconditionFailure("invariant: serialized() output does not re-parse (\(error)): \(text)")
        }
        precondition(again == value, "invariant: serialized() re-parses to a different value: \(text)")
        precondition(again.serialized() == text, "invariant: serialized() is not a fixed point: \(text)")
    }

    // MARK: Base64URL

    static func base64(_ bytes: [UInt8]) {
        // decode(encode(x)) == x for arbitrary bytes (a prefix: the codec has no state beyond 3 bytes,
        // and this keeps large inputs cheap).
        let prefix = Array(bytes.prefix(512))
        let encoded = Base64URL.encode(prefix)
        precondition(Base64URL.decode(encoded) == prefix, "invariant: decode(encode(x)) != x")
        precondition(encoded.utf8.count == (prefix.count * 4 + 2) / 3, "invariant: unpadded length")
        // encode(decode(x)) == x for every x that decodes: the whole input (the token's own segments
        // are checked in `verifier`).
        canonicalBase64(String(decoding: bytes, as: UTF8.self))
    }

    static func canonicalBase64<S: StringProtocol>(_ text: S) {
        guard let decoded = Base64URL.decode(text) else { return }
        let n = text.utf8.count
        precondition(n % 4 != 1, "invariant: decoded a length % 4 == 1 string")
        precondition(decoded.count == n / 4 * 3 + max(0, n % 4 - 1), "invariant: decoded length")
        precondition(Array(Base64URL.encode(decoded).utf8) == Array(text.utf8), "invariant: encode(decode(x)) != x for \(text)")
    }

    // MARK: NotificationVerifier

    static func runVerify(_ body: [UInt8], _ answer: SignatureCheck) -> (Result<VerifiedNotification, RejectReason>, [SignatureCall]) {
        var calls: [SignatureCall] = []
        do {
            let verified = try FuzzSetup.verifier.verify(body: body, now: FuzzSetup.now) { kid, input, signature in
                calls.append(SignatureCall(kid: kid, signingInput: input, signature: signature))
                return answer
            }
            return (.success(verified), calls)
        } catch {
            return (.failure(error), calls)
        }
    }

    static func verifier(_ body: [UInt8]) {
        let token = try? FuzzSetup.verifier.extractToken(fromBody: body)
        if let token { tokenPieces(token) }
        let (valid, validCalls) = runVerify(body, .valid)
        let (invalid, invalidCalls) = runVerify(body, .invalid)

        precondition(validCalls.count <= 1 && invalidCalls.count <= 1, "invariant: signature closure called more than once")
        precondition(validCalls == invalidCalls, "invariant: closure arguments differ between runs")

        if let call = validCalls.first {
            // The closure ran: everything before it passed, so `.invalid` must fail exactly there.
            guard case .failure(.badSignature) = invalid else {
                preconditionFailure("invariant: .invalid signature did not yield bad_signature but \(invalid)")
            }
            guard let token else { preconditionFailure("invariant: signature checked but extractToken fails") }
            checkSignatureCall(call, token: token)
            if case .failure(let reason) = valid {
                precondition(FuzzSetup.postSignatureReasons.contains(reason), "invariant: \(reason) after a valid signature")
            }
        } else {
            // Rejected before the signature check: both runs fail identically, and never succeed.
            guard case .failure(let reason) = valid else { preconditionFailure("invariant: verified without a signature check") }
            precondition(FuzzSetup.preSignatureReasons.contains(reason), "invariant: \(reason) before the signature check")
            guard case .failure(reason) = invalid else { preconditionFailure("invariant: runs disagree before the signature check") }
        }
        if case .failure(let reason) = valid {
            precondition(FuzzSetup.verifyReasons.contains(reason), "invariant: verify threw transport reason \(reason)")
        }

        checkInspection(token, valid)

        if case .success(let notification) = valid {
            checkVerified(notification)
            checkEventRules(notification.event)
        }
    }

    /// Every token segment that decodes is canonical base64url; decoded header/claims and a string
    /// `events` claim obey the JSON round-trip invariants.
    static func tokenPieces(_ token: String) {
        let segments = token.split(separator: ".", omittingEmptySubsequences: false)
        for segment in segments { canonicalBase64(segment) }
        guard segments.count == 3 else { return }
        if let header = Base64URL.decode(segments[0]) { json(header) }
        if let claims = Base64URL.decode(segments[1]) {
            if let events = json(claims)?["events"]?.stringValue { json(Array(events.utf8)) }
        }
    }

    /// The closure sees exactly the token's first two segments and the decoded third one.
    static func checkSignatureCall(_ call: SignatureCall, token: String) {
        precondition(!call.kid.isEmpty, "invariant: empty kid passed to the signature check")
        let utf8 = Array(token.utf8)
        precondition(utf8.count > call.signingInput.count && Array(utf8[..<call.signingInput.count]) == call.signingInput,
                     "invariant: signingInput is not a prefix of the token")
        precondition(utf8[call.signingInput.count] == UInt8(ascii: "."), "invariant: signingInput does not end before a dot")
        precondition(call.signingInput.filter { $0 == UInt8(ascii: ".") }.count == 1, "invariant: signingInput has != 1 dot")
        let signatureSegment = Array(utf8[(call.signingInput.count + 1)...])
        precondition(Array(Base64URL.encode(call.signature).utf8) == signatureSegment, "invariant: signature bytes do not match segment 3")
    }

    /// `inspect` reports the same outcome as `verify`, step by step, in order.
    static func checkInspection(_ token: String?, _ result: Result<VerifiedNotification, RejectReason>) {
        guard let token else {
            if case .failure(let reason) = result {
                precondition(reason == .malformedJSON || reason == .missingPayload, "invariant: extractToken fails but verify says \(reason)")
            }
            return
        }
        let steps = FuzzSetup.verifier.inspect(token: token, now: FuzzSetup.now) { _, _, _ in .valid }
        precondition(!steps.isEmpty, "invariant: inspect returned no steps")
        let names = steps.map(\.name)
        precondition(Array(FuzzSetup.stepNames.prefix(names.count)) == names, "invariant: inspect step names/order \(names)")
        precondition(steps.dropLast().allSatisfy { $0.passed && $0.reason == nil }, "invariant: inspect continued after a failure")
        precondition(steps.allSatisfy { !$0.detail.isEmpty }, "invariant: empty inspection detail")
        for step in steps {
            // Details describe values, they never contain the token (header/claims segments).
            if token.utf8.count >= 16 { precondition(!contains(step.detail, token), "invariant: detail contains the token") }
        }
        switch result {
        case .success:
            precondition(steps.count == FuzzSetup.stepNames.count && steps.last!.passed, "invariant: verify ok but inspect failed")
        case .failure(let reason):
            precondition(steps.last!.passed == false && steps.last!.reason == reason,
                         "invariant: inspect ends with \(String(describing: steps.last!.reason)), verify threw \(reason)")
        }
    }

    static func checkVerified(_ n: VerifiedNotification) {
        let policy = FuzzSetup.policy
        precondition(n.issuer == policy.issuer, "invariant: wrong issuer accepted")
        precondition(policy.audiences.contains(n.audience), "invariant: wrong audience accepted")
        precondition(!n.jti.isEmpty && n.jti.unicodeScalars.count <= NotificationVerifier.maxJTILength, "invariant: jti length")
        precondition(!n.event.sub.isEmpty && n.event.sub.unicodeScalars.count <= NotificationVerifier.maxSubLength, "invariant: sub length")
        precondition(!n.event.type.rawValue.isEmpty && n.event.type.rawValue.unicodeScalars.count <= NotificationVerifier.maxTypeLength,
                     "invariant: type length")
        if let email = n.event.email { precondition(email.unicodeScalars.count <= NotificationVerifier.maxEmailLength, "invariant: email length") }
        precondition(EventType(rawValue: n.event.type.rawValue) == n.event.type, "invariant: EventType rawValue round trip")
        // iat is required; without exp the token lives iat + 86,400 s.
        guard let iat = n.issuedAt else { preconditionFailure("invariant: token without iat accepted") }
        precondition(iat <= NotificationVerifier.saturatingAdd(FuzzSetup.now, policy.clockSkewSeconds), "invariant: future iat accepted")
        let expiry = n.expiresAt ?? NotificationVerifier.saturatingAdd(iat, NotificationVerifier.defaultLifetimeSeconds)
        precondition(FuzzSetup.now <= NotificationVerifier.saturatingAdd(expiry, policy.clockSkewSeconds), "invariant: expired token accepted")
        // event_time in [2019-01-01, iat + 1 h], in milliseconds (iat here is at most now + skew: no overflow).
        let t = n.event.eventTimeMillis
        precondition(t >= NotificationVerifier.minEventTimeMillis, "invariant: event_time before 2019 accepted: \(t)")
        precondition(t <= iat * 1000 + NotificationVerifier.maxEventTimeAfterIssueMillis, "invariant: event_time after iat + 1 h accepted: \(t)")
        precondition(NotificationVerifier.eventTimeProblem(Double(t), issuedAt: iat) == nil, "invariant: eventTimeProblem disagrees")
        for seconds in [n.expiresAt, n.issuedAt, n.event.eventTimeMillis / 1000] { if let seconds { checkUTC(seconds) } }

        // claimsJSON is what goes into the jsonb column: it must re-parse, to an object that still
        // carries the verified claims, and be canonical.
        let claims: [String: JSONValue]
        do {
            guard let object = try JSONParser.parse(n.claimsJSON).objectValue else { preconditionFailure("invariant: claimsJSON is not an object") }
            claims = object
        } catch {
            preconditionFailure("invariant: claimsJSON does not re-parse (\(error)): \(n.claimsJSON)")
        }
        roundTrip(.object(claims))
        precondition(claims["iss"] == .string(n.issuer) && claims["aud"] == .string(n.audience) && claims["jti"] == .string(n.jti),
                     "invariant: claimsJSON lost iss/aud/jti")
        precondition(claims["exp"]?.int64Value == n.expiresAt && claims["iat"]?.int64Value == n.issuedAt, "invariant: claimsJSON lost exp/iat")
        precondition((try? NotificationVerifier.parseEvent(claims["events"], issuedAt: iat)) == n.event, "invariant: claimsJSON events parse differently")

        // Re-signing the stored claims (fake signature) verifies to the very same notification.
        let token = Base64URL.encode(Array(#"{"alg":"RS256","kid":"fuzz"}"#.utf8)) + "." + Base64URL.encode(Array(n.claimsJSON.utf8)) + ".AA"
        let again = try? FuzzSetup.verifier.verify(token: token, now: FuzzSetup.now) { _, _, _ in .valid }
        precondition(again == n, "invariant: re-verifying claimsJSON gives \(String(describing: again))")
    }

    // MARK: EventRules

    static func checkEventRules(_ event: AppleEvent) {
        for current in FuzzSetup.states {
            let d = EventRules.apply(event, to: current)
            let old = current ?? .new
            let t = event.eventTimeMillis

            if old.status == .deleted {
                // A deleted account stays deleted, whatever arrives; only a later deletion moves its time.
                precondition(d.outcome == .finalDeleted && d.newState.status == .deleted && d.newState.email == old.email,
                             "invariant: a deleted account was changed: \(d)")
                if event.type != .accountDelete {
                    precondition(d == AccountDecision(newState: old, accountChanged: false, revokeSessions: .none, revokeReason: nil, outcome: .finalDeleted),
                                 "invariant: a deleted account was changed: \(d)")
                }
            } else {
                switch event.type {
                case .unknown:
                    precondition(d.outcome == .ignored && d.newState == old && !d.accountChanged && d.revokeSessions == .none,
                                 "invariant: unknown type changed something")
                case .signIn, .deletionRequested:
                    preconditionFailure("invariant: a notification carried a type only siwa-notify records: \(event.type)")
                case .accountDelete:
                    precondition(d.outcome == .applied && d.newState.status == .deleted && d.revokeSessions == .all
                                 && d.revokeReason == "account-delete" && d.accountChanged, "invariant: account-delete not applied: \(d)")
                    precondition(d.newState.email == nil && d.newState.isPrivateEmail == nil && d.newState.emailForwarding == nil,
                                 "invariant: account-delete kept personal data")
                case .consentRevoked:
                    precondition(d.revokeSessions == .createdAtOrBefore(t) && d.revokeReason == "consent-revoked",
                                 "invariant: consent-revoked must revoke sessions up to its time")
                    precondition(d.outcome == .stale || d.newState.status == .consentRevoked, "invariant: consent-revoked not applied")
                case .emailDisabled, .emailEnabled:
                    precondition(d.revokeSessions == .none && d.revokeReason == nil, "invariant: email event revoked sessions")
                    precondition(d.newState.status == old.status, "invariant: email event changed status")
                    if d.outcome == .applied {
                        precondition(d.newState.emailForwarding == (event.type == .emailEnabled), "invariant: forwarding flag")
                        precondition(d.newState.emailEventTime == t, "invariant: emailEventTime")
                    }
                }
                precondition(d.outcome != .finalDeleted, "invariant: final_deleted for a live account")
                if d.outcome == .stale { precondition(d.newState == old, "invariant: a stale event changed the account") }
                if d.outcome == .applied || d.outcome == .stale {
                    precondition(d.accountChanged == (current == nil || d.newState != old), "invariant: accountChanged flag")
                }
                if current == nil && event.type.isKnown { precondition(d.accountChanged, "invariant: new sub with a known type not created") }
            }

            // Event times never move backwards (but a deletion's status time is its own time).
            let statusTimes = event.type == .accountDelete ? [] : [(old.statusEventTime, d.newState.statusEventTime)]
            for (before, after) in [(old.lastEventTime, d.newState.lastEventTime), (old.emailEventTime, d.newState.emailEventTime)]
                + statusTimes {
                if let before { precondition(after != nil && after! >= before, "invariant: an event time moved backwards: \(d)") }
            }
            // Applying the same event again changes nothing more.
            let twice = EventRules.apply(event, to: d.newState)
            precondition(twice.newState == d.newState && !twice.accountChanged, "invariant: apply is not idempotent: \(twice)")

            // Once deleted, no later or earlier event of any type brings the account back.
            if d.newState.status == .deleted {
                for type in [EventType.emailDisabled, .emailEnabled, .consentRevoked, .accountDelete, .unknown("x")] {
                    for time in [t, t &- 1, t &+ 1, .min, .max] {
                        let next = EventRules.apply(AppleEvent(type: type, sub: event.sub, eventTimeMillis: time, email: "z@z", isPrivateEmail: false),
                                                    to: d.newState)
                        // Only a sign-in (never in a notification) comes back; a later deletion moves its time.
                        precondition(next.newState.status == .deleted && next.newState.email == d.newState.email && next.outcome == .finalDeleted,
                                     "invariant: a deleted account came back")
                        if type != .accountDelete || time <= (d.newState.statusEventTime ?? .min) {
                            precondition(next.newState == d.newState && next.revokeSessions == .none, "invariant: a deleted account changed")
                        }
                    }
                }
            }
        }
    }

    // MARK: JWKSet

    static func jwks(_ bytes: [UInt8]) {
        guard let keys = try? JWKSet.parseRSAKeys(bytes) else { return }
        for key in keys {
            precondition(!key.kid.isEmpty, "invariant: JWK with empty kid")
            precondition(key.modulus.first.map { $0 != 0 } ?? false, "invariant: modulus empty or with a leading zero")
            precondition(key.exponent.first.map { $0 != 0 } ?? false, "invariant: exponent empty or with a leading zero")
        }
        let text = JWKSet.serialize(keys)
        guard let document = try? JSONParser.parse(text) else { preconditionFailure("invariant: JWKSet.serialize output is not JSON: \(text)") }
        roundTrip(document)
        let again = try? JWKSet.parseRSAKeys(Array(text.utf8))
        precondition(again == keys, "invariant: parseRSAKeys(serialize(keys)) != keys")
    }

    // MARK: formatUTC

    /// `formatUTC` of the first 8 input bytes (little endian) is "out of range" or a well-formed
    /// timestamp that converts back to the same second.
    static func formatUTC(_ bytes: [UInt8]) {
        guard bytes.count >= 8 else { return }
        var raw: UInt64 = 0
        for i in 0..<8 { raw |= UInt64(bytes[i]) << (8 * UInt64(i)) }
        let seconds = Int64(bitPattern: raw)
        checkUTC(seconds)
        checkUTC(seconds % 400_000_000_000) // mostly in range
    }

    static func checkUTC(_ seconds: Int64) {
        let text = NotificationVerifier.formatUTC(seconds)
        let inRange = seconds > -315_000_000_000 && seconds < 253_402_300_800
        guard inRange else {
            precondition(text == "out of range", "invariant: formatUTC out of range")
            return
        }
        let u = Array(text.utf8)
        // "<year>-MM-DDTHH:MM:SSZ"; the fixed tail is 16 bytes.
        precondition(u.count >= 20, "invariant: formatUTC too short: \(text)")
        let tail = Array(u[(u.count - 16)...])
        func num(_ s: ArraySlice<UInt8>) -> Int64 {
            var v: Int64 = 0
            for b in s {
                precondition(b >= 0x30 && b <= 0x39, "invariant: formatUTC non-digit: \(text)")
                v = v * 10 + Int64(b - 0x30)
            }
            return v
        }
        precondition(tail[0] == 0x2D && tail[3] == 0x2D && tail[6] == 0x54 && tail[9] == 0x3A && tail[12] == 0x3A && tail[15] == 0x5A,
                     "invariant: formatUTC shape: \(text)")
        let yearBytes = u[..<(u.count - 16)]
        let negative = yearBytes.first == 0x2D
        let yearDigits = negative ? yearBytes.dropFirst() : yearBytes
        precondition(yearDigits.count >= 4, "invariant: year padding: \(text)")
        let year = negative ? -num(yearDigits) : num(yearDigits)
        let month = num(tail[1..<3]), day = num(tail[4..<6])
        let hour = num(tail[7..<9]), minute = num(tail[10..<12]), second = num(tail[13..<15])
        precondition((1...12).contains(month) && day >= 1 && day <= daysInMonth(year, month) && hour < 24 && minute < 60 && second < 60,
                     "invariant: formatUTC field range: \(text)")
        let back = daysFromCivil(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second
        precondition(back == seconds, "invariant: formatUTC(\(seconds)) = \(text) converts back to \(back)")
    }

    static func daysInMonth(_ y: Int64, _ m: Int64) -> Int64 {
        let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0
        return [31, leap ? 29 : 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31][Int(m - 1)]
    }

    /// Howard Hinnant's days_from_civil (the inverse of the algorithm under test).
    static func daysFromCivil(_ y0: Int64, _ m: Int64, _ d: Int64) -> Int64 {
        let y = m <= 2 ? y0 - 1 : y0
        let era = (y >= 0 ? y : y - 399) / 400
        let yoe = y - era * 400
        let doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        return era * 146_097 + doe - 719_468
    }

    static func contains(_ haystack: String, _ needle: String) -> Bool {
        let h = Array(haystack.utf8), n = Array(needle.utf8)
        guard !n.isEmpty, h.count >= n.count else { return n.isEmpty }
        for i in 0...(h.count - n.count) where h[i] == n[0] && Array(h[i..<(i + n.count)]) == n { return true }
        return false
    }
}

// MARK: - Structure-aware mutator

struct SplitMix64 {
    var state: UInt64
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
    mutating func below(_ n: Int) -> Int { Int(next() % UInt64(n)) }
    mutating func pick<T>(_ values: [T]) -> T { values[below(values.count)] }
}

enum StructuredMutator {
    /// libFuzzer's byte-level mutation (with its dictionary and comparison hints) of a byte string.
    static func mutateBytes(_ bytes: [UInt8]) -> [UInt8] {
        let capacity = max(bytes.count * 2, bytes.count + 64)
        var buffer = bytes + [UInt8](repeating: 0, count: capacity - bytes.count)
        let n = buffer.withUnsafeMutableBufferPointer { LLVMFuzzerMutate($0.baseAddress!, bytes.count, capacity) }
        return Array(buffer[..<n])
    }

    static func mutateText(_ text: String) -> String { String(decoding: mutateBytes(Array(text.utf8)), as: UTF8.self) }

    static let longA = String(repeating: "a", count: 255)
    static let longE = String(repeating: "e\u{301}", count: 128) // 128 characters, 256 scalars
    static let strings: [JSONValue] = [
        .string(""), .string(" "), .string("null"), .string("true"), .string("1752572190719"), .string(longA), .string(longA + "b"),
        .string(longE), .string("\u{1F600}"), .string("e\u{301}"), .string("\u{1}\u{1F}\u{7F}"), .string("\u{FFFD}"), .string("\\\"/"),
        .string(#"{"sub":"s","type":"t","event_time":1}"#), .null, .bool(true), .bool(false), .number(0), .number(-0.0),
        .number(1.5), .number(1e300), .array([]), .object([:]),
    ]
    static let times: [JSONValue] = [
        .number(Double(FuzzSetup.now)), .number(Double(FuzzSetup.now - 60)), .number(Double(FuzzSetup.now - 61)),
        .number(Double(FuzzSetup.now + 60)), .number(Double(FuzzSetup.now + 61)), .number(1_752_572_190_719), .number(0),
        .number(-1), .number(9_007_199_254_740_992), .number(9_007_199_254_740_994), .number(-9_007_199_254_740_992),
        .number(1e19), .number(-1e19), .number(0.5), .number(1_752_572_200.5), .string("1752572200"),
        .number(Double(FuzzSetup.now - 86_400)), .number(Double(FuzzSetup.now - 86_460)), .number(Double(FuzzSetup.now - 86_461)),
    ]
    /// `event_time` at and around its bounds for `iat` = now (and the corpus iat 1752572197).
    static let eventTimes: [JSONValue] = [
        .number(1_546_300_800_000), .number(1_546_300_799_999), .number(Double(FuzzSetup.now * 1000 + 3_600_000)),
        .number(Double(FuzzSetup.now * 1000 + 3_600_001)), .number(1_752_575_797_000), .number(1_752_575_797_001),
        .number(1_752_572_190), .number(1_752_572_190_719), .number(-1_752_572_190_719), .number(9_007_199_254_740_992),
        .number(0x1p63), .number(-0x1p63), .number(1e300), .number(1_752_572_190_719.5),
    ]
    static let values: [String: [JSONValue]] = [
        "alg": [.string("RS256"), .string("none"), .string("HS256"), .string("rs256"), .string("RS256 "), .string("ES256"), .array([.string("RS256")])],
        "kid": [.string("E6q83RB15n"), .string("W6WcOKB"), .string(""), .string("k\u{0}")],
        "typ": [.string("JWT")],
        "iss": [.string(VerificationPolicy.appleIssuer), .string(VerificationPolicy.appleIssuer + "/"), .string("https://appleid.apple.com.evil")],
        "aud": [.string("de.lunaone.sign-in-with-apple-example"), .string("com.example.app"), .string("com.example"),
                .array([.string("com.example.app")])],
        "jti": [.string("8sIboCeUBQuZ0M7x91YKZQ"), .string(longA), .string(longA + "b")],
        "exp": times, "iat": times, "event_time": eventTimes + times,
        "sub": [.string("000739.90ab72d5c78444a9bdf1a3fb80ff6660.2105"), .string(longA), .string(longA + "b")],
        "type": [.string("email-disabled"), .string("email-enabled"), .string("consent-revoked"), .string("account-delete"),
                 .string("account-deleted"), .string("email-changed"), .string(String(repeating: "t", count: 64)),
                 .string(String(repeating: "t", count: 65))],
        "email": [.string("x@privaterelay.appleid.com"), .string(String(repeating: "m", count: 320)), .string(String(repeating: "m", count: 321))],
        "is_private_email": [.bool(true), .bool(false), .string("true"), .string("false"), .string("TRUE"), .number(1)],
        "email_verified": [.bool(true), .bool(false), .string("true"), .string("false"), .string("1"), .null],
        "nonce": [.string("n-0S6_WzA2Mj"), .string(""), .string("n-0S6_WzA2Mj\u{301}")],
        "auth_time": times,
        "transfer_sub": [.string("000111.4e5f6a7b8c9d0e1f2a3b4c5d6e7f8091.0001"), .string(""), .string(longA), .string(longA + "b")],
        "events": [.object([:]), .string(""), .string("{}"), .string("[]"), .string("{"),
                   .string(#"{"type":"account-delete","sub":"s","event_time":1}"#),
                   .object(["type": .string("email-enabled"), "sub": .string("s"), "event_time": .number(1)])],
    ]
    static let headerKeys = ["alg", "kid", "typ", "x5c", "jku"]
    static let claimKeys = ["iss", "aud", "exp", "iat", "jti", "events", "nbf", "sub"]
    static let eventKeys = ["type", "sub", "event_time", "email", "is_private_email", "extra"]

    static func interesting(for key: String, _ rng: inout SplitMix64) -> JSONValue {
        if let own = values[key], rng.below(3) != 0 { return rng.pick(own) }
        return rng.below(4) == 0 ? rng.pick(times) : rng.pick(strings)
    }

    /// Sets, deletes or re-types one member.
    static func tweak(_ object: inout [String: JSONValue], keys: [String], _ rng: inout SplitMix64) {
        let key = rng.below(4) == 0 && !object.isEmpty ? rng.pick(Array(object.keys)) : rng.pick(keys)
        switch rng.below(6) {
        case 0: object[key] = nil
        case 1:
            // A key that is canonically equivalent but byte-different (NFD vs NFC) next to the original.
            object[key + "\u{301}"] = interesting(for: key, &rng)
        default: object[key] = interesting(for: key, &rng)
        }
    }

    /// `claimKeys`: the claims to set or delete (the id-token target passes its own).
    static func mutate(_ body: [UInt8], _ rng: inout SplitMix64, claimKeys: [String] = StructuredMutator.claimKeys) -> [UInt8]? {
        guard var bodyObject = (try? JSONParser.parse(body))?.objectValue else { return nil }
        if case .array(let keys)? = bodyObject["keys"] {
            bodyObject["keys"] = .array(mutateJWKS(keys, &rng))
            return Array(JSONValue.object(bodyObject).serialized().utf8)
        }
        guard let token = bodyObject["payload"]?.stringValue else { return nil }
        var segments = token.split(separator: ".", omittingEmptySubsequences: false).map(String.init)
        while segments.count < 3 { segments.append("") }
        var header = Base64URL.decode(segments[0]) ?? Array(segments[0].utf8)
        var claims = Base64URL.decode(segments[1]) ?? Array(segments[1].utf8)
        var signature = Base64URL.decode(segments[2]) ?? Array(segments[2].utf8)
        var rawToken: String?

        switch rng.below(12) {
        case 0: header = mutateBytes(header)
        case 1, 2: claims = mutateBytes(claims)
        case 3:
            guard var h = (try? JSONParser.parse(header))?.objectValue else { header = mutateBytes(header); break }
            tweak(&h, keys: headerKeys, &rng)
            header = Array(JSONValue.object(h).serialized().utf8)
        case 4, 5:
            guard var c = (try? JSONParser.parse(claims))?.objectValue else { claims = mutateBytes(claims); break }
            tweak(&c, keys: claimKeys, &rng)
            claims = Array(JSONValue.object(c).serialized().utf8)
        case 6, 7, 8:
            // The events claim: a JSON string (as Apple sends it) or an object.
            guard var c = (try? JSONParser.parse(claims))?.objectValue else { claims = mutateBytes(claims); break }
            let events = c["events"] ?? .string("{}")
            var text = events.stringValue ?? events.serialized()
            let asString = rng.below(8) == 0 ? !(events.stringValue != nil) : events.stringValue != nil
            if var e = (try? JSONParser.parse(text))?.objectValue, rng.below(3) != 0 {
                tweak(&e, keys: eventKeys, &rng)
                text = JSONValue.object(e).serialized()
            } else {
                text = mutateText(text)
            }
            if asString {
                c["events"] = .string(text)
            } else {
                c["events"] = (try? JSONParser.parse(text)) ?? .string(text)
            }
            claims = Array(JSONValue.object(c).serialized().utf8)
        case 9: signature = mutateBytes(signature)
        case 10:
            // Token text itself: extra/missing segments, padding, whitespace, truncation.
            var t = segments.joined(separator: ".")
            switch rng.below(6) {
            case 0: t += "." + Base64URL.encode(signature)
            case 1: t = segments.prefix(2).joined(separator: ".")
            case 2: t = String(decoding: Array(t.utf8).prefix(rng.below(t.utf8.count + 1)), as: UTF8.self)
            case 3: t += "=="
            case 4: t = " " + t
            default: t = mutateText(t)
            }
            rawToken = t
        default:
            // Body level: other members, a non-string payload, an empty body object.
            switch rng.below(4) {
            case 0: bodyObject[rng.pick(["extra", "payload\u{301}", "Payload"])] = rng.pick(strings)
            case 1: bodyObject["payload"] = rng.pick(strings)
            case 2: bodyObject = ["payload": .string(token)]
            default: return mutateBytes(body)
            }
            return Array(JSONValue.object(bodyObject).serialized().utf8)
        }
        let newToken = rawToken
            ?? Base64URL.encode(header) + "." + Base64URL.encode(claims) + "." + Base64URL.encode(signature)
        bodyObject["payload"] = .string(newToken)
        return Array(JSONValue.object(bodyObject).serialized().utf8)
    }

    static func mutateJWKS(_ keys: [JSONValue], _ rng: inout SplitMix64) -> [JSONValue] {
        var keys = keys
        if keys.isEmpty || rng.below(6) == 0 {
            keys.append(.object(["kty": .string("RSA"), "kid": .string("k\(keys.count)"), "use": .string("sig"),
                                 "alg": .string("RS256"), "n": .string("AQAB"), "e": .string("AQAB")]))
            return keys
        }
        let i = rng.below(keys.count)
        guard var key = keys[i].objectValue else { keys[i] = .object([:]); return keys }
        let field = rng.pick(["kty", "kid", "use", "alg", "n", "e"])
        switch rng.below(4) {
        case 0: key[field] = nil
        case 1:
            let bytes = (key[field]?.stringValue).flatMap { Base64URL.decode($0) } ?? []
            key[field] = .string(Base64URL.encode(mutateBytes(bytes)))
        case 2: key[field] = .string(rng.pick(["RSA", "EC", "sig", "enc", "RS256", "RS512", "", "AA", "AAAB", "AQAB=", "A"]))
        default: key[field] = rng.pick(strings)
        }
        keys[i] = .object(key)
        return keys
    }
}
