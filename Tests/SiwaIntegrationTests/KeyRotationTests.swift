import Foundation
import SiwaApp
import SiwaCore
import SiwaCrypto
import SiwaDevTools
import Testing

@Suite("Key set: rotation and refresh", .needsDatabase)
struct KeyRotationTests {
    @Test("a kid refused 401 stays refused until a later key fetch; once a fetch finds it, it is accepted")
    func rotatedKeyAccepted() throws {
        try TestHarness.with { h throws in
            let rotated = NotificationSigner(key: try RSAPrivateKey.generate(), kid: "rotated-key-2")
            let token = try rotated.sign(
                claims: NotificationSigner.claims(
                    audience: TestHarness.audience,
                    type: "consent-revoked", sub: "sub.rotated"))
            // Not published yet: the fetch it triggers (no fetch within the min-refresh interval)
            // still lacks it → 401.
            h.waitForKeyFetchWindow()
            #expect(try h.post(token: token).code == "unknown_kid")
            let refused = Date()
            // Apple rotates: the key set now holds both keys.
            let both = JWKSet.serialize([
                JWK(kid: h.signer.kid, modulus: h.signer.key.modulus, exponent: h.signer.key.exponent),
                JWK(kid: rotated.kid, modulus: rotated.key.modulus, exponent: rotated.key.exponent),
            ])
            try both.write(toFile: h.jwksPath, atomically: true, encoding: .utf8)
            h.waitForKeyFetchWindow(since: refused)
            // No fetch since: the key set fetched after it was first seen lacks it, still 401.
            #expect(try h.post(token: token).code == "unknown_kid")
            // Another unknown kid starts a fetch, which finds the rotated key.
            let stranger = NotificationSigner(key: TestHarness.sharedKey, kid: "another-kid")
            let other = try stranger.sign(
                claims: NotificationSigner.claims(audience: TestHarness.audience, type: "consent-revoked", sub: "sub.other"))
            #expect(try h.post(token: other).code == "unknown_kid")
            let reply = try h.post(token: token)
            #expect(reply.status == 200)
            #expect(reply.code == "accepted")
            // The old key still verifies.
            #expect(try h.post(token: try h.token(sub: "sub.oldkey")).code == "accepted")
        }
    }

    @Test("keys unobtainable for an unknown kid: a fetch is tried and fails (counted), 503 with Retry-After")
    func keysUnavailable() throws {
        try TestHarness.with { h throws in
            try FileManager.default.removeItem(atPath: h.jwksPath)
            // Past the fetch rate limit: the 503 below must come from a failed fetch, not from
            // the limit (which answers 503 without fetching).
            h.waitForKeyFetchWindow()
            let stranger = NotificationSigner(key: TestHarness.sharedKey, kid: "never-seen")
            let reply = try h.post(
                token: try stranger.sign(
                    claims: NotificationSigner.claims(
                        audience: TestHarness.audience, type: "consent-revoked", sub: "sub.nokeys")))
            #expect(reply.status == 503)
            #expect(reply.code == "keys_unavailable")
            #expect(reply.headers["retry-after"] != nil)
            let failures = try h.admin("/metrics").body.split(separator: "\n")
                .first { $0.hasPrefix("siwa_key_refreshes_total{result=\"failure\"} ") }
            #expect((failures?.split(separator: " ").last.flatMap { Double($0) } ?? 0) >= 1, "the fetch was tried and failed")
            // Known keys keep working while the key set cannot be fetched.
            #expect(try h.post(token: try h.token(sub: "sub.stillok")).code == "accepted")
        }
    }
}
