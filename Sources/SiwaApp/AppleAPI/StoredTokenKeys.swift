import Logging
import SiwaPostgres

/// The keys of the stored refresh tokens against `SIWA_TOKEN_KEY_FILE`: the start-up check (a
/// token whose key is not configured stops the start, contract §7) and `rekey` (every token
/// re-encrypted with the newest key, so an old key file can be dropped).
public enum StoredTokenKeys {
    /// Why stored tokens cannot be used with the configured keys. `description` is one line for
    /// operators: key ids, counts and a `sub_hash`, never a token or a raw `sub`.
    public struct Failure: Error, Sendable, CustomStringConvertible {
        public var description: String
    }

    /// Opens one stored token per distinct `key_id`. Throws when a key in use is not configured
    /// or a token does not open with its key (a wrong file under the right name is caught too).
    /// A role that may not read `siwa.apple_tokens` (`siwa_receiver`) skips the check: the
    /// worker's processes make it. Returns how many keys were checked (nil: skipped).
    @discardableResult
    public static func check(_ vault: TokenVault, conninfo: String, logger: Logger) throws -> Int? {
        let rows: [(row: TokenKeyStatements.Row, count: Int)]
        do {
            let connection = try PostgresConnection(conninfo: conninfo, applicationName: "siwa-notify token key check")
            rows = try connection.rows(TokenKeyStatements.onePerKey)
        } catch  where error.sqlState == "42501" {
            logger.notice("this role may not read siwa.apple_tokens: the stored tokens' keys are checked by the worker's processes")
            return nil
        } catch {
            throw Failure(description: "cannot read the stored refresh tokens to check their keys: \(error)")
        }
        for (row, count) in rows {
            do {
                _ = try vault.open(row.token, sub: row.sub, clientID: row.clientID)
            } catch {
                let tokens = "\(count) stored refresh token\(count == 1 ? "" : "s")"
                if !vault.holds(keyID: row.token.keyID) {
                    throw Failure(
                        description:
                            "\(tokens) are encrypted with key \(row.token.keyID), which it does not hold "
                            + "(keys: \(vault.keyIDs.joined(separator: ", "))): list that key's file after a comma, "
                            + "or those tokens cannot be revoked")
                }
                throw Failure(
                    description:
                        "a stored refresh token (sub_hash \(SubjectHash.of(row.sub)), client id \(row.clientID)) does not open "
                        + "with key \(row.token.keyID) (\(tokens) use it): the file of that key is not the one they were encrypted with")
            }
        }
        if !rows.isEmpty {
            logger.info(
                "stored refresh tokens open with the configured keys",
                metadata: ["keys": "\(rows.map { "\($0.row.token.keyID)=\($0.count)" }.joined(separator: ","))"])
        }
        return rows.count
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
    /// `SIWA_TOKEN_KEY_FILE`), `batchSize` per short transaction, in primary-key order. Resumable:
    /// a run that was killed leaves committed batches under the newest key, and the next run skips
    /// them. Throws at the first token that does not open (the batch rolls back; `rekeyed` says
    /// how many were committed before, in the error).
    public static func rekey(_ vault: TokenVault, conninfo: String, batchSize: Int = 100) throws -> RekeyReport {
        let newest = vault.current.id
        var report = RekeyReport()
        let connection: PostgresConnection
        do {
            connection = try PostgresConnection(conninfo: conninfo, applicationName: "siwa-notify rekey")
            report.alreadyCurrent = try connection.row(TokenKeyStatements.countUnderKey, newest) ?? 0
        } catch {
            throw Failure(description: "cannot read the stored refresh tokens: \(error)")
        }
        var after: (sub: String, clientID: String)?
        while true {
            var done = 0
            var failure: String?
            do {
                let last = try connection.transaction { c throws(PostgresError) -> TokenKeyStatements.Row? in
                    let rows = try c.rows(TokenKeyStatements.nextNotUnder, (newest, after, batchSize))
                    for row in rows {
                        do {
                            let plaintext = try vault.open(row.token, sub: row.sub, clientID: row.clientID)
                            let sealed = try vault.seal(plaintext, sub: row.sub, clientID: row.clientID)
                            done += try c.affected(TokenKeyStatements.replace, (row, sealed))
                        } catch let error as PostgresError {
                            throw error
                        } catch {
                            failure = "\(error) (sub_hash \(SubjectHash.of(row.sub)), client id \(row.clientID))"
                            throw PostgresError(code: .queryFailed, serverMessage: "rolled back")
                        }
                    }
                    return rows.last
                }
                guard let last else { break }
                after = (last.sub, last.clientID)
            } catch {
                throw Failure(
                    description: "\(failure ?? "\(error)"); \(report.rekeyed) tokens were rekeyed before (run rekey again once fixed)")
            }
            report.rekeyed += done
        }
        // Tokens skipped because a deletion job held them, or stored meanwhile by a process that
        // still encrypts with an older key.
        do {
            report.remaining = try connection.row(TokenKeyStatements.countNotUnder, newest) ?? 0
        } catch {
            throw Failure(description: "cannot count the stored refresh tokens: \(error)")
        }
        return report
    }
}
