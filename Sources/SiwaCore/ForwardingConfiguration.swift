/// Forwarding of applied events to the app (README "Forwarding to your app", Standard Webhooks): on when
/// `SIWA_FORWARD_URL` is set. Only names and numbers: reading and checking the secret file is
/// the application's job at start (`StandardWebhookSecret.parse`).
public struct ForwardingConfiguration: Sendable, Equatable {
    /// `SIWA_FORWARD_URL`: `https://`, or `http://` to a loopback host.
    public var url: String
    /// `SIWA_FORWARD_SECRET_FILE`: lines `whsec_<base64>`; every one signs (rotation).
    public var secretFile: String
    /// `SIWA_FORWARD_RETRY_FOR`: how long a forward is retried before it is `dead`. Default 3 days.
    public var retryFor: Duration

    public static let defaultRetryFor = Duration.seconds(3 * 86_400)
    /// Bounds of `SIWA_FORWARD_RETRY_FOR`: a minute to 30 days.
    public static let retryForRange = 60...(30 * 86_400)

    public init(url: String, secretFile: String, retryFor: Duration = ForwardingConfiguration.defaultRetryFor) {
        self.url = url
        self.secretFile = secretFile
        self.retryFor = retryFor
    }

    /// nil when neither `SIWA_FORWARD_URL` nor `SIWA_FORWARD_SECRET_FILE` is set; an error naming
    /// the variable when only one is, when the URL is not acceptable, or when
    /// `SIWA_FORWARD_RETRY_FOR` is not a duration in range.
    static func load(_ value: (String) -> String?) throws(ConfigurationError) -> ForwardingConfiguration? {
        var retryFor = defaultRetryFor
        if let text = value("SIWA_FORWARD_RETRY_FOR") {
            guard let seconds = DurationText.seconds(text), retryForRange.contains(seconds) else {
                throw ConfigurationError(
                    variable: "SIWA_FORWARD_RETRY_FOR",
                    problem: "must be a duration with a unit (s, m, h or d, e.g. 3d or 36h) between 1m and 30d")
            }
            retryFor = .seconds(seconds)
        }
        let url = value("SIWA_FORWARD_URL"), file = value("SIWA_FORWARD_SECRET_FILE")
        switch (url, file) {
        case (nil, nil):
            return nil
        case (nil, .some):
            throw ConfigurationError(
                variable: "SIWA_FORWARD_URL", problem: "is required when SIWA_FORWARD_SECRET_FILE is set (set both or neither)")
        case (.some, nil):
            throw ConfigurationError(
                variable: "SIWA_FORWARD_SECRET_FILE",
                problem: "is required when SIWA_FORWARD_URL is set: a file of whsec_<base64> secret lines (set both or neither)")
        case (.some(let url), .some(let file)):
            if let problem = problem(withURL: url) {
                throw ConfigurationError(variable: "SIWA_FORWARD_URL", problem: problem)
            }
            return ForwardingConfiguration(url: url, secretFile: file, retryFor: retryFor)
        }
    }

    /// nil if `url` may receive forwards: `https://` to any host, `http://` to loopback only.
    static func problem(withURL url: String) -> String? {
        let lower = url.lowercased()
        guard lower.hasPrefix("https://") || lower.hasPrefix("http://") else {
            return "must be an https:// URL (or http:// to a loopback host)"
        }
        return JWKSLocation.problem(with: url)
    }
}
