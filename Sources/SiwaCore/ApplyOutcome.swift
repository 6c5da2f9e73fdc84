/// How an event was handled by `EventRules.apply`.
public enum ApplyOutcome: String, Sendable {
    /// The event's effect on the account was applied.
    case applied
    /// Older than what is already applied; account unchanged (a consent revocation still revokes sessions).
    case stale
    /// The account is deleted; nothing changes.
    case finalDeleted = "final_deleted"
    /// Unknown event type; nothing changes.
    case ignored
}
