import Foundation
import Testing

/// A bound on each test's wall time that fails the run, not the machine. A loop under test that
/// spins (a wake that is never consumed, a wait that never blocks) holds no lock a test could
/// time out on: it runs until CI's limit, growing the memory of the recorded failures. Past the
/// bound the test's name is printed and the test process exits 124, so such a regression fails
/// in minutes. Generous on purpose: it catches a hang, it measures nothing.
struct Bounded: TestTrait, SuiteTrait, TestScoping {
    let seconds: Int

    var isRecursive: Bool { true }

    func provideScope(
        for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void
    ) async throws {
        if test.isSuite {
            try await function()
            return
        }
        let finished = DispatchSemaphore(value: 0)
        let (name, seconds) = (test.name, seconds)
        Thread.detachNewThread {
            guard finished.wait(timeout: .now() + .seconds(seconds)) == .timedOut else { return }
            FileHandle.standardError.write(
                Data("✘ \(name): still running after its bound of \(seconds) s (a loop under test spins or waits forever): stopping the run\n".utf8))
            exit(124)
        }
        defer { finished.signal() }
        try await function()
    }
}

extension Trait where Self == Bounded {
    /// Fails the run when a test of this suite runs longer than `seconds`.
    static func bounded(_ seconds: Int = 120) -> Self { Bounded(seconds: seconds) }
}
