import SiwaCore
import SiwaPostgres

/// Writes verified notifications to the outbox `siwa.events`.
public struct EventStore: Sendable {
    /// What the insert did.
    public enum Outcome: String, Sendable {
        /// A new row, committed, to be applied by the worker.
        case accepted
        /// Same `jti`, or same (`sub`, `type`, `event_time`), already stored.
        case duplicate
        /// A new row of an unknown type, stored for the record with status `ignored`.
        case ignored
    }

    static let insertName = "siwa_insert_event"
    static let insertSQL = """
        INSERT INTO siwa.events (jti, aud, sub, type, event_time, email, is_private_email, status, claims)
        VALUES ($1, $2, $3, $4, timestamptz 'epoch' + $5::bigint * interval '1 millisecond',
                $6, $7::boolean, $8, $9::jsonb)
        ON CONFLICT DO NOTHING
        """

    /// Prepares the statements on a (new) connection.
    public static func prepare(_ connection: PostgresConnection) throws(PostgresError) {
        try connection.prepare(insertName, insertSQL)
    }

    /// Inserts in autocommit mode: when this returns, the row is durable.
    public static func insert(_ notification: VerifiedNotification, on connection: PostgresConnection) throws(PostgresError) -> Outcome {
        try prepare(connection)
        let event = notification.event
        let status = event.type.isKnown ? "pending" : "ignored"
        let result = try connection.executePrepared(insertName, [
            notification.jti, notification.audience, event.sub, event.type.rawValue,
            String(event.eventTimeMillis), event.email, event.isPrivateEmail.map { $0 ? "true" : "false" },
            status, notification.claimsJSON,
        ])
        if result.affectedRows == 0 { return .duplicate }
        return event.type.isKnown ? .accepted : .ignored
    }
}
