import SiwaPostgres

/// One row of a console listing: column → text (NULL columns absent). Pages show text; a
/// number they compute with is read with `int`/`double`.
struct ConsoleRow: Sendable, Equatable {
    var values: [String: String]

    subscript(_ column: String) -> String? { values[column] }
    func int(_ column: String) -> Int { values[column].flatMap { Int($0) } ?? 0 }
    func int64(_ column: String) -> Int64? { values[column].flatMap { Int64($0) } }
    func double(_ column: String) -> Double? { values[column].flatMap { Double($0) } }
    func bool(_ column: String) -> Bool? { values[column].map { $0 == "t" } }
}

/// What the operator console reads and changes (README "Console"). Every read is driven by an
/// index or a bounded id range of a primary key: never a scan of `siwa.events`.
enum ConsoleStatements {
    /// `column` as `YYYY-MM-DD HH:MM:SS` UTC.
    private static func utc(_ column: String, as name: String) -> String {
        "pg_catalog.to_char(\(column) AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS') AS \(name)"
    }

    private static func listing<B>(
        _ name: String, _ columns: [String], _ sql: String, bind: @escaping @Sendable (B) -> [String?]
    ) -> Statement<B, ConsoleRow> {
        Statement(
            name, sql, bind: bind,
            decode: { row throws(PostgresError) in
                var values: [String: String] = [:]
                for c in columns { if let v = try row.optionalText(c) { values[c] = v } }
                return ConsoleRow(values: values)
            })
    }

    // MARK: Sessions and the audit trail
    // The console's role writes none of the sessions, operators or audit rows: each change is an
    // owner's function of schema.sql ("Operator console") that hashes the token it is given itself.

    /// The operator and token fingerprint of a sign-in or a live session.
    struct SignedIn: Equatable {
        var operatorName: String
        var fingerprint: String
    }

    private static func signedIn(_ row: RowReader) throws(PostgresError) -> SignedIn {
        SignedIn(operatorName: try row.text("signed_in_operator"), fingerprint: try row.text("fingerprint"))
    }

    /// A sign-in: the function checks the operator's token, creates the session (the cookie's
    /// hash) and records the sign-in, or records the refusal and returns no row.
    static let signIn = Statement<(name: String, token: String, session: String, client: String?), SignedIn>(
        "console_sign_in",
        "SELECT signed_in_operator, fingerprint FROM siwa.console_sign_in($1, $2, $3, $4)",
        bind: { [$0.name, $0.token, $0.session, $0.client] }, decode: signedIn)

    /// The live session of a cookie (no row: unknown, ended, idle or past its lifetime);
    /// `activity` marks it seen.
    static let session = Statement<(session: String, activity: Bool), SignedIn>(
        "console_session",
        "SELECT signed_in_operator, fingerprint FROM siwa.console_session($1, $2)",
        bind: { [$0.session, $0.activity ? "true" : "false"] }, decode: signedIn)

    static let signOut = Statement<(session: String, client: String?), Void>(
        "console_sign_out", "SELECT siwa.console_sign_out($1, $2)", bind: { [$0.session, $0.client] })

    static let revealedEmail = Statement<(session: String, client: String?, sub: String), Void>(
        "console_revealed_email", "SELECT siwa.console_revealed_email($1, $2, $3)", bind: { [$0.session, $0.client, $0.sub] })

    static let requestDeletion = Statement<(session: String, client: String?, sub: String, aud: String?), Void>(
        "console_request_deletion", "SELECT siwa.console_request_deletion($1, $2, $3, $4)",
        bind: { [$0.session, $0.client, $0.sub, $0.aud] })

    /// Dead rows of a kind back to pending: these ids, else one type (a provider call's target),
    /// else all; returns how many moved (the audit row is the function's).
    static let replay = Statement<(session: String, client: String?, kind: String, ids: [String]?, type: String?), Int>(
        "console_replay", "SELECT siwa.console_replay($1, $2, $3, $4::text[], $5) AS n",
        bind: { [$0.session, $0.client, $0.kind, $0.ids.map { SQLEncoding.array($0) }, $0.type] },
        decode: { row throws(PostgresError) in try row.int("n") })

    static let actions = listing(
        "console_actions", ["id", "at", "operator", "token_fingerprint", "client_address", "action", "target"],
        """
        SELECT id, \(utc("at", as: "at")), operator, token_fingerprint, client_address, action, target
        FROM siwa.operator_actions WHERE id < $1 ORDER BY id DESC LIMIT $2
        """, bind: { (p: (before: Int64, limit: Int)) in [String(p.before), String(p.limit)] })

    // MARK: Overview

    static let keySets = listing(
        "console_key_sets", ["url", "fetched", "age"],
        "SELECT url, \(utc("fetched_at", as: "fetched")), extract(epoch FROM pg_catalog.now() - fetched_at)::float8 AS age FROM siwa.key_sets ORDER BY url",
        bind: { (_: Void) in [] })

    /// The ends of the events' id range (both ends of the primary key, one entry each: `min` and
    /// `max` were planned as a read of the whole index on a table analyzed while empty).
    static let idRange = Statement<Void, (low: Int64, high: Int64)?>(
        "console_id_range",
        """
        SELECT (SELECT id FROM siwa.events ORDER BY id LIMIT 1) AS low, (SELECT id FROM siwa.events ORDER BY id DESC LIMIT 1) AS high
        """,
        decode: { row throws(PostgresError) in
            guard let low = try row.optionalInt64("low"), let high = try row.optionalInt64("high") else { return nil }
            return (low, high)
        })

    /// The first event at or after an id, and when it was received (one primary-key probe: the
    /// steps of a bisection by time).
    static let probe = Statement<Int64, (id: Int64, receivedAt: Double)>(
        "console_probe",
        "SELECT id, extract(epoch FROM received_at)::float8 AS t FROM siwa.events WHERE id >= $1 ORDER BY id LIMIT 1",
        bind: { [String($0)] },
        decode: { row throws(PostgresError) in (try row.int64("id"), try row.double("t")) })

    /// Events received per minute and type since `since` (Unix seconds), ids `$1` to `$3` (both
    /// bounds: without statistics a one-sided range is planned as a third of the table).
    static let receivedPerMinute = listing(
        "console_received_per_minute", ["t", "type", "n"],
        """
        SELECT extract(epoch FROM pg_catalog.date_trunc('minute', received_at))::float8 AS t, type, pg_catalog.count(*)::int AS n
        FROM siwa.events WHERE id BETWEEN $1 AND $3 AND received_at >= pg_catalog.to_timestamp($2) GROUP BY 1, 2
        """, bind: { (p: (from: Int64, since: Double, through: Int64)) in [String(p.from), String(p.since), String(p.through)] })

    /// Events applied per minute and type since `since`, among ids `$1` to `$3`.
    static let appliedPerMinute = listing(
        "console_applied_per_minute", ["t", "type", "n"],
        """
        SELECT extract(epoch FROM pg_catalog.date_trunc('minute', processed_at))::float8 AS t, type, pg_catalog.count(*)::int AS n
        FROM siwa.events WHERE id BETWEEN $1 AND $3 AND status = 'done' AND processed_at >= pg_catalog.to_timestamp($2) GROUP BY 1, 2
        """, bind: { (p: (from: Int64, since: Double, through: Int64)) in [String(p.from), String(p.since), String(p.through)] })

    /// The hourly rollup's watermark, locked (nil when another process is refreshing it).
    static let lockRollup = Statement<Void, Int64>(
        "console_lock_rollup", "SELECT last_id FROM siwa.console_rollup FOR UPDATE SKIP LOCKED",
        decode: { row throws(PostgresError) in try row.int64("last_id") })

    /// The highest id whose outcome is final: below the oldest event still waiting in the queue
    /// (the queue's primary key in order, to its first waiting row: past the dead ones only).
    static let finalBound = Statement<Void, Int64>(
        "console_final_bound",
        """
        SELECT coalesce((SELECT id - 1 FROM siwa.event_queue WHERE status IN ('pending', 'failed') ORDER BY id LIMIT 1),
                        (SELECT id FROM siwa.events ORDER BY id DESC LIMIT 1), 0) AS bound
        """,
        decode: { row throws(PostgresError) in try row.int64("bound") })

    /// Counts the events of the id range (`$1`, `$2`] into the hourly rollup: received by the
    /// hour of arrival, applied by the hour of processing.
    static let rollUp = Statement<(after: Int64, through: Int64), Void>(
        "console_roll_up",
        """
        INSERT INTO siwa.console_hours AS h (hour, type, received, applied)
        SELECT v.hour, e.type, pg_catalog.sum(v.r)::int, pg_catalog.sum(v.a)::int
        FROM siwa.events e,
             LATERAL (VALUES (pg_catalog.date_trunc('hour', e.received_at), 1, 0),
                             (CASE WHEN e.status = 'done' THEN pg_catalog.date_trunc('hour', e.processed_at) END, 0, 1)) v(hour, r, a)
        WHERE e.id > $1 AND e.id <= $2 AND v.hour IS NOT NULL AND v.hour > pg_catalog.now() - interval '8 days'
        GROUP BY 1, 2
        ON CONFLICT (hour, type) DO UPDATE SET received = h.received + excluded.received, applied = h.applied + excluded.applied
        """, bind: { [String($0.after), String($0.through)] })

    static let rollupMark = Statement<Void, Int64>(
        "console_rollup_mark", "SELECT last_id FROM siwa.console_rollup",
        decode: { row throws(PostgresError) in try row.int64("last_id") })

    static let setRollupMark = Statement<Int64, Void>(
        "console_set_rollup_mark", "UPDATE siwa.console_rollup SET last_id = $1", bind: { [String($0)] })

    static let pruneHours = Statement<Void, Void>(
        "console_prune_hours", "DELETE FROM siwa.console_hours WHERE hour < pg_catalog.now() - interval '8 days'", bind: { _ in [] })

    static let hours = listing(
        "console_hours", ["t", "type", "received", "applied"],
        """
        SELECT extract(epoch FROM hour)::float8 AS t, type, received, applied FROM siwa.console_hours
        WHERE hour >= pg_catalog.date_trunc('hour', pg_catalog.now()) - interval '167 hours'
        """, bind: { (_: Void) in [] })

    /// When the rollup's last counted event arrived (the charts say how current they are).
    static let rollupCurrentTo = Statement<Int64, Double>(
        "console_rollup_current_to", "SELECT extract(epoch FROM received_at)::float8 AS t FROM siwa.events WHERE id = $1",
        bind: { [String($0)] }, decode: { row throws(PostgresError) in try row.double("t") })

    /// Most due tokens the console counts (the page says "more than" beyond it).
    static let tokensDueShown = 10_000

    /// Tokens due now, up to one more than `tokensDueShown`: the first entries of the due index,
    /// whatever the reconciliation's backlog.
    static let tokensDue = Statement<Void, Int>(
        "console_tokens_due",
        """
        SELECT pg_catalog.count(*)::int AS n FROM (SELECT 1 FROM siwa.apple_tokens WHERE next_validation_at <= pg_catalog.now() LIMIT \(tokensDueShown + 1)) due
        """,
        decode: { row throws(PostgresError) in try row.int("n") })

    static let reconcilePace = Statement<Void, String?>(
        "console_reconcile_pace",
        """
        SELECT CASE WHEN next_slot = '-infinity' THEN NULL ELSE pg_catalog.to_char(next_slot AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS') END AS slot
        FROM siwa.reconcile_pace
        """,
        decode: { row throws(PostgresError) in try row.optionalText("slot") })

    // MARK: Events

    private static let eventColumns = ["id", "type", "status", "aud", "sub_hash", "received", "event_time", "attempts", "outcome"]
    private static let eventSelect = """
        SELECT e.id, e.type, e.status, e.aud, siwa.subject_hash(e.sub) AS sub_hash, \(utc("e.received_at", as: "received")),
               \(utc("e.event_time", as: "event_time")), e.attempts, e.outcome
        """
    private static let eventFilters = "($3::text IS NULL OR e.type = $3) AND ($4::text IS NULL OR e.status = $4) AND ($5::text IS NULL OR e.aud = $5)"

    struct EventQuery: Sendable, Equatable {
        /// Only ids below this one (the keyset cursor).
        var before: Int64
        /// Only ids at or above this one (the bounded window, or a time filter's start).
        var floor: Int64
        var type: String?
        var status: String?
        var aud: String?
        var limit: Int
        var sub: String?
    }

    private static func eventBinds(_ q: EventQuery) -> [String?] {
        [String(q.before), String(q.floor), q.type, q.status, q.aud, String(q.limit), q.sub]
    }

    /// A bounded range of the primary key, newest first.
    static let eventsInRange = listing(
        "console_events_range", eventColumns,
        eventSelect + " FROM siwa.events e WHERE e.id < $1 AND e.id >= $2 AND \(eventFilters) AND $7::text IS NULL ORDER BY e.id DESC LIMIT $6",
        bind: { eventBinds($0) })

    /// One user's events (by `events_dedupe_key`, which `sub` leads), newest first. The user's
    /// rows are taken first (materialized): never a walk down the primary key filtering on `sub`.
    static let eventsOfSub = listing(
        "console_events_sub", eventColumns,
        "WITH e AS MATERIALIZED (SELECT * FROM siwa.events WHERE sub = $7) " + eventSelect
            + " FROM e WHERE e.id < $1 AND e.id >= $2 AND \(eventFilters) ORDER BY e.id DESC LIMIT $6",
        bind: { eventBinds($0) })

    /// Queue rows one page of waiting or dead events reads at most.
    static let queueWindow = 2_000

    /// The lowest id of the `queueWindow` newest queue rows below `$1` (nil: fewer are left).
    static let queueWindowFloor = Statement<Int64, Int64>(
        "console_queue_window_floor",
        "SELECT id FROM siwa.event_queue WHERE id < $1 ORDER BY id DESC OFFSET \(queueWindow - 1) LIMIT 1",
        bind: { [String($0)] }, decode: { row throws(PostgresError) in try row.int64("id") })

    /// Events waiting or dead, newest first, among queue ids `$2` to `$1` (a window of at most
    /// `queueWindow` queue rows): the queue's primary key backwards, an event probe per row
    /// (`= ANY (ARRAY[q.id])`, see `WorkerStatements`). The status test is an expression no
    /// partial index of the queue implies: a read of a whole status index and a sort never
    /// competes with the walk that stops at the page's end.
    static let eventsInQueue = listing(
        "console_events_queue", eventColumns,
        eventSelect
            + " FROM siwa.event_queue q, siwa.events e WHERE e.id = ANY (ARRAY[q.id]) AND (q.status || '') = $4 AND q.id < $1"
            + " AND q.id >= $2 AND \(eventFilters) AND ($7::text IS NULL OR e.sub = $7) ORDER BY q.id DESC LIMIT $6",
        bind: { eventBinds($0) })

    static let event = listing(
        "console_event",
        [
            "id", "jti", "aud", "sub", "type", "status", "attempts", "outcome", "last_error", "claims", "event_time", "received",
            "processed", "next_attempt", "email", "is_private_email", "inner",
        ],
        """
        SELECT id, jti, aud, sub, type, status, attempts, outcome, last_error, pg_catalog.jsonb_pretty(claims) AS claims,
               \(utc("event_time", as: "event_time")), \(utc("received_at", as: "received")), \(utc("processed_at", as: "processed")),
               \(utc("next_attempt_at", as: "next_attempt")), email, is_private_email,
               -- Apple's `events` claim is a JSON string (verified JSON when stored): shown decoded too.
               CASE WHEN pg_catalog.jsonb_typeof(claims -> 'events'::text) = 'string' THEN pg_catalog.jsonb_pretty((claims ->> 'events'::text)::jsonb)
                    ELSE pg_catalog.jsonb_pretty(claims -> 'events'::text) END AS inner
        FROM siwa.events WHERE id = $1
        """, bind: { (id: Int64) in [String(id)] })

    /// The `sub` whose hash (`siwa.subject_hash`) is `$1`, through the accounts' hash index (in
    /// matches taken first, materialized; `status` read too, so that no index-only walk down the
    /// primary key, hashing every `sub`, can answer it: that looked cheaper on a table believed empty).
    static let subOfHash = Statement<String, String>(
        "console_sub_of_hash",
        """
        WITH a AS MATERIALIZED (SELECT apple_sub, status FROM siwa.accounts WHERE siwa.subject_hash(apple_sub) = $1)
        SELECT apple_sub FROM a LIMIT 1
        """,
        bind: { [$0] }, decode: { row throws(PostgresError) in try row.text("apple_sub") })

    // MARK: Failures

    static let deadLetters = listing(
        "console_dead_letters", ["id", "type", "sub_hash", "event_time", "received", "attempts", "last_error"],
        """
        SELECT id, type, sub_hash, \(utc("event_time", as: "event_time")), \(utc("received_at", as: "received")), attempts, last_error
        FROM siwa.dead_letters WHERE id < $1 ORDER BY id DESC LIMIT $2
        """, bind: { (p: (before: Int64, limit: Int)) in [String(p.before), String(p.limit)] })

    static let deadLetterTypes = listing(
        "console_dead_letter_types", ["type", "n"],
        """
        SELECT e.type, pg_catalog.count(*)::int AS n FROM siwa.event_queue q JOIN siwa.events e ON e.id = q.id
        WHERE q.status = 'dead' AND e.status = 'dead' GROUP BY 1 ORDER BY 1
        """, bind: { (_: Void) in [] })

    /// Revocations of one status (`dead`, `failed`), newest first, by that status's own partial
    /// index (`revocations_dead_idx`, `revocations_failed_idx`): the status is in the SQL, not a
    /// parameter, so every plan can use it.
    static func revocations(_ status: String) -> Statement<Int, ConsoleRow> {
        listing(
            "console_revocations_\(status)",
            ["id", "sub_hash", "client_id", "reason", "status", "attempts", "last_error", "created", "next_attempt"],
            """
            SELECT id, siwa.subject_hash(apple_sub) AS sub_hash, client_id, reason, status, attempts, last_error,
                   \(utc("created_at", as: "created")), \(utc("next_attempt_at", as: "next_attempt"))
            FROM siwa.revocations WHERE status = '\(status)' ORDER BY id DESC LIMIT $1
            """, bind: { (limit: Int) in [String(limit)] })
    }

    static let deadRevocations = revocations("dead")
    static let failedRevocations = revocations("failed")

    static let deadForwards = listing(
        "console_dead_forwards", ["id", "seq", "type", "sub_hash", "aud", "source", "attempts", "last_error", "created"],
        """
        SELECT id, seq, type, siwa.subject_hash(sub) AS sub_hash, aud, source, attempts, last_error, \(utc("created_at", as: "created"))
        FROM siwa.forwards WHERE status = 'dead' ORDER BY seq DESC LIMIT $1
        """, bind: { (limit: Int) in [String(limit)] })

    /// Dead provider calls, newest first (by `provider_calls_dead_idx`): the provider's last
    /// HTTP status and error code, never a credential.
    static let deadProviderCalls = listing(
        "console_dead_provider_calls",
        ["id", "target", "effect", "sub_hash", "event_type", "attempts", "last_status", "last_reason", "updated"],
        """
        SELECT id, target, effect, siwa.subject_hash(apple_sub) AS sub_hash, event_type, attempts, last_status::text AS last_status,
               last_reason, \(utc("updated_at", as: "updated"))
        FROM siwa.provider_calls WHERE state = 'dead' ORDER BY id DESC LIMIT $1
        """, bind: { (limit: Int) in [String(limit)] })

    // MARK: A user
    // (Each reads the user's rows first, materialized, by the user's index; ordered afterwards: an
    // index in the listing's order, walked whole and filtered, looked cheaper on a table believed
    // empty.)

    static let account = listing(
        "console_account",
        ["apple_sub", "status", "email", "is_private_email", "email_forwarding", "last_event_time", "deleted", "created", "updated"],
        """
        SELECT apple_sub, status, email, is_private_email, email_forwarding, \(utc("last_event_time", as: "last_event_time")),
               \(utc("deleted_at", as: "deleted")), \(utc("created_at", as: "created")), \(utc("updated_at", as: "updated"))
        FROM siwa.accounts WHERE apple_sub = $1
        """, bind: { (sub: String) in [sub] })

    static let appAccounts = listing(
        "console_app_accounts", ["aud", "status", "email", "is_private_email", "email_forwarding", "signed_in", "updated"],
        """
        WITH a AS MATERIALIZED (SELECT * FROM siwa.app_accounts WHERE apple_sub = $1)
        SELECT aud, status, email, is_private_email, email_forwarding, \(utc("signed_in_at", as: "signed_in")), \(utc("updated_at", as: "updated"))
        FROM a ORDER BY aud
        """, bind: { (sub: String) in [sub] })

    static let sessions = listing(
        "console_user_sessions", ["id", "aud", "created", "expires", "revoked", "revoked_reason", "live"],
        """
        SELECT id, aud, \(utc("created_at", as: "created")), \(utc("expires_at", as: "expires")), \(utc("revoked_at", as: "revoked")),
               revoked_reason, (revoked_at IS NULL AND (expires_at IS NULL OR expires_at > pg_catalog.now())) AS live
        FROM siwa.sessions WHERE apple_sub = $1 ORDER BY created_at DESC LIMIT 100
        """, bind: { (sub: String) in [sub] })

    static let userEvents = listing(
        "console_user_events", ["id", "type", "aud", "status", "outcome", "event_time", "received", "email", "source"],
        """
        SELECT id, type, aud, status, outcome, \(utc("event_time", as: "event_time")), \(utc("received_at", as: "received")), email,
               claims ->> 'source'::text AS source
        FROM siwa.events WHERE sub = $1 ORDER BY event_time DESC, id DESC LIMIT 200
        """, bind: { (sub: String) in [sub] })

    static let userRevocations = listing(
        "console_user_revocations", ["id", "client_id", "reason", "status", "confirmation", "attempts", "last_error", "created", "finished"],
        """
        WITH r AS MATERIALIZED (
            SELECT id, client_id, reason, status, confirmation, attempts, last_error, created_at, finished_at
            FROM siwa.revocations WHERE apple_sub = $1)
        SELECT id, client_id, reason, status, confirmation, attempts, last_error, \(utc("created_at", as: "created")),
               \(utc("finished_at", as: "finished"))
        FROM r ORDER BY id DESC LIMIT 100
        """, bind: { (sub: String) in [sub] })

    static let userForwards = listing(
        "console_user_forwards", ["id", "type", "aud", "source", "status", "attempts", "created", "delivered", "last_error"],
        """
        SELECT id, type, aud, source, status, attempts, \(utc("created_at", as: "created")), \(utc("delivered_at", as: "delivered")), last_error
        FROM siwa.forwards WHERE sub = $1 ORDER BY seq DESC LIMIT 100
        """, bind: { (sub: String) in [sub] })

    /// A user's calls to the hosted providers: which, when, the provider's last HTTP status and
    /// error code (never a credential).
    static let userProviderCalls = listing(
        "console_user_provider_calls", ["target", "effect", "event_type", "state", "attempts", "last_status", "last_reason", "actions", "updated"],
        """
        SELECT target, effect, event_type, state, attempts, last_status::text AS last_status, last_reason, actions, \(utc("updated_at", as: "updated"))
        FROM siwa.provider_calls WHERE apple_sub = $1 ORDER BY id DESC LIMIT 100
        """, bind: { (sub: String) in [sub] })
}
