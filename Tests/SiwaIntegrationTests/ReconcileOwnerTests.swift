import Foundation
import SiwaCore
import SiwaPostgres
import Testing

@testable import SiwaApp

/// Reconciliation believes Apple's answer only about the user whose token it sent.
@Suite("Reconciliation: whose grant", .serialized, .needsDatabase)
struct ReconcileOwnerTests {
    typealias S = AppleTestSetup

    @Test("a token whose Apple answer names another user is not counted valid for the row's user; its own token is")
    func answerAboutTheTokensOwner() throws {
        let harness = try DeletionHarness(reconcileEvery: 4)
        defer { harness.stop() }
        let vault = TokenVault(keys: [harness.tokenKey])
        _ = try ReconcileTests.storeToken("001.own", fake: harness.fake, vault: vault, conninfo: harness.conninfo)
        // Another user's live token, stored (sealed for this row, so it opens) under 001.mine: as an
        // auth library's row pointing at someone else would have it adopted.
        let (theirs, _) = try harness.fake.issueTokens(for: .init(sub: "001.theirs"), clientID: S.clientID)
        let sealed = try vault.seal(theirs, sub: "001.mine", clientID: S.clientID)
        _ = try TestDatabase.query(
            harness.conninfo,
            "INSERT INTO siwa.apple_tokens (apple_sub, client_id, key_id, ciphertext, source) VALUES ($1, $2, $3, $4::bytea, 'authjs')",
            ["001.mine", S.clientID, sealed.keyID, SQLEncoding.bytea(sealed.ciphertext)])
        try ReconcileTests.due(harness.conninfo)
        #expect(
            try eventually(timeout: 20) {
                try ReconcileTests.value(harness.conninfo, "SELECT validated_at IS NOT NULL FROM siwa.apple_tokens WHERE apple_sub = '001.own'")
                    == "t"
                    && ReconcileTests.value(harness.conninfo, "SELECT validation_failures FROM siwa.apple_tokens WHERE apple_sub = '001.mine'") == "1"
            }, "the own token validated, the other user's answered")
        #expect(try ReconcileTests.value(harness.conninfo, "SELECT validated_at IS NULL FROM siwa.apple_tokens WHERE apple_sub = '001.mine'") == "t")
        #expect(harness.logs.lines.contains { $0.contains("about another user than the token's owner") && !$0.contains("001.mine") })
    }
}
