import Foundation

/// Server-drawn SVG charts (no script, no external asset): stacked bars over time buckets, with
/// a y axis in the chart's unit, time labels on the x axis, a legend, and a tooltip per bar
/// (`<title>`). Colors come from the console's stylesheet (classes `s0`…`s5`).
struct ConsoleChart: Equatable {
    struct Series: Equatable {
        var name: String
        /// One value per bucket.
        var values: [Double]
        /// The color (`s0`…`s5`): the same type keeps its color on every chart.
        var color: Int = 0
    }

    /// A stable color per event type.
    static func color(of type: String) -> Int {
        let known = ["email-disabled", "email-enabled", "consent-revoked", "account-delete", "sign-in", "deletion-requested"]
        return known.firstIndex(of: type) ?? (type.utf8.reduce(0) { ($0 &* 31 &+ Int($1)) & 0xFFFF } % 6)
    }

    var title: String
    /// The y axis' unit, e.g. `events/min`.
    var unit: String
    /// Each bucket's start (Unix seconds, UTC).
    var buckets: [Double]
    /// Seconds per bucket (60, 3600).
    var bucketSeconds: Double
    var series: [Series]
    var width = 720.0
    var height = 220.0

    private static let left = 52.0, right = 12.0, top = 22.0, bottom = 28.0

    /// The largest stacked total of a bucket.
    var peak: Double {
        buckets.indices.map { i in series.reduce(0) { $0 + ($1.values.indices.contains(i) ? $1.values[i] : 0) } }.max() ?? 0
    }

    /// Ticks of the y axis: 0 and steps of 1, 2 or 5 × 10ⁿ up to at least `peak` (4 to 6 of them).
    static func ticks(peak: Double) -> [Double] {
        guard peak > 0 else { return [0, 1] }
        let rough = peak / 4
        let magnitude = pow(10, floor(log10(rough)))
        let step = [1.0, 2, 5, 10].map { $0 * magnitude }.first { $0 >= rough } ?? rough
        let top = ceil(peak / step) * step
        return stride(from: 0, through: top + step / 2, by: step).map { $0 }
    }

    /// An axis label: whole numbers as such, fractions with one decimal.
    static func label(_ v: Double) -> String {
        if v >= 1000 && v.truncatingRemainder(dividingBy: 1000) == 0 { return "\(Int(v / 1000))k" }
        return v == v.rounded() ? String(Int(v)) : String(format: "%.1f", v)
    }

    /// The time label of a bucket (UTC): `HH:MM` for minutes, `Wed 25` (a midnight) or
    /// `Wed 25 14h` for hours.
    func timeLabel(_ t: Double) -> String {
        let date = Date(timeIntervalSince1970: t)
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC")!
        let c = calendar.dateComponents([.hour, .minute, .weekday, .day], from: date)
        if bucketSeconds < 3600 { return String(format: "%02d:%02d", c.hour ?? 0, c.minute ?? 0) }
        let days = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"]
        let day = "\(days[((c.weekday ?? 1) - 1) % 7]) \(c.day ?? 0)"
        return c.hour == 0 ? day : day + String(format: " %02dh", c.hour ?? 0)
    }

    func svg() -> String {
        let e = ConsoleHTML.escape
        let ticks = Self.ticks(peak: peak)
        let yMax = ticks.last ?? 1
        let left = Self.left, right = Self.right, top = Self.top
        let plotW = width - left - right, plotH = height - top - Self.bottom
        let n = max(1, buckets.count)
        let slot = plotW / Double(n)
        let barW = max(1, slot * 0.8)
        func y(_ v: Double) -> Double { top + plotH - (v / yMax) * plotH }
        func f(_ v: Double) -> String { String(format: "%.1f", v) }

        var out = "<figure class=\"chart\"><figcaption>\(e(title))</figcaption>"
        out +=
            "<svg viewBox=\"0 0 \(f(width)) \(f(height))\" width=\"100%\" role=\"img\" "
            + "aria-label=\"\(e(title)), in \(e(unit))\" xmlns=\"http://www.w3.org/2000/svg\">"
        // Y axis: grid lines and labels in the unit.
        for t in ticks {
            out += "<line class=\"grid\" x1=\"\(f(left))\" x2=\"\(f(width - right))\" y1=\"\(f(y(t)))\" y2=\"\(f(y(t)))\"/>"
            out += "<text class=\"axis\" x=\"\(f(left - 6))\" y=\"\(f(y(t) + 4))\" text-anchor=\"end\">\(e(Self.label(t)))</text>"
        }
        out += "<text class=\"unit\" x=\"4\" y=\"10\">\(e(unit))</text>"
        // Bars, stacked in series order.
        for (i, start) in buckets.enumerated() {
            var base = 0.0
            let x = left + Double(i) * slot + (slot - barW) / 2
            for s in series {
                let v = s.values.indices.contains(i) ? s.values[i] : 0
                guard v > 0 else { continue }
                let y0 = y(base + v), h = y(base) - y(base + v)
                out += "<rect class=\"s\(s.color % 6)\" x=\"\(f(x))\" y=\"\(f(y0))\" width=\"\(f(barW))\" height=\"\(f(max(h, 0.5)))\">"
                out += "<title>\(e(timeLabel(start))) UTC · \(e(s.name)): \(e(Self.label(v))) \(e(unit))</title></rect>"
                base += v
            }
        }
        // X axis: the baseline and a label every 10 minutes (minute buckets) or at each UTC midnight.
        out += "<line class=\"axisline\" x1=\"\(f(left))\" x2=\"\(f(width - right))\" y1=\"\(f(y(0)))\" y2=\"\(f(y(0)))\"/>"
        let labelEvery = bucketSeconds < 3600 ? 600.0 : 86_400.0
        for (i, start) in buckets.enumerated() where start.truncatingRemainder(dividingBy: labelEvery) == 0 {
            let x = left + Double(i) * slot + slot / 2
            out += "<line class=\"axisline\" x1=\"\(f(x))\" x2=\"\(f(x))\" y1=\"\(f(y(0)))\" y2=\"\(f(y(0) + 4))\"/>"
            out += "<text class=\"axis\" x=\"\(f(x))\" y=\"\(f(height - 8))\" text-anchor=\"middle\">\(e(timeLabel(start)))</text>"
        }
        out += "</svg><ul class=\"legend\">"
        for s in series {
            let total = s.values.reduce(0, +)
            out += "<li><span class=\"swatch s\(s.color % 6)\"></span>\(e(s.name)) <span class=\"muted\">\(e(Self.label(total)))</span></li>"
        }
        if series.isEmpty { out += "<li class=\"muted\">no events in this period</li>" }
        return out + "</ul></figure>"
    }
}
