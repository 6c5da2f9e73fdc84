extension ServerConfiguration {
    /// Seconds in a duration written with a unit: `90s`, `15m`, `24h`, `7d` (a whole number and
    /// one of `s`, `m`, `h`, `d`); `0` alone is zero (off). nil for anything else (a bare number,
    /// a fraction, a negative value, another unit, an overflow).
    public static func parseDuration(_ text: String) -> Int? {
        if text == "0" { return 0 }
        guard let unit = text.last, text.count >= 2 else { return nil }
        let digits = text.dropLast()
        guard digits.allSatisfy({ $0.isASCII && $0.isNumber }), let n = Int(digits) else { return nil }
        let factor: Int
        switch unit {
        case "s": factor = 1
        case "m": factor = 60
        case "h": factor = 3600
        case "d": factor = 86_400
        default: return nil
        }
        let (seconds, overflow) = n.multipliedReportingOverflow(by: factor)
        return overflow ? nil : seconds
    }

    /// `name` as a duration within `range` seconds (or 0 when `allowZero`), else an error naming it.
    static func duration(
        _ name: String, _ text: String?, range: ClosedRange<Int>, allowZero: Bool, default def: Int
    ) throws(ConfigurationError) -> Int {
        guard let text else { return def }
        guard let seconds = parseDuration(text), (allowZero && seconds == 0) || range.contains(seconds) else {
            throw ConfigurationError(
                variable: name,
                problem: "must be a duration with a unit (s, m, h, d) between \(describe(range.lowerBound)) and \(describe(range.upperBound))"
                    + (allowZero ? ", or 0 (off)" : ""))
        }
        return seconds
    }

    /// The shortest way to write `seconds` with a unit (`86400` → `1d`).
    public static func describe(_ seconds: Int) -> String {
        for (unit, factor) in [("d", 86_400), ("h", 3600), ("m", 60)] where seconds >= factor && seconds % factor == 0 {
            return "\(seconds / factor)\(unit)"
        }
        return "\(seconds)s"
    }
}
