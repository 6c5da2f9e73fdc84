// The parser fuzz targets beside `verifier` (FuzzMain.swift selects one): what siwa-notify reads
// from Apple (id_tokens, token and migration answers), from API callers (request bodies) and from
// operators' files (API tokens, forward secrets, transfer lists). Each input is what that parser
// reads, as bytes. The invariants: no crash, no leak (a refusal never echoes a secret), a bounded
// result (nothing longer than the input, counts within the lines), and each result re-encodes to
// an input that parses back to it. Seeds: Fuzz/seeds/<target>/ (Fuzz/make-seeds.py).

// MARK: - id-token: IDTokenVerifier.verify

enum IDTokenTarget {
    static let clientID = "com.example.app"
    static let devAudience = "com.example.siwa-notify.dev"
    static let nonce = "n-0S6_WzA2Mj"
    /// The `--dev` key signs for the dev audience only.
    static let verifier = IDTokenVerifier(keyAudiences: ["dev-key": [devAudience]])
    static let claimKeys = [
        "iss", "aud", "exp", "iat", "sub", "email", "is_private_email", "email_verified", "nonce", "auth_time", "transfer_sub",
    ]
    static let preSignature: Set<IDTokenError> = [.malformedToken, .unsupportedAlgorithm, .missingKid]

    static let target = FuzzTarget(
        name: "id-token", test: test,
        mutate: { input, rng in
            // The notification mutator, on the token wrapped as a body.
            let body = Array(JSONValue.object(["payload": .string(String(decoding: input, as: UTF8.self))]).serialized().utf8)
            guard let out = StructuredMutator.mutate(body, &rng, claimKeys: claimKeys),
                let token = (try? JSONParser.parse(out))?["payload"]?.stringValue
            else { return nil }
            return Array(token.utf8)
        })

    struct Run {
        var result: Result<IDTokenClaims, IDTokenError>
        var calls: [SignatureCall]
    }

    static func run(_ token: String, _ answer: SignatureCheck, clientID: String = clientID, nonce: String? = nil, maxAge: Int64? = nil) -> Run {
        var calls: [SignatureCall] = []
        do {
            let claims = try verifier.verify(token: token, clientID: clientID, nonce: nonce, now: FuzzSetup.now, maxAgeSeconds: maxAge) {
                kid, input, signature in
                calls.append(SignatureCall(kid: kid, signingInput: input, signature: signature))
                return answer
            }
            return Run(result: .success(claims), calls: calls)
        } catch {
            return Run(result: .failure(error), calls: calls)
        }
    }

    static func test(_ bytes: [UInt8]) {
        let token = String(decoding: bytes, as: UTF8.self)
        let valid = run(token, .valid)
        let invalid = run(token, .invalid)
        precondition(valid.calls.count <= 1 && valid.calls == invalid.calls, "invariant: id_token signature closure calls differ")
        if let call = valid.calls.first {
            FuzzChecks.checkSignatureCall(call, token: token)
            guard case .failure(.badSignature) = invalid.result else {
                preconditionFailure("invariant: .invalid id_token signature gave \(invalid.result)")
            }
            // (`malformed_token` may follow the signature: a `crit` header is refused once it verified.)
            if case .failure(let e) = valid.result {
                precondition(e != .unsupportedAlgorithm && e != .missingKid, "invariant: \(e) after the signature")
                if e == .malformedToken {
                    precondition((try? CompactJWS.parse(token))?.header["crit"] != nil, "invariant: malformed_token after the signature without crit")
                }
            }
        } else {
            guard case .failure(let e) = valid.result, case .failure(e) = invalid.result, preSignature.contains(e) else {
                preconditionFailure("invariant: id_token without a signature check: \(valid.result) / \(invalid.result)")
            }
        }
        // Refusals are reason codes: they never carry the token.
        for r in [valid.result, invalid.result] {
            if case .failure(let e) = r { precondition(!FuzzCheck.leaks(e.description, token), "invariant: id_token error echoes the token") }
        }
        // What TokenExchange reads from an unverified token (to label a revocation) never crashes
        // and agrees with the verified claims.
        let unverifiedSub = (try? CompactJWS.parse(token))?.claims["sub"]?.stringValue

        guard case .success(let claims) = valid.result else { return }
        checkClaims(claims, tokenBytes: bytes.count)
        precondition(FuzzCheck.utf8Equal(unverifiedSub, claims.sub), "invariant: unverified sub differs from the verified one")
        // A nonce or an age limit only adds a check: passing it gives the same claims.
        for extra in [run(token, .valid, nonce: nonce), run(token, .valid, maxAge: 3600)] {
            if case .success(let same) = extra.result { precondition(same == claims, "invariant: id_token claims depend on the nonce/age check") }
        }
        if case .success = run(token, .valid, nonce: nonce).result {
            precondition(
                FuzzCheck.utf8Equal((try? CompactJWS.parse(token))?.claims["nonce"]?.stringValue, nonce), "invariant: nonce mismatch accepted")
        }
        if case .success = run(token, .valid, maxAge: 3600).result {
            precondition(claims.issuedAt >= FuzzSetup.now - 3600, "invariant: too old id_token accepted")
        }
        // Another client id never accepts the same token.
        if case .success = run(token, .valid, clientID: "de.lunaone.sign-in-with-apple-example").result {
            preconditionFailure("invariant: id_token accepted for two client ids")
        }
    }

    static func checkClaims(_ c: IDTokenClaims, tokenBytes: Int) {
        precondition(c.audience.utf8.elementsEqual(clientID.utf8), "invariant: id_token for another audience accepted")
        precondition(!c.sub.isEmpty && c.sub.unicodeScalars.count <= TokenLimits.maxSubLength, "invariant: id_token sub length")
        if let email = c.email { precondition(email.unicodeScalars.count <= TokenLimits.maxEmailLength, "invariant: id_token email length") }
        if let t = c.transferSub {
            precondition(!t.isEmpty && t.unicodeScalars.count <= TokenLimits.maxSubLength, "invariant: transfer_sub length")
        }
        precondition(c.issuedAt <= TokenLimits.saturatingAdd(FuzzSetup.now, 60), "invariant: future id_token accepted")
        precondition(FuzzSetup.now <= TokenLimits.saturatingAdd(c.expiresAt, 60), "invariant: expired id_token accepted")
        precondition(c.signedInAt == (c.authTime ?? c.issuedAt), "invariant: signedInAt")
        for s in [c.sub, c.audience, c.email ?? "", c.transferSub ?? ""] {
            precondition(s.utf8.count <= tokenBytes, "invariant: a claim longer than the token")
        }
    }
}

// MARK: - apple-answers: Apple's /auth/token, /auth/revoke error and /auth/usermigrationinfo bodies

enum AppleAnswersTarget {
    static let keys = [
        "access_token", "token_type", "expires_in", "refresh_token", "id_token", "error", "transfer_sub", "sub", "email",
        "is_private_email",
    ]
    static let values: [String: [JSONValue]] = [
        "access_token": [.string("a1b2"), .string(""), .null],
        "token_type": [.string("Bearer"), .number(1), .null],
        "expires_in": [.number(3600), .number(0), .number(-1), .number(1.5), .number(9_007_199_254_740_994), .string("3600"), .null],
        "refresh_token": [.string("r1.0.sr.x"), .string(""), .null],
        "id_token": [.string("eyJ.eyJ.sig"), .string(""), .null],
        "error": [
            .string("invalid_grant"), .string("invalid_client"), .string("invalid_request"), .string("unauthorized_client"),
            .string("unsupported_grant_type"), .string(String(repeating: "e\u{301}", count: 40)), .string(""),
        ],
        "transfer_sub": [.string("000111.abc.0001"), .string("a b"), .string(String(repeating: "t", count: 257)), .string("\"")],
        "sub": [.string("000739.90ab72d5c78444a9bdf1a3fb80ff6660.2105"), .string("")],
        "email": [.string("x@privaterelay.appleid.com"), .string(""), .null],
        "is_private_email": [.bool(true), .string("true"), .string("false"), .string("yes"), .null],
    ]

    static let target = FuzzTarget(
        name: "apple-answers", test: test,
        mutate: { input, rng in JSONObjectMutator.mutate(input, keys: keys, values: values, &rng) })

    static func test(_ body: [UInt8]) {
        FuzzChecks.json(body)
        let n = body.count
        func bounded(_ strings: String?...) {
            for s in strings { precondition((s?.utf8.count ?? 0) <= n, "invariant: an Apple answer's field is longer than the body") }
        }
        func same<T: Equatable>(_ parse: ([UInt8]) throws(AppleResponseError) -> T) -> T? {
            let first = Result { () throws(AppleResponseError) in try parse(body) }
            let second = Result { () throws(AppleResponseError) in try parse(body) }
            precondition(first == second, "invariant: an Apple answer parses differently twice")
            return try? first.get()
        }

        if let t = same(AppleTokenResponse.parse) {
            precondition(!t.idToken.isEmpty && !t.refreshToken.isEmpty, "invariant: empty token accepted")
            bounded(t.idToken, t.refreshToken, t.accessToken, t.tokenType)
            var o: [String: JSONValue] = ["id_token": .string(t.idToken), "refresh_token": .string(t.refreshToken)]
            o["access_token"] = t.accessToken.map { .string($0) }
            o["token_type"] = t.tokenType.map { .string($0) }
            o["expires_in"] = t.expiresIn.map { .number(Double($0)) }
            precondition((try? AppleTokenResponse.parse(Array(JSONValue.object(o).serialized().utf8))) == t, "invariant: token answer round trip")
        }
        if let r = same(AppleRefreshResponse.parse) {
            if let id = r.idToken { precondition(!id.isEmpty, "invariant: empty id_token in a refresh answer") }
            bounded(r.idToken)
        }
        if let code = AppleErrorCode.parse(body) {
            precondition(AppleErrorCode.parse(body) == code, "invariant: error code parses differently twice")
            precondition(!code.description.isEmpty && code.description.unicodeScalars.count <= 64, "invariant: error code length")
            precondition(AppleErrorCode(code.description) == code, "invariant: error code round trip")
        }
        if let a = same(AppleAccessToken.parse) {
            precondition(!a.token.isEmpty && a.expiresIn > 0, "invariant: access token without a token or a lifetime")
            bounded(a.token)
        }
        if let t = same(AppleTransferSub.parse) {
            precondition(TransferList.isIdentifier(t), "invariant: transfer_sub is not an identifier")
            precondition((try? TransferList.parse(line: Substring(TransferList.line(t)))) == t, "invariant: transfer_sub list line round trip")
        }
        if let u = same(AppleMigratedUser.parse) {
            precondition(!u.sub.isEmpty && u.email?.isEmpty != true, "invariant: migrated user without sub, or an empty email")
            bounded(u.sub, u.email)
        }
    }
}

// MARK: - api-bodies: POST /apple/tokens and /apple/refresh-tokens

enum APIBodiesTarget {
    /// `e\u{301}` and `é` are canonically equivalent, byte-different: only the first is configured.
    static let audiences = ["com.example.app", "de.lunaone.sign-in-with-apple-example", "e\u{301}"]
    static let keys = ["code", "client_id", "redirect_uri", "nonce", "refresh_token", "id_token"]
    static let values: [String: [JSONValue]] = [
        "code": [.string("c0de"), .string(""), .number(1), .null],
        "client_id": [.string("com.example.app"), .string("\u{e9}"), .string("e\u{301}"), .string("com.example.app "), .null],
        "redirect_uri": [.string("https://example.com/cb"), .null, .number(1)],
        "nonce": [.string("n-0S6_WzA2Mj"), .string(""), .bool(true)],
        "refresh_token": [.string("r1.0.sr.x"), .string(""), .array([])],
        "id_token": [.string("eyJ.eyJ.sig"), .string(""), .object([:])],
    ]

    static let target = FuzzTarget(
        name: "api-bodies", test: test,
        mutate: { input, rng in JSONObjectMutator.mutate(input, keys: keys, values: values, &rng) })

    static func test(_ body: [UInt8]) {
        let isObject = (try? JSONParser.parse(body))?.objectValue != nil
        let n = body.count
        do {
            let r = try CodeExchangeRequest.parse(body, audiences: audiences)
            precondition(!r.code.isEmpty && audiences.containsExactly(r.clientID), "invariant: exchange body accepted without code/client")
            for s in [r.code, r.clientID, r.redirectURI ?? "", r.nonce ?? ""] { precondition(s.utf8.count <= n, "invariant: field longer than body") }
            var o: [String: JSONValue] = ["code": .string(r.code), "client_id": .string(r.clientID)]
            o["redirect_uri"] = r.redirectURI.map { .string($0) }
            o["nonce"] = r.nonce.map { .string($0) }
            let again = try? CodeExchangeRequest.parse(Array(JSONValue.object(o).serialized().utf8), audiences: audiences)
            precondition(again.map { FuzzCheck.utf8Equal($0.clientID, r.clientID) && $0 == r } == true, "invariant: exchange body round trip")
        } catch {
            precondition((error == .malformedJSON) || isObject, "invariant: a JSON object refused as \(error)")
            precondition(error != .missingRefreshToken && error != .missingIDToken, "invariant: exchange refused as \(error)")
            if !isObject { precondition(error == .malformedJSON, "invariant: a non-object refused as \(error)") }
        }
        do {
            let r = try HandOverRequest.parse(body, audiences: audiences)
            precondition(!r.refreshToken.isEmpty && !r.idToken.isEmpty && audiences.containsExactly(r.clientID), "invariant: hand-over accepted")
            for s in [r.refreshToken, r.idToken, r.clientID] { precondition(s.utf8.count <= n, "invariant: field longer than body") }
            let o: [String: JSONValue] = ["client_id": .string(r.clientID), "refresh_token": .string(r.refreshToken), "id_token": .string(r.idToken)]
            let again = try? HandOverRequest.parse(Array(JSONValue.object(o).serialized().utf8), audiences: audiences)
            precondition(again == r, "invariant: hand-over body round trip")
        } catch {
            precondition(error != .missingCode, "invariant: hand-over refused as missing_code")
            if !isObject { precondition(error == .malformedJSON, "invariant: a non-object refused as \(error)") }
        }
    }
}

// MARK: - api-tokens: SIWA_API_TOKEN_FILE

enum APITokenFileTarget {
    static let interesting = [
        "", "#", "# comment", " 0123456789abcdef ", "0123456789abcde", "0123456789abcdef", "0123456789abcdef\r", "\t0123456789abcdef\t",
        "0123456789 abcdef", "0123456789abcde\u{e9}", String(repeating: "k", count: 4096), "\u{0}0123456789abcdef",
    ]

    static let target = FuzzTarget(
        name: "api-tokens", test: test, mutate: { input, rng in LineMutator.mutate(input, interesting: interesting, &rng) })

    static func trimmed(_ line: ArraySlice<UInt8>) -> [UInt8] {
        let blank: (UInt8) -> Bool = { $0 == 0x20 || $0 == 0x09 || $0 == 0x0D }
        return Array(line.drop(while: blank).reversed().drop(while: blank).reversed())
    }

    static func test(_ bytes: [UInt8]) {
        let lines = FuzzCheck.lines(bytes)
        do {
            let tokens = try APITokens(fileContents: bytes)
            precondition(tokens.count >= 1 && tokens.count <= lines.count, "invariant: token count outside 1...lines")
            var seen = 0
            for line in lines {
                let t = trimmed(line)
                if t.isEmpty || t.first == UInt8(ascii: "#") { continue }
                seen += 1
                let token = String(decoding: t, as: UTF8.self)
                precondition(tokens.admits(authorization: "Bearer " + token), "invariant: a configured token is not admitted")
                precondition(tokens.admits(authorization: "bEaReR  " + token), "invariant: scheme case or spaces matter")
                precondition(!tokens.admits(authorization: token), "invariant: a token without the scheme admitted")
            }
            precondition(seen == tokens.count, "invariant: token count differs from the token lines")
            precondition(!tokens.admits(authorization: nil) && !tokens.admits(authorization: "Bearer "), "invariant: nothing admitted")
        } catch {
            precondition(["empty", "too_short", "invalid_character"].contains(error.reason), "invariant: token file reason \(error.reason)")
            precondition(error.line >= 0 && error.line <= lines.count && (error.line == 0) == (error.reason == "empty"), "invariant: line")
            for line in lines {
                let t = String(decoding: trimmed(line), as: UTF8.self)
                precondition(!FuzzCheck.leaks(error.description, t), "invariant: token file error echoes a line")
            }
        }
    }
}

// MARK: - forward-secrets: SIWA_FORWARD_SECRET_FILE

enum ForwardSecretFileTarget {
    static func secret(_ n: Int) -> String { StandardWebhookSecret.prefix + Base64.encode((0..<n).map { UInt8(truncatingIfNeeded: $0 &* 37) }) }

    static let interesting = [
        "", "#", secret(24), secret(23), secret(32), secret(64), secret(65), " " + secret(32) + " ", secret(32) + "\r",
        String(secret(32).dropLast()), secret(32).replacingPlusWith(), "whsec_", "whsec_====", "WHSEC_" + String(secret(32).dropFirst(6)),
    ]

    static let target = FuzzTarget(
        name: "forward-secrets", test: test, mutate: { input, rng in LineMutator.mutate(input, interesting: interesting, &rng) })

    static func test(_ bytes: [UInt8]) {
        let text = String(decoding: bytes, as: UTF8.self)
        let lines = text.split(separator: "\n", omittingEmptySubsequences: false)
        switch StandardWebhookSecret.parse(file: text) {
        case .success(let keys):
            precondition(!keys.isEmpty && keys.count <= lines.count, "invariant: key count outside 1...lines")
            for key in keys {
                precondition(StandardWebhookSecret.keySizes.contains(key.count), "invariant: key size \(key.count)")
                let line = StandardWebhookSecret.prefix + Base64.encode(key)
                guard case .success(let again) = StandardWebhookSecret.parse(file: line), again == [key] else {
                    preconditionFailure("invariant: whsec_ line round trip")
                }
            }
        case .failure(let problem):
            for raw in lines {
                // Trimmed as the parser trims: " whsec_ " is the message's own wording, not a leak.
                let line = ServerConfiguration.trim(String(raw))
                let payload = line.hasPrefix(StandardWebhookSecret.prefix) ? line.dropFirst(StandardWebhookSecret.prefix.count) : line[...]
                precondition(!FuzzCheck.leaks(problem.description, payload), "invariant: secret file error echoes a line")
            }
        }
        // Standard base64: what decodes re-encodes (padded) to text that decodes to the same bytes.
        for line in lines.prefix(64) {
            if let decoded = Base64.decode(line) {
                precondition(Base64.decode(Base64.encode(decoded)) == decoded, "invariant: base64 round trip")
                precondition(decoded.count <= line.utf8.count, "invariant: base64 decoded longer than its text")
            }
        }
    }
}

extension String {
    /// The URL-safe alphabet's characters, which standard base64 refuses.
    fileprivate func replacingPlusWith() -> String {
        String(map { $0 == "+" ? "-" : $0 == "/" ? "_" : $0 })
    }
}

// MARK: - transfer-list: `transfer import`'s input

enum TransferListTarget {
    static let interesting = [
        "", "#", "# comment", #"{"transfer_sub":"000111.abc.0001"}"#, #"{"transfer_sub":"000111.abc.0001","sub":"s"}"#,
        #"{"transfer_sub":"a b"}"#, #"{"transfer_sub":1}"#, "000111.abc.0001", " 000111.abc.0001\r", "a\"b", "{", "{}",
        String(repeating: "t", count: 256), String(repeating: "t", count: 257), #"{"transfer_sub":"x","transfer_sub":"y"}"#,
    ]

    static let target = FuzzTarget(
        name: "transfer-list", test: test, mutate: { input, rng in LineMutator.mutate(input, interesting: interesting, &rng) })

    static func test(_ bytes: [UInt8]) {
        let text = String(decoding: bytes, as: UTF8.self)
        let lines = text.split(separator: "\n", omittingEmptySubsequences: false)
        do {
            let ids = try TransferList.parse(text)
            precondition(ids.count <= lines.count && Set(ids.map { Array($0.utf8) }).count == ids.count, "invariant: ids bounded and unique")
            precondition(ids.reduce(0) { $0 + $1.utf8.count } <= bytes.count, "invariant: ids longer than the list")
            for id in ids {
                precondition(TransferList.isIdentifier(id), "invariant: transfer list id is not an identifier")
                precondition((try? TransferList.parse(line: Substring(TransferList.line(id)))) == id, "invariant: list line round trip")
            }
            // The list `transfer export` would write for these ids reads back to them.
            let written = ids.map(TransferList.line).joined(separator: "\n")
            precondition((try? TransferList.parse(written)) == ids, "invariant: transfer list round trip")
        } catch {
            precondition(error.line >= 1 && error.line <= lines.count, "invariant: error line \(error.line) of \(lines.count)")
            // The line named is the first one that does not read.
            func read(_ line: Substring) -> Result<String?, TransferList.LineError> {
                Result { () throws(TransferList.LineError) in try TransferList.parse(line: line) }
            }
            for line in lines.prefix(error.line - 1) {
                if case .failure = read(line) { preconditionFailure("invariant: an earlier line does not read") }
            }
            let failing = read(lines[error.line - 1])
            guard case .failure(error.reason) = failing else { preconditionFailure("invariant: the named line reads") }
        }
    }
}
