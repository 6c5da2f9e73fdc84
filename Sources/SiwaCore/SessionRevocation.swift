/// Which of the account's sessions must be revoked.
public enum SessionRevocation: Sendable, Equatable {
    case none
    /// Sessions created at or before this time (milliseconds); later sign-ins survive.
    case createdAtOrBefore(Int64)
    case all
}
