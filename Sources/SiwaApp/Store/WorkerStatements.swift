import SiwaCore
import SiwaPostgres

/// An outbox row the worker claimed (locked) in its transaction.
struct ClaimedEvent: Sendable {
    var id: Int64
    var audience: String
    var event: AppleEvent
    var attempts: Int
    /// `claims.source` of events siwa-notify recorded itself (`in-app`, `reconcile`, `sign-in`);
    /// nil for Apple's notifications.
    var source: String? = nil

    /// Where the event came from, as forwards name it.
    var forwardSource: ForwardSource {
        if event.type == .deletionRequested { return .inApp }
        return source.flatMap(ForwardSource.init(rawValue:)) ?? .apple
    }
}

/// The worker's statements: claim due events, lock or create accounts, write the decisions of
/// `EventRules`, revoke sessions, erase a deleted user's email, mark events done or failed, call
/// the operator hook, prune. Each batch statement takes arrays and touches rows by key only
/// (index lookups); `beginBatch` scopes planner settings that keep them so whatever the
/// statistics say (a table bulk-loaded without ANALYZE is no reason for a scan per batch).
///
/// Driven by the batch by construction: a table is reached only through an index condition
/// holding the batch's keys, `= ANY($1)`, `= ANY (ARRAY(SELECT …))`, or, where each row of the
/// batch brings its own values, `= ANY (ARRAY[u.key])`. The last is no equality between two
/// columns, so the planner cannot hash, merge or turn the join round: without a sequential scan
/// the table's only way in is a probe per batch row, on the inner side of a loop over the batch.
/// (A plain `t.key = u.key` let a planner that believed the table nearly empty, analyzed while it
/// was, put a scan of its whole primary key outside a loop over the batch.)
enum WorkerStatements {
    /// The NOTIFY channel of new events (the statement trigger on `siwa.events`).
    static let channel = "siwa_events"

    /// Opens the batch transaction: statement and lock timeouts, and key lookups only, all
    /// transaction-local (`SET LOCAL`: nothing lingers on a pooled connection).
    static func beginBatch(statementTimeoutSeconds: Int, lockTimeoutSeconds: Int) -> String {
        """
        BEGIN; SET LOCAL statement_timeout = '\(statementTimeoutSeconds)s'; SET LOCAL lock_timeout = '\(lockTimeoutSeconds)s';
        \(keyLookupsOnly.sql)
        """
    }

    /// The worker's own statements look rows up by key: never a sequential scan, hash or merge
    /// join over a whole table; no bitmap scan, so the claim reads the due index in its order
    /// and stops at the batch size (on a table that was never analyzed, a bitmap scan and a
    /// sort of the whole backlog looked cheaper); and no JIT compilation (without statistics the
    /// row estimates cross `jit_above_cost`, and compiling cost far more than the statement).
    /// All transaction-local; the measurements are in bench/README.md.
    static let keyLookupsOnly = Statement<Void, Void>(
        "key_lookups_only",
        """
        SET LOCAL enable_seqscan = off; SET LOCAL enable_hashjoin = off; SET LOCAL enable_mergejoin = off;
        SET LOCAL enable_bitmapscan = off; SET LOCAL jit = off
        """,
        bind: { _ in [] })

    /// A short transaction of key lookups only, for the statements of the other background
    /// parts (retention, reconciliation) that are batch-driven as the worker's are.
    static let beginKeyLookups = "BEGIN; " + keyLookupsOnly.sql

    /// Before the operator hook runs: the planner as configured (the hook's own queries).
    static let plannerDefaults = Statement<Void, Void>(
        "planner_defaults",
        """
        SET LOCAL enable_seqscan = DEFAULT; SET LOCAL enable_hashjoin = DEFAULT; SET LOCAL enable_mergejoin = DEFAULT;
        SET LOCAL enable_bitmapscan = DEFAULT; SET LOCAL jit = DEFAULT
        """,
        bind: { _ in [] })

    /// Up to `$1` due events, oldest first, locked (`SKIP LOCKED`: workers share one queue):
    /// Apple's, sign-ins and in-app deletions alike. The due rows come from `siwa.event_queue`
    /// (its due index, in order), and both rows are locked, the queue's first: an event row
    /// another batch holds (erasing that user's addresses) is skipped, not waited for, and
    /// taken by a later claim.
    static let claim = Statement<Int, ClaimedEvent>(
        "claim_events",
        """
        SELECT e.id, e.aud, e.sub, e.type, \(SQLEncoding.millis("e.event_time")) AS event_ms, e.email, e.is_private_email,
               e.attempts, e.claims ->> 'source'::text AS source
        FROM siwa.events e
        WHERE e.id = ANY (ARRAY(
            SELECT q.id FROM siwa.event_queue q
            WHERE q.status IN ('pending', 'failed') AND q.next_attempt_at <= pg_catalog.now()
            ORDER BY q.next_attempt_at, q.id
            LIMIT $1
            FOR UPDATE SKIP LOCKED))
          AND e.status IN ('pending', 'failed')
        ORDER BY e.next_attempt_at, e.id
        FOR UPDATE OF e SKIP LOCKED
        """,
        bind: { [String($0)] },
        decode: { row throws(PostgresError) in
            ClaimedEvent(
                id: try row.int64("id"), audience: try row.text("aud"),
                event: AppleEvent(
                    type: EventType(stored: try row.text("type")), sub: try row.text("sub"),
                    eventTimeMillis: try row.int64("event_ms"), email: try row.optionalText("email"),
                    isPrivateEmail: try row.optionalBool("is_private_email")),
                attempts: try row.int("attempts"), source: try row.optionalText("source"))
        })

    struct Failure {
        var id: Int64
        var status: EventStatus
        var error: String
        var retryInSeconds: Double
    }

    /// Records a failed attempt: `failed` (retried at `next_attempt_at`) or `dead`.
    static let markFailed = Statement<Failure, Void>(
        "mark_failed",
        """
        UPDATE siwa.events SET status = $2, attempts = attempts + 1, last_error = $3,
            next_attempt_at = pg_catalog.now() + $4::double precision * interval '1 second'
        WHERE id = $1
        """,
        bind: { [String($0.id), $0.status.rawValue, String($0.error.prefix(500)), String($0.retryInSeconds)] })

    /// Creates the accounts that do not exist yet, with the state the batch decided for a new
    /// account (so a new account is written once, not inserted and then updated), and locks the
    /// others, in one pass in `sub` byte order (`COLLATE "C"`, as the worker sorts and as
    /// `apple_sub` is stored, whatever the database's collation), and returns the subs it
    /// created. One order for new and existing accounts alike: inserting the new ones first and
    /// locking the existing ones after could deadlock with another worker's one-by-one path,
    /// which takes a batch's subs in sorted order, one at a time. (`DO UPDATE … WHERE false`
    /// locks the existing row and writes nothing; only inserted rows are returned.)
    static let createOrLockAccounts = Statement<[(sub: String, state: AccountState)], String>(
        "create_or_lock_accounts",
        """
        INSERT INTO siwa.accounts AS a (apple_sub, status, email, is_private_email, email_forwarding, last_event_time,
            email_event_time, status_event_time, signed_in_at, address_event_time, account_since, deleted_at)
        SELECT u.sub, u.status, u.email, u.priv, u.fwd,
            \(SQLEncoding.timestamp(millis: "u.last_ms")), \(SQLEncoding.timestamp(millis: "u.email_ms")),
            \(SQLEncoding.timestamp(millis: "u.status_ms")), \(SQLEncoding.timestamp(millis: "u.signed_ms")),
            \(SQLEncoding.timestamp(millis: "u.address_ms")), \(SQLEncoding.timestamp(millis: "u.since_ms")),
            CASE WHEN u.status = 'deleted' THEN pg_catalog.now() END
        FROM \(accountRows) ORDER BY u.sub COLLATE "C"
        ON CONFLICT (apple_sub) DO UPDATE SET apple_sub = excluded.apple_sub WHERE false
        RETURNING apple_sub
        """,
        bind: accountBinds,
        decode: { row throws(PostgresError) in try row.text("apple_sub") })

    /// Account states as statement rows (`u`), bound by `accountBinds`.
    private static let accountRows = """
        ROWS FROM (pg_catalog.unnest($1::text[]),
            pg_catalog.unnest($2::text[]),
            pg_catalog.unnest($3::text[]),
            pg_catalog.unnest($4::boolean[]),
            pg_catalog.unnest($5::boolean[]),
            pg_catalog.unnest($6::bigint[]),
            pg_catalog.unnest($7::bigint[]),
            pg_catalog.unnest($8::bigint[]),
            pg_catalog.unnest($9::bigint[]),
            pg_catalog.unnest($10::bigint[]),
            pg_catalog.unnest($11::bigint[]))
             AS u(sub, status, email, priv, fwd, last_ms, email_ms, status_ms, signed_ms, address_ms, since_ms)
        """

    private static func accountBinds(_ rows: [(sub: String, state: AccountState)]) -> [String?] {
        [
            SQLEncoding.array(rows.map { $0.sub }), SQLEncoding.array(rows.map { $0.state.status.rawValue }),
            SQLEncoding.array(rows.map { $0.state.email }), SQLEncoding.array(rows.map { $0.state.isPrivateEmail }),
            SQLEncoding.array(rows.map { $0.state.emailForwarding }), SQLEncoding.array(rows.map { $0.state.lastEventTime }),
            SQLEncoding.array(rows.map { $0.state.emailEventTime }), SQLEncoding.array(rows.map { $0.state.statusEventTime }),
            SQLEncoding.array(rows.map { $0.state.signedInAt }), SQLEncoding.array(rows.map { $0.state.addressEventTime }),
            SQLEncoding.array(rows.map { $0.state.accountSince }),
        ]
    }

    /// Reads the state of the accounts of these subs, locked (`createOrLockAccounts` took the
    /// locks already: this waits for nothing).
    static let lockAccounts = Statement<[String], (sub: String, state: AccountState)>(
        "lock_accounts",
        """
        SELECT apple_sub, status, email, is_private_email, email_forwarding,
               \(SQLEncoding.millis("last_event_time")) AS last_ms,
               \(SQLEncoding.millis("email_event_time")) AS email_ms,
               \(SQLEncoding.millis("status_event_time")) AS status_ms,
               \(SQLEncoding.millis("signed_in_at")) AS signed_ms,
               \(SQLEncoding.millis("address_event_time")) AS address_ms,
               \(SQLEncoding.millis("account_since")) AS since_ms
        FROM siwa.accounts WHERE apple_sub = ANY($1::text[]) ORDER BY apple_sub FOR UPDATE
        """,
        bind: { [SQLEncoding.array($0)] },
        decode: { row throws(PostgresError) in
            (
                try row.text("apple_sub"),
                AccountState(
                    status: try row.value("status", as: AccountStatus.self), email: try row.optionalText("email"),
                    isPrivateEmail: try row.optionalBool("is_private_email"),
                    emailForwarding: try row.optionalBool("email_forwarding"),
                    lastEventTime: try row.optionalInt64("last_ms"), emailEventTime: try row.optionalInt64("email_ms"),
                    statusEventTime: try row.optionalInt64("status_ms"), signedInAt: try row.optionalInt64("signed_ms"),
                    addressEventTime: try row.optionalInt64("address_ms"), accountSince: try row.optionalInt64("since_ms"))
            )
        })

    /// Writes new account states.
    static let updateAccounts = Statement<[(sub: String, state: AccountState)], Void>(
        "update_accounts",
        """
        UPDATE siwa.accounts a SET status = u.status, email = u.email, is_private_email = u.priv,
            email_forwarding = u.fwd,
            last_event_time = \(SQLEncoding.timestamp(millis: "u.last_ms")),
            email_event_time = \(SQLEncoding.timestamp(millis: "u.email_ms")),
            status_event_time = \(SQLEncoding.timestamp(millis: "u.status_ms")),
            signed_in_at = \(SQLEncoding.timestamp(millis: "u.signed_ms")),
            address_event_time = \(SQLEncoding.timestamp(millis: "u.address_ms")),
            account_since = \(SQLEncoding.timestamp(millis: "u.since_ms")),
            updated_at = pg_catalog.now(),
            deleted_at = CASE WHEN u.status = 'deleted' THEN coalesce(a.deleted_at, pg_catalog.now()) END
        FROM \(accountRows)
        WHERE a.apple_sub = ANY (ARRAY[u.sub])
        """,
        bind: accountBinds)

    /// Every app account of these users, locked (after their `siwa.accounts` rows: one lock order).
    static let lockAppAccounts = Statement<[String], (sub: String, aud: String, state: AccountState)>(
        "lock_app_accounts",
        """
        SELECT apple_sub, aud, status, email, is_private_email, email_forwarding,
               \(SQLEncoding.millis("last_event_time")) AS last_ms,
               \(SQLEncoding.millis("email_event_time")) AS email_ms,
               \(SQLEncoding.millis("status_event_time")) AS status_ms,
               \(SQLEncoding.millis("signed_in_at")) AS signed_ms,
               \(SQLEncoding.millis("address_event_time")) AS address_ms
        FROM siwa.app_accounts WHERE apple_sub = ANY($1::text[]) ORDER BY apple_sub, aud FOR UPDATE
        """,
        bind: { [SQLEncoding.array($0)] },
        decode: { row throws(PostgresError) in
            (
                try row.text("apple_sub"), try row.text("aud"),
                AccountState(
                    status: try row.value("status", as: AccountStatus.self), email: try row.optionalText("email"),
                    isPrivateEmail: try row.optionalBool("is_private_email"),
                    emailForwarding: try row.optionalBool("email_forwarding"),
                    lastEventTime: try row.optionalInt64("last_ms"), emailEventTime: try row.optionalInt64("email_ms"),
                    statusEventTime: try row.optionalInt64("status_ms"), signedInAt: try row.optionalInt64("signed_ms"),
                    addressEventTime: try row.optionalInt64("address_ms"))
            )
        })

    /// Inserts app account states, in the one order of every writer (sub, then aud).
    private static let appAccountInsert = """
        INSERT INTO siwa.app_accounts AS a (apple_sub, aud, status, email, is_private_email, email_forwarding,
                                            last_event_time, email_event_time, status_event_time, signed_in_at,
                                            address_event_time)
        SELECT u.sub, u.aud, u.status, u.email, u.priv, u.fwd, \(SQLEncoding.timestamp(millis: "u.last_ms")),
               \(SQLEncoding.timestamp(millis: "u.email_ms")), \(SQLEncoding.timestamp(millis: "u.status_ms")),
               \(SQLEncoding.timestamp(millis: "u.signed_ms")), \(SQLEncoding.timestamp(millis: "u.address_ms"))
        FROM ROWS FROM (pg_catalog.unnest($1::text[]),
            pg_catalog.unnest($2::text[]),
            pg_catalog.unnest($3::text[]),
            pg_catalog.unnest($4::text[]),
            pg_catalog.unnest($5::boolean[]),
            pg_catalog.unnest($6::boolean[]),
            pg_catalog.unnest($7::bigint[]),
            pg_catalog.unnest($8::bigint[]),
            pg_catalog.unnest($9::bigint[]),
            pg_catalog.unnest($10::bigint[]),
            pg_catalog.unnest($11::bigint[]))
             AS u(sub, aud, status, email, priv, fwd, last_ms, email_ms, status_ms, signed_ms, address_ms)
        ORDER BY u.sub COLLATE "C", u.aud
        """

    private static func appAccountBinds(_ rows: [(sub: String, aud: String, state: AccountState)]) -> [String?] {
        [
            SQLEncoding.array(rows.map { $0.sub }), SQLEncoding.array(rows.map { $0.aud }),
            SQLEncoding.array(rows.map { $0.state.status.rawValue }), SQLEncoding.array(rows.map { $0.state.email }),
            SQLEncoding.array(rows.map { $0.state.isPrivateEmail }), SQLEncoding.array(rows.map { $0.state.emailForwarding }),
            SQLEncoding.array(rows.map { $0.state.lastEventTime }), SQLEncoding.array(rows.map { $0.state.emailEventTime }),
            SQLEncoding.array(rows.map { $0.state.statusEventTime }), SQLEncoding.array(rows.map { $0.state.signedInAt }),
            SQLEncoding.array(rows.map { $0.state.addressEventTime }),
        ]
    }

    /// Creates app accounts that `lockAppAccounts` did not find. A plain insert, with no
    /// speculative insertion: the batch holds each user's account lock, under which only the
    /// worker writes that user's app accounts. A transfer import does not take it: an app
    /// account it creates meanwhile fails the insert (unique key), and the batch is then applied
    /// event by event, each reading its app accounts again.
    static let insertAppAccounts = Statement<[(sub: String, aud: String, state: AccountState)], Void>(
        "insert_app_accounts", appAccountInsert, bind: appAccountBinds)

    /// Rewrites the app accounts `lockAppAccounts` locked (an upsert: on rows that exist it costs
    /// what an UPDATE by key does).
    static let writeAppAccounts = Statement<[(sub: String, aud: String, state: AccountState)], Void>(
        "write_app_accounts",
        appAccountInsert + """

            ON CONFLICT (apple_sub, aud) DO UPDATE SET status = excluded.status, email = excluded.email,
                is_private_email = excluded.is_private_email, email_forwarding = excluded.email_forwarding,
                last_event_time = excluded.last_event_time, email_event_time = excluded.email_event_time,
                status_event_time = excluded.status_event_time, signed_in_at = excluded.signed_in_at,
                address_event_time = excluded.address_event_time, updated_at = pg_catalog.now()
            """,
        bind: appAccountBinds)

    struct SessionsToRevoke {
        var sub: String
        /// Only sessions created at or before this time (ms); nil: all.
        var createdAtOrBefore: Int64?
        var reason: String
        /// Only this app's sessions and those without an app; nil: every app's.
        var aud: String? = nil
    }

    /// Revokes live sessions. Each element finds its user's sessions in `sessions_sub_idx` in a
    /// correlated subquery (a SubPlan, which the planner cannot turn into a join the other way
    /// round), and the rows are then updated by primary key. A plain join lets a planner that
    /// believes the live sessions few (statistics taken before a bulk load of live sessions)
    /// read the whole index once and compare it with every element (bench/README
    /// "revoke_sessions"). No `revoked_at` test on `s` itself, for the same
    /// reason (it would make `s` look tiny again); `COALESCE` keeps a revocation the app made
    /// while this statement waited for the row.
    static let revokeSessions = Statement<[SessionsToRevoke], Void>(
        "revoke_sessions",
        """
        UPDATE siwa.sessions s
        SET revoked_at = COALESCE(s.revoked_at, pg_catalog.now()),
            revoked_reason = CASE WHEN s.revoked_at IS NULL THEN u.reason ELSE s.revoked_reason END
        FROM ROWS FROM (pg_catalog.unnest($1::text[]),
            pg_catalog.unnest($2::bigint[]),
            pg_catalog.unnest($3::text[]),
            pg_catalog.unnest($4::text[])) AS u(sub, before_ms, reason, aud)
        WHERE s.id = ANY (ARRAY(
            SELECT x.id FROM siwa.sessions x
            WHERE x.apple_sub = u.sub AND x.revoked_at IS NULL
              AND (u.before_ms IS NULL OR x.created_at <= \(SQLEncoding.timestamp(millis: "u.before_ms")))
              AND (u.aud IS NULL OR x.aud IS NULL OR x.aud = u.aud)))
        """,
        bind: { rows in
            [
                SQLEncoding.array(rows.map { $0.sub }), SQLEncoding.array(rows.map { $0.createdAtOrBefore }),
                SQLEncoding.array(rows.map { $0.reason }), SQLEncoding.array(rows.map { $0.aud }),
            ]
        })

    /// A deleted user's email leaves the outbox too: the `email` column and the `email` inside
    /// the stored claims (`events` is a JSON string in Apple's tokens, an object in its docs).
    /// Only rows that still hold an address are written (an erased row no longer matches: the
    /// `email` key, quoted, not the `email-…` type names), so a deleted user's later events do not
    /// rewrite the history again. A key spelled with escapes (`"\u0065mail"`) is not seen by the
    /// text match, but the receiver parsed it and filled the `email` column, which is. A row
    /// with `"email"` as a value, not a key, matches for ever and is rewritten (harmlessly) by
    /// each later event of that user. Rows another worker has claimed are skipped (no lock wait, no
    /// deadlock): they are that user's events too, and erase again when they are applied.
    static let eraseEventEmails = Statement<[String], Void>(
        "erase_event_emails", eraseEmails(where: "e.sub = ANY($1::text[])"), bind: { [SQLEncoding.array($0)] })

    /// Erases the address of the events matching `condition` (alias `e`) that hold one; rows
    /// another worker has claimed are skipped (see `eraseEventEmails`).
    private static func eraseEmails(where condition: String) -> String {
        """
        WITH target AS (
            SELECT e.id FROM siwa.events e
            WHERE \(condition) AND \(holdsEmail)
            FOR UPDATE SKIP LOCKED)
        UPDATE siwa.events e SET email = NULL, claims = \(claimsWithoutEmail)
        WHERE e.id = ANY (ARRAY(SELECT t.id FROM target t))
        """
    }

    /// Unknown-type events received in the last hour that still hold an address while their user
    /// is deleted. The insert trigger erases them when the deleted account is visible; one inserted
    /// while the batch that applies that user's deletion (or creates the account *as deleted*: a
    /// user never seen before) was still open read the account as it was and kept its address
    /// (the trigger takes no lock, so a receiver holding its transaction cannot stall the worker;
    /// one held open past the hour is out of reach, by its `received_at`). Swept by the worker
    /// (a small partial index: unknown types are rare); claimed rows are skipped, as above. The
    /// recent unknown-type events are listed first (an InitPlan over that index), and each one's
    /// account is read by its key in a correlated subquery (no join to turn round): joined freely,
    /// a planner whose statistics saw no deleted account starts from `accounts_status_idx` and
    /// probes every deleted user's events (bench/README.md).
    static let eraseRacedIgnoredEmails = Statement<Void, Void>(
        "erase_raced_ignored_emails",
        eraseEmails(
            where: """
                e.id = ANY (ARRAY(
                    SELECT r.id FROM siwa.events r
                    WHERE \(unknownType) AND r.status = 'ignored' AND r.received_at > pg_catalog.now() - interval '1 hour'
                      AND (SELECT a.status FROM siwa.accounts a WHERE a.apple_sub = r.sub) = 'deleted'))
                """),
        bind: { _ in [] })

    /// The predicate of `events_unknown_type_idx` (schema.sql), word for word (alias `r`): the
    /// planner uses a partial index only for a query that states its predicate.
    private static let unknownType = """
        r.type NOT IN ('email-disabled', 'email-enabled', 'consent-revoked', 'account-delete', 'sign-in', 'deletion-requested')
        """

    /// A deletion older than the sign-in the user came back with (`.stale`: the account stays)
    /// still ends the deleted account: its events older than the comeback (`accountSince`, the
    /// rules' own bound: such events "were the deleted account's") lose their address, as
    /// `eraseEventEmails` does for a deleted user; the new account's events keep theirs.
    static let eraseEventEmailsBefore = Statement<Comeback, Void>(
        "erase_event_emails_before",
        eraseEmails(where: "e.sub = $1 AND e.event_time < \(SQLEncoding.timestamp(millis: "$2::bigint"))"),
        bind: { [$0.sub, String($0.sinceMillis)] })

    /// A user who was deleted and came back at `sinceMillis` (`AccountState.accountSince`): what
    /// is older belonged to the deleted account (see `eraseEventEmailsBefore`).
    struct Comeback: Equatable {
        var sub: String
        var sinceMillis: Int64
    }

    /// Events that hold an address, as `eraseEventEmails` finds them (alias `e`).
    private static let holdsEmail = #"(e.email IS NOT NULL OR e.claims ->> 'events'::text LIKE '%"email"%')"#

    /// `e.claims` without the `email` of its `events` (a JSON string in Apple's tokens, an
    /// object in its docs).
    private static let claimsWithoutEmail = """
        CASE pg_catalog.jsonb_typeof(e.claims -> 'events'::text)
                WHEN 'string' THEN pg_catalog.jsonb_set(e.claims, '{events}', pg_catalog.to_jsonb((((e.claims ->> 'events'::text)::jsonb) - 'email'::text)::text))
                WHEN 'object' THEN pg_catalog.jsonb_set(e.claims, '{events}', (e.claims -> 'events'::text) - 'email'::text)
                ELSE e.claims END
        """

    /// An event that failed (its savepoint, erasure included, rolled back) for a user whose
    /// account is deleted loses its address now: it may stay `dead` for ever, and a hook that
    /// refuses deleted users' events makes exactly that likely. (The account by its key in a
    /// correlated subquery: no join whose order statistics could turn.)
    static let eraseFailedEventEmail = Statement<Int64, Void>(
        "erase_failed_event_email",
        """
        UPDATE siwa.events e SET email = NULL, claims = \(claimsWithoutEmail)
        WHERE e.id = $1 AND \(holdsEmail)
          AND (SELECT a.status FROM siwa.accounts a WHERE a.apple_sub = e.sub) = 'deleted'
        """,
        bind: { [String($0)] })

    /// Marks events done with what the worker decided (`applied`, `stale`, `final_deleted`):
    /// before the hook runs, so the hook reads the decision in `event.outcome`.
    static let markDone = Statement<[(id: Int64, outcome: String)], Void>(
        "mark_done",
        """
        UPDATE siwa.events e SET status = 'done', processed_at = pg_catalog.now(), attempts = e.attempts + 1,
            outcome = u.outcome, last_error = NULL
        FROM ROWS FROM (pg_catalog.unnest($1::bigint[]), pg_catalog.unnest($2::text[])) AS u(id, outcome)
        WHERE e.id = ANY (ARRAY[u.id])
        """,
        bind: { rows in [SQLEncoding.array(rows.map { $0.id }), SQLEncoding.array(rows.map { $0.outcome })] })

    /// True while `siwa.on_event` is the shipped no-op: the schema creates it with the setting
    /// `application_name = 'siwa-notify:default-hook'` (one any owner may attach; a custom
    /// `siwa.*` setting would need a superuser), which any `CREATE OR REPLACE` of the operator's
    /// own drops.
    static let hookIsDefault = Statement<Void, Bool>(
        "hook_is_default",
        """
        SELECT coalesce(pg_catalog.bool_and('application_name=siwa-notify:default-hook' = ANY (p.proconfig)), false) AS is_default
        FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
        WHERE n.nspname = 'siwa' AND p.proname = 'on_event'
        """,
        decode: { row throws(PostgresError) in try row.bool("is_default") })

    /// Calls the operator hook for each event, in event-time order, after it was marked done.
    /// Planned with the planner's defaults (for the hook's own queries): the account is a
    /// `LATERAL` subquery that cannot be flattened (`OFFSET 0`), so it is looked up per event,
    /// never scanned whole and joined.
    static let callHook = Statement<[Int64], Void>(
        "call_hook",
        """
        SELECT siwa.on_event(e, x.a) FROM siwa.events e
        CROSS JOIN LATERAL (SELECT a FROM siwa.accounts a WHERE a.apple_sub = e.sub OFFSET 0) x
        WHERE e.id = ANY($1::bigint[]) ORDER BY e.event_time, e.id
        """,
        bind: { [SQLEncoding.array($0)] })

    /// Queue rows left without an event that needs work: the triggers keep the queue right
    /// through every INSERT, UPDATE, DELETE and TRUNCATE, but not through an `UPDATE` of `id`, a
    /// trigger disabled by hand or `session_replication_role = replica`. Such a row is claimed and
    /// skipped for ever, and a batch's worth at the head of the queue would starve the worker:
    /// the retention pass drops those among the next 10,000 due (the head a claim reads; a
    /// stale row further back is dropped when it comes due) and among 10,000 dead rows, one
    /// probe of `siwa.events` each: never a pass over a backlog of a million. A row whose status
    /// differs from its event's is kept: the event still needs work.
    static let dropStaleQueueRows = Statement<Void, Void>(
        "drop_stale_queue_rows",
        """
        DELETE FROM siwa.event_queue q
        WHERE q.id = ANY (ARRAY(
                SELECT h.id FROM siwa.event_queue h
                WHERE h.status IN ('pending', 'failed') AND h.next_attempt_at <= pg_catalog.now()
                ORDER BY h.next_attempt_at, h.id LIMIT 10000)
              || ARRAY(SELECT d.id FROM siwa.event_queue d WHERE d.status = 'dead' ORDER BY d.id LIMIT 10000))
          AND coalesce((SELECT e.status IN ('pending', 'failed', 'dead') FROM siwa.events e WHERE e.id = q.id), false) = false
        """,
        bind: { _ in [] })

    /// Deletes up to 1000 done or ignored events older than `$1` days (a short transaction of
    /// its own; pending, failed and dead events are never touched; in-app deletion requests are
    /// kept: they are the deletion's evidence, `user-report`). The day range uses
    /// `events_received_day_idx`, so a table with nothing old costs nothing; the rows found are then
    /// deleted by primary key.
    static let prune = Statement<Int, Void>(
        "prune_events",
        """
        DELETE FROM siwa.events WHERE id = ANY (ARRAY(
            SELECT id FROM siwa.events
            WHERE (received_at AT TIME ZONE 'UTC')::date < (pg_catalog.now() AT TIME ZONE 'UTC')::date - $1::int + 1
              AND status IN ('done', 'ignored') AND type <> 'deletion-requested'
              AND coalesce(processed_at, received_at) < pg_catalog.now() - $1::int * interval '1 day'
            LIMIT 1000 FOR UPDATE SKIP LOCKED))
        """,
        bind: { [String($0)] })
}
