import Foundation
import SiwaApp
import SiwaCore
import SiwaDevTools
import SiwaPostgres
import Testing

/// A deletion revokes what was held, whatever order things land in (issue 30): the property test
/// over arrival orders is `TokenOrderTests`; this is its reproduction on the whole running server.
@Suite("Deletion order", .serialized, .needsDatabase)
struct DeletionOrderTests {
    typealias S = AppleTestSetup
    typealias H = DeletionHarness

    @Test(
        "a deletion that loses the race to a newer sign-in (its hook failed, the sign-in to another app applied meanwhile) still revokes the token held before it; the new sign-in keeps its own"
    )
    func staleDeletionStillRevokesWhatWasHeld() throws {
        let h = try H(retryBaseDelay: 0.3)
        defer { h.stop() }
        let sub = "001234.race.0001"
        let appA = try h.signIn(sub: sub, clientID: S.clientID)
        #expect(try h.eventually { try h.accountStatus(sub) == "active" })
        // The operator's hook fails on deletions (a bug, an outage of their table) until told otherwise.
        _ = try h.query(
            """
            CREATE TABLE public.hook_switch (failing boolean NOT NULL);
            INSERT INTO public.hook_switch VALUES (true);
            CREATE OR REPLACE FUNCTION siwa.on_event(event siwa.events, account siwa.accounts) RETURNS void
            LANGUAGE plpgsql AS $$
            BEGIN
                IF event.type = 'deletion-requested' AND (SELECT failing FROM public.hook_switch) THEN
                    RAISE EXCEPTION 'hook down';
                END IF;
            END
            $$;
            """)
        _ = try h.query("SELECT siwa.request_deletion($1, $2)", [sub, S.clientID])
        #expect(try h.eventually { try h.jobStatus(sub) == "failed" })
        // During the retries the user signs in to app B (a later second: auth_time has one-second precision).
        untilNextSecond()
        let appB = try h.signIn(sub: sub, clientID: S.otherClientID)
        #expect(
            try h.eventually {
                try h.scalar("SELECT status FROM siwa.events WHERE sub = $1 AND type = 'sign-in' ORDER BY id DESC LIMIT 1", [sub]) == "done"
            })
        #expect(try h.jobStatus(sub) == "failed", "the deletion applied before the sign-in: no race")
        _ = try h.query("UPDATE public.hook_switch SET failing = false")
        #expect(try h.eventually(15) { try h.jobStatus(sub) == "done" })
        #expect(
            try h.scalar("SELECT outcome FROM siwa.events WHERE sub = $1 AND type = 'deletion-requested'", [sub]) == "stale",
            "the newer sign-in makes the deletion stale for the account")
        #expect(try h.accountStatus(sub) == "active")

        // App A's token, held when the deletion took effect, left siwa.apple_tokens and is revoked at Apple.
        #expect(try h.scalar("SELECT count(*) FROM siwa.apple_tokens WHERE apple_sub = $1 AND client_id = $2", [sub, S.clientID]) == "0")
        #expect(
            try h.scalar(
                "SELECT count(*) FROM siwa.revocations WHERE apple_sub = $1 AND client_id = $2 AND reason = 'in-app-deletion'",
                [
                    sub, S.clientID,
                ]) == "1")
        #expect(h.eventually { h.fake.revokedTokens.contains(appA) })
        // App B's, signed in after the deletion, is the new account's: kept, never revoked.
        #expect(try h.scalar("SELECT count(*) FROM siwa.apple_tokens WHERE apple_sub = $1 AND client_id = $2", [sub, S.otherClientID]) == "1")
        #expect(!h.fake.revokedTokens.contains(appB))
    }
}
