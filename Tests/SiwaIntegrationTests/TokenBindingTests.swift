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

    @Test("start-up: a ciphertext moved to another user's row, or another app's, stops the start; moved back, it starts")
    func startUpCheck() throws {
        let setup = try TokenKeyRotationTests.Setup()
        let sub = try setup.storeTokens(1, key: setup.old, prefix: "bound")[0]
        func starts() throws -> Bool {
            let app = setup.application(setup.oldFile, logs: LogSink.capturing())
            defer { app.shutdown() }
            do {
                try app.start()
                return true
            } catch {
                #expect("\(error)".contains("does not open with key \(setup.old.id)"), "\(error)")
                #expect(!"\(error)".contains("000739."), "no sub in the message")
                return false
            }
        }
        func move(sub newSub: String, clientID: String) throws {
            _ = try TestDatabase.query(setup.conninfo, "UPDATE siwa.apple_tokens SET apple_sub = $1, client_id = $2", [newSub, clientID])
        }
        try move(sub: "000739.someone.else", clientID: S.clientID)
        #expect(try !starts(), "another user's row")
        try move(sub: sub, clientID: S.otherClientID)
        #expect(try !starts(), "another app's row")
        try move(sub: sub, clientID: S.clientID)
        #expect(try starts(), "its own row")
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
