/// The event carried in a verified notification's `events` claim.
public struct AppleEvent: Sendable, Equatable {
    public var type: EventType
    /// Apple's stable user identifier.
    public var sub: String
    /// `event_time`, in milliseconds since the Unix epoch.
    public var eventTimeMillis: Int64
    /// The relay or real email, when Apple sends it.
    public var email: String?
    /// `is_private_email`, when Apple sends it.
    public var isPrivateEmail: Bool?

    public init(type: EventType, sub: String, eventTimeMillis: Int64, email: String? = nil, isPrivateEmail: Bool? = nil) {
        self.type = type
        self.sub = sub
        self.eventTimeMillis = eventTimeMillis
        self.email = email
        self.isPrivateEmail = isPrivateEmail
    }
}
