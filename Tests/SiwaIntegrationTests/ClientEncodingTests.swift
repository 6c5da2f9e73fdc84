import Foundation
import SiwaApp
import SiwaPostgres
import Testing

/// A database (or role) whose default `client_encoding` is not UTF8 must not change what is
/// stored: the service speaks UTF-8 whatever the server's default for new sessions.
@Suite("Client encoding", .needsDatabase)
struct ClientEncodingTests {
    /// The UTF-8 bytes of `text` as lowercase hex, to compare with `encode(convert_to(col, 'UTF8'), 'hex')`
    /// (hex is ASCII: the comparison does not depend on the checking connection's encoding).
    static func hex(_ text: String) -> String {
        text.utf8.map { String(format: "%02x", $0) }.joined()
    }

    @Test("ALTER DATABASE … SET client_encoding = 'LATIN1': non-ASCII sub, email and type are stored byte-identical to what was signed")
    func latin1DatabaseDefault() throws {
        let conninfo = try TestDatabase.create()
        let dbname = try TestDatabase.query(conninfo, "SELECT current_database()").scalar ?? ""
        _ = try TestDatabase.query(conninfo, "ALTER DATABASE \(dbname) SET client_encoding = 'LATIN1'")
        // New sessions now default to LATIN1 (the premise of the test; read from the catalog, not
        // from a session, whose encoding the client library may choose itself).
        #expect(
            try TestDatabase.query(
                conninfo,
                """
                SELECT array_to_string(setconfig, ',') FROM pg_db_role_setting
                WHERE setdatabase = (SELECT oid FROM pg_database WHERE datname = current_database()) AND setrole = 0
                """
            ).scalar == "client_encoding=LATIN1")

        let h = try TestHarness(conninfo: conninfo)
        defer { h.stop() }
        let sub = "000739.jörg.ünïcødé.Ω.0001"
        let email = "jörg.müller@exämple.com"
        let unknownType = "party-🎉-straße"
        let known = try h.post(token: try h.token(type: "email-enabled", sub: sub, email: email, isPrivateEmail: false))
        #expect(known.status == 200 && known.code == "accepted", "\(known.status) \(known.body)")
        let unknown = try h.post(token: try h.token(type: unknownType, sub: sub + ".🎉"))
        #expect(unknown.status == 200 && unknown.code == "ignored", "\(unknown.status) \(unknown.body)")
        #expect(try h.waitForWorker())

        // What is stored, byte for byte (convert_to from the database's UTF8 to UTF8 is the identity).
        let stored = try h.query(
            """
            SELECT encode(convert_to(sub, 'UTF8'), 'hex') AS sub, encode(convert_to(email, 'UTF8'), 'hex') AS email,
                   encode(convert_to(type, 'UTF8'), 'hex') AS type, status,
                   encode(convert_to(claims::text, 'UTF8'), 'hex') AS claims
            FROM siwa.events ORDER BY id
            """)
        #expect(stored.rows.count == 2)
        #expect(stored.value(0, "sub") == Self.hex(sub))
        #expect(stored.value(0, "email") == Self.hex(email))
        #expect(stored.value(0, "type") == Self.hex("email-enabled"))
        #expect(stored.value(0, "status") == "done")
        #expect(stored.value(1, "sub") == Self.hex(sub + ".🎉"))
        #expect(stored.value(1, "type") == Self.hex(unknownType))
        #expect(stored.value(1, "status") == "ignored")
        // The claims (jsonb) hold the same characters, not their mojibake.
        let claims = String(decoding: Self.bytes(fromHex: stored.value(0, "claims") ?? ""), as: UTF8.self)
        #expect(claims.contains(sub), "\(claims)")
        #expect(claims.contains(email), "\(claims)")
        let unknownClaims = String(decoding: Self.bytes(fromHex: stored.value(1, "claims") ?? ""), as: UTF8.self)
        #expect(unknownClaims.contains(unknownType), "\(unknownClaims)")

        // The worker wrote the account with the same bytes.
        let account = try h.query(
            """
            SELECT encode(convert_to(apple_sub, 'UTF8'), 'hex') AS sub, encode(convert_to(email, 'UTF8'), 'hex') AS email
            FROM siwa.accounts
            """)
        #expect(account.rows.count == 1)
        #expect(account.value(0, "sub") == Self.hex(sub))
        #expect(account.value(0, "email") == Self.hex(email))
    }

    static func bytes(fromHex hex: String) -> [UInt8] {
        var out: [UInt8] = []
        var index = hex.startIndex
        while index < hex.endIndex, let end = hex.index(index, offsetBy: 2, limitedBy: hex.endIndex) {
            if let byte = UInt8(hex[index..<end], radix: 16) { out.append(byte) }
            index = end
        }
        return out
    }
}
