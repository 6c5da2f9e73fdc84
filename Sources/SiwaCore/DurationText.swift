/// Durations as operators write them in the configuration: a whole number and a unit, `s`, `m`,
/// `h` or `d` (`90s`, `30m`, `24h`, `7d`). `0` alone (no unit) is zero: "off" where allowed.
public enum DurationText {
    /// Seconds, or nil when `text` is not a duration (no unit, unknown unit, negative, overflow).
    public static func seconds(_ text: String) -> Int? {
        let bytes = Array(text.utf8)
        if bytes == [UInt8(ascii: "0")] { return 0 }
        guard let unit = bytes.last, bytes.count >= 2 else { return nil }
        let factor: Int
        switch unit {
        case UInt8(ascii: "s"): factor = 1
        case UInt8(ascii: "m"): factor = 60
        case UInt8(ascii: "h"): factor = 3600
        case UInt8(ascii: "d"): factor = 86_400
        default: return nil
        }
        // At most 12 digits: a duration of a trillion units is a typo, not a setting.
        guard bytes.count <= 13 else { return nil }
        var n = 0
        for b in bytes.dropLast() {
            guard (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(b) else { return nil }
            let (times, o1) = n.multipliedReportingOverflow(by: 10)
            let (plus, o2) = times.addingReportingOverflow(Int(b - UInt8(ascii: "0")))
            guard !o1, !o2 else { return nil }
            n = plus
        }
        let (total, overflow) = n.multipliedReportingOverflow(by: factor)
        return overflow ? nil : total
    }

    /// The shortest exact spelling of `seconds` (`7d`, `90s`), for messages and defaults.
    public static func format(_ seconds: Int) -> String {
        if seconds == 0 { return "0" }
        for (unit, factor) in [("d", 86_400), ("h", 3600), ("m", 60)] where seconds % factor == 0 {
            return "\(seconds / factor)\(unit)"
        }
        return "\(seconds)s"
    }
}
