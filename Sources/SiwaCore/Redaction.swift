/// Removes personal data from text that is stored where dashboards read it (e.g. a database
/// error raised by an operator's hook, kept in `siwa.events.last_error`).
public enum Redaction {
    /// `text` with every e-mail-like token (`local@domain`) replaced by `<email>`.
    public static func withoutEmails(_ text: String) -> String {
        let scalars = Array(text.unicodeScalars)
        guard scalars.contains("@") else { return text }
        func isWordScalar(_ s: Unicode.Scalar) -> Bool {
            !(s == " " || s == "\t" || s == "\n" || s == "\r" || s == "\"" || s == "," || s == ";"
                || s == "(" || s == ")" || s == "<" || s == ">" || s == "[" || s == "]" || s == "{" || s == "}" || s == "=")
        }
        var out = String.UnicodeScalarView()
        var i = 0
        while i < scalars.count {
            // A word: a run of scalars without separators.
            guard isWordScalar(scalars[i]) else {
                out.append(scalars[i])
                i += 1
                continue
            }
            var j = i
            while j < scalars.count && isWordScalar(scalars[j]) { j += 1 }
            let word = scalars[i..<j]
            if let at = word.firstIndex(of: "@"), at > word.startIndex, at < word.index(before: word.endIndex) {
                out.append(contentsOf: "<email>".unicodeScalars)
            } else {
                out.append(contentsOf: word)
            }
            i = j
        }
        return String(out)
    }
}
