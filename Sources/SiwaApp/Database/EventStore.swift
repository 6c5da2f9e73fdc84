/// The outbox `siwa.events`: what a write of a verified notification did.
public enum EventStore {
    public enum Outcome: String, Sendable {
        /// A new row, committed, to be applied by the worker.
        case accepted
        /// Same `jti`, or same (`sub`, `type`, `event_time`), already stored.
        case duplicate
        /// A new row of an unknown type, stored for the record with status `ignored`.
        case ignored
    }
}
