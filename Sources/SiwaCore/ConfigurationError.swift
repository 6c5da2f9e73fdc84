/// A configuration problem, naming the environment variable.
public struct ConfigurationError: Error, Sendable, Equatable, CustomStringConvertible {
    /// E.g. `SIWA_MAX_BODY`.
    public var variable: String
    /// E.g. `must be an integer between 1024 and 10485760`.
    public var problem: String

    public init(variable: String, problem: String) {
        self.variable = variable
        self.problem = problem
    }

    /// One line: `"<variable>: <problem>"`.
    public var description: String { "\(variable): \(problem)" }
}
