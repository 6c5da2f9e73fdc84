import Foundation
import Logging
import SiwaApp
import SiwaPostgres
import Testing

@Suite(
    "Worker: retries, dead letters, replay, the SQL hook, retention",
    .needsDatabase)
struct RetryAndHookTests {
    static let hookLog = """
        CREATE TABLE public.hook_log (event_id bigint NOT NULL, sub text NOT NULL, type text NOT NULL, status text NOT NULL);
        CREATE OR REPLACE FUNCTION siwa.on_event(event siwa.events, account siwa.accounts) RETURNS void
        LANGUAGE plpgsql AS $$
        BEGIN
            INSERT INTO public.hook_log VALUES (event.id, event.sub, event.type, account.status);
        END $$;
        """

    @Test("a replaced hook takes effect in the same transaction as the event")
    func replacedHook() throws {
        try TestHarness.with { h throws in
            _ = try h.query(Self.hookLog)
            #expect(try h.post(token: try h.token(type: "consent-revoked", sub: "sub.hook")).code == "accepted")
            #expect(try h.waitForWorker())
            let row = try h.query("SELECT sub, type, status FROM public.hook_log")
            #expect(row.rows.count == 1)
            #expect(row.value(0, "sub") == "sub.hook")
            #expect(row.value(0, "status") == "consent_revoked")
        }
    }

    @Test("an edited hook that keeps the shipped marker comment is still called, on the bulk path too")
    func editedDefaultHook() throws {
        try TestHarness.with { h throws in
            _ = try h.query(
                """
                CREATE TABLE public.hook_log (event_id bigint NOT NULL);
                CREATE OR REPLACE FUNCTION siwa.on_event(event siwa.events, account siwa.accounts) RETURNS void
                LANGUAGE plpgsql AS $$
                BEGIN
                    -- siwa-notify:default-hook (the worker skips calling it while this marker is here)
                    INSERT INTO public.hook_log VALUES (event.id);
                END $$;
                """)
            for i in 0..<20 {
                #expect(try h.post(token: try h.token(type: "email-enabled", sub: "sub.edited.\(i)")).code == "accepted")
            }
            #expect(try h.waitForWorker())
            #expect(try h.scalar("SELECT count(*) FROM public.hook_log") == "20")
        }
    }

    @Test("an exception in the hook: retried with backoff, then dead; others are not blocked; replay brings it back")
    func poisonedEvent() throws {
        let h = try TestHarness(maxAttempts: 3, retryBaseDelay: 0.05)
        defer { h.stop() }
        try h.replaceHook("IF event.sub = 'sub.poison' THEN RAISE EXCEPTION 'operator table is locked'; END IF;")
        #expect(try h.post(token: try h.token(type: "consent-revoked", sub: "sub.poison")).code == "accepted")
        for i in 0..<5 {
            #expect(try h.post(token: try h.token(type: "email-disabled", sub: "sub.fine.\(i)")).code == "accepted")
        }
        let settled = try eventually(timeout: 15) {
            try h.scalar("SELECT status FROM siwa.events WHERE sub = 'sub.poison'") == "dead"
        }
        #expect(settled)
        let dead = try h.query("SELECT attempts, last_error FROM siwa.events WHERE sub = 'sub.poison'")
        #expect(dead.value(0, "attempts") == "3")
        #expect(dead.value(0, "last_error")?.contains("operator table is locked") == true)
        #expect(try h.scalar("SELECT count(*) FROM siwa.events WHERE status = 'done'") == "5")
        // The poisoned event's effects were rolled back with it.
        #expect(try h.scalar("SELECT count(*) FROM siwa.accounts WHERE apple_sub = 'sub.poison'") == "0")
        #expect(try h.scalar("SELECT count(*) FROM siwa.dead_letters") == "1")

        // Fix the hook, replay: applied once.
        try h.replaceHook("")
        #expect(try OutboxAdmin.replay(.type("email-disabled"), conninfo: h.conninfo) == 0)
        #expect(try OutboxAdmin.replay(.type("consent-revoked"), conninfo: h.conninfo) == 1)
        #expect(try h.waitForWorker())
        let done = try h.query("SELECT status, attempts FROM siwa.events WHERE sub = 'sub.poison'")
        #expect(done.value(0, "status") == "done")
        #expect(done.value(0, "attempts") == "1")
        #expect(try h.scalar("SELECT status FROM siwa.accounts WHERE apple_sub = 'sub.poison'") == "consent_revoked")
    }

    @Test("a hook that refuses deleted users' events: the event fails and goes dead, and its address is erased all the same")
    func deadEventOfDeletedUserKeepsNoEmail() throws {
        let h = try TestHarness(maxAttempts: 2, retryBaseDelay: 0.05)
        defer { h.stop() }
        try h.replaceHook(
            """
            IF account.status = 'deleted' AND event.type <> 'account-delete' THEN
                RAISE EXCEPTION 'user % is gone', event.sub;
            END IF;
            """)
        let sub = "sub.gone"
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        #expect(try h.post(token: try h.token(type: "account-delete", sub: sub, eventTimeMillis: now - 60_000)).code == "accepted")
        #expect(try h.waitForWorker())
        #expect(try h.scalar("SELECT status FROM siwa.accounts WHERE apple_sub = '\(sub)'") == "deleted")
        // Apple's late email event for the deleted user: the hook refuses it, twice.
        let late = try h.token(
            type: "email-enabled", sub: sub, eventTimeMillis: now - 120_000, email: "gone@privaterelay.appleid.com",
            isPrivateEmail: true)
        #expect(try h.post(token: late).code == "accepted")
        let settled = try eventually(timeout: 15) {
            try h.scalar("SELECT status FROM siwa.events WHERE sub = '\(sub)' AND type = 'email-enabled'") == "dead"
        }
        #expect(settled)
        // Dead, with no address left: not in the column, not in the claims, not in any view.
        let row = try h.query("SELECT email, claims::text AS claims FROM siwa.events WHERE sub = '\(sub)' AND type = 'email-enabled'")
        #expect(row.value(0, "email") == nil)
        #expect(row.value(0, "claims")?.contains("gone@") == false)
        #expect(row.value(0, "claims")?.contains("email-enabled") == true)
        #expect(try h.scalar("SELECT count(*) FROM siwa.events WHERE claims::text LIKE '%gone@%' OR email LIKE '%gone@%'") == "0")
    }

    @Test("replay by id and all")
    func replaySelections() throws {
        let url = try TestDatabase.create()
        _ = try TestDatabase.query(
            url,
            """
            INSERT INTO siwa.events (jti, aud, sub, type, event_time, status, claims)
            SELECT 'dead-' || g, 'a', 's' || g, 'consent-revoked', now(), 'dead', '{}' FROM generate_series(1, 4) g
            """)
        let first = try TestDatabase.query(url, "SELECT min(id) FROM siwa.events").scalar.flatMap { Int64($0) }!
        #expect(try OutboxAdmin.replay(.ids([first, first + 1]), conninfo: url) == 2)
        #expect(try OutboxAdmin.replay(.ids([first]), conninfo: url) == 0)
        #expect(try OutboxAdmin.replay(.all, conninfo: url) == 2)
        #expect(try TestDatabase.query(url, "SELECT count(*) FROM siwa.events WHERE status = 'pending' AND attempts = 0").scalar == "4")
    }

    @Test("retention prunes old done and ignored events only; pending, failed and dead are kept")
    func retention() throws {
        let url = try TestDatabase.create()
        _ = try TestDatabase.query(
            url,
            """
            INSERT INTO siwa.events (jti, aud, sub, type, event_time, status, received_at, processed_at, claims)
            SELECT 'r-' || g, 'a', 's' || g, 'consent-revoked', now(),
                   (ARRAY['done', 'pending', 'failed', 'dead', 'ignored'])[1 + g % 5],
                   CASE WHEN g <= 2500 THEN now() - interval '41 days' ELSE now() - interval '1 day' END,
                   CASE WHEN g % 5 = 4 THEN NULL WHEN g <= 2500 THEN now() - interval '40 days' ELSE now() - interval '1 day' END,
                   '{}'
            FROM generate_series(1, 4000) g
            """)
        let connection = try PostgresConnection(conninfo: url)
        let pruned = try Retention.prune(on: connection, olderThanDays: 30)
        #expect(pruned == 1000)  // 500 old done + 500 old ignored
        #expect(try TestDatabase.query(url, "SELECT count(*) FROM siwa.events WHERE status IN ('done', 'ignored')").scalar == "600")
        #expect(try TestDatabase.query(url, "SELECT count(*) FROM siwa.events WHERE status NOT IN ('done', 'ignored')").scalar == "2400")
    }
}
