import SiwaPostgres

/// The last good key set of each JWKS URL (`siwa.key_sets`), so a restart while Apple's
/// endpoint is unreachable still verifies.
enum KeySetStatements {
    static let load = Statement<String, String>(
        "load_key_set", "SELECT body FROM siwa.key_sets WHERE url = $1",
        bind: { url in [url] }, decode: { row throws(PostgresError) in try row.text("body") })

    static let save = Statement<(url: String, body: String), Void>(
        "save_key_set",
        """
        INSERT INTO siwa.key_sets (url, body, fetched_at) VALUES ($1, $2, pg_catalog.now())
        ON CONFLICT (url) DO UPDATE SET body = excluded.body, fetched_at = excluded.fetched_at
        """,
        bind: { [$0.url, $0.body] })
}
