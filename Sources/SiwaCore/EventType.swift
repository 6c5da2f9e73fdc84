/// The `type` of an Apple server-to-server event.
public enum EventType: Sendable, Hashable {
    case emailDisabled
    case emailEnabled
    case consentRevoked
    case accountDelete
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

    /// The canonical spelling (`.accountDelete` is `"account-delete"`); an unknown type's own string.
    public var rawValue: String {
        switch self {
        case .emailDisabled: return "email-disabled"
        case .emailEnabled: return "email-enabled"
        case .consentRevoked: return "consent-revoked"
        case .accountDelete: return "account-delete"
        case .unknown(let raw): return raw
        }
    }

    /// False only for `.unknown`.
    public var isKnown: Bool {
        if case .unknown = self { return false }
        return true
    }
}
