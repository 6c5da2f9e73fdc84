import SiwaCore
import SiwaPostgres

/// A forward a sender claimed (leased) to POST it.
struct ClaimedForward: Sendable {
    var message: ForwardMessage
    /// Failed attempts so far.
    var attempts: Int
    /// Seconds since it was queued or replayed (the retry deadline counts from then).
    var ageSeconds: Double
}

/// Forwarding to the app (README "Forwarding to your app"): queue forwards in the worker's transaction, erase a
/// deleted user's email from them, claim due ones with a lease, record outcomes, replay dead
/// ones, and the numbers of `status` and `/metrics`.
enum ForwardStatements {
    /// The NOTIFY channel of new forwards (the statement trigger on `siwa.forwards`).
    static let channel = "siwa_forwards"

    /// Events that took effect, each with where it came from.
    struct Queued {
        var events: [(event: ClaimedEvent, source: ForwardSource)]
    }

    /// Queues a forward for each event (in the caller's transaction; `seq` follows the order of
    /// `events`). The `webhook-id` is `msg_<event id>`: an event takes effect once, and a second
    /// insert of the same id changes nothing. `email` and `is_private_email` only for email events.
    static let enqueue = Statement<Queued, Void>(
        "enqueue_forwards",
        """
        INSERT INTO siwa.forwards (id, sub, aud, type, event_time, source, email, is_private_email)
        SELECT u.id, u.sub, u.aud, u.type, \(SQLEncoding.timestamp(millis: "u.event_ms")), u.source, u.email, u.priv
        FROM ROWS FROM (pg_catalog.unnest($1::text[]),
            pg_catalog.unnest($2::text[]),
            pg_catalog.unnest($3::text[]),
            pg_catalog.unnest($4::text[]),
            pg_catalog.unnest($5::bigint[]),
            pg_catalog.unnest($6::text[]),
            pg_catalog.unnest($7::boolean[]),
            pg_catalog.unnest($8::text[]))
            WITH ORDINALITY AS u(id, sub, aud, type, event_ms, email, priv, source, n)
        ORDER BY u.n
        ON CONFLICT (id) DO NOTHING
        """,
        bind: { q in
            let messages = q.events.map { (e, source) in
                // An in-app deletion is forwarded as what it is to the app: an account-delete.
                ForwardMessage(
                    id: ForwardMessage.id(forEvent: e.id), type: e.event.type == .deletionRequested ? .accountDelete : e.event.type,
                    sub: e.event.sub, audience: e.audience, eventTimeMillis: e.event.eventTimeMillis, source: source,
                    email: e.event.email, isPrivateEmail: e.event.isPrivateEmail)
            }
            return [
                SQLEncoding.array(messages.map(\.id)), SQLEncoding.array(messages.map(\.sub)),
                SQLEncoding.array(messages.map(\.audience)), SQLEncoding.array(messages.map(\.type.rawValue)),
                SQLEncoding.array(messages.map(\.eventTimeMillis)),
                SQLEncoding.array(messages.map { $0.isEmailEvent ? $0.email : nil }),
                SQLEncoding.array(messages.map { $0.isEmailEvent ? $0.isPrivateEmail : nil }),
                SQLEncoding.array(messages.map(\.source.rawValue)),
            ]
        })

    /// A deleted user's forwards lose their email (next to `WorkerStatements.eraseEventEmails`):
    /// the undelivered ones are then sent without it, and delivered ones keep no address here.
    /// Rows are locked in id order, as `recordOutcomes` locks them (no deadlock with a sender).
    static let eraseEmails = Statement<[String], Void>(
        "erase_forward_emails", eraseEmails(where: "x.sub = ANY($1::text[])"), bind: { [SQLEncoding.array($0)] })

    /// The forwards of a deleted account's events, when the user has come back since
    /// (`WorkerStatements.eraseEventEmailsBefore`): those older than the comeback lose their email.
    static let eraseEmailsBefore = Statement<WorkerStatements.Comeback, Void>(
        "erase_forward_emails_before",
        eraseEmails(where: "x.sub = $1 AND x.event_time < \(SQLEncoding.timestamp(millis: "$2::bigint"))"),
        bind: { [$0.sub, String($0.sinceMillis)] })

    /// Erases the email of the forwards matching `condition` (alias `x`), locked in id order.
    /// They are found first (`forwards_email_idx`), then locked by primary key in id order:
    /// asked for rows in id order outright, a planner that believed the table empty read its whole
    /// primary key rather than sort a few rows.
    private static func eraseEmails(where condition: String) -> String {
        """
        WITH target AS (
            SELECT f.id FROM siwa.forwards f
            WHERE f.id = ANY (ARRAY(SELECT x.id FROM siwa.forwards x WHERE \(condition) AND x.email IS NOT NULL))
            ORDER BY f.id FOR UPDATE)
        UPDATE siwa.forwards f SET email = NULL WHERE f.id = ANY (ARRAY(SELECT t.id FROM target t))
        """
    }

    struct Claim {
        var limit: Int
        var leaseSeconds: Double
    }

    /// Opens the sender's cycle (record the answers, then claim: one commit). The claim must
    /// read the due index in its order and stop at its limit: with statistics taken while the
    /// backlog was deep, the planner prefers a bitmap scan of every due row, an anti-join for
    /// each and a sort, whose cost grows with the backlog (bench/README.md).
    static let beginCycle = """
        BEGIN; SET LOCAL enable_seqscan = off; SET LOCAL enable_bitmapscan = off; SET LOCAL enable_sort = off;
        SET LOCAL enable_hashjoin = off; SET LOCAL enable_mergejoin = off; SET LOCAL jit = off
        """

    /// Leases up to `limit` due forwards, each the earliest waiting one of its sub (a sub's later
    /// forward waits while an earlier one is pending, failed or in flight; dead ones do not
    /// count): the first waiting forward of its sub, found by one probe of
    /// `forwards_waiting_sub_idx` in a correlated subquery (as `NOT EXISTS` it was an anti-join
    /// whose inner side, with statistics that saw nothing waiting, read a whole partial index for
    /// each due row). A lease that expired (its sender died) makes the forward due again. The leased
    /// rows are found through the primary key (`= ANY(ARRAY(...))`): joined to the CTE, the
    /// generic plan of this prepared statement guessed a tenth of the table and hashed a
    /// sequential scan of all of `siwa.forwards`, delivered rows included, on every claim.
    static let claim = Statement<Claim, ClaimedForward>(
        "claim_forwards",
        """
        WITH due AS (
            SELECT f.id FROM siwa.forwards f
            WHERE f.status IN ('pending', 'failed') AND f.next_attempt_at <= pg_catalog.now()
              AND (f.lease_until IS NULL OR f.lease_until <= pg_catalog.now())
              AND (SELECT e.seq FROM siwa.forwards e
                   WHERE e.sub = f.sub AND e.status IN ('pending', 'failed') ORDER BY e.seq LIMIT 1) = f.seq
            ORDER BY f.next_attempt_at, f.seq
            LIMIT $1
            FOR UPDATE SKIP LOCKED)
        UPDATE siwa.forwards f SET lease_until = pg_catalog.now() + $2::double precision * interval '1 second'
        WHERE f.id = ANY (ARRAY(SELECT due.id FROM due))
        RETURNING f.id, f.sub, f.aud, f.type, \(SQLEncoding.millis("f.event_time")) AS event_ms, f.source, f.email,
                  f.is_private_email, f.transfer_sub, f.attempts, extract(epoch FROM pg_catalog.now() - f.retry_since)::double precision AS age
        """,
        bind: { [String($0.limit), String($0.leaseSeconds)] },
        decode: { row throws(PostgresError) in
            ClaimedForward(
                message: ForwardMessage(
                    id: try row.text("id"), type: EventType(rawValue: try row.text("type")), sub: try row.text("sub"),
                    audience: try row.text("aud"), eventTimeMillis: try row.int64("event_ms"),
                    source: try row.value("source", as: ForwardSource.self), email: try row.optionalText("email"),
                    isPrivateEmail: try row.optionalBool("is_private_email"), transferSub: try row.optionalText("transfer_sub")),
                attempts: try row.int("attempts"), ageSeconds: try row.double("age"))
        })

    struct Outcome {
        var id: String
        /// `delivered`, `failed` or `dead`.
        var status: String
        var error: String?
        var retryInSeconds: Double
        /// The delivering attempt's POST, until now (ms); nil unless delivered.
        var deliveryMillis: Int?
    }

    /// Records attempts' outcomes and ends their leases. Only forwards still waiting are
    /// written (a late outcome never undoes a delivery recorded by another sender after a
    /// lease expired). Rows are locked in id order, and written by a probe per outcome
    /// (`= ANY (ARRAY[u.id])`: see `WorkerStatements`).
    static let recordOutcomes = Statement<[Outcome], Void>(
        "record_forward_outcomes",
        """
        WITH locked AS (
            SELECT f.id FROM siwa.forwards f
            WHERE f.id = ANY($1::text[]) AND f.status IN ('pending', 'failed')
            ORDER BY f.id FOR UPDATE)
        UPDATE siwa.forwards f SET status = u.status, attempts = f.attempts + 1, lease_until = NULL, last_error = u.error,
            next_attempt_at = CASE WHEN u.status = 'failed' THEN pg_catalog.now() + u.retry_in * interval '1 second' ELSE f.next_attempt_at END,
            delivered_at = CASE WHEN u.status = 'delivered' THEN pg_catalog.now() END,
            delivery_ms = u.ms
        FROM ROWS FROM (pg_catalog.unnest($1::text[]),
            pg_catalog.unnest($2::text[]),
            pg_catalog.unnest($3::text[]),
            pg_catalog.unnest($4::double precision[]),
            pg_catalog.unnest($5::bigint[])) AS u(id, status, error, retry_in, ms)
            JOIN locked ON locked.id = u.id
        WHERE f.id = ANY (ARRAY[u.id])
        """,
        bind: { rows in
            [
                SQLEncoding.array(rows.map(\.id)), SQLEncoding.array(rows.map(\.status)),
                SQLEncoding.array(rows.map { $0.error.map { String($0.prefix(500)) } }),
                SQLEncoding.array(rows.map { Optional(String($0.retryInSeconds)) }),
                SQLEncoding.array(rows.map { $0.deliveryMillis.map(Int64.init) }),
            ]
        })

    struct Backlog: Equatable, Sendable {
        var pending: Int
        var failed: Int
        var dead: Int
        var inFlight: Int
        var oldestWaitingAgeSeconds: Double
    }

    static let backlog = Statement<Void, Backlog>(
        "forward_backlog",
        "SELECT pending, failed, dead, in_flight, oldest_waiting_age_seconds FROM siwa.forward_backlog",
        decode: { row throws(PostgresError) in
            Backlog(
                pending: try row.int("pending"), failed: try row.int("failed"), dead: try row.int("dead"),
                inFlight: try row.int("in_flight"), oldestWaitingAgeSeconds: try row.double("oldest_waiting_age_seconds"))
        })

    struct Latency: Equatable, Sendable {
        var deliveredLastHour: Int
        var p50Millis: Double?
        var p99Millis: Double?
    }

    /// Deliveries of the last hour, and the POST→delivered latency of the newest 1000.
    static let latency = Statement<Void, Latency>(
        "forward_latency",
        """
        SELECT (SELECT pg_catalog.count(*) FROM siwa.forwards WHERE status = 'delivered' AND delivered_at > pg_catalog.now() - interval '1 hour') AS last_hour,
               pg_catalog.percentile_cont(0.5) WITHIN GROUP (ORDER BY r.delivery_ms) AS p50,
               pg_catalog.percentile_cont(0.99) WITHIN GROUP (ORDER BY r.delivery_ms) AS p99
        FROM (SELECT delivery_ms FROM siwa.forwards WHERE status = 'delivered' AND delivered_at > pg_catalog.now() - interval '1 hour'
              ORDER BY delivered_at DESC LIMIT 1000) r
        """,
        decode: { row throws(PostgresError) in
            Latency(
                deliveredLastHour: try row.int("last_hour"), p50Millis: try row.optionalDouble("p50"),
                p99Millis: try row.optionalDouble("p99"))
        })

    private static let requeue = """
        UPDATE siwa.forwards SET status = 'pending', attempts = 0, next_attempt_at = pg_catalog.now(), last_error = NULL,
            lease_until = NULL, retry_since = pg_catalog.now()
        WHERE status = 'dead'
        """

    /// Puts every dead forward back in the queue (its retry period starts again).
    static let replayAll = Statement<Void, Void>("replay_forwards_all", requeue, bind: { _ in [] })
    /// Puts the dead forwards of one event type back in the queue.
    static let replayType = Statement<String, Void>("replay_forwards_type", requeue + " AND type = $1", bind: { [$0] })

    /// Deletes up to 1000 delivered forwards older than `$1` days (a short transaction of its own).
    static let prune = Statement<Int, Void>(
        "prune_forwards",
        """
        DELETE FROM siwa.forwards WHERE id = ANY (ARRAY(
            SELECT id FROM siwa.forwards
            WHERE status = 'delivered' AND delivered_at < pg_catalog.now() - $1::int * interval '1 day'
            LIMIT 1000 FOR UPDATE SKIP LOCKED))
        """,
        bind: { [String($0)] })
}
