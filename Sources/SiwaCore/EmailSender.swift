/// The email services whose suppression lists the worker keeps in step with Apple's relay
/// (`SIWA_EMAIL_SENDERS`, docs/email-senders.md). Raw values are the names the variable takes and
/// the `target` stored with each call, as the hosted providers' are.
public enum EmailSender: String, CaseIterable, Sendable, Equatable {
    case ses
    case sendgrid
    case postmark
    case mailgun
}

/// What the worker decided for a relay address at an email service. Each is idempotent at the
/// service: repeating it after it took effect changes nothing.
public enum SenderEffect: String, CaseIterable, Sendable, Equatable {
    /// `email-disabled`: the address is suppressed (where it is not already).
    case suppress
    /// `email-enabled`: the suppressions siwa-notify added for the address are lifted, no other.
    case unsuppress
    /// `account-delete` or an in-app deletion: every suppression siwa-notify added for the user is
    /// removed, and the address's entry wherever the service's API deletes it.
    case erase
}

/// Who a queued call goes to: a hosted identity provider or an email service. Both share one
/// queue (`siwa.provider_calls`), whose `target` column holds the raw value.
public enum CallTarget: Hashable, Sendable, RawRepresentable {
    case provider(HostedProvider)
    case sender(EmailSender)

    public init?(rawValue: String) {
        if let p = HostedProvider(rawValue: rawValue) {
            self = .provider(p)
        } else if let s = EmailSender(rawValue: rawValue) {
            self = .sender(s)
        } else {
            return nil
        }
    }

    public var rawValue: String {
        switch self {
        case .provider(let p): return p.rawValue
        case .sender(let s): return s.rawValue
        }
    }

    /// Every target, providers first, in their declaration order.
    public static let all: [CallTarget] = HostedProvider.allCases.map(CallTarget.provider) + EmailSender.allCases.map(CallTarget.sender)
}

/// What a queued call does (`siwa.provider_calls.effect`).
public enum CallEffect: Hashable, Sendable, RawRepresentable {
    case provider(ProviderEffect)
    case sender(SenderEffect)

    public init?(rawValue: String) {
        if let p = ProviderEffect(rawValue: rawValue) {
            self = .provider(p)
        } else if let s = SenderEffect(rawValue: rawValue) {
            self = .sender(s)
        } else {
            return nil
        }
    }

    public var rawValue: String {
        switch self {
        case .provider(let p): return p.rawValue
        case .sender(let s): return s.rawValue
        }
    }
}

/// One entry of a service's suppression list: the address, and the list it is on (a Postmark
/// message stream, a Mailgun domain; empty where the service has one list per account).
public struct SuppressionEntry: Hashable, Sendable {
    public var address: String
    public var scope: String

    public init(address: String, scope: String) {
        self.address = address
        self.scope = scope
    }
}

/// What a sender call changed in siwa-notify's record of the suppressions it added
/// (`siwa.email_suppressions`): written with the call's outcome, whatever that outcome, so that a
/// retry after a partial failure still knows which entries were its own.
public struct SuppressionLedger: Equatable, Sendable {
    /// Entries siwa-notify added (absent before the call).
    public var added: [SuppressionEntry] = []
    /// Entries of siwa-notify's that are gone from the service now (removed, or found absent).
    public var removed: [SuppressionEntry] = []

    public init(added: [SuppressionEntry] = [], removed: [SuppressionEntry] = []) {
        self.added = added
        self.removed = removed
    }

    public var isEmpty: Bool { added.isEmpty && removed.isEmpty }
}

/// Which effect the worker queues at an email service for an event, from its decision for
/// `siwa.*` (so with the same rules: event-time order, stale and duplicate events change nothing,
/// deletion is final):
/// - an `email-disabled` that took effect, of a relay address, suppresses it;
/// - an `email-enabled` that took effect, of a relay address, lifts what siwa-notify added;
/// - an `account-delete` or in-app deletion that took effect erases (whatever the address);
/// - anything else: nothing. A non-relay address is left alone unless `allAddresses`
///   (`SIWA_EMAIL_SENDERS_ALL_ADDRESSES`): Apple sends these events for relay addresses.
public enum EmailSenderRules {
    /// Apple's relay domains. Apple adds domains (`private.icloud.com` since 2026): an address an
    /// event marks `is_private_email` is a relay address whatever its domain.
    public static let relayDomains = ["privaterelay.appleid.com", "private.icloud.com"]

    /// Whether `address` is a relay address: `isPrivate` says so, or its domain is a relay domain.
    public static func isRelayAddress(_ address: String, isPrivate: Bool?) -> Bool {
        if isPrivate == true { return true }
        guard let at = address.lastIndex(of: "@") else { return false }
        let domain = address[address.index(after: at)...].lowercased()
        return relayDomains.contains(domain)
    }

    /// The effect and the address it concerns (for `erase`, the user's address before the
    /// deletion, `before`, when it is one the services are kept in step for); nil: nothing to do.
    public static func effect(
        of event: AppleEvent, decision: AccountDecision, allAddresses: Bool, before: AccountState?
    ) -> (effect: SenderEffect, address: String?)? {
        guard decision.outcome == .applied else { return nil }
        switch event.type {
        case .emailDisabled, .emailEnabled:
            guard let address = event.email, !address.isEmpty,
                allAddresses || isRelayAddress(address, isPrivate: event.isPrivateEmail)
            else { return nil }
            return (event.type == .emailDisabled ? .suppress : .unsuppress, address)
        case .accountDelete, .deletionRequested:
            guard let address = before?.email, !address.isEmpty,
                allAddresses || isRelayAddress(address, isPrivate: before?.isPrivateEmail)
            else { return (.erase, nil) }
            return (.erase, address)
        default:
            return nil
        }
    }
}

extension SuppressionEntry {
    /// Entries as the call queue's claim reads them: a line `address<TAB>scope` each.
    public static func parse(lines: String?) -> [SuppressionEntry] {
        guard let lines else { return [] }
        return lines.split(separator: "\n").compactMap { (line: Substring) -> SuppressionEntry? in
            let parts = line.split(separator: "\t", maxSplits: 1, omittingEmptySubsequences: false)
            guard parts.count == 2 else { return nil }
            return SuppressionEntry(address: String(parts[0]), scope: String(parts[1]))
        }
    }
}
