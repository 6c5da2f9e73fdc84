import Foundation
import SiwaApp
import SiwaCore
import SiwaCrypto
import SiwaDevTools
import SiwaPostgres
import Synchronization
import Testing

/// What the database enforces whatever a role's credentials say (README "Grants"): a sign-in is
/// never dated after the database's clock, no role writes a revocation row of its own, the
/// receiver's `ignored` rows are unknown types dated no later than now (plus the skew allowed),
/// its other rows no later than now + 2 h, and only a deletion that can take effect refuses a sign-in.
@Suite("What the database enforces", .serialized, .needsDatabase)
struct DatabaseTrustTests {
    /// `SELECT` of one value as the given connection, or the SQLSTATE it failed with.
    static func outcome(_ c: PostgresConnection, _ sql: String, _ parameters: [String?] = []) -> String {
        do {
            return try c.execute(sql, parameters).scalar ?? "NULL"
        } catch {
            return "error " + (error.sqlState ?? "none")
        }
    }

    /// The SQLSTATE and server message a statement failed with ("none" when it succeeded): a
    /// refusal is checked for its cause, not merely for being an error.
    static func refusal(_ body: () throws -> Void) -> String {
        do {
            try body()
            return "none"
        } catch let error as PostgresError {
            return (error.sqlState ?? "no-sqlstate") + " " + error.serverMessage
        } catch {
            return "\(error)"
        }
    }

    /// A row of `siwa.revocations` refused by its token check.
    static func refusedByTokenCheck(_ refusal: String) -> Bool {
        refusal.hasPrefix("23514 ") && refusal.contains("\"revocations_token_check\"")
    }

    @Test("a sign-in stored through the API's role is dated no later than the database's clock; Apple's earlier time is kept")
    func signInDatedByTheDatabase() throws {
        let (url, login) = try LeastPrivilegeTests.databaseWithLoginRoles()
        let api = try PostgresConnection(conninfo: login["siwa_api"]!)
        let sub = "000739.future.0001"
        // A year ahead: newer than any deletion for a year, were it believed.
        #expect(
            Self.outcome(
                api,
                "SELECT siwa.store_apple_token($1, 'app', '\(RecordedTokenKey.id)', \(RecordedTokenKey.sealed()), NULL, NULL, now() + interval '1 year')",
                [sub])
                == "created")
        #expect(try TestDatabase.query(url, "SELECT signed_in_at <= now() FROM siwa.apple_tokens WHERE apple_sub = $1", [sub]).scalar == "t")
        #expect(
            try TestDatabase.query(url, "SELECT event_time <= now() FROM siwa.events WHERE sub = $1 AND type = 'sign-in'", [sub]).scalar
                == "t")
        // Apple's own (earlier) time is kept: it orders the sign-in against deletions.
        let earlier = "000739.past.0001"
        #expect(
            Self.outcome(
                api,
                "SELECT siwa.store_apple_token($1, 'app', '\(RecordedTokenKey.id)', \(RecordedTokenKey.sealed()), NULL, NULL, timestamptz '2024-05-01 10:00:00+00')",
                [earlier])
                == "created")
        #expect(
            try TestDatabase.query(url, "SELECT signed_in_at = '2024-05-01 10:00:00+00' FROM siwa.apple_tokens WHERE apple_sub = $1", [earlier])
                .scalar == "t")
    }

    @Test("no role inserts a revocation row; the functions queue only rows that hold a token; none waits without one")
    func revocationsOnlyThroughFunctions() throws {
        let (url, login) = try LeastPrivilegeTests.databaseWithLoginRoles()
        let api = try PostgresConnection(conninfo: login["siwa_api"]!)
        let worker = try PostgresConnection(conninfo: login["siwa_worker"]!)
        let sub = "000739.revoke.0001"
        for (role, c) in [("api", api), ("worker", worker)] {
            #expect(
                Self.outcome(c, "INSERT INTO siwa.revocations (apple_sub, client_id, reason) VALUES ($1, 'app', 'in-app-deletion')", [sub])
                    == "error 42501", "\(role)")
            #expect(
                Self.outcome(
                    c,
                    "INSERT INTO siwa.revocations (apple_sub, client_id, key_id, ciphertext, reason, status) VALUES ($1, 'app', 'k', '\\x00', 'x', 'done')",
                    [sub]) == "error 42501", "\(role)")
        }
        // The API's function: a token it could not keep, never a row without one.
        #expect(Self.outcome(api, "SELECT siwa.queue_revocation($1, 'app', NULL, NULL)", [sub]) == "error 23514")
        #expect(Self.outcome(api, "SELECT siwa.queue_revocation($1, 'app', '\(RecordedTokenKey.id)', \(RecordedTokenKey.sealed()))", [sub]) == "")
        #expect(
            try TestDatabase.query(
                url, "SELECT status || ':' || reason || ':' || length(ciphertext) FROM siwa.revocations WHERE apple_sub = $1", [sub]
            )
            .scalar == "pending:exchange-failed:28")
        // Not even the owner makes a revocation wait without its token (the revoker would mark it done without a call).
        let born = Self.refusal {
            _ = try TestDatabase.query(
                url, "INSERT INTO siwa.revocations (apple_sub, client_id, reason) VALUES ($1, 'app', 'exchange-failed')", [sub])
        }
        #expect(Self.refusedByTokenCheck(born), "\(born)")
        let erased = Self.refusal {
            _ = try TestDatabase.query(url, "UPDATE siwa.revocations SET ciphertext = NULL WHERE apple_sub = $1", [sub])
        }
        #expect(Self.refusedByTokenCheck(erased), "\(erased)")
        #expect(try TestDatabase.query(url, "SELECT count(*) FROM siwa.revocations").scalar == "1")
    }

    @Test("the receiver's ignored rows are unknown types dated no later than now + 60 s; an ignored deletion refuses no sign-in")
    func ignoredRowsCannotDelete() throws {
        let (url, login) = try LeastPrivilegeTests.databaseWithLoginRoles()
        let receiver = try PostgresConnection(conninfo: login["siwa_receiver"]!)
        let sub = "000739.ignored.0001"
        func insert(_ jti: String, _ type: String, _ eventTime: String) -> String {
            Self.outcome(
                receiver,
                """
                SELECT count(*) FROM siwa.insert_events(ARRAY[$1], ARRAY['app'], ARRAY[$2], ARRAY[$3],
                    ARRAY[(extract(epoch FROM \(eventTime)) * 1000)::bigint], ARRAY[NULL::text], ARRAY[NULL::boolean],
                    ARRAY['ignored'], ARRAY['{}'])
                """, [jti, sub, type])
        }
        func insertDirectly(_ jti: String, _ type: String, _ eventTime: String) -> String {
            Self.outcome(
                receiver,
                "INSERT INTO siwa.events (jti, aud, sub, type, event_time, status, claims) VALUES ($1, 'app', $2, $3, \(eventTime), 'ignored', '{}') RETURNING jti",
                [jti, sub, type])
        }
        // A deletion that never enters the queue, dated ten years ahead: it would refuse every sign-in.
        #expect(insertDirectly("i1", "account-delete", "now() + interval '10 years'") == "error 42501")
        #expect(insertDirectly("i2", "account-delete", "now()") == "error 42501")
        #expect(insertDirectly("i3", "email-enabled", "now()") == "error 42501")
        #expect(insertDirectly("i4", "made-up-type", "now() + interval '1 day'") == "error 42501")
        #expect(insertDirectly("i5", "made-up-type", "now() + interval '30 seconds'") == "i5")
        // Through the receiver's function a later date is brought back to now (its claims keep Apple's).
        #expect(insert("i6", "made-up-type", "now() + interval '1 day'") == "1")
        #expect(try TestDatabase.query(url, "SELECT event_time <= now() FROM siwa.events WHERE jti = 'i6'").scalar == "t")
        #expect(try TestDatabase.query(url, "SELECT count(*) FROM siwa.events").scalar == "2")

        // Only a deletion that can take effect refuses a sign-in: an ignored one (written by the
        // owner, who may) does not; a pending one does.
        _ = try TestDatabase.query(
            url,
            "INSERT INTO siwa.events (jti, aud, sub, type, event_time, status, claims) VALUES ('o1', 'app', $1, 'account-delete', now() + interval '10 years', 'ignored', '{}')",
            [sub])
        let api = try PostgresConnection(conninfo: login["siwa_api"]!)
        #expect(
            Self.outcome(
                api, "SELECT siwa.store_apple_token($1, 'app', '\(RecordedTokenKey.id)', \(RecordedTokenKey.sealed()), NULL, NULL, now())", [sub])
                == "created")
        _ = try TestDatabase.query(
            url,
            "INSERT INTO siwa.events (jti, aud, sub, type, event_time, claims) VALUES ('o2', 'app', $1, 'account-delete', now() + interval '1 minute', '{}')",
            [sub])
        #expect(
            Self.outcome(
                api, "SELECT siwa.store_apple_token($1, 'app', '\(RecordedTokenKey.id)', \(RecordedTokenKey.sealed()), NULL, NULL, now())", [sub])
                == "deleted")
    }

    @Test("a notification of an unknown type dated up to an hour after iat (as Apple may), received as siwa_receiver: 200 ignored, dated now")
    func receiverDatesIgnoredRowsNow() throws {
        let (url, login) = try LeastPrivilegeTests.databaseWithLoginRoles()
        let h = try TestHarness(conninfo: login["siwa_receiver"]!, roles: .receive)
        defer { h.stop() }
        let later = Int64(Date().timeIntervalSince1970 * 1000) + 30 * 60 * 1000
        let reply = try h.post(token: try h.token(type: "made-up-type", sub: "000739.later.0001", eventTimeMillis: later))
        #expect(reply.status == 200 && reply.code == "ignored", "\(reply.status) \(reply.body)")
        #expect(try TestDatabase.query(url, "SELECT event_time <= now() FROM siwa.events WHERE sub = '000739.later.0001'").scalar == "t")
    }

    @Test("the receiver's role stores no event dated over 2 h ahead (a year-3000 deletion); the latest a verified one carries is stored")
    func farFutureEventsRefused() throws {
        let (url, login) = try LeastPrivilegeTests.databaseWithLoginRoles()
        let receiver = try PostgresConnection(conninfo: login["siwa_receiver"]!)
        // Apple's account-delete, pending, through the receiver's own statement (one row per time).
        func insert(_ eventTimes: [String]) -> String {
            let times = eventTimes.map { "(extract(epoch FROM \($0)) * 1000)::bigint" }.joined(separator: ", ")
            let n = eventTimes.count
            return Self.outcome(
                receiver,
                """
                SELECT count(*) FROM siwa.insert_events(
                    ARRAY(SELECT 'ff-' || pg_catalog.gen_random_uuid() FROM generate_series(1, \(n))), array_fill('app'::text, ARRAY[\(n)]),
                    ARRAY(SELECT '000739.future.' || g FROM generate_series(1, \(n)) g), array_fill('account-delete'::text, ARRAY[\(n)]),
                    ARRAY[\(times)], array_fill(NULL::text, ARRAY[\(n)]), array_fill(NULL::boolean, ARRAY[\(n)]),
                    array_fill('pending'::text, ARRAY[\(n)]), array_fill('{}'::text, ARRAY[\(n)]))
                """)
        }
        // Dated in year 3000 it would refuse every later sign-in of its user.
        #expect(insert(["timestamptz '3000-01-01 00:00:00+00'"]) == "error 42501")
        #expect(insert(["now() + interval '2 hours 1 minute'"]) == "error 42501")
        // A forged row refuses its whole batch: a verified batch never holds one (below).
        #expect(insert(["now()", "timestamptz '3000-01-01 00:00:00+00'"]) == "error 42501")
        #expect(try TestDatabase.query(url, "SELECT count(*) FROM siwa.events").scalar == "0")
        // Refused as dated too far ahead, the worker's reconcile row too.
        let worker = try PostgresConnection(conninfo: login["siwa_worker"]!)
        for (c, type, claims) in [(receiver, "account-delete", "{}"), (worker, "consent-revoked", #"{"source":"reconcile","client_id":"app"}"#)] {
            do {
                _ = try c.execute(
                    "INSERT INTO siwa.events (jti, aud, sub, type, event_time, claims) VALUES ('siwa-reconcile-3000', 'app', 's', $1, timestamptz '3000-01-01 00:00:00+00', $2::jsonb)",
                    [type, claims])
                Issue.record("a \(type) dated in year 3000 was stored")
            } catch {
                #expect(error.sqlState == "42501" && error.serverMessage.contains("more than 2 hours ahead"), "\(type): \(error)")
            }
        }
        // The latest a verified notification carries (iat at the receiver's clock + 60 s, the event
        // 1 h after it), with the receiver's clock 58 minutes ahead of the database's: stored.
        #expect(insert(["now()", "now() + interval '1 hour 60 seconds' + interval '58 minutes'"]) == "2")

        // The receiver refuses a year-3000 event itself, before the database, and stores the
        // latest it verifies.
        let h = try TestHarness(conninfo: login["siwa_receiver"]!, roles: .receive)
        defer { h.stop() }
        let year3000: Int64 = 32_503_680_000_000
        let refused = try h.post(token: try h.token(type: "account-delete", sub: "000739.future.3000", eventTimeMillis: year3000))
        #expect(refused.status == 400 && refused.code == "bad_event_time", "\(refused.status) \(refused.body)")
        let issued = Int64(Date().timeIntervalSince1970) + VerificationPolicy(audiences: []).clockSkewSeconds - 5
        let latest = try h.signer.sign(
            claims: NotificationSigner.claims(
                audience: TestHarness.audience, type: "account-delete", sub: "000739.future.latest",
                eventTimeMillis: issued * 1000 + NotificationVerifier.maxEventTimeAfterIssueMillis, now: issued))
        let stored = try h.post(token: latest)
        #expect(stored.status == 200 && stored.code == "accepted", "\(stored.status) \(stored.body)")
        #expect(
            try TestDatabase.query(url, "SELECT string_agg(sub, ',' ORDER BY sub) FROM siwa.events WHERE sub LIKE '000739.future.%'").scalar
                == "000739.future.1,000739.future.2,000739.future.latest")
    }

    @Test("the cached key set: the receiver's role cannot plant a key; the worker keeps it; a receiver restarting in an outage verifies with it")
    func keyCacheWrittenByTheWorkerOnly() throws {
        let (url, login) = try LeastPrivilegeTests.databaseWithLoginRoles()
        let forger = NotificationSigner(key: try RSAPrivateKey.generate(bits: 2048), kid: "test-key-1")
        // The worker's process fetches Apple's set and keeps it.
        let worker = try TestHarness(conninfo: login["siwa_worker"]!, roles: .work)
        let jwksURL = "file://" + worker.jwksPath
        let kept = eventually {
            (try? TestDatabase.query(url, "SELECT count(*) FROM siwa.key_sets WHERE url = $1", [jwksURL]).scalar) == "1"
        }
        worker.stop()
        #expect(kept, "the worker did not keep the key set")
        // With the receiver's password a forger's key is planted in neither a new row nor the kept one.
        let receiverDB = try PostgresConnection(conninfo: login["siwa_receiver"]!)
        #expect(
            Self.outcome(receiverDB, "INSERT INTO siwa.key_sets (url, body) VALUES ('file:///elsewhere', $1) RETURNING url", [forger.jwks])
                == "error 42501")
        #expect(Self.outcome(receiverDB, "UPDATE siwa.key_sets SET body = $1 RETURNING url", [forger.jwks]) == "error 42501")
        #expect(
            Self.outcome(
                receiverDB,
                "INSERT INTO siwa.key_sets (url, body) VALUES ($1, $2) ON CONFLICT (url) DO UPDATE SET body = excluded.body RETURNING url",
                [jwksURL, forger.jwks]) == "error 42501")

        // Apple unreachable at the receiver's start: the kept set verifies Apple's, not the forger's.
        try FileManager.default.removeItem(atPath: worker.jwksPath)
        let h = try TestHarness(conninfo: login["siwa_receiver"]!, roles: .receive, jwksURL: jwksURL)
        defer { h.stop() }
        #expect(try h.admin("/readyz").status == 200)
        let apple = try h.post(token: try h.token(type: "consent-revoked", sub: "000739.keys.0001"))
        #expect(apple.status == 200 && apple.code == "accepted", "\(apple.status) \(apple.body)")
        let forged = try h.post(
            token: try forger.sign(
                claims: NotificationSigner.claims(audience: TestHarness.audience, type: "account-delete", sub: "000739.keys.0002")))
        #expect(forged.status == 401 && forged.code == "bad_signature", "\(forged.status) \(forged.body)")
        #expect(try TestDatabase.query(url, "SELECT string_agg(sub, ',') FROM siwa.events").scalar == "000739.keys.0001")
    }

    @Test("a row held past the sign-in's lock wait: the fresh grant is stored all the same, nothing queued for revocation")
    func signInDecidedWithoutTheLock() throws {
        let (url, login) = try LeastPrivilegeTests.databaseWithLoginRoles()
        let api = try PostgresConnection(conninfo: login["siwa_api"]!)
        let sub = "000739.locked.0002"
        _ = try TestDatabase.query(url, "INSERT INTO siwa.accounts (apple_sub) VALUES ($1)", [sub])
        #expect(
            Self.outcome(
                api, "SELECT siwa.store_apple_token($1, 'app', '\(RecordedTokenKey.id)', \(RecordedTokenKey.sealed()), NULL, NULL, now())", [sub])
                == "updated")
        let holder = try PostgresConnection(conninfo: url)
        _ = try holder.execute("BEGIN")
        _ = try holder.execute("SELECT 1 FROM siwa.accounts WHERE apple_sub = $1 FOR UPDATE", [sub])
        defer { _ = try? holder.execute("ROLLBACK") }
        _ = try api.execute("BEGIN")
        _ = try api.execute("SET LOCAL lock_timeout = 300")
        #expect(
            Self.outcome(
                api, "SELECT siwa.store_apple_token($1, 'app', '\(RecordedTokenKey.other)', \(RecordedTokenKey.sealed("01")), NULL, NULL, now())",
                [sub]) == "updated")
        _ = try api.execute("COMMIT")
        #expect(try TestDatabase.query(url, "SELECT key_id FROM siwa.apple_tokens WHERE apple_sub = $1", [sub]).scalar == RecordedTokenKey.other)
        #expect(try TestDatabase.query(url, "SELECT count(*) FROM siwa.revocations").scalar == "0")
    }

    @Test("a database of the previous version gets the same guarantees from migrate: grants, check, trigger, adopted tokens dated")
    func upgradeEnforces() throws {
        let (url, login) = try LeastPrivilegeTests.databaseWithLoginRoles()
        // The previous versions' state: their grants, no check (a row waiting without a token), the
        // trigger without far-future rows, an adopted token dated -infinity, a key set the
        // receiver's role could write.
        _ = try TestDatabase.query(
            url,
            """
            ALTER TABLE siwa.revocations DROP CONSTRAINT revocations_token_check;
            GRANT INSERT ON siwa.revocations TO siwa_worker;
            GRANT INSERT (apple_sub, client_id, key_id, ciphertext, reason) ON siwa.revocations TO siwa_api;
            INSERT INTO siwa.revocations (apple_sub, client_id, reason) VALUES ('000739.old.0001', 'app', 'exchange-failed');
            DROP TRIGGER events_only_signed_facts ON siwa.events;
            CREATE TRIGGER events_only_signed_facts BEFORE INSERT ON siwa.events
                FOR EACH ROW WHEN (NEW.type IN ('sign-in', 'deletion-requested') OR NEW.status NOT IN ('pending', 'ignored')
                                   OR NEW.claims ? 'source' OR NEW.status = 'ignored')
                EXECUTE FUNCTION siwa.refuse_unsigned_event();
            INSERT INTO siwa.apple_tokens (apple_sub, client_id, key_id, ciphertext, signed_in_at, source, updated_at)
            VALUES ('000739.old.0002', 'app', 'k', '\\x00', '-infinity', 'authjs', now() - interval '1 day');
            REVOKE INSERT, UPDATE ON siwa.key_sets FROM siwa_worker;
            GRANT INSERT, UPDATE ON siwa.key_sets TO siwa_receiver;
            INSERT INTO siwa.key_sets (url, body) VALUES ('file:///planted', '{"keys":[]}');
            COMMENT ON COLUMN siwa.apple_tokens.signed_in_at IS NULL;
            """)
        try Migrator.migrate(conninfo: url, force: true)
        #expect(
            try TestDatabase.query(url, "SELECT status || ':' || (finished_at IS NOT NULL)::text FROM siwa.revocations").scalar
                == "no_token:true")
        #expect(
            try TestDatabase.query(
                url,
                """
                SELECT has_table_privilege('siwa_worker', 'siwa.revocations', 'INSERT')
                    OR has_any_column_privilege('siwa_api', 'siwa.revocations', 'INSERT')
                """
            ).scalar == "f")
        #expect(
            try TestDatabase.query(
                url, "SELECT signed_in_at = updated_at FROM siwa.apple_tokens WHERE apple_sub = '000739.old.0002'"
            ).scalar == "t")
        // A key set the receiver's role could have written is forgotten; only the worker's writes one now.
        #expect(try TestDatabase.query(url, "SELECT count(*) FROM siwa.key_sets").scalar == "0")
        #expect(
            try TestDatabase.query(
                url,
                """
                SELECT has_table_privilege('siwa_receiver', 'siwa.key_sets', 'INSERT')
                    OR has_table_privilege('siwa_receiver', 'siwa.key_sets', 'UPDATE')
                    OR NOT has_table_privilege('siwa_worker', 'siwa.key_sets', 'INSERT')
                """
            ).scalar == "f")
        let receiver = try PostgresConnection(conninfo: login["siwa_receiver"]!)
        #expect(
            Self.outcome(
                receiver,
                "INSERT INTO siwa.events (jti, aud, sub, type, event_time, status, claims) VALUES ('u1', 'app', 's', 'account-delete', now(), 'ignored', '{}')"
            ) == "error 42501")
        #expect(
            Self.outcome(
                receiver,
                "INSERT INTO siwa.events (jti, aud, sub, type, event_time, claims) VALUES ('u2', 'app', 's', 'account-delete', timestamptz '3000-01-01 00:00:00+00', '{}')"
            ) == "error 42501")
        let restored = Self.refusal {
            _ = try TestDatabase.query(url, "INSERT INTO siwa.revocations (apple_sub, client_id, reason) VALUES ('s', 'app', 'x')")
        }
        #expect(Self.refusedByTokenCheck(restored), "the check migrate puts back: \(restored)")
    }
}
