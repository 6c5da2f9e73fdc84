import SiwaCore
import SiwaCrypto
import SiwaPostgres

/// The Apple refresh tokens an auth library keeps in its own table (README "Tokens the library stores"), adopted into `siwa.apple_tokens` (encrypted by the caller) so that in-app
/// deletion and reconciliation use them like the hand-over's. A token is adopted once:
/// `siwa.library_tokens` keeps the SHA-256 of the last one adopted for each user and client id, so a
/// token reconciliation found gone (and erased) is not taken again while the library still holds
/// it. A token that came through siwa-notify's own sign-in (`source` NULL) is never replaced.
/// Every read is a key lookup: by the batch's subs, or one keyset page of the library's
/// (provider, sub) index.
enum LibraryTokenStatements {
    struct Found {
        var sub: String
        /// nil: none to adopt (none stored, already adopted, or a hand-over token holds the place).
        var token: String?
    }

    /// True when the library's token `token` of `sub` is still to adopt for client id `$client`:
    /// no sign-in's token holds the place, and it is not the one adopted last.
    private static func toAdopt(sub: String, token: String, client: String) -> String {
        """
        \(token) IS NOT NULL
        AND NOT EXISTS (SELECT FROM siwa.apple_tokens t
                        WHERE t.apple_sub = \(sub) AND t.client_id = \(client) AND t.source IS NULL)
        AND NOT EXISTS (SELECT FROM siwa.library_tokens l
                        WHERE l.apple_sub = \(sub) AND l.client_id = \(client)
                          AND l.token_hash = pg_catalog.sha256(pg_catalog.convert_to(\(token), 'UTF8')))
        """
    }

    /// The tokens to adopt of the users whose Apple identity is one of `$1` (a deletion is
    /// applied to them): a probe of the identity per element, as `AuthLibraryStatements`. nil
    /// when the library keeps no refresh token.
    static func forSubs(_ s: AuthLibrarySchema) -> Statement<(subs: [String], clientID: String), Found>? {
        let i = s.identities
        guard let column = i.refreshToken else { return nil }
        return Statement(
            "\(s.kind.rawValue)_library_tokens_for_subs",
            """
            SELECT u.sub, x.token
            FROM pg_catalog.unnest($1::text[]) AS u(sub)
            CROSS JOIN LATERAL (
                SELECT i.\(q(column)) AS token FROM \(i.table.quoted) i
                WHERE i.\(q(i.subject)) = u.sub AND i.\(q(i.provider)) = 'apple' LIMIT 1) x
            WHERE \(toAdopt(sub: "u.sub", token: "x.token", client: "$2"))
            """,
            bind: { [SQLEncoding.array($0.subs), $0.clientID] },
            decode: { row throws(PostgresError) in Found(sub: try row.text("sub"), token: try row.optionalText("token")) })
    }

    /// One page of the library's Apple identities after `$1` in sub order (`$2` of them), each
    /// with its token when there is one to adopt (nil otherwise: the page still moves the
    /// cursor). The index on (provider, sub) or (sub) is read in order from the cursor: never the
    /// whole table.
    static func page(_ s: AuthLibrarySchema) -> Statement<(after: String, limit: Int, clientID: String), Found>? {
        let i = s.identities
        guard let column = i.refreshToken else { return nil }
        return Statement(
            "\(s.kind.rawValue)_library_tokens_page",
            """
            SELECT p.sub, CASE WHEN \(toAdopt(sub: "p.sub", token: "p.token", client: "$3")) THEN p.token END AS token
            FROM (
                SELECT i.\(q(i.subject)) AS sub, i.\(q(column)) AS token FROM \(i.table.quoted) i
                WHERE i.\(q(i.provider)) = 'apple' AND i.\(q(i.subject)) > $1
                ORDER BY i.\(q(i.subject)) LIMIT $2) p
            ORDER BY p.sub
            """,
            bind: { [$0.after, String($0.limit), $0.clientID] },
            decode: { row throws(PostgresError) in Found(sub: try row.text("sub"), token: try row.optionalText("token")) })
    }

    struct Sealed {
        var sub: String
        var token: DeletionStatements.StoredToken
        /// SHA-256 of the token in clear (what `toAdopt` compares).
        var hash: [UInt8]
    }

    /// Stores sealed library tokens for client id `$5` (`source` the library). `signed_in_at` is
    /// the adoption's time: the library held the grant then and says no more. Dated earlier, an
    /// older consent-revoked arriving late would erase a grant newer than it, never adopted again
    /// (adopted once), and leave nothing for a later in-app deletion; an in-app deletion takes an
    /// adopted token whenever it was adopted (`siwa.move_tokens_to_revocation`: it removes the
    /// library's identity that held it). A row from siwa-notify's own sign-in is left as it is
    /// (also one stored since the read); one adopted before is replaced (the library holds a newer
    /// token) and validated again from scratch. Returns how many were stored.
    static let adopt = Statement<(rows: [Sealed], clientID: String, source: String), Int>(
        "adopt_library_tokens",
        """
        WITH u AS (
            SELECT * FROM ROWS FROM (pg_catalog.unnest($1::text[]),
                pg_catalog.unnest($2::text[]),
                pg_catalog.unnest($3::text[]),
                pg_catalog.unnest($4::text[])) AS u(sub, key_id, ciphertext, hash)
        ), stored AS (
            INSERT INTO siwa.apple_tokens AS t (apple_sub, client_id, key_id, ciphertext, signed_in_at, source)
            SELECT u.sub, $5, u.key_id, pg_catalog.decode(u.ciphertext, 'hex'), pg_catalog.now(), $6 FROM u
            ON CONFLICT ON CONSTRAINT apple_tokens_pkey DO UPDATE
                SET key_id = excluded.key_id, ciphertext = excluded.ciphertext, signed_in_at = excluded.signed_in_at,
                    source = excluded.source, updated_at = pg_catalog.now(), validated_at = NULL, next_validation_at = NULL,
                    validation_failures = 0
                WHERE t.source IS NOT NULL
            RETURNING t.apple_sub
        ), recorded AS (
            INSERT INTO siwa.library_tokens AS l (apple_sub, client_id, source, token_hash)
            SELECT u.sub, $5, $6, pg_catalog.decode(u.hash, 'hex') FROM u WHERE u.sub = ANY (ARRAY(SELECT s.apple_sub FROM stored s))
            ON CONFLICT ON CONSTRAINT library_tokens_pkey DO UPDATE
                SET source = excluded.source, token_hash = excluded.token_hash, adopted_at = pg_catalog.now()
            RETURNING 1
        )
        SELECT pg_catalog.count(*)::int AS adopted FROM recorded
        """,
        bind: {
            [
                SQLEncoding.array($0.rows.map(\.sub)), SQLEncoding.array($0.rows.map(\.token.keyID)),
                SQLEncoding.array($0.rows.map { Hex.encode($0.token.ciphertext) }), SQLEncoding.array($0.rows.map { Hex.encode($0.hash) }),
                $0.clientID, $0.source,
            ]
        },
        decode: { row throws(PostgresError) in try row.int("adopted") })

    private static func q(_ name: String) -> String { "\"\(name)\"" }
}
