import Foundation
import SiwaApp
import SiwaCrypto
import SiwaPostgres
import Testing

/// `siwa.token_keys`: the API's functions store a token only under a key id the owner or a
/// worker's process recorded, and only a ciphertext at least AES-GCM's nonce plus tag long.
@Suite("Token key list", .serialized, .needsDatabase)
struct TokenKeyListTests {
    static func outcome(_ c: PostgresConnection, _ sql: String, _ parameters: [String?] = []) -> String {
        DatabaseTrustTests.outcome(c, sql, parameters)
    }

    @Test("an API login records no key id and stores nothing under one no process recorded, nor a ciphertext shorter than nonce and tag")
    func apiTakesRecordedKeysOnly() throws {
        let (url, login) = try LeastPrivilegeTests.databaseWithLoginRoles()
        let api = try PostgresConnection(conninfo: login["siwa_api"]!)
        let worker = try PostgresConnection(conninfo: login["siwa_worker"]!)
        let sub = "000739.keys.0001"
        let store = "SELECT siwa.store_apple_token($1, 'app', $2, decode($3, 'hex'), NULL, NULL, now())"
        let queue = "SELECT siwa.queue_revocation($1, 'app', $2, decode($3, 'hex'))"
        let whole = String(repeating: "00", count: 28), short = String(repeating: "00", count: 27)
        // The key id that stopped every worker's start, a well-formed one nobody recorded, and the
        // way round through the list itself.
        for key in ["zz", "0000000c"] {
            #expect(Self.outcome(api, store, [sub, key, whole]) == "error 42501", "\(key)")
            #expect(Self.outcome(api, queue, [sub, key, whole]) == "error 42501", "\(key)")
        }
        #expect(Self.outcome(api, "SELECT siwa.record_token_keys(ARRAY['0000000c'])") == "error 42501")
        #expect(Self.outcome(api, "INSERT INTO siwa.token_keys (key_id) VALUES ('0000000c')") == "error 42501")
        // Under a recorded key, a ciphertext one byte short of nonce and tag.
        #expect(Self.outcome(api, store, [sub, RecordedTokenKey.id, short]) == "error 22023")
        #expect(Self.outcome(api, queue, [sub, RecordedTokenKey.id, short]) == "error 22023")
        #expect(
            try TestDatabase.query(url, "SELECT (SELECT count(*) FROM siwa.apple_tokens) + (SELECT count(*) FROM siwa.revocations)").scalar == "0")
        // A worker's process records its own key (its role writes the tokens anyway); then the API stores under it.
        #expect(Self.outcome(worker, "SELECT siwa.record_token_keys(ARRAY['0000000c', '0000000c'])") == "1")
        #expect(Self.outcome(worker, "SELECT siwa.record_token_keys(ARRAY['zz'])") == "error 23514")
        #expect(Self.outcome(api, store, [sub, "0000000c", whole]) == "created")
        #expect(Self.outcome(api, queue, [sub, "0000000c", whole]) == "")
    }

    @Test("the owner (migrate, rekey) and a worker record the keys of SIWA_TOKEN_KEY_FILE; an API login cannot and is told")
    func recordedFromTheKeyFile() throws {
        let (url, login) = try LeastPrivilegeTests.databaseWithLoginRoles()
        let new = TokenKey.generate(), old = TokenKey.generate()
        let vault = TokenVault(keys: [new, old])
        #expect(try StoredTokenKeys.record(vault, conninfo: login["siwa_api"]!) == false)
        #expect(try TestDatabase.query(url, "SELECT count(*) FROM siwa.token_keys WHERE key_id IN ($1, $2)", [new.id, old.id]).scalar == "0")
        #expect(try StoredTokenKeys.record(vault, conninfo: url))
        #expect(try StoredTokenKeys.record(TokenVault(keys: [TokenKey.generate()]), conninfo: login["siwa_worker"]!))
        #expect(try TestDatabase.query(url, "SELECT count(*) FROM siwa.token_keys WHERE key_id IN ($1, $2)", [new.id, old.id]).scalar == "2")
        #expect(try TestDatabase.query(url, "SELECT count(*) FROM siwa.token_keys").scalar == "5")
    }

    @Test("upgrade: the key ids the stored tokens use are recorded once, when the list is made; ids of another shape are not")
    func upgradeRecordsKeysInUse() throws {
        let url = try TestDatabase.createEmpty()
        let connection = try PostgresConnection(conninfo: url)
        try connection.execute(
            try String(contentsOf: SchemaEquivalenceTests.fixtures.appendingPathComponent("schema-0735416.sql"), encoding: .utf8))
        _ = try connection.execute(
            """
            INSERT INTO siwa.apple_tokens (apple_sub, client_id, key_id, ciphertext) VALUES ('a', 'app', 'abcdef01', '\\x00'), ('b', 'app', 'zz', '\\x00');
            INSERT INTO siwa.revocations (apple_sub, client_id, key_id, ciphertext, reason) VALUES ('c', 'app', 'abcdef02', '\\x00', 'in-app-deletion')
            """)
        #expect(try Migrator.migrate(conninfo: url) == .applied)
        #expect(try connection.execute("SELECT string_agg(key_id, ',' ORDER BY key_id) FROM siwa.token_keys").scalar == "abcdef01,abcdef02")
        // Recorded once: a token written later under another id is not recorded by the next migration.
        _ = try connection.execute(
            "INSERT INTO siwa.apple_tokens (apple_sub, client_id, key_id, ciphertext) VALUES ('d', 'app', 'abcdef03', '\\x00')")
        try Migrator.migrate(conninfo: url, force: true)
        #expect(try connection.execute("SELECT count(*) FROM siwa.token_keys").scalar == "2")
    }
}
