import Foundation
import SiwaPostgres
import Testing

/// Apple's two spellings of the deletion (`account-delete`, `account-deleted`) are one type for
/// every check, not only for the worker.
@Suite("Deletion spelling", .serialized, .needsDatabase)
struct DeletionSpellingTests {
    @Test("a pending `account-deleted` refuses an older sign-in in store_apple_token, as `account-delete` does")
    func storeTokenSeesBothSpellings() throws {
        let (url, login) = try LeastPrivilegeTests.databaseWithLoginRoles()
        let receiver = try PostgresConnection(conninfo: login["siwa_receiver"]!)
        let api = try PostgresConnection(conninfo: login["siwa_api"]!)
        for (i, type) in ["account-delete", "account-deleted"].enumerated() {
            let sub = "000739.spelling.\(i)"
            _ = try receiver.execute(
                """
                INSERT INTO siwa.events (jti, aud, sub, type, event_time, status, claims)
                VALUES ($1, 'app', $2, $3, now() - interval '1 minute', 'pending', '{}')
                """, ["spelling-\(i)", sub, type])
            let answer = try api.execute(
                "SELECT siwa.store_apple_token($1, 'app', $2, \(RecordedTokenKey.sealed()), NULL, NULL, now() - interval '2 minutes')",
                [sub, RecordedTokenKey.id]
            ).scalar
            #expect(answer == "deleted", "\(type)")
        }
        #expect(try TestDatabase.query(url, "SELECT count(*) FROM siwa.apple_tokens").scalar == "0")
    }
}
