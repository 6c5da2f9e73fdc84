import SiwaCore

/// Where the `Receiver` hands a verified notification to be committed: the `OutboxWriter` in
/// the server; an in-memory sink when the receiver's decisions are tested in-process.
public protocol OutboxSink: Sendable {
    /// Queues `notification`; `completion` is called exactly once, from any thread, with what
    /// became of it — by `deadline` at the latest.
    /// Returns `false` (and never calls `completion`) when it is refused: the queue is full
    /// or the sink is not running; the request is then answered 503.
    func submit(
        _ notification: VerifiedNotification, deadline: Deadline,
        completion: @escaping OutboxWriter.Completion
    ) -> Bool
}

extension OutboxWriter: OutboxSink {}
