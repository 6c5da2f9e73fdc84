/// Durations of the configuration (`SIWA_FORWARD_RETRY_FOR=3d`): a whole number followed by one
/// unit, `s`, `m`, `h` or `d`. No spaces, no fractions, no unit-less numbers (a bare `3` could
/// mean seconds or days: refused rather than guessed).
public enum DurationParser {
    /// Seconds in `text` (`90s`, `15m`, `24h`, `7d`); nil when it is not one number and one unit,
    /// or when the number of seconds would overflow.
    public static func seconds(_ text: String) -> Int? {
        let bytes = Array(text.utf8)
        guard bytes.count >= 2, let unit = bytes.last else { return nil }
        let multiplier: Int
        switch unit {
        case UInt8(ascii: "s"): multiplier = 1
        case UInt8(ascii: "m"): multiplier = 60
        case UInt8(ascii: "h"): multiplier = 3600
        case UInt8(ascii: "d"): multiplier = 86_400
        default: return nil
        }
        let digits = bytes.dropLast()
        guard digits.count <= 12, digits.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }) else { return nil }
        guard let number = Int(String(decoding: digits, as: UTF8.self)) else { return nil }
        let (product, overflow) = number.multipliedReportingOverflow(by: multiplier)
        return overflow ? nil : product
    }
}
