/// A token key id recorded in `siwa.token_keys` and a ciphertext of the shortest length the API's
/// functions accept (AES-GCM's nonce and tag): what a test storing a token through
/// `siwa.store_apple_token` or `siwa.queue_revocation` passes when the token is never opened.
enum RecordedTokenKey {
    static let id = "0000000a"
    static let other = "0000000b"
    /// SQL of a 28-byte ciphertext whose bytes are all `byte` (two hex digits).
    static func sealed(_ byte: String = "00") -> String { "decode(repeat('\(byte)', 28), 'hex')" }

    /// Records `id` and `other` in the database of `url` (as the owner would).
    static func record(_ url: String) throws {
        _ = try TestDatabase.query(url, "INSERT INTO siwa.token_keys (key_id) VALUES ($1), ($2) ON CONFLICT DO NOTHING", [id, other])
    }
}
