import SiwaPostgres

/// What each role may do in schema `siwa`: the "Grants" table of docs/security.md, in one place.
/// `doctor` compares the catalogs with it; `LeastPrivilegeTests` holds schema.sql and the table to it.
public enum GrantMatrix {
    /// siwa's group roles (NOLOGIN, members of none of each other).
    public static let roles = ["siwa_receiver", "siwa_worker", "siwa_api", "siwa_dashboard", "siwa_console", "siwa_operator"]

    /// Each role's privileges, the allow-list: `role PRIVILEGE object`; a column grant names its
    /// columns, `object(col,...)`; `PUBLIC` is everyone (nothing of siwa's); `MEMBER` a membership
    /// between siwa's roles (none); `ATTRIBUTE` a role attribute (LOGIN, SUPERUSER, ...: none).
    public static let expected: Set<String> = [
        "siwa_api USAGE schema siwa", "siwa_api EXECUTE store_apple_token", "siwa_api EXECUTE map_transfer",
        "siwa_api EXECUTE queue_revocation", "siwa_api SELECT backlog",
        "siwa_dashboard USAGE schema siwa", "siwa_dashboard EXECUTE subject_hash",
        "siwa_dashboard SELECT account_status_summary", "siwa_dashboard SELECT app_account_status_summary",
        "siwa_dashboard SELECT backlog", "siwa_dashboard SELECT dead_forwards", "siwa_dashboard SELECT operator_actions",
        "siwa_dashboard SELECT dead_letters",
        "siwa_dashboard SELECT events_per_day", "siwa_dashboard SELECT forward_backlog",
        "siwa_receiver USAGE schema siwa",
        "siwa_receiver INSERT events(aud,claims,email,event_time,is_private_email,jti,status,sub,type)",
        "siwa_receiver SELECT events(jti)", "siwa_receiver EXECUTE insert_events", "siwa_receiver SELECT backlog",
        "siwa_receiver SELECT key_sets",
        "siwa_worker USAGE schema siwa",
        "siwa_worker EXECUTE on_event", "siwa_worker EXECUTE request_deletion", "siwa_worker EXECUTE subject_hash",
        // The token keys' ids: recorded by the owner and the worker's processes, read by the API's.
        "siwa_worker EXECUTE record_token_keys", "siwa_worker SELECT token_keys", "siwa_api SELECT token_keys",
        "siwa_worker SELECT accounts", "siwa_worker INSERT accounts", "siwa_worker UPDATE accounts",
        "siwa_worker SELECT app_accounts", "siwa_worker INSERT app_accounts", "siwa_worker UPDATE app_accounts",
        "siwa_worker SELECT apple_tokens", "siwa_worker INSERT apple_tokens", "siwa_worker UPDATE apple_tokens",
        "siwa_worker DELETE apple_tokens", "siwa_worker SELECT counts", "siwa_worker SELECT count_changes",
        "siwa_worker SELECT events", "siwa_worker INSERT events", "siwa_worker UPDATE events", "siwa_worker DELETE events",
        "siwa_worker SELECT event_queue", "siwa_worker UPDATE event_queue", "siwa_worker DELETE event_queue",
        "siwa_worker SELECT forwards", "siwa_worker INSERT forwards", "siwa_worker UPDATE forwards",
        "siwa_worker DELETE forwards", "siwa_worker SELECT forward_backlog", "siwa_worker SELECT dead_forwards",
        "siwa_worker SELECT reconcile_pace", "siwa_worker UPDATE reconcile_pace",
        "siwa_worker SELECT revocations", "siwa_worker UPDATE revocations", "siwa_worker EXECUTE move_tokens_to_revocation",
        "siwa_worker SELECT sessions", "siwa_worker UPDATE sessions", "siwa_worker SELECT backlog",
        "siwa_worker SELECT key_sets", "siwa_worker INSERT key_sets", "siwa_worker UPDATE key_sets",
        // Revocation proof and the user report.
        "siwa_worker INSERT revocation_calls", "siwa_dashboard EXECUTE user_report", "siwa_api EXECUTE user_report",
        "siwa_dashboard SELECT revocation_proofs", "siwa_api SELECT revocation_proofs",
        "siwa_dashboard SELECT unconfirmed_revocations", "siwa_api SELECT unconfirmed_revocations",
        // The console: its pages' reads; sign-ins, sessions, audit rows, replays and deletions through
        // the owner's console_* functions only.
        "siwa_console USAGE schema siwa", "siwa_console SELECT operator_actions",
        "siwa_console EXECUTE console_sign_in", "siwa_console EXECUTE console_session", "siwa_console EXECUTE console_sign_out",
        "siwa_console EXECUTE console_revealed_email", "siwa_console EXECUTE console_request_deletion",
        "siwa_console EXECUTE console_replay",
        "siwa_console SELECT console_hours", "siwa_console INSERT console_hours", "siwa_console UPDATE console_hours",
        "siwa_console DELETE console_hours", "siwa_console SELECT console_rollup", "siwa_console UPDATE console_rollup",
        "siwa_console SELECT events", "siwa_console SELECT event_queue", "siwa_console SELECT accounts",
        "siwa_console SELECT app_accounts", "siwa_console SELECT sessions",
        "siwa_console SELECT revocations(apple_sub,attempts,client_id,confirmation,confirmed_at,created_at,finished_at,id,key_id,last_error,next_attempt_at,reason,status)",
        "siwa_console SELECT forwards", "siwa_console SELECT key_sets", "siwa_console SELECT reconcile_pace",
        "siwa_console SELECT counts", "siwa_console SELECT count_changes", "siwa_console SELECT transfers",
        "siwa_console SELECT provider_calls",
        "siwa_console SELECT backlog", "siwa_console SELECT forward_backlog", "siwa_console SELECT dead_letters",
        "siwa_console SELECT apple_tokens(apple_sub,client_id,key_id,next_validation_at,quarantined_at)",
        "siwa_console EXECUTE subject_hash", "siwa_console EXECUTE user_report",
        // The auth libraries' tokens adopted (their hash only).
        "siwa_worker SELECT library_tokens", "siwa_worker INSERT library_tokens", "siwa_worker UPDATE library_tokens",
        // The hosted providers' call queue (sent by the work role, read by dashboards).
        "siwa_worker SELECT provider_calls", "siwa_worker INSERT provider_calls", "siwa_worker UPDATE provider_calls",
        "siwa_worker DELETE provider_calls",
        "siwa_worker SELECT email_suppressions", "siwa_worker INSERT email_suppressions", "siwa_worker UPDATE email_suppressions",
        "siwa_worker DELETE email_suppressions", "siwa_worker SELECT provider_call_backlog", "siwa_worker SELECT dead_provider_calls",
        "siwa_dashboard SELECT provider_call_backlog", "siwa_dashboard SELECT dead_provider_calls",
        "siwa_console SELECT provider_call_backlog",
        "siwa_worker SELECT email_sender_backlog", "siwa_dashboard SELECT email_sender_backlog", "siwa_console SELECT email_sender_backlog",
        // Releases: each process reads the schema's release at start and keeps its heartbeat row.
        "siwa_receiver SELECT schema_release", "siwa_worker SELECT schema_release", "siwa_api SELECT schema_release",
        "siwa_dashboard SELECT schema_release", "siwa_console SELECT schema_release",
        "siwa_receiver SELECT processes", "siwa_receiver INSERT processes", "siwa_receiver UPDATE processes",
        "siwa_receiver DELETE processes", "siwa_worker SELECT processes", "siwa_worker INSERT processes",
        "siwa_worker UPDATE processes", "siwa_worker DELETE processes", "siwa_console SELECT processes",
        "siwa_console INSERT processes", "siwa_console UPDATE processes", "siwa_console DELETE processes",
        "siwa_dashboard SELECT processes",
        // Operators (people): the console's credentials, through the owner's functions.
        "siwa_operator USAGE schema siwa", "siwa_operator EXECUTE operator_add", "siwa_operator EXECUTE operator_list",
        "siwa_operator EXECUTE operator_remove",
    ]

    /// Every privilege on schema `siwa` and its objects held by PUBLIC, one of `roles` or any
    /// other `siwa_*` role, read from the catalogs as the login of `conninfo` (any login may read them).
    public static func read(conninfo: String) throws -> Set<String> {
        let c = try PostgresConnection(conninfo: conninfo, applicationName: "siwa-notify doctor")
        return try read(on: c)
    }

    static func read(on c: PostgresConnection) throws(PostgresError) -> Set<String> {
        Set(try c.rows(DoctorStatements.grants, roles))
    }
}
