extension ServerConfiguration {
    /// `name` as a duration (`DurationText`) within `range` seconds (or 0 when `allowZero`), else
    /// an error naming it; `def` when unset.
    static func duration(
        _ name: String, _ text: String?, range: ClosedRange<Int>, allowZero: Bool = false, default def: Duration
    ) throws(ConfigurationError) -> Duration {
        guard let text else { return def }
        guard let seconds = DurationText.seconds(text), (allowZero && seconds == 0) || range.contains(seconds) else {
            let bounds = "\(DurationText.format(range.lowerBound)) and \(DurationText.format(range.upperBound))"
            throw ConfigurationError(
                variable: name,
                problem: "must be a duration with a unit (s, m, h, d) between \(bounds)" + (allowZero ? ", or 0 (off)" : ""))
        }
        return .seconds(seconds)
    }
}
