/// The auth libraries' own tables as each library creates them, for the `SIWA_APPLY_TO` tests.
/// Written by hand from each library's published migrations or documented schema (the parts
/// siwa-notify touches in full, with their keys, indexes, foreign keys and row-level security;
/// tables it never touches left out).
enum AuthLibrarySchemas {
    /// Supabase Auth (GoTrue) v2.x, github.com/supabase/auth `migrations/` through
    /// 20240612123726_enable_rls_update_grants: `auth.users` (00_init_auth_schema and later
    /// column additions), `auth.identities` (20210909172000_create_identities_table,
    /// 20221215195800_add_identities_email_column, 20231117164230_add_id_pkey_identities),
    /// `auth.sessions` (20220811173540_add_sessions_table, 20221011041400_add_mfa_indexes, aal /
    /// not_after / refreshed_at / user_agent / ip / tag columns), `auth.refresh_tokens`
    /// (00_init, 20210927181326_add_refresh_token_parent, session_id), RLS on every table.
    static let supabase = """
        CREATE SCHEMA auth;
        CREATE TYPE auth.aal_level AS ENUM ('aal1', 'aal2', 'aal3');
        CREATE TABLE auth.users (
            instance_id uuid NULL,
            id uuid NOT NULL PRIMARY KEY,
            aud varchar(255) NULL,
            "role" varchar(255) NULL,
            email varchar(255) NULL,
            encrypted_password varchar(255) NULL,
            email_confirmed_at timestamptz NULL,
            invited_at timestamptz NULL,
            confirmation_token varchar(255) NULL,
            confirmation_sent_at timestamptz NULL,
            recovery_token varchar(255) NULL,
            recovery_sent_at timestamptz NULL,
            email_change_token_new varchar(255) NULL,
            email_change varchar(255) NULL,
            email_change_sent_at timestamptz NULL,
            last_sign_in_at timestamptz NULL,
            raw_app_meta_data jsonb NULL,
            raw_user_meta_data jsonb NULL,
            is_super_admin bool NULL,
            created_at timestamptz NULL,
            updated_at timestamptz NULL,
            phone text NULL UNIQUE DEFAULT NULL,
            phone_confirmed_at timestamptz NULL,
            phone_change text NULL DEFAULT '',
            phone_change_token varchar(255) NULL DEFAULT '',
            phone_change_sent_at timestamptz NULL,
            confirmed_at timestamptz GENERATED ALWAYS AS (LEAST(email_confirmed_at, phone_confirmed_at)) STORED,
            email_change_token_current varchar(255) NULL DEFAULT '',
            email_change_confirm_status smallint NULL DEFAULT 0 CHECK (email_change_confirm_status >= 0 AND email_change_confirm_status <= 2),
            banned_until timestamptz NULL,
            reauthentication_token varchar(255) NULL DEFAULT '',
            reauthentication_sent_at timestamptz NULL,
            is_sso_user boolean NOT NULL DEFAULT false,
            deleted_at timestamptz NULL,
            is_anonymous boolean NOT NULL DEFAULT false
        );
        CREATE INDEX users_instance_id_idx ON auth.users USING btree (instance_id);
        CREATE TABLE auth.identities (
            provider_id text NOT NULL,
            user_id uuid NOT NULL,
            identity_data jsonb NOT NULL,
            provider text NOT NULL,
            last_sign_in_at timestamptz NULL,
            created_at timestamptz NULL,
            updated_at timestamptz NULL,
            email text GENERATED ALWAYS AS (lower(identity_data ->> 'email')) STORED,
            id uuid NOT NULL DEFAULT gen_random_uuid() PRIMARY KEY,
            CONSTRAINT identities_provider_id_provider_unique UNIQUE (provider_id, provider),
            CONSTRAINT identities_user_id_fkey FOREIGN KEY (user_id) REFERENCES auth.users(id) ON DELETE CASCADE
        );
        CREATE INDEX identities_user_id_idx ON auth.identities USING btree (user_id);
        CREATE INDEX identities_email_idx ON auth.identities (email text_pattern_ops);
        CREATE TABLE auth.sessions (
            id uuid NOT NULL PRIMARY KEY,
            user_id uuid NOT NULL,
            created_at timestamptz NULL,
            updated_at timestamptz NULL,
            factor_id uuid NULL,
            aal auth.aal_level NULL,
            not_after timestamptz NULL,
            refreshed_at timestamp without time zone NULL,
            user_agent text NULL,
            ip inet NULL,
            tag text NULL,
            CONSTRAINT sessions_user_id_fkey FOREIGN KEY (user_id) REFERENCES auth.users(id) ON DELETE CASCADE
        );
        CREATE INDEX sessions_user_id_idx ON auth.sessions USING btree (user_id);
        CREATE INDEX user_id_created_at_idx ON auth.sessions (user_id, created_at);
        CREATE INDEX sessions_not_after_idx ON auth.sessions (not_after DESC);
        CREATE TABLE auth.refresh_tokens (
            instance_id uuid NULL,
            id bigserial NOT NULL PRIMARY KEY,
            "token" varchar(255) NULL UNIQUE,
            user_id varchar(255) NULL,
            revoked bool NULL,
            created_at timestamptz NULL,
            updated_at timestamptz NULL,
            parent varchar(255) NULL,
            session_id uuid NULL,
            CONSTRAINT refresh_tokens_session_id_fkey FOREIGN KEY (session_id) REFERENCES auth.sessions(id) ON DELETE CASCADE
        );
        CREATE INDEX refresh_tokens_instance_id_idx ON auth.refresh_tokens USING btree (instance_id);
        CREATE INDEX refresh_tokens_instance_id_user_id_idx ON auth.refresh_tokens USING btree (instance_id, user_id);
        CREATE INDEX refresh_tokens_parent_idx ON auth.refresh_tokens USING btree (parent);
        CREATE INDEX refresh_tokens_session_id_revoked_idx ON auth.refresh_tokens (session_id, revoked);
        CREATE INDEX refresh_tokens_updated_at_idx ON auth.refresh_tokens (updated_at DESC);
        ALTER TABLE auth.users ENABLE ROW LEVEL SECURITY;
        ALTER TABLE auth.identities ENABLE ROW LEVEL SECURITY;
        ALTER TABLE auth.sessions ENABLE ROW LEVEL SECURITY;
        ALTER TABLE auth.refresh_tokens ENABLE ROW LEVEL SECURITY;
        """

    /// Better Auth 1.4 core schema, as `npx @better-auth/cli generate` writes it for the built-in
    /// Kysely adapter on PostgreSQL (better-auth.com/docs/concepts/database, "Core Schema"):
    /// camelCase columns, `session_userId_idx` and `account_userId_idx`.
    static let betterAuth = """
        CREATE TABLE "user" ("id" text NOT NULL PRIMARY KEY, "name" text NOT NULL, "email" text NOT NULL UNIQUE,
            "emailVerified" boolean NOT NULL, "image" text, "createdAt" timestamptz DEFAULT CURRENT_TIMESTAMP NOT NULL,
            "updatedAt" timestamptz DEFAULT CURRENT_TIMESTAMP NOT NULL);
        CREATE TABLE "session" ("id" text NOT NULL PRIMARY KEY, "expiresAt" timestamptz NOT NULL, "token" text NOT NULL UNIQUE,
            "createdAt" timestamptz DEFAULT CURRENT_TIMESTAMP NOT NULL, "updatedAt" timestamptz NOT NULL, "ipAddress" text,
            "userAgent" text, "userId" text NOT NULL REFERENCES "user" ("id") ON DELETE CASCADE);
        CREATE TABLE "account" ("id" text NOT NULL PRIMARY KEY, "accountId" text NOT NULL, "providerId" text NOT NULL,
            "userId" text NOT NULL REFERENCES "user" ("id") ON DELETE CASCADE, "accessToken" text, "refreshToken" text,
            "idToken" text, "accessTokenExpiresAt" timestamptz, "refreshTokenExpiresAt" timestamptz, "scope" text,
            "password" text, "createdAt" timestamptz DEFAULT CURRENT_TIMESTAMP NOT NULL, "updatedAt" timestamptz NOT NULL);
        CREATE INDEX "session_userId_idx" ON "session" ("userId");
        CREATE INDEX "account_userId_idx" ON "account" ("userId");
        """

    /// The same model as a Drizzle schema generated for Better Auth writes it (`usePlural`,
    /// snake_case column names, `timestamp`), in an app schema `app`.
    static let betterAuthSnakePlural = """
        CREATE SCHEMA app;
        CREATE TABLE app.users (id text PRIMARY KEY, name text NOT NULL, email text NOT NULL UNIQUE,
            email_verified boolean NOT NULL DEFAULT false, image text, created_at timestamp NOT NULL DEFAULT now(),
            updated_at timestamp NOT NULL DEFAULT now());
        CREATE TABLE app.sessions (id text PRIMARY KEY, expires_at timestamp NOT NULL, token text NOT NULL UNIQUE,
            created_at timestamp NOT NULL DEFAULT now(), updated_at timestamp NOT NULL, ip_address text, user_agent text,
            user_id text NOT NULL REFERENCES app.users (id) ON DELETE CASCADE);
        CREATE TABLE app.accounts (id text PRIMARY KEY, account_id text NOT NULL, provider_id text NOT NULL,
            user_id text NOT NULL REFERENCES app.users (id) ON DELETE CASCADE, access_token text, refresh_token text,
            id_token text, access_token_expires_at timestamp, refresh_token_expires_at timestamp, scope text, password text,
            created_at timestamp NOT NULL DEFAULT now(), updated_at timestamp NOT NULL);
        CREATE INDEX sessions_user_id_idx ON app.sessions (user_id);
        CREATE INDEX accounts_user_id_idx ON app.accounts (user_id);
        """

    /// Auth.js `@auth/pg-adapter` 1.x: the schema of authjs.dev/getting-started/adapters/pg
    /// (no foreign keys, no index beyond the primary keys).
    static let authjsPostgres = """
        CREATE TABLE verification_token (identifier TEXT NOT NULL, expires TIMESTAMPTZ NOT NULL, token TEXT NOT NULL,
            PRIMARY KEY (identifier, token));
        CREATE TABLE accounts (id SERIAL, "userId" INTEGER NOT NULL, type VARCHAR(255) NOT NULL, provider VARCHAR(255) NOT NULL,
            "providerAccountId" VARCHAR(255) NOT NULL, refresh_token TEXT, access_token TEXT, expires_at BIGINT, id_token TEXT,
            scope TEXT, session_state TEXT, token_type TEXT, PRIMARY KEY (id));
        CREATE TABLE sessions (id SERIAL, "userId" INTEGER NOT NULL, expires TIMESTAMPTZ NOT NULL,
            "sessionToken" VARCHAR(255) NOT NULL, PRIMARY KEY (id));
        CREATE TABLE users (id SERIAL, name VARCHAR(255), email VARCHAR(255), "emailVerified" TIMESTAMPTZ, image TEXT,
            PRIMARY KEY (id));
        """

    /// Auth.js `@auth/prisma-adapter` 2.x: the default models of authjs.dev/getting-started/adapters/prisma
    /// (PostgreSQL), as `prisma migrate` writes them.
    static let authjsPrisma = """
        CREATE TABLE "User" ("id" TEXT NOT NULL, "name" TEXT, "email" TEXT, "emailVerified" TIMESTAMP(3), "image" TEXT,
            "createdAt" TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP, "updatedAt" TIMESTAMP(3) NOT NULL,
            CONSTRAINT "User_pkey" PRIMARY KEY ("id"));
        CREATE TABLE "Account" ("userId" TEXT NOT NULL, "type" TEXT NOT NULL, "provider" TEXT NOT NULL,
            "providerAccountId" TEXT NOT NULL, "refresh_token" TEXT, "access_token" TEXT, "expires_at" INTEGER,
            "token_type" TEXT, "scope" TEXT, "id_token" TEXT, "session_state" TEXT,
            "createdAt" TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP, "updatedAt" TIMESTAMP(3) NOT NULL,
            CONSTRAINT "Account_pkey" PRIMARY KEY ("provider", "providerAccountId"));
        CREATE TABLE "Session" ("sessionToken" TEXT NOT NULL, "userId" TEXT NOT NULL, "expires" TIMESTAMP(3) NOT NULL,
            "createdAt" TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP, "updatedAt" TIMESTAMP(3) NOT NULL);
        CREATE UNIQUE INDEX "User_email_key" ON "User"("email");
        CREATE UNIQUE INDEX "Session_sessionToken_key" ON "Session"("sessionToken");
        ALTER TABLE "Account" ADD CONSTRAINT "Account_userId_fkey" FOREIGN KEY ("userId") REFERENCES "User"("id")
            ON DELETE CASCADE ON UPDATE CASCADE;
        ALTER TABLE "Session" ADD CONSTRAINT "Session_userId_fkey" FOREIGN KEY ("userId") REFERENCES "User"("id")
            ON DELETE CASCADE ON UPDATE CASCADE;
        """
}
