/// How long a loop waits before it connects again after a failure: 0.2 s, doubling to 5 s, back
/// to 0.2 s once a round succeeds. A pure decision: the loop asks, then waits on its clock.
public struct ReconnectBackoff: Sendable, Equatable {
    public var first: Duration
    public var maximum: Duration
    /// The wait the next failure gets.
    public private(set) var next: Duration

    public init(first: Duration = .milliseconds(200), maximum: Duration = .seconds(5)) {
        self.first = first
        self.maximum = maximum
        next = first
    }

    /// A failure: returns how long to wait before trying again, and doubles the next wait.
    public mutating func failed() -> Duration {
        let wait = next
        next = min(next * 2, maximum)
        return wait
    }

    /// A round that worked: the next failure waits `first` again.
    public mutating func succeeded() { next = first }
}
