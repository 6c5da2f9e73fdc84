import Foundation
import SiwaCore
import SiwaCrypto
import Testing

@testable import SiwaApp

/// A stored refresh token is bound to its row: its ciphertext, moved to another user's or another
/// app's row (same key), does not open there — not at the start-up check, not in the revoker.
@Suite(
    "Stored tokens bound to their owner", .serialized,
    .needsDatabase)
struct TokenBindingTests {
    typealias S = AppleTestSetup

    @Test("start-up: a ciphertext moved to another user's row, or another app's, does not open there: set aside, the start goes on")
    func startUpCheck() throws {
        let setup = try TokenKeyRotationTests.Setup()
        let sub = try setup.storeTokens(2, key: setup.old, prefix: "bound")
        func start() throws {
            let app = setup.application(setup.oldFile, logs: LogSink.capturing())
            defer { app.shutdown() }
            try app.start()
        }
        func setAside() throws -> String? {
            try TestDatabase.query(
                setup.conninfo,
                "SELECT string_agg(apple_sub || ' ' || client_id, ',' ORDER BY apple_sub) FROM siwa.apple_tokens WHERE quarantined_at IS NOT NULL"
            ).scalar
        }
        try start()
        #expect(try setAside() == nil, "in their own rows they open")
        _ = try TestDatabase.query(setup.conninfo, "UPDATE siwa.apple_tokens SET apple_sub = '000739.someone.else' WHERE apple_sub = $1", [sub[0]])
        _ = try TestDatabase.query(setup.conninfo, "UPDATE siwa.apple_tokens SET client_id = $1 WHERE apple_sub = $2", [S.otherClientID, sub[1]])
        try start()
        #expect(try setAside() == "\(sub[1]) \(S.otherClientID),000739.someone.else \(S.clientID)")
    }

    @Test("revoker: moved ciphertexts fail token_undecryptable and never reach Apple; the token in its own row is revoked")
    func revoker() throws {
        let h = try DeletionHarness()
        defer { h.stop() }
        let vault = TokenVault(keys: [h.tokenKey])
        // Queued while the worker runs (the start-up check would refuse them before).
        func queue(row sub: String, clientID: String, sealedFor owner: String, ownerClient: String, token: String) throws {
            let sealed = try vault.seal(token, sub: owner, clientID: ownerClient)
            _ = try h.query(
                """
                INSERT INTO siwa.revocations (apple_sub, client_id, key_id, ciphertext, reason)
                VALUES ($1, $2, $3, $4::bytea, 'in-app-deletion')
                """, [sub, clientID, sealed.keyID, SQLEncoding.bytea(sealed.ciphertext)])
        }
        try queue(row: "000739.bind.b", clientID: S.clientID, sealedFor: "000739.bind.a", ownerClient: S.clientID, token: "r.moved.user")
        try queue(row: "000739.bind.a", clientID: S.otherClientID, sealedFor: "000739.bind.a", ownerClient: S.clientID, token: "r.moved.app")
        try queue(row: "000739.bind.c", clientID: S.clientID, sealedFor: "000739.bind.c", ownerClient: S.clientID, token: "r.own.row")
        // Positive signs first: the control revoked, and both moved rows tried.
        #expect(h.eventually(20) { (try? h.scalar("SELECT status FROM siwa.revocations WHERE apple_sub = '000739.bind.c'")) == "done" })
        #expect(
            h.eventually(20) {
                (try? h.scalar("SELECT count(*) FROM siwa.revocations WHERE last_error IS NOT NULL AND apple_sub <> '000739.bind.c'")) == "2"
            })
        let errors = try h.query("SELECT status, last_error FROM siwa.revocations WHERE apple_sub <> '000739.bind.c'").rows
        #expect(errors.count == 2)
        for row in errors {
            #expect(row[0] != "done")
            #expect(row[1]?.hasPrefix("token_undecryptable") == true, "\(row[1] ?? "")")
        }
        #expect(h.fake.revokedTokens == ["r.own.row"])
    }
}
