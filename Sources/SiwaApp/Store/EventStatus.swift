/// `siwa.events.status` (the CHECK constraint of `schema.sql`, and README "Database").
public enum EventStatus: String, Sendable, CaseIterable, Codable {
    /// Waiting for the worker.
    case pending
    /// Applied (see `outcome`).
    case done
    /// An attempt failed; retried at `next_attempt_at`.
    case failed
    /// Out of attempts: `replay` puts it back.
    case dead
    /// An unknown type, stored for the record; never applied.
    case ignored
}

/// What writing a verified notification to the outbox did.
public enum InsertOutcome: String, Sendable {
    /// A new row, committed, to be applied by the worker.
    case accepted
    /// Same `jti`, or same (`aud`, `sub`, `type`, `event_time`), already stored.
    case duplicate
    /// A new row of an unknown type, stored for the record with status `ignored`.
    case ignored
}
