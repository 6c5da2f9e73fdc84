import SiwaCore
import SiwaPostgres

/// A provider call a sender claimed (leased) to make it.
struct ClaimedProviderCall: Sendable {
    var id: Int64
    var target: CallTarget
    var sub: String
    var effect: CallEffect
    /// The address of an email service's call (none for a hosted provider's).
    var email: String? = nil
    /// An email service's call: the suppressions siwa-notify's record says it added of the
    /// address (for `erase`, of the user) at that service.
    var recorded: [SuppressionEntry] = []
    /// Attempts so far.
    var attempts: Int
    /// Seconds since it was queued or replayed (the retry bound counts from then).
    var ageSeconds: Double
    /// An earlier attempt of this call found the user (its `actions` are set): the provider had
    /// the user (`ProviderRules.settled`). Other calls are not read: the row's own history is
    /// what it needs, and costs no read.
    var foundBefore: Bool = false
}

/// The hosted providers' call queue (`siwa.provider_calls`, docs/hosted-providers.md): queued in
/// the worker's transaction, claimed with a lease, outcomes recorded, dead ones replayed, and the
/// numbers of `status`, `/metrics` and the console. Shaped as `ForwardStatements`.
enum ProviderCallStatements {
    /// The NOTIFY channel of new calls (the statement trigger on `siwa.provider_calls`).
    static let channel = "siwa_provider_calls"

    /// One call to queue.
    struct Queued {
        var target: CallTarget
        var effect: CallEffect
        var event: ClaimedEvent
        /// An email service's call: the address it concerns.
        var email: String? = nil
    }

    /// Queues calls in the caller's transaction, in the order given (the order of `id`, which is
    /// the order the sender keeps per user). An event queues one call per provider: a second
    /// insert for the same event and provider changes nothing.
    static let enqueue = Statement<[Queued], Void>(
        "enqueue_provider_calls",
        """
        INSERT INTO siwa.provider_calls (target, apple_sub, effect, event_id, event_type, event_time, email)
        SELECT u.target, u.sub, u.effect, u.event_id, u.type, \(SQLEncoding.timestamp(millis: "u.event_ms")), u.email
        FROM ROWS FROM (pg_catalog.unnest($1::text[]),
            pg_catalog.unnest($2::text[]),
            pg_catalog.unnest($3::text[]),
            pg_catalog.unnest($4::bigint[]),
            pg_catalog.unnest($5::text[]),
            pg_catalog.unnest($6::bigint[]),
            pg_catalog.unnest($7::text[]))
            WITH ORDINALITY AS u(target, sub, effect, event_id, type, event_ms, email, n)
        ORDER BY u.n
        ON CONFLICT (event_id, target) DO NOTHING
        """,
        bind: { rows in
            [
                SQLEncoding.array(rows.map(\.target.rawValue)), SQLEncoding.array(rows.map(\.event.event.sub)),
                SQLEncoding.array(rows.map(\.effect.rawValue)), SQLEncoding.array(rows.map(\.event.id)),
                SQLEncoding.array(rows.map(\.event.event.type.rawValue)), SQLEncoding.array(rows.map(\.event.event.eventTimeMillis)),
                SQLEncoding.array(rows.map(\.email)),
            ]
        })

    struct Claim {
        var limit: Int
        var leaseSeconds: Double
        /// The providers configured: a call of another one waits for it to be configured again.
        var targets: [CallTarget]
    }

    /// Leases up to `limit` due calls, each the earliest waiting one of its user at its provider
    /// (a later call waits while an earlier one is pending or in flight; dead ones do not count),
    /// found as `ForwardStatements.claim` finds forwards (and for the same planner reasons).
    static let claim = Statement<Claim, ClaimedProviderCall>(
        "claim_provider_calls",
        """
        WITH due AS (
            SELECT p.id FROM siwa.provider_calls p
            WHERE p.state = 'pending' AND p.next_attempt_at <= pg_catalog.now()
              AND (p.lease_until IS NULL OR p.lease_until <= pg_catalog.now())
              AND p.target = ANY($3::text[])
              AND (SELECT e.id FROM siwa.provider_calls e
                   WHERE e.target = p.target AND e.apple_sub = p.apple_sub AND e.state = 'pending' ORDER BY e.id LIMIT 1) = p.id
            ORDER BY p.next_attempt_at, p.id
            LIMIT $1
            FOR UPDATE SKIP LOCKED)
        UPDATE siwa.provider_calls p SET lease_until = pg_catalog.now() + $2::double precision * interval '1 second'
        WHERE p.id = ANY (ARRAY(SELECT due.id FROM due))
        RETURNING p.id, p.target, p.apple_sub, p.effect, p.attempts,
                  extract(epoch FROM pg_catalog.now() - p.retry_since)::double precision AS age,
                  p.actions IS NOT NULL AS found_before, p.email,
                  -- An email service's call: the suppressions siwa-notify added, a line "address<TAB>scope" each.
                  (SELECT pg_catalog.string_agg(s.email || E'\t' || s.scope, E'\n' ORDER BY s.email, s.scope)
                   FROM siwa.email_suppressions s
                   WHERE s.target = p.target
                     AND (s.email = p.email OR (p.effect = 'erase' AND s.apple_sub = p.apple_sub))) AS recorded
        """,
        bind: { [String($0.limit), String($0.leaseSeconds), SQLEncoding.array($0.targets.map(\.rawValue))] },
        decode: { row throws(PostgresError) in
            ClaimedProviderCall(
                id: try row.int64("id"), target: try row.value("target", as: CallTarget.self), sub: try row.text("apple_sub"),
                effect: try row.value("effect", as: CallEffect.self), email: try row.optionalText("email"),
                recorded: SuppressionEntry.parse(lines: try row.optionalText("recorded")),
                attempts: try row.int("attempts"), ageSeconds: try row.double("age"), foundBefore: try row.bool("found_before"))
        })

    struct Outcome {
        var id: Int64
        var state: ProviderCallState
        /// The provider's last HTTP status, when it answered.
        var status: Int?
        /// Its error code, or a network code; nil on success.
        var reason: String?
        /// What the call did (`signed_out,unlinked`; after a failure what it did so far, empty
        /// when it found the user and did nothing yet); nil: unchanged.
        var actions: String?
        var retryInSeconds: Double
    }

    /// Records attempts' outcomes and ends their leases; only calls still pending are written (a
    /// late outcome never undoes one recorded by another sender after a lease expired). Rows are
    /// locked in id order and written by a probe per outcome, as `ForwardStatements.recordOutcomes`.
    static let recordOutcomes = Statement<[Outcome], Void>(
        "record_provider_call_outcomes",
        """
        WITH locked AS (
            SELECT p.id FROM siwa.provider_calls p
            WHERE p.id = ANY($1::bigint[]) AND p.state = 'pending'
            ORDER BY p.id FOR UPDATE)
        UPDATE siwa.provider_calls p SET state = u.state, attempts = p.attempts + 1, lease_until = NULL,
            last_status = u.status, last_reason = u.reason, actions = coalesce(u.actions, p.actions),
            next_attempt_at = CASE WHEN u.state = 'pending' THEN pg_catalog.now() + u.retry_in * interval '1 second' ELSE p.next_attempt_at END,
            updated_at = pg_catalog.now()
        FROM ROWS FROM (pg_catalog.unnest($1::bigint[]),
            pg_catalog.unnest($2::text[]),
            pg_catalog.unnest($3::integer[]),
            pg_catalog.unnest($4::text[]),
            pg_catalog.unnest($5::text[]),
            pg_catalog.unnest($6::double precision[])) AS u(id, state, status, reason, actions, retry_in)
            JOIN locked ON locked.id = u.id
        WHERE p.id = ANY (ARRAY[u.id])
        """,
        bind: { rows in
            [
                SQLEncoding.array(rows.map(\.id)), SQLEncoding.array(rows.map(\.state.rawValue)),
                SQLEncoding.array(rows.map { $0.status.map(Int64.init) }),
                SQLEncoding.array(rows.map { $0.reason.map { String($0.prefix(200)) } }), SQLEncoding.array(rows.map(\.actions)),
                SQLEncoding.array(rows.map { Optional(String($0.retryInSeconds)) }),
            ]
        })

    /// One provider's queue, for `status`, `/metrics` and the console.
    struct Backlog: Equatable, Sendable {
        var target: CallTarget
        var pending: Int
        var inFlight: Int
        var dead: Int
        var oldestWaitingAgeSeconds: Double
        var doneLastHour: Int
        var userUnknownLastHour: Int
    }

    static let backlog = Statement<Void, Backlog>(
        "provider_call_backlog",
        """
        SELECT target, pending, in_flight, dead, oldest_waiting_age_seconds, done_last_hour, user_unknown_last_hour
        FROM siwa.provider_call_backlog
        UNION ALL
        SELECT target, pending, in_flight, dead, oldest_waiting_age_seconds, done_last_hour, user_unknown_last_hour
        FROM siwa.email_sender_backlog
        """,
        decode: { row throws(PostgresError) in
            Backlog(
                target: try row.value("target", as: CallTarget.self), pending: try row.int("pending"), inFlight: try row.int("in_flight"),
                dead: try row.int("dead"), oldestWaitingAgeSeconds: try row.double("oldest_waiting_age_seconds"),
                doneLastHour: try row.int("done_last_hour"), userUnknownLastHour: try row.int("user_unknown_last_hour"))
        })

    /// One call of a user, as the console and `user-report` show it (never a credential).
    struct Call: Equatable, Sendable {
        var id: Int64
        var target: String
        var effect: String
        var eventType: String
        var state: String
        var attempts: Int
        var lastStatus: Int?
        var lastReason: String?
        var actions: String?
        var createdAtMillis: Int64
        var updatedAtMillis: Int64
    }

    /// A user's calls, newest first (at most 100).
    static let ofUser = Statement<String, Call>(
        "provider_calls_of_user",
        """
        SELECT id, target, effect, event_type, state, attempts, last_status, last_reason, actions,
               \(SQLEncoding.millis("created_at")) AS created_ms, \(SQLEncoding.millis("updated_at")) AS updated_ms
        FROM siwa.provider_calls WHERE apple_sub = $1 ORDER BY id DESC LIMIT 100
        """,
        bind: { [$0] },
        decode: { row throws(PostgresError) in
            Call(
                id: try row.int64("id"), target: try row.text("target"), effect: try row.text("effect"),
                eventType: try row.text("event_type"), state: try row.text("state"), attempts: try row.int("attempts"),
                lastStatus: try row.optionalInt64("last_status").map { Int($0) }, lastReason: try row.optionalText("last_reason"),
                actions: try row.optionalText("actions"), createdAtMillis: try row.int64("created_ms"),
                updatedAtMillis: try row.int64("updated_ms"))
        })

    private static let requeue = """
        UPDATE siwa.provider_calls SET state = 'pending', attempts = 0, next_attempt_at = pg_catalog.now(), last_reason = NULL,
            lease_until = NULL, retry_since = pg_catalog.now(), updated_at = pg_catalog.now()
        WHERE state = 'dead'
        """

    /// Puts every dead call back in the queue (its retry bound starts again).
    static let replayAll = Statement<Void, Void>("replay_provider_calls_all", requeue, bind: { _ in [] })
    /// Puts one provider's dead calls back in the queue.
    static let replayTarget = Statement<String, Void>("replay_provider_calls_target", requeue + " AND target = $1", bind: { [$0] })
    /// Puts the dead calls of these ids back in the queue (the console's selection).
    static let replayIDs = Statement<[Int64], Void>(
        "replay_provider_calls_ids", requeue + " AND id = ANY($1::bigint[])", bind: { [SQLEncoding.array($0.map { Optional($0) })] })

    /// Deletes up to 1000 finished calls older than `$1` days (a short transaction of its own).
    static let prune = Statement<Int, Void>(
        "prune_provider_calls",
        """
        DELETE FROM siwa.provider_calls WHERE id = ANY (ARRAY(
            SELECT id FROM siwa.provider_calls
            WHERE state IN ('done', 'user_unknown') AND updated_at < pg_catalog.now() - $1::int * interval '1 day'
            LIMIT 1000 FOR UPDATE SKIP LOCKED))
        """,
        bind: { [String($0)] })
}
