import SiwaCore
import SiwaPostgres
import Testing

@testable import SiwaApp

/// How the outbox writer writes a batch and answers each request, without a database.
@Suite("Insert policy")
struct InsertPolicyTests {
    static func n(
        _ jti: String, sub: String = "s", type: String = "consent-revoked", ms: Int64 = 1_752_572_190_719, aud: String = "a"
    )
        -> VerifiedNotification
    {
        VerifiedNotification(
            jti: jti, issuer: "https://appleid.apple.com", audience: aud, issuedAt: 1_752_572_197, expiresAt: nil,
            event: AppleEvent(type: EventType(rawValue: type), sub: sub, eventTimeMillis: ms, email: nil, isPrivateEmail: nil),
            claimsJSON: "{}")
    }

    @Test("copies in a batch (same jti, or same aud/sub/type/event_time) are set aside, compared as exact bytes")
    func plan() {
        let batch = [
            Self.n("j1", sub: "s1"),
            Self.n("j1", sub: "s9"),  // same jti
            Self.n("j2", sub: "s1"),  // same event as j1 (a re-signed retry)
            Self.n("j3", sub: "s1", aud: "b"),  // same event for another app: its own row
            Self.n("j4", sub: "e\u{301}"),  // é decomposed
            Self.n("j5", sub: "\u{e9}"),  // é precomposed: equal for Swift, not for PostgreSQL
        ]
        let p = InsertPolicy.plan(batch)
        #expect(p.unique == [0, 3, 4, 5])
        #expect(p.copyOf == [1: 0, 2: 0])
    }

    @Test("two events of one user, app and type at different event_times (and jtis) in one batch: both rows, both accepted")
    func sameTypeDistinctTimes() {
        // A user turning forwarding off, on and off again: the burst after an outage.
        let batch = [
            Self.n("j1", sub: "s1", type: "email-disabled", ms: 1_752_572_190_719),
            Self.n("j2", sub: "s1", type: "email-enabled", ms: 1_752_572_190_720),
            Self.n("j3", sub: "s1", type: "email-disabled", ms: 1_752_572_190_721),
        ]
        let p = InsertPolicy.plan(batch)
        #expect(p.unique == [0, 1, 2] && p.copyOf.isEmpty)
        let results = InsertPolicy.results(p.unique.map { batch[$0] }, inserted: ["j1", "j2", "j3"])
        #expect(InsertPolicy.answers(p, batchSize: 3, uniqueResults: results) == Array(repeating: .committed(.accepted), count: 3))
    }

    @Test("answers: rows returned are accepted (unknown types ignored), the others duplicates; copies follow their row")
    func answers() {
        let batch = [Self.n("j1"), Self.n("j1"), Self.n("j2", sub: "t", type: "something-new"), Self.n("j3", sub: "u")]
        let p = InsertPolicy.plan(batch)
        let rows = p.unique.map { batch[$0] }
        let results = InsertPolicy.results(rows, inserted: ["j1", "j2"])
        #expect(results == [.committed(.accepted), .committed(.ignored), .committed(.duplicate)])
        #expect(
            InsertPolicy.answers(p, batchSize: 4, uniqueResults: results)
                == [.committed(.accepted), .committed(.duplicate), .committed(.ignored), .committed(.duplicate)])
        // A failed row: its copy shares the failure, it is not called a duplicate.
        let failed = OutboxResult.refused(detail: "x")
        #expect(InsertPolicy.answers(p, batchSize: 4, uniqueResults: [failed, .committed(.ignored), .committed(.accepted)])[1] == failed)
    }

    @Test("a broken connection is retried once; refused data goes row by row; anything else fails the batch")
    func recovery() {
        let lost = PostgresError(code: .connectionLost)
        #expect(InsertPolicy.recovery(after: lost, rows: 10, attempt: 1) == .retryOnFreshConnection)
        #expect(InsertPolicy.recovery(after: lost, rows: 10, attempt: 2) == .fail(.unavailable(detail: "postgres connection_lost: ")))
        let check = PostgresError(code: .queryFailed, sqlState: "23514", serverMessage: "violates check constraint")
        #expect(InsertPolicy.recovery(after: check, rows: 10, attempt: 1) == .rowByRow)
        #expect(
            InsertPolicy.recovery(after: check, rows: 1, attempt: 1)
                == .fail(.refused(detail: "postgres query_failed (23514): violates check constraint")))
        let timeout = PostgresError(code: .queryFailed, sqlState: "57014", serverMessage: "canceling statement")
        guard case .fail(.unavailable) = InsertPolicy.recovery(after: timeout, rows: 10, attempt: 1) else {
            Issue.record("a statement timeout is not repeated row by row")
            return
        }
    }

    @Test(
        "database failures as the receiver's answer: transient ones unavailable (503), the rest refused (500)",
        arguments: [
            (PostgresError(code: .connectionLost, serverMessage: "server closed the connection unexpectedly"), true),
            (PostgresError(code: .queryFailed, sqlState: "57014", serverMessage: "statement timeout"), true),
            (PostgresError(code: .queryFailed, sqlState: "40P01", serverMessage: "deadlock detected"), true),
            (PostgresError(code: .queryFailed, sqlState: "42P01", serverMessage: "relation does not exist"), false),
            (PostgresError(code: .unexpectedRow, serverMessage: "outcome"), false),
        ])
    func classification(_ error: PostgresError, transient: Bool) {
        switch OutboxResult(error) {
        case .unavailable(let detail): #expect(transient && detail.hasPrefix("\(error)"))
        case .refused(let detail): #expect(!transient && detail.hasPrefix("\(error)"))
        default: Issue.record("a failure is never committed or timed out")
        }
    }
}
