import Testing

/// The database tests' gate: skipped without a database on a developer's machine, failed (not
/// skipped) under CI or with SIWA_REQUIRE_DATABASE, so a run without PostgreSQL cannot pass.
@Suite("Database gate")
struct DatabaseGateTests {
    @Test("CI or SIWA_REQUIRE_DATABASE (set, not false/0/no) require the database; nothing else does")
    func requirement() {
        #expect(TestDatabase.requirement(["CI": "true"]))
        #expect(TestDatabase.requirement(["CI": "1"]))
        #expect(TestDatabase.requirement(["SIWA_REQUIRE_DATABASE": "yes"]))
        #expect(TestDatabase.requirement(["CI": "false", "SIWA_REQUIRE_DATABASE": "1"]))
        #expect(!TestDatabase.requirement([:]))
        #expect(!TestDatabase.requirement(["CI": "false"]))
        #expect(!TestDatabase.requirement(["CI": "", "SIWA_REQUIRE_DATABASE": "0"]))
        #expect(!TestDatabase.requirement(["SIWA_REQUIRE_DATABASE": "no", "HOME": "/root"]))
    }
}
