import SiwaPostgres

/// `siwa.transfers`: an app transfer between teams (`transfer export`, `transfer import`), and
/// the sign-in that maps a transferred user.
enum TransferStatements {
    /// The sending team's users still to export for `team`, after `after`, in `sub` order: every
    /// account not deleted without a transfer identifier for that team yet.
    static let exportCandidates = Statement<(team: String, after: String, limit: Int), String>(
        "transfer_export_candidates",
        """
        SELECT a.apple_sub FROM siwa.accounts a
        WHERE a.status <> 'deleted' AND a.apple_sub > $2
          AND NOT EXISTS (
              SELECT 1 FROM siwa.transfers t WHERE t.direction = 'export' AND t.team_id = $1 AND t.sub = a.apple_sub)
        ORDER BY a.apple_sub LIMIT $3
        """,
        bind: { [$0.team, $0.after, String($0.limit)] },
        decode: { row throws(PostgresError) in try row.text("apple_sub") })

    /// Records transfer identifiers as Apple gave them (a row already there is kept).
    static let recordExports = Statement<(team: String, clientID: String, subs: [String], transferSubs: [String]), Void>(
        "transfer_record_exports",
        """
        INSERT INTO siwa.transfers (direction, team_id, client_id, sub, transfer_sub)
        SELECT 'export', $1, $2, u.sub, u.transfer_sub FROM ROWS FROM (pg_catalog.unnest($3::text[]),
            pg_catalog.unnest($4::text[])) AS u(sub, transfer_sub)
        ON CONFLICT (team_id, sub) WHERE direction = 'export' DO NOTHING
        """,
        bind: { [$0.team, $0.clientID, SQLEncoding.array($0.subs), SQLEncoding.array($0.transferSubs)] })

    /// The list for the recipient: the transfer identifiers of `team`'s users not deleted, in the
    /// order they were obtained.
    static let exportList = Statement<String, String>(
        "transfer_export_list",
        """
        SELECT t.transfer_sub FROM siwa.transfers t JOIN siwa.accounts a ON a.apple_sub = t.sub
        WHERE t.direction = 'export' AND t.team_id = $1 AND a.status <> 'deleted'
        ORDER BY t.id
        """,
        bind: { [$0] },
        decode: { row throws(PostgresError) in try row.text("transfer_sub") })

    /// Records received transfer identifiers (unmapped; one already there is kept).
    static let recordReceived = Statement<(team: String, clientID: String, transferSubs: [String]), Void>(
        "transfer_record_received",
        """
        INSERT INTO siwa.transfers (direction, team_id, client_id, transfer_sub)
        SELECT 'import', $1, $2, u.transfer_sub FROM pg_catalog.unnest($3::text[]) AS u(transfer_sub)
        ON CONFLICT (transfer_sub) WHERE direction = 'import' DO NOTHING
        """,
        bind: { [$0.team, $0.clientID, SQLEncoding.array($0.transferSubs)] })

    /// Which of these received identifiers are not mapped to a user yet.
    static let unmapped = Statement<[String], String>(
        "transfer_unmapped",
        """
        SELECT t.transfer_sub FROM pg_catalog.unnest($1::text[]) WITH ORDINALITY AS u(transfer_sub, n)
        JOIN siwa.transfers t ON t.direction = 'import' AND t.transfer_sub = u.transfer_sub
        WHERE t.new_sub IS NULL ORDER BY u.n
        """,
        bind: { [SQLEncoding.array($0)] },
        decode: { row throws(PostgresError) in try row.text("transfer_sub") })

    /// One user Apple resolved at the receiving team.
    struct Imported: Sendable {
        var transferSub: String
        var newSub: String
        var email: String?
        var isPrivateEmail: Bool?
    }

    struct ImportBatch: Sendable {
        var users: [Imported]
        /// The app being transferred: `aud` of the app accounts and of the forwards.
        var clientID: String
        /// Forwarding is on: queue a `user-migrated` forward per identifier mapped now.
        var forward: Bool
    }

    /// Creates the accounts and their app accounts (`aud` the client id; active, email recorded;
    /// one already there, e.g. signed in since, is kept as it is; a user already deleted in this
    /// team stays deleted: no app account, no forward, only the mapping), maps the identifiers and, when
    /// forwarding is on, queues a `user-migrated` forward for each identifier mapped now (id
    /// `msg_transfer_<transfers.id>`, source `transfer`, event_time `migrated_at`), all in one
    /// statement. Rows are inserted in `COLLATE "C"` order, the order the worker locks them in.
    /// Returns the forwards queued.
    static let recordImported = Statement<ImportBatch, Void>(
        "transfer_record_imported",
        """
        WITH m AS (
            SELECT * FROM ROWS FROM (pg_catalog.unnest($1::text[]),
                pg_catalog.unnest($2::text[]),
                pg_catalog.unnest($3::text[]),
                pg_catalog.unnest($4::boolean[]))
                AS m(transfer_sub, new_sub, email, is_private_email)
        ), users AS (
            SELECT DISTINCT ON (new_sub COLLATE "C") new_sub, email, is_private_email FROM m ORDER BY new_sub COLLATE "C"
        ), created AS (
            INSERT INTO siwa.accounts (apple_sub, email, is_private_email, status)
            SELECT new_sub, email, is_private_email, 'active' FROM users ORDER BY new_sub COLLATE "C"
            ON CONFLICT (apple_sub) DO NOTHING
        ), deleted AS (
            SELECT a.apple_sub FROM siwa.accounts a
            WHERE a.apple_sub = ANY (ARRAY(SELECT new_sub FROM users)) AND a.status = 'deleted'
        ), apps AS (
            INSERT INTO siwa.app_accounts (apple_sub, aud, status, email, is_private_email)
            SELECT new_sub, $5, 'active', email, is_private_email FROM users
            WHERE new_sub NOT IN (SELECT apple_sub FROM deleted) ORDER BY new_sub COLLATE "C"
            ON CONFLICT (apple_sub, aud) DO NOTHING
        ), mapped AS (
            UPDATE siwa.transfers t SET new_sub = m.new_sub, migrated_at = pg_catalog.now()
            FROM m WHERE t.direction = 'import' AND t.transfer_sub = m.transfer_sub AND t.new_sub IS NULL
            RETURNING t.id, t.transfer_sub, t.new_sub, t.migrated_at
        )
        INSERT INTO siwa.forwards (id, sub, aud, type, event_time, source, transfer_sub)
        SELECT 'msg_transfer_' || id::text, new_sub, $5, 'user-migrated', migrated_at, 'transfer', transfer_sub
        FROM mapped WHERE $6::boolean AND new_sub NOT IN (SELECT apple_sub FROM deleted) ORDER BY id
        ON CONFLICT (id) DO NOTHING
        """,
        bind: { batch in
            let rows = batch.users
            return [
                SQLEncoding.array(rows.map(\.transferSub)), SQLEncoding.array(rows.map(\.newSub)),
                SQLEncoding.array(rows.map(\.email)), SQLEncoding.array(rows.map(\.isPrivateEmail)), batch.clientID,
                SQLEncoding.bool(batch.forward),
            ]
        })

    /// For the sign-in path (`POST /apple/tokens`, `POST /apple/refresh-tokens`): an `id_token`
    /// carrying `transfer_sub` maps that identifier to the user who signed in (`newSub`), as
    /// `transfer import` does (`siwa.map_transfer`, callable by the least-privilege roles). Binds:
    /// `transferSub`, `newSub`, `teamID` (SIWA_TEAM_ID), `clientID` (the id_token's `aud`),
    /// `forward` (forwarding is on: a user mapped now is queued as a `user-migrated` forward, as
    /// `recordImported` does). True when mapped now; false when it was mapped already. Also
    /// `PostgresConnection.mapTransferOnSignIn`, callable outside the module.
    static let mapOnSignIn = Statement<(transferSub: String, newSub: String, teamID: String, clientID: String, forward: Bool), Bool>(
        "transfer_map_on_sign_in", "SELECT siwa.map_transfer($1, $2, $3, $4, $5) AS mapped",
        bind: { [$0.transferSub, $0.newSub, $0.teamID, $0.clientID, SQLEncoding.bool($0.forward)] },
        decode: { row throws(PostgresError) in try row.bool("mapped") })

    /// What `status` shows of transfers.
    struct Counts: Sendable, Equatable {
        var exported: Int
        var mapped: Int
        var unmapped: Int
        /// Unix seconds of the first identifier received (the window's start as seen here).
        var importStarted: Double?
    }

    /// Users exported, mapped and still unmapped (maintained counts: schema.sql "Maintained counts"),
    /// and when the first import began (`transfers_import_created_idx`).
    static let counts = Statement<Void, Counts>(
        "transfer_counts",
        """
        SELECT \(MaintainedCounts.sum("'transfers:export'")) AS exported,
               \(MaintainedCounts.sum("'transfers:mapped'")) AS mapped,
               \(MaintainedCounts.sum("'transfers:unmapped'")) AS unmapped,
               (SELECT extract(epoch FROM created_at)::float8 FROM siwa.transfers WHERE direction = 'import' ORDER BY created_at LIMIT 1)
                   AS import_started
        """,
        decode: { row throws(PostgresError) in
            Counts(
                exported: try row.int("exported"), mapped: try row.int("mapped"), unmapped: try row.int("unmapped"),
                importStarted: try row.optionalDouble("import_started"))
        })
}

extension PostgresConnection {
    /// Records that the user who signed in as `newSub` is the one behind `transferSub` (an
    /// `id_token` with `transfer_sub`, within Apple's 60 days after an app transfer). Idempotent;
    /// true when it mapped the identifier now.
    @discardableResult
    public func mapTransferOnSignIn(
        transferSub: String, newSub: String, teamID: String, clientID: String, forward: Bool = false
    ) throws(PostgresError) -> Bool {
        try row(TransferStatements.mapOnSignIn, (transferSub, newSub, teamID, clientID, forward)) ?? false
    }
}
