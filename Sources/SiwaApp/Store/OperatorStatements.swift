import SiwaPostgres

/// What operators and the admin listener read and change: readiness, backlog gauges, `status`,
/// `replay`, the schema.
enum OperatorStatements {
    /// The database answers.
    static let ping = Statement<Void, String>("ping", "SELECT 1 AS one", decode: { row throws(PostgresError) in try row.text("one") })

    /// True when `siwa.events` exists (the schema was applied before).
    static let schemaExists = Statement<Void, Bool>(
        "schema_exists", "SELECT pg_catalog.to_regclass('siwa.events') IS NOT NULL AS present",
        decode: { row throws(PostgresError) in try row.bool("present") })

    struct Backlog: Equatable {
        var pending: Int
        var failed: Int
        var dead: Int
        var oldestPendingAgeSeconds: Double
    }

    static let backlog = Statement<Void, Backlog>(
        "backlog", "SELECT pending, failed, dead, oldest_pending_age_seconds FROM siwa.backlog",
        decode: { row throws(PostgresError) in
            Backlog(
                pending: try row.int("pending"), failed: try row.int("failed"), dead: try row.int("dead"),
                oldestPendingAgeSeconds: try row.double("oldest_pending_age_seconds"))
        })

    static let keySetAge = Statement<Void, Double?>(
        "key_set_age", "SELECT extract(epoch FROM pg_catalog.now() - pg_catalog.max(fetched_at)) AS age FROM siwa.key_sets",
        decode: { row throws(PostgresError) in try row.optionalDouble("age") })

    struct TypeCount: Equatable {
        var type: String
        var status: EventStatus
        var lastHour: Int
        var lastDay: Int
    }

    /// Events of the last day by type and status (a range over `events_received_day_idx`).
    static let countsLastDay = Statement<Void, TypeCount>(
        "counts_last_day",
        """
        SELECT type, status,
               pg_catalog.count(*) FILTER (WHERE received_at > pg_catalog.now() - interval '1 hour') AS last_hour,
               pg_catalog.count(*) AS last_day
        FROM siwa.events
        WHERE (received_at AT TIME ZONE 'UTC')::date >= (pg_catalog.now() AT TIME ZONE 'UTC')::date - 1
          AND received_at > pg_catalog.now() - interval '1 day'
        GROUP BY 1, 2 ORDER BY 1, 2
        """,
        decode: { row throws(PostgresError) in
            TypeCount(
                type: try row.text("type"), status: try row.value("status", as: EventStatus.self),
                lastHour: try row.int("last_hour"), lastDay: try row.int("last_day"))
        })

    struct RecentEvent: Equatable {
        var id: Int64
        var type: String
        var status: EventStatus
        var receivedAt: String
        var attempts: Int
    }

    /// Users per app and status (the app accounts' summary view).
    static let appAccountCounts = Statement<Void, (aud: String, status: String, count: Int)>(
        "app_account_counts",
        "SELECT aud, status, pg_catalog.sum(accounts)::int AS n FROM siwa.app_account_status_summary GROUP BY 1, 2 ORDER BY 1, 2",
        decode: { row throws(PostgresError) in (try row.text("aud"), try row.text("status"), try row.int("n")) })

    static let recentEvents = Statement<Void, RecentEvent>(
        "recent_events",
        """
        SELECT id, type, status, pg_catalog.to_char(received_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') AS received,
               attempts
        FROM siwa.events ORDER BY id DESC LIMIT 10
        """,
        decode: { row throws(PostgresError) in
            RecentEvent(
                id: try row.int64("id"), type: try row.text("type"), status: try row.value("status", as: EventStatus.self),
                receivedAt: try row.text("received"), attempts: try row.int("attempts"))
        })

    /// Dead events are found through the queue (its dead index), not by a scan of every event.
    private static let requeue = """
        UPDATE siwa.events SET status = 'pending', attempts = 0, next_attempt_at = pg_catalog.now(), last_error = NULL
        WHERE id IN (SELECT id FROM siwa.event_queue WHERE status = 'dead') AND status = 'dead'
        """

    /// Puts every dead event back in the queue.
    static let replayAll = Statement<Void, Void>("replay_all", requeue, bind: { _ in [] })
    /// Puts the dead events of one type back in the queue.
    static let replayType = Statement<String, Void>("replay_type", requeue + " AND type = $1", bind: { [$0] })
    /// Puts the dead events with these ids back in the queue.
    static let replayIDs = Statement<[Int64], Void>(
        "replay_ids", requeue + " AND id = ANY($1::bigint[])", bind: { [SQLEncoding.array($0)] })
}
