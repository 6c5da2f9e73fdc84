/// Where an effect that is forwarded came from (`data.source` of the payload).
public enum ForwardSource: String, Sendable, CaseIterable {
    /// A notification Apple sent.
    case apple
    /// An in-app deletion (`siwa.request_deletion`, `siwa-notify revoke`).
    case inApp = "in-app"
    /// A change found by reconciliation (a grant Apple no longer knows).
    case reconcile
    /// A user brought over by `transfer import` (type `user-migrated`).
    case transfer
}

/// One forward, as `POST`ed to `SIWA_FORWARD_URL` (README "Forwarding to your app"):
/// `{"type","timestamp","data":{"sub","aud","event_time","source","email"?,"is_private_email"?,"transfer_sub"?}}`.
/// Besides the event types, `user-migrated` (source `transfer`): a user `transfer import` mapped,
/// `sub` the new one, `transfer_sub` the identifier the records received from the other team carry.
public struct ForwardMessage: Sendable, Equatable {
    /// The `webhook-id`: the same on every attempt.
    public var id: String
    public var type: EventType
    public var sub: String
    public var audience: String
    public var eventTimeMillis: Int64
    public var source: ForwardSource
    /// Only on email events; nil once erased (an `account-delete` of that user).
    public var email: String?
    public var isPrivateEmail: Bool?
    /// Only on `user-migrated`: the transfer identifier of the user (`siwa.transfers`).
    public var transferSub: String?

    /// The type of a forward of a user `transfer import` mapped.
    public static let userMigrated = EventType.unknown("user-migrated")

    public init(
        id: String, type: EventType, sub: String, audience: String, eventTimeMillis: Int64, source: ForwardSource,
        email: String? = nil, isPrivateEmail: Bool? = nil, transferSub: String? = nil
    ) {
        self.id = id
        self.type = type
        self.sub = sub
        self.audience = audience
        self.eventTimeMillis = eventTimeMillis
        self.source = source
        self.email = email
        self.isPrivateEmail = isPrivateEmail
        self.transferSub = transferSub
    }

    /// The `webhook-id` of the forward of outbox event `eventID` (an event takes effect once).
    public static func id(forEvent eventID: Int64) -> String { "msg_\(eventID)" }

    /// Whether the type carries `email` and `is_private_email`.
    public var isEmailEvent: Bool { type == .emailDisabled || type == .emailEnabled }

    /// The JSON body. `timestamp` is when the event happened (`event_time`, ISO 8601 UTC with
    /// milliseconds), as the Standard Webhooks payload format has it; `event_time` in `data` is
    /// the same instant in milliseconds, as Apple sends it.
    public func body() -> [UInt8] {
        var data = "{\"sub\":" + JSONValue.quoted(sub) + ",\"aud\":" + JSONValue.quoted(audience)
        data += ",\"event_time\":\(eventTimeMillis),\"source\":" + JSONValue.quoted(source.rawValue)
        if isEmailEvent {
            if let email { data += ",\"email\":" + JSONValue.quoted(email) }
            if let isPrivateEmail { data += ",\"is_private_email\":" + (isPrivateEmail ? "true" : "false") }
        }
        if let transferSub { data += ",\"transfer_sub\":" + JSONValue.quoted(transferSub) }
        data += "}"
        let text =
            "{\"type\":" + JSONValue.quoted(type.rawValue) + ",\"timestamp\":"
            + JSONValue.quoted(Self.iso8601(millis: eventTimeMillis)) + ",\"data\":" + data + "}"
        return Array(text.utf8)
    }

    /// `2025-07-15T09:36:30.719Z` for milliseconds since the epoch (proleptic Gregorian, UTC).
    public static func iso8601(millis: Int64) -> String {
        let (seconds, ms) = millis.quotientAndRemainder(dividingBy: 1000)
        let adjustedSeconds = ms < 0 ? seconds - 1 : seconds
        let milli = ms < 0 ? ms + 1000 : ms
        let (days0, secondOfDay0) = adjustedSeconds.quotientAndRemainder(dividingBy: 86_400)
        let days = secondOfDay0 < 0 ? days0 - 1 : days0
        let secondOfDay = secondOfDay0 < 0 ? secondOfDay0 + 86_400 : secondOfDay0
        // Howard Hinnant's civil_from_days.
        let z = days + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let doe = z - era * 146_097
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
        let mp = (5 * doy + 2) / 153
        let day = doy - (153 * mp + 2) / 5 + 1
        let month = mp < 10 ? mp + 3 : mp - 9
        let year = yoe + era * 400 + (month <= 2 ? 1 : 0)
        func pad(_ n: Int64, _ width: Int) -> String {
            let s = String(n)
            return String(repeating: "0", count: max(0, width - s.count)) + s
        }
        return "\(pad(year, 4))-\(pad(month, 2))-\(pad(day, 2))T\(pad(secondOfDay / 3600, 2)):\(pad(secondOfDay % 3600 / 60, 2)):"
            + "\(pad(secondOfDay % 60, 2)).\(pad(milli, 3))Z"
    }
}

/// What happens to a forward after a failed attempt: retried with exponential backoff and
/// jitter (`RetryPolicy`) until `retryFor` after it was queued, then dead. The last
/// retry is placed at the deadline, not past it.
public struct ForwardSchedule: Sendable, Equatable {
    public enum Next: Sendable, Equatable {
        case retry(after: Duration)
        case dead
    }

    /// `SIWA_FORWARD_RETRY_FOR`.
    public var retryFor: Duration
    /// Backoff; its `maxAttempts` is not used (time decides).
    public var backoff: RetryPolicy

    public init(retryFor: Duration, backoff: RetryPolicy = RetryPolicy(maxAttempts: .max, baseDelay: .seconds(1), maxDelay: .seconds(3600))) {
        self.retryFor = retryFor
        self.backoff = backoff
    }

    /// After `attempts` failed attempts (this one included), `age` after the forward was
    /// queued; `jitter` in [0, 1).
    public func next(afterAttempts attempts: Int, age: Duration, jitter: Double) -> Next {
        let left = retryFor - age
        guard left > .zero else { return .dead }
        return .retry(after: min(backoff.delay(afterAttempts: attempts, jitter: jitter), left))
    }
}
