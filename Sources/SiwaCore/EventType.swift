/// The `type` of an Apple server-to-server event.
public enum EventType: Sendable, Hashable {
    case emailDisabled
    case emailEnabled
    case consentRevoked
    case accountDelete
    /// A verified sign-in recorded by the API (`sign-in`): never from Apple's notifications.
    case signIn
    /// An in-app deletion (`siwa.request_deletion`, `deletion-requested`): applied like
    /// `account-delete`, and the user's tokens are revoked at Apple. Never from Apple's notifications.
    case deletionRequested
    /// Any other type, kept verbatim.
    case unknown(String)

    /// Maps Apple's spelling; `"account-deleted"` is accepted as an alias of `"account-delete"`.
    public init(rawValue: String) {
        switch rawValue {
        case "email-disabled": self = .emailDisabled
        case "email-enabled": self = .emailEnabled
        case "consent-revoked": self = .consentRevoked
        case "account-delete", "account-deleted": self = .accountDelete
        default: self = .unknown(rawValue)
        }
    }

    /// A type as stored in `siwa.events`: Apple's types, and the two siwa-notify records itself
    /// (`sign-in`, `deletion-requested`), which a notification from Apple can never carry
    /// (`init(rawValue:)` keeps them unknown: stored and ignored).
    public init(stored: String) {
        switch stored {
        case "sign-in": self = .signIn
        case "deletion-requested": self = .deletionRequested
        default: self.init(rawValue: stored)
        }
    }

    /// The canonical spelling (`.accountDelete` is `"account-delete"`); an unknown type's own string.
    public var rawValue: String {
        switch self {
        case .emailDisabled: return "email-disabled"
        case .emailEnabled: return "email-enabled"
        case .consentRevoked: return "consent-revoked"
        case .accountDelete: return "account-delete"
        case .signIn: return "sign-in"
        case .deletionRequested: return "deletion-requested"
        case .unknown(let raw): return raw
        }
    }

    /// False only for `.unknown`.
    public var isKnown: Bool {
        if case .unknown = self { return false }
        return true
    }
}
