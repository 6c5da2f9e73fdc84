/// One step of `NotificationVerifier.inspect`, for humans.
public struct InspectionStep: Sendable, Equatable {
    /// "structure", "header", "key", "signature", "issuer", "audience", "expiry", "issued-at", "jti" or "events".
    public var name: String
    public var passed: Bool
    /// The rejection when `passed` is false.
    public var reason: RejectReason?
    /// A human description (may describe claim values, never contains the token).
    public var detail: String

    public init(name: String, passed: Bool, reason: RejectReason?, detail: String) {
        self.name = name
        self.passed = passed
        self.reason = reason
        self.detail = detail
    }
}
