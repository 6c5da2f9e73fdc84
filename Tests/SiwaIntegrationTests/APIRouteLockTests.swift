import Foundation
import SiwaApp
import SiwaCrypto
import SiwaFetch
import Testing

/// Every route of the admin listener but the four open ones is locked: the loop is over the
/// table the listener routes by (`AdminHandler.routes`), so a route added later is covered
/// without a new test.
@Suite("API routes locked", .serialized, .needsDatabase)
struct APIRouteLockTests {
    typealias H = DeletionHarness

    static func post(_ url: String, authorization: String?) throws -> FetchResponse {
        try Fetcher.perform(
            FetchRequest(
                url: url, method: "POST",
                headers: ["Content-Type: application/json"] + (authorization.map { ["Authorization: \($0)"] } ?? []),
                body: Array("{}".utf8), connectTimeout: .seconds(5), totalTimeout: .seconds(30), allowedSchemes: [.http]))
    }

    @Test("every API route: 401 unauthorized + WWW-Authenticate without a token and with any wrong one; the right one passes the lock")
    func everyRouteLocked() throws {
        let h = try H()
        defer { h.stop() }
        // Open by design: health, readiness, metrics and the API's description. Any other route
        // must be locked (a new open one is added here, deliberately).
        let open: Set<String> = ["/healthz", "/readyz", "/metrics", "/openapi.json"]
        let locked = AdminHandler.routes.keys.filter { !open.contains($0) }.sorted()
        #expect(locked.count >= 2)
        #expect(Set(AdminHandler.routes.keys).isSuperset(of: open))
        let token = h.apiToken
        let wrong: [String?] = [
            nil, "", "Bearer", "Bearer ", "Bearer wrong", "Basic \(token)", "Bearer \(token)x",
            // A prefix of the token, or the token cut short by one byte: compared whole.
            "Bearer \(token.prefix(token.count - 1))", "Bearer \(token.prefix(8))",
            "Bearer x\(token.dropFirst())",
        ]
        for path in locked {
            for authorization in wrong {
                let reply = try Self.post(h.adminURL + path, authorization: authorization)
                let body = String(decoding: reply.body, as: UTF8.self)
                #expect(reply.status == 401, "\(path) with \(authorization.map { String($0.prefix(12)) } ?? "no header")")
                #expect(body == "{\"error\":\"unauthorized\"}", "\(path)")
                #expect(reply.headers["www-authenticate"] == "Bearer", "\(path)")
            }
            // The lock is what refused: the right token gets past it (to the body's checks).
            let admitted = try Self.post(h.adminURL + path, authorization: "Bearer \(token)")
            #expect(admitted.status != 401, "\(path) refused the right token")
        }
        #expect(h.fake.calls(to: "/auth/token").isEmpty && h.fake.calls(to: "/auth/revoke").isEmpty, "nothing reached Apple")
    }
}
