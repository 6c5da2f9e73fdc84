import Logging
import SiwaPostgres
import SiwaRuntime

/// The keys of the stored refresh tokens against `SIWA_TOKEN_KEY_FILE`: the start-up check (a
/// token whose key is not configured stops the start, README "In-app account deletion") and `rekey` (every token
/// re-encrypted with the newest key, so an old key file can be dropped).
public enum StoredTokenKeys {
    /// Why stored tokens cannot be used with the configured keys. `description` is one line for
    /// operators: key ids, counts and a `sub_hash`, never a token or a raw `sub`.
    public struct Failure: Error, Sendable, CustomStringConvertible {
        public var description: String
    }

    /// Opens one stored token per distinct `key_id`, in `siwa.apple_tokens` and among the tokens
    /// waiting in `siwa.revocations` to be revoked at Apple. Throws when a key in use is not
    /// configured. A token that does not open under a key this process holds is bad data, not a
    /// wrong key (a key's id is its hash): it is set aside (`quarantined_at`; a waiting revocation
    /// goes dead with the reason), logged once, and the next token of that key is tried. A role
    /// that may not read those tables (`siwa_receiver`) skips the check: the worker's processes
    /// make it. Returns how many keys were checked (nil: skipped).
    @discardableResult
    public static func check(_ vault: TokenVault, conninfo: String, logger: Logger) throws -> Int? {
        let connection: PostgresConnection
        do {
            connection = try PostgresConnection(conninfo: conninfo, applicationName: "siwa-notify token key check")
            try record(vault, on: connection, logger: logger)
            _ = try connection.rows(TokenKeyStatements.onePerKey)  // a role that may not read the tokens skips the check
        } catch  where error.sqlState == "42501" {
            logger.notice("this role may not read siwa.apple_tokens: the stored tokens' keys are checked by the worker's processes")
            return nil
        } catch {
            throw Failure(description: "cannot read the stored refresh tokens to check their keys: \(error)")
        }
        var rows: [(row: TokenKeyStatements.Row, count: Int)] = []
        var setAside = Set<TokenKeyStatements.Row>()
        for (pick, quarantine) in [
            (TokenKeyStatements.onePerKey, TokenKeyStatements.quarantine),
            (TokenKeyStatements.revocationOnePerKey, TokenKeyStatements.quarantineRevocation),
        ] {
            while true {
                let picked: [(row: TokenKeyStatements.Row, count: Int)]
                do {
                    picked = try connection.rows(pick)
                } catch {
                    throw Failure(description: "cannot read the stored refresh tokens to check their keys: \(error)")
                }
                let bad = picked.filter { p in
                    vault.holds(keyID: p.row.token.keyID) && (try? vault.open(p.row.token, sub: p.row.sub, clientID: p.row.clientID)) == nil
                }
                // Ones already set aside and picked again (a revocation in flight): left to the revoker.
                let fresh = bad.filter { !setAside.contains($0.row) }
                if fresh.isEmpty {
                    rows += picked.filter { p in !bad.contains { $0.row == p.row } }
                    break
                }
                for b in fresh {
                    do {
                        try connection.affected(quarantine, b.row)
                    } catch {
                        throw Failure(description: "cannot set aside a stored refresh token that does not open: \(error)")
                    }
                    setAside.insert(b.row)
                    logger.warning(
                        "a stored refresh token does not open with its key: set aside (quarantined), never sent to Apple",
                        metadata: [
                            "sub_hash": "\(SubjectHash.of(b.row.sub))", "client_id": "\(b.row.clientID)", "key_id": "\(b.row.token.keyID)",
                        ])
                }
            }
        }
        // Tokens per key, over both tables.
        var counts: [String: Int] = [:]
        for (row, count) in rows { counts[row.token.keyID, default: 0] += count }
        for (row, _) in rows where !vault.holds(keyID: row.token.keyID) {
            let count = counts[row.token.keyID] ?? 0
            throw Failure(
                description:
                    "\(count) stored refresh token\(count == 1 ? "" : "s") are encrypted with key \(row.token.keyID), which it does not hold "
                    + "(keys: \(vault.keyIDs.joined(separator: ", "))): list that key's file after a comma, "
                    + "or those tokens cannot be revoked")
        }
        if !counts.isEmpty {
            logger.info(
                "stored refresh tokens open with the configured keys",
                metadata: ["keys": "\(counts.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: ","))"])
        }
        return counts.count
    }

    /// Records the ids of `vault`'s keys in `siwa.token_keys` (the ids the API's functions store a
    /// token under) where this login may: the owner (`migrate`, `rekey`) and the worker's role.
    /// Where it may not (the API's login), warns when the key that encrypts is not recorded: the
    /// API's functions then refuse to store a token (42501). True when recorded here.
    @discardableResult
    public static func record(_ vault: TokenVault, conninfo: String, logger: Logger? = nil) throws -> Bool {
        let connection = try PostgresConnection(conninfo: conninfo, applicationName: "siwa-notify token keys")
        return try record(vault, on: connection, logger: logger)
    }

    @discardableResult
    static func record(_ vault: TokenVault, on connection: PostgresConnection, logger: Logger?) throws(PostgresError) -> Bool {
        do {
            _ = try connection.row(TokenKeyStatements.record, vault.keyIDs)
            return true
        } catch  where error.sqlState == "42501" {
            // Not this login's to record: whether the key it encrypts with is.
        }
        do {
            if try connection.row(TokenKeyStatements.isRecorded, vault.current.id) != true {
                logger?.warning(
                    """
                    token key \(vault.current.id) is not recorded in siwa.token_keys: sign-ins cannot be stored until \
                    `siwa-notify migrate` or `rekey` runs with this SIWA_TOKEN_KEY_FILE, or a work process starts with it
                    """)
            }
        } catch  where error.sqlState == "42501" {
            // A receiver's login: it stores no token.
        }
        return false
    }

    /// What `rekey` did.
    public struct RekeyReport: Sendable, Equatable {
        /// Re-encrypted with the newest key by this run.
        public var rekeyed = 0
        /// Already under the newest key when the run began.
        public var alreadyCurrent = 0
        /// Still under an older key after the run: a deletion job held them, or a process still
        /// configured with the old key stored them meanwhile (run `rekey` again).
        public var remaining = 0
    }

    /// Re-encrypts every stored token not under the newest key (the first of
    /// `SIWA_TOKEN_KEY_FILE`), `batchSize` per short transaction, in primary-key order, then every
    /// token waiting in `siwa.revocations` the same way (by id). Resumable:
    /// a run that was killed leaves committed batches under the newest key, and the next run skips
    /// them. Throws at the first token that does not open (the batch rolls back; `rekeyed` says
    /// how many were committed before, in the error).
    public static func rekey(_ vault: TokenVault, conninfo: String, batchSize: Int = 100) throws -> RekeyReport {
        let newest = vault.current.id
        var report = RekeyReport()
        let connection: PostgresConnection
        do {
            connection = try PostgresConnection(conninfo: conninfo, applicationName: "siwa-notify rekey")
            try record(vault, on: connection, logger: nil)
            report.alreadyCurrent = try connection.row(TokenKeyStatements.countUnderKey, newest) ?? 0
        } catch {
            throw Failure(description: "cannot read the stored refresh tokens: \(error)")
        }
        report.rekeyed = try rekeyInBatches(
            vault, on: connection, rekeyedBefore: 0,
            next: { c, last throws(PostgresError) in
                try c.rows(TokenKeyStatements.nextNotUnder, (newest, last.map { ($0.sub, $0.clientID) }, batchSize))
            },
            row: { $0 }, label: { "sub_hash \(SubjectHash.of($0.sub)), client id \($0.clientID)" },
            replace: { c, row, sealed throws(PostgresError) in try c.affected(TokenKeyStatements.replace, (row, sealed)) })
        report.rekeyed += try rekeyInBatches(
            vault, on: connection, rekeyedBefore: report.rekeyed,
            next: { c, last throws(PostgresError) in
                try c.rows(TokenKeyStatements.nextRevocationsNotUnder, (newest, last?.id ?? 0, batchSize))
            },
            row: { $0.row },
            label: { "revocation \($0.id), sub_hash \(SubjectHash.of($0.row.sub)), client id \($0.row.clientID)" },
            replace: { c, job, sealed throws(PostgresError) in try c.affected(TokenKeyStatements.replaceRevocation, (job, sealed)) })
        // Tokens skipped because a deletion job held them, or stored meanwhile by a process that
        // still encrypts with an older key.
        do {
            report.remaining = try connection.row(TokenKeyStatements.countNotUnder, newest) ?? 0
        } catch {
            throw Failure(description: "cannot count the stored refresh tokens: \(error)")
        }
        return report
    }

    /// Re-encrypts with the newest key, one short transaction per batch, the tokens `next` locks
    /// (the batch after the last one, from the start when nil) until it returns none; returns how
    /// many were re-encrypted. Throws at the first token that does not open (its batch rolls back).
    private static func rekeyInBatches<Item>(
        _ vault: TokenVault, on connection: PostgresConnection, rekeyedBefore: Int,
        next: (PostgresConnection, Item?) throws(PostgresError) -> [Item],
        row: (Item) -> TokenKeyStatements.Row, label: (Item) -> String,
        replace: (PostgresConnection, Item, DeletionStatements.StoredToken) throws(PostgresError) -> Int
    ) throws -> Int {
        var rekeyed = 0
        var after: Item?
        while true {
            var done = 0
            var failure: String?
            do {
                let last = try connection.transaction { c throws(PostgresError) -> Item? in
                    let items = try next(c, after)
                    for item in items {
                        let token = row(item)
                        do {
                            let plaintext = try vault.open(token.token, sub: token.sub, clientID: token.clientID)
                            done += try replace(c, item, try vault.seal(plaintext, sub: token.sub, clientID: token.clientID))
                        } catch let error as PostgresError {
                            throw error
                        } catch {
                            failure = "\(error) (\(label(item)))"
                            throw PostgresError(code: .queryFailed, serverMessage: "rolled back")
                        }
                    }
                    return items.last
                }
                guard let last else { return rekeyed }
                after = last
            } catch {
                throw Failure(
                    description:
                        "\(failure ?? "\(error)"); \(rekeyedBefore + rekeyed) tokens were rekeyed before (run rekey again once fixed)")
            }
            rekeyed += done
        }
    }
}
