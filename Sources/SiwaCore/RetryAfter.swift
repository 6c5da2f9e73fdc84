/// `Retry-After` (RFC 9110 §10.2.3): a number of seconds or an HTTP-date.
public enum RetryAfter {
    /// Longest wait a value can say: far beyond any bound a schedule keeps, small enough that
    /// `Duration` arithmetic on it never overflows.
    static let longestSaid: Int64 = 1 << 32

    /// The wait `value` asks for at `now` (Unix seconds): its seconds, or its date minus `now` (a
    /// date already past: no wait). nil when it is neither: RFC 9110 lets a recipient ignore a
    /// malformed value, and a guess would be worse than the backoff. Not capped to a believable
    /// wait: the caller's schedule bounds what it believes.
    public static func wait(_ value: String, now: Double) -> Duration? {
        let text = ServerConfiguration.trim(value)
        if !text.isEmpty, text.utf8.allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }) {
            // Digits only: a count too long for Int64 is longer than any bound anyway.
            return .seconds(min(Int64(text) ?? longestSaid, longestSaid))
        }
        guard now.isFinite, let date = httpDate(text, now: now) else { return nil }
        let seconds = (Double(date) - now).rounded(.up)
        return seconds <= 0 ? .zero : .seconds(Int64(min(seconds, Double(longestSaid))))
    }

    static let days = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"]
    static let longDays = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
    static let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]

    /// Unix seconds of an HTTP-date: the IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`), or one
    /// of the obsolete forms a recipient must accept, RFC 850 (`Sunday, 06-Nov-94 08:49:37 GMT`,
    /// its two-digit year read as RFC 9110 says, against `now`) and asctime
    /// (`Sun Nov  6 08:49:37 1994`). nil when malformed or not a date of the calendar.
    public static func httpDate(_ text: String, now: Double) -> Int64? {
        let parts = text.split(separator: " ").map(String.init)
        if parts.count == 6, parts[0].hasSuffix(","), days.contains(String(parts[0].dropLast())), parts[5] == "GMT",
            parts[1].utf8.count == 2, parts[3].utf8.count == 4
        {
            return stamp(year: parts[3], month: parts[2], day: parts[1], time: parts[4])
        }
        if parts.count == 4, parts[0].hasSuffix(","), longDays.contains(String(parts[0].dropLast())), parts[3] == "GMT" {
            let date = parts[1].split(separator: "-", omittingEmptySubsequences: false).map(String.init)
            guard date.count == 3, date[0].utf8.count == 2, date[2].utf8.count == 2, let yy = digits(date[2]) else { return nil }
            // RFC 9110: a year more than 50 years ahead is the latest past year ending so.
            let thisYear = 1970 + Int64((now / 86_400) / 365.2425)
            var year = thisYear - thisYear % 100 + yy
            if year > thisYear + 50 { year -= 100 }
            return stamp(year: String(year), month: date[1], day: date[0], time: parts[2])
        }
        if parts.count == 5, days.contains(parts[0]), (1...2).contains(parts[2].utf8.count), parts[4].utf8.count == 4 {
            return stamp(year: parts[4], month: parts[1], day: parts[2], time: parts[3])
        }
        return nil
    }

    private static func digits(_ text: String) -> Int64? {
        guard !text.isEmpty, text.utf8.allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }) else { return nil }
        return Int64(text)
    }

    private static func stamp(year: String, month: String, day: String, time: String) -> Int64? {
        let clock = time.split(separator: ":", omittingEmptySubsequences: false).map(String.init)
        guard let y = digits(year), let m = months.firstIndex(of: month).map({ Int64($0) + 1 }), let d = digits(day), clock.count == 3,
            clock.allSatisfy({ $0.utf8.count == 2 }), let hh = digits(clock[0]), let mm = digits(clock[1]), let ss = digits(clock[2]),
            hh < 24, mm < 60, ss <= 60, d >= 1, d <= daysIn(month: m, year: y)
        else { return nil }
        return daysFromCivil(year: y, month: m, day: d) * 86_400 + hh * 3600 + mm * 60 + ss
    }

    private static func daysIn(month: Int64, year: Int64) -> Int64 {
        switch month {
        case 2: return (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 ? 29 : 28
        case 4, 6, 9, 11: return 30
        default: return 31
        }
    }

    /// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's days_from_civil).
    static func daysFromCivil(year: Int64, month: Int64, day: Int64) -> Int64 {
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yearOfEra = y - era * 400
        let dayOfYear = (153 * (month > 2 ? month - 3 : month + 9) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        return era * 146_097 + dayOfEra - 719_468
    }
}
