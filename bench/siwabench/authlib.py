"""Mode authlib: the worker with SIWA_APPLY_TO=supabase against without it, at AUTHLIB_ACCOUNTS
users: events/s and their ratio."""
import os
from .backlog import WORKER_TABLES, analyze_tables, drain
from .dataset import SCALE_FUNCTIONS, scale_accounts_sql, scale_backlog_sql
from .harness import AUDIENCE, env_int, log, migrate, psql, psql_script


# Supabase Auth's tables as far as the worker uses them (columns, keys, indexes and foreign keys of
# github.com/supabase/auth's migrations; the full schema is in the tests, AuthLibrarySchemas.swift).
AUTHLIB_SUPABASE_SQL = """
    DROP SCHEMA IF EXISTS auth CASCADE;
    CREATE SCHEMA auth;
    CREATE TABLE auth.users (id uuid PRIMARY KEY, email varchar(255), created_at timestamptz);
    CREATE TABLE auth.identities (provider_id text NOT NULL, user_id uuid NOT NULL REFERENCES auth.users ON DELETE CASCADE,
        identity_data jsonb NOT NULL, provider text NOT NULL, created_at timestamptz, updated_at timestamptz,
        email text GENERATED ALWAYS AS (lower(identity_data ->> 'email')) STORED,
        id uuid NOT NULL DEFAULT gen_random_uuid() PRIMARY KEY, UNIQUE (provider_id, provider));
    CREATE TABLE auth.sessions (id uuid PRIMARY KEY, user_id uuid NOT NULL REFERENCES auth.users ON DELETE CASCADE,
        created_at timestamptz, updated_at timestamptz);
    CREATE TABLE auth.refresh_tokens (id bigserial PRIMARY KEY, token varchar(255) UNIQUE, user_id varchar(255),
        revoked bool, created_at timestamptz, session_id uuid REFERENCES auth.sessions ON DELETE CASCADE);
"""


def authlib_load(accounts, app_accounts):
    """siwa's accounts and sessions, and a Supabase user (Apple identity, session, refresh token) for each.
    `app_accounts`: each account also has its app account for the bench's audience, as on a server
    that has run a while (the first event or sign-in of an app creates it); without, the worker
    creates one for each existing user it meets (the model of sessions 11-13)."""
    psql(f"TRUNCATE {WORKER_TABLES}")
    for sql in scale_accounts_sql(accounts, 1):
        psql_script(sql)
    if app_accounts:
        psql_script(f"""
            INSERT INTO siwa.app_accounts (apple_sub, aud, status, email, is_private_email, email_forwarding,
                                           last_event_time, email_event_time, created_at, updated_at)
            SELECT apple_sub, '{AUDIENCE}', status, email, is_private_email, email_forwarding,
                   last_event_time, email_event_time, created_at, updated_at FROM siwa.accounts;
        """)
    psql_script(AUTHLIB_SUPABASE_SQL)
    psql_script(f"""
        INSERT INTO auth.users (id, created_at) SELECT md5('u' || a)::uuid, now() FROM generate_series(0, {accounts - 1}) a;
        INSERT INTO auth.identities (provider_id, user_id, identity_data, provider, created_at)
        SELECT public.bench_sub(a, ''), md5('u' || a)::uuid, '{{}}', 'apple', now() FROM generate_series(0, {accounts - 1}) a;
        INSERT INTO auth.sessions (id, user_id, created_at)
        SELECT md5('s' || a)::uuid, md5('u' || a)::uuid, now() - interval '3 days' FROM generate_series(0, {accounts - 1}) a;
        INSERT INTO auth.refresh_tokens (token, user_id, revoked, created_at, session_id)
        SELECT md5('t' || a), md5('u' || a), false, now() - interval '3 days', md5('s' || a)::uuid FROM generate_series(0, {accounts - 1}) a;
        CREATE INDEX ON auth.identities (user_id);
        CREATE INDEX ON auth.sessions (user_id, created_at);
        CREATE INDEX ON auth.refresh_tokens (session_id, revoked);
        CHECKPOINT;
    """)


def authlib():
    accounts = env_int("AUTHLIB_ACCOUNTS", 1000000)
    backlog = env_int("AUTHLIB_BACKLOG", 100000)
    app_accounts = env_int("AUTHLIB_APP_ACCOUNTS", 1) == 1
    # AUTHLIB_LIVED (percent, default 0: the fresh bulk load, every page full): that share of the
    # rows the worker updates rewritten once and vacuumed, as sign-ins leave a table that has
    # lived (Supabase rewrites the identity at each one): free space on the pages, for both runs.
    lived = env_int("AUTHLIB_LIVED", 0)
    migrate()
    psql_script(SCALE_FUNCTIONS)
    backlog_sql, _, _ = scale_backlog_sql(backlog, accounts)
    runs = {}
    # Each run on a fresh load (the first run's deletions would change the second's work).
    for target in ["", "supabase"]:
        label = f"authlib {target or 'no target'}"
        log(f"{label}: loading {accounts} accounts with a session, and as many Supabase users")
        authlib_load(accounts, app_accounts)
        if lived:
            psql_script(f"""
                UPDATE siwa.accounts SET updated_at = updated_at + interval '1 second' WHERE hashtext(apple_sub) % 100 < {lived} AND hashtext(apple_sub) % 100 > -{lived};
                UPDATE siwa.app_accounts SET updated_at = updated_at + interval '1 second' WHERE hashtext(apple_sub) % 100 < {lived} AND hashtext(apple_sub) % 100 > -{lived};
                UPDATE auth.identities SET updated_at = now() WHERE hashtext(provider_id) % 100 < {lived} AND hashtext(provider_id) % 100 > -{lived};
                VACUUM siwa.accounts, siwa.app_accounts, auth.identities;
            """)
        psql_script(backlog_sql)
        psql_script(analyze_tables() + "ANALYZE siwa.app_accounts, auth.users, auth.identities, auth.sessions, auth.refresh_tokens; CHECKPOINT;")
        os.environ["SIWA_APPLY_TO"] = target
        try:
            runs[target or "none"] = drain(1, label=label)
        finally:
            os.environ.pop("SIWA_APPLY_TO", None)
        runs[target or "none"]["supabase_sessions_left"] = int(psql("SELECT count(*) FROM auth.sessions"))
    ratio = round(runs["supabase"]["events_per_s"] / runs["none"]["events_per_s"], 3) if runs["none"]["events_per_s"] else None
    log(f"authlib: {runs['none']['events_per_s']:.0f} events/s without a target, {runs['supabase']['events_per_s']:.0f} with "
        f"supabase: ratio {ratio} (aim >= 0.8)")
    return {"accounts": accounts, "backlog": backlog, "app_accounts": app_accounts, "lived_percent": lived, "runs": runs, "ratio": ratio,
            "aims": {"ratio": 0.8}}
