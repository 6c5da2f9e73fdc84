/// One finding of `siwa-notify doctor`: a stable code (for automation), how bad it is, what was
/// found and the statement or setting that fixes it.
public struct DoctorFinding: Sendable, Codable, Equatable {
    public enum Severity: String, Sendable, Codable, CaseIterable, Comparable {
        /// A credential or the data is exposed, or the deployment does not work: `doctor` exits non-zero.
        case high = "HIGH"
        /// Weaker than it should be; fix it soon.
        case medium = "MEDIUM"
        /// Acceptable where it is deliberate.
        case low = "LOW"
        /// Worth knowing, not a problem.
        case info = "INFO"

        /// HIGH first.
        public static func < (a: Severity, b: Severity) -> Bool {
            allCases.firstIndex(of: a)! < allCases.firstIndex(of: b)!
        }
    }

    public var code: String
    public var severity: Severity
    public var message: String
    public var fix: String

    public init(_ code: String, _ severity: Severity, _ message: String, fix: String) {
        self.code = code
        self.severity = severity
        self.message = message
        self.fix = fix
    }
}

/// `doctor`'s report: the findings, most severe first.
public struct DoctorReport: Sendable, Codable, Equatable {
    /// The process whose configuration was examined (`serve`, `receive` or `work`).
    public var process: String
    public var findings: [DoctorFinding]
    /// The release and commit of the binary that examined (`--version`'s).
    public var version: String? = nil
    public var commit: String? = nil

    public init(process: String, findings: [DoctorFinding]) {
        self.process = process
        // Stable order: by severity, then as found.
        self.findings = findings.enumerated().sorted { ($0.element.severity, $0.offset) < ($1.element.severity, $1.offset) }.map(\.element)
    }

    /// True when no finding is HIGH (`doctor` exits 0).
    public var passes: Bool { !findings.contains { $0.severity == .high } }

    /// The findings as an operator reads them, then one line of counts.
    public var text: String {
        var out = ""
        for f in findings {
            let severity = f.severity.rawValue + String(repeating: " ", count: 7 - f.severity.rawValue.count)
            out += "\(severity)\(f.code): \(f.message)\n"
            for line in f.fix.split(separator: "\n", omittingEmptySubsequences: false) { out += "       fix: \(line)\n" }
        }
        let counts = DoctorFinding.Severity.allCases.map { s in "\(findings.filter { $0.severity == s }.count) \(s.rawValue)" }
        out += "doctor (\(process)): \(counts.joined(separator: ", "))\(passes ? "" : " — fix the HIGH findings")\n"
        return out
    }
}
