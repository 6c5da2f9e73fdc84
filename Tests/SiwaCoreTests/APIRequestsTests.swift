import Testing

@testable import SiwaCore

/// The API's request bodies (README "In-app account deletion"): what each endpoint reads, and the 400 reason of each
/// refusal, first failure first (the fuzz target `api-bodies` checks the same rules on any input).
@Suite struct APIRequestsTests {
    static let audiences = ["com.example.app", "e\u{301}"]

    static func exchange(_ body: String) -> Result<CodeExchangeRequest, APIRequestError> {
        Result { () throws(APIRequestError) in try CodeExchangeRequest.parse(Array(body.utf8), audiences: audiences) }
    }

    static func handOver(_ body: String) -> Result<HandOverRequest, APIRequestError> {
        Result { () throws(APIRequestError) in try HandOverRequest.parse(Array(body.utf8), audiences: audiences) }
    }

    @Test("a code exchange: code and client_id, optional redirect_uri and nonce, unknown members ignored")
    func exchangeAccepted() throws {
        let request = try Self.exchange(#"{"code":"c1","client_id":"com.example.app","nonce":"n","redirect_uri":"https://x/cb","x":1}"#).get()
        #expect(request == CodeExchangeRequest(code: "c1", clientID: "com.example.app", redirectURI: "https://x/cb", nonce: "n"))
        #expect(try Self.exchange(#"{"code":"c1","client_id":"com.example.app"}"#).get().nonce == nil)
    }

    @Test("code exchange refusals, in order: malformed_json, missing_code, unknown_client_id, then a non-string optional member")
    func exchangeRefused() {
        let cases: [(String, APIRequestError)] = [
            ("", .malformedJSON), ("[]", .malformedJSON), ("code=1", .malformedJSON),
            (#"{"client_id":"nope"}"#, .missingCode), (#"{"code":"","client_id":"com.example.app"}"#, .missingCode),
            (#"{"code":1,"client_id":"com.example.app"}"#, .missingCode),
            (#"{"code":"c","client_id":"com.example.other","nonce":1}"#, .unknownClientID),
            // Canonically equivalent, byte-different: Apple and PostgreSQL compare bytes.
            (#"{"code":"c","client_id":"\u00e9"}"#, .unknownClientID),
            (#"{"code":"c","client_id":"com.example.app","nonce":1}"#, .malformedJSON),
            (#"{"code":"c","client_id":"com.example.app","redirect_uri":null}"#, .malformedJSON),
        ]
        for (body, reason) in cases {
            guard case .failure(let got) = Self.exchange(body) else {
                Issue.record("\(body) accepted")
                continue
            }
            #expect(got == reason, "\(body)")
        }
        #expect(APIRequestError.unknownClientID.rawValue == "unknown_client_id")
    }

    @Test("a hand-over: client_id, refresh_token, id_token; refusals in that order")
    func handOver() throws {
        let ok = try Self.handOver(#"{"client_id":"e\u0301","refresh_token":"r","id_token":"i"}"#).get()
        #expect(ok == HandOverRequest(clientID: "e\u{301}", refreshToken: "r", idToken: "i"))
        let cases: [(String, APIRequestError)] = [
            ("null", .malformedJSON), (#"{"refresh_token":"r","id_token":"i"}"#, .unknownClientID),
            (#"{"client_id":"com.example.app","id_token":"i"}"#, .missingRefreshToken),
            (#"{"client_id":"com.example.app","refresh_token":"","id_token":"i"}"#, .missingRefreshToken),
            (#"{"client_id":"com.example.app","refresh_token":"r"}"#, .missingIDToken),
            (#"{"client_id":"com.example.app","refresh_token":"r","id_token":["i"]}"#, .missingIDToken),
        ]
        for (body, reason) in cases {
            guard case .failure(let got) = Self.handOver(body) else {
                Issue.record("\(body) accepted")
                continue
            }
            #expect(got == reason, "\(body)")
        }
    }
}
