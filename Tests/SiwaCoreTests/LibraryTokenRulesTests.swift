import SiwaCore
import Testing

@Suite("Auth libraries: the refresh tokens they store")
struct LibraryTokenRulesTests {
    @Test("a refresh token as Apple issues it, in clear, is adopted; anything a library's encryption writes, or not Apple's, is not")
    func plainAppleRefreshToken() {
        for plain in [
            "r0f61ad4f1e4a4b3aaf9c37c5ea0b1cbb.0.srtxu.ZWRVq9v2wGGNSt1fnpY_aw",
            "rb65a6a1ca59944f5a1b8a0b8d5b6e3a1.0.mrsqx.k-Gz2eBqFJvQ8y1oLhUXAw",
            "r1234abcd5678ef.0",
        ] {
            #expect(LibraryTokenRules.isPlainAppleRefreshToken(plain), "\(plain)")
        }
        for other in [
            "",
            "r1", "r-apple-a",  // too short / not hex after the r
            String(repeating: "a1", count: 48),  // Better Auth's encryptOAuthTokens: hex
            "eyJhbGciOiJkaXIiLCJlbmMiOiJBMjU2R0NNIn0..aXY.Y2lwaGVy.dGFn",  // a JWE
            "cjBmNjFhZDRmMWU0YTRiM2FhZjljMzdjNWVhMGIxY2JiLjAuc3J0eHUu+/==",  // base64
            "r0f61ad4f1e4a4b3aaf9c37c5ea0b1cbb",  // no part after a dot
            "r0f61ad4f1e4a4b3aaf9c37c5ea0b1cbb..srtxu",  // an empty part
            "R0F61AD4F1E4A4B3.0.srtxu.ZWRV",  // upper-case hex: not what Apple writes
            "r0f61ad4f1e4a4b3.0.srtxu.ZW RV",  // a space
            "r0f61ad4f1e4a4b3.0.srtxu." + String(repeating: "A", count: 1024),  // oversized
        ] {
            #expect(!LibraryTokenRules.isPlainAppleRefreshToken(other), "\(other)")
        }
    }

    @Test("the client id of the library's tokens: SIWA_LIBRARY_CLIENT_ID, else the only audience; one of SIWA_AUDIENCES")
    func clientID() throws {
        #expect(LibraryTokenRules.clientID(configured: nil, audiences: ["com.example.web"]) == "com.example.web")
        #expect(LibraryTokenRules.clientID(configured: nil, audiences: ["com.example.app", "com.example.web"]) == nil)
        #expect(LibraryTokenRules.clientID(configured: "com.example.web", audiences: ["com.example.app", "com.example.web"]) == "com.example.web")
        let env = ["SIWA_AUDIENCES": "com.example.app,com.example.web", "SIWA_APPLY_TO": "authjs"]
        #expect(try ServerConfiguration.load(environment: env).authLibraries.clientID == nil)
        let set = try ServerConfiguration.load(environment: env.merging(["SIWA_LIBRARY_CLIENT_ID": " com.example.web "]) { _, n in n })
        #expect(set.authLibraries.clientID == "com.example.web")
        #expect(throws: ConfigurationError(variable: "SIWA_LIBRARY_CLIENT_ID", problem: "must be one of SIWA_AUDIENCES")) {
            try ServerConfiguration.load(environment: env.merging(["SIWA_LIBRARY_CLIENT_ID": "com.example.other"]) { _, n in n })
        }
    }
}
