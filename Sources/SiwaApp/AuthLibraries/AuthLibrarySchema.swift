import SiwaCore

/// Where one auth library keeps its users, their provider identities and their sessions: the
/// tables and columns the worker touches (README "Using Supabase Auth / Better Auth / Auth.js"). The three libraries share one shape:
/// an identity row (provider `apple`, the Apple `sub`) names the user; sessions belong to the
/// user; the user row is deleted only with `SIWA_ON_ACCOUNT_DELETE=delete-user`.
public struct AuthLibrarySchema: Sendable, Equatable {
    public var kind: AuthLibraryKind

    public struct Identities: Sendable, Equatable {
        public var table: TableName
        public var user: String
        public var provider: String
        public var subject: String
        /// Supabase: `identity_data` (jsonb) and `updated_at`, where email events are recorded.
        public var data: String?
        public var updatedAt: String?
        /// Where the library keeps the identity's Apple refresh token (Better Auth, Auth.js); nil:
        /// it keeps none (Supabase Auth). Read only when in-app deletion is configured.
        public var refreshToken: String? = nil
    }

    public struct Sessions: Sendable, Equatable {
        public var table: TableName
        public var user: String
        /// nil: the library records no creation time (Auth.js): every session of the user ends.
        public var createdAt: String?
        /// The session's key, needed when refresh tokens hang off it.
        public var id: String?
        /// Supabase: `auth.refresh_tokens` and its `session_id`.
        public var refreshTokens: (table: TableName, session: String)?

        public static func == (a: Sessions, b: Sessions) -> Bool {
            a.table == b.table && a.user == b.user && a.createdAt == b.createdAt && a.id == b.id
                && a.refreshTokens?.table == b.refreshTokens?.table && a.refreshTokens?.session == b.refreshTokens?.session
        }
    }

    public var identities: Identities
    public var sessions: Sessions
    public var users: TableName
    public var userID: String

    /// Supabase Auth (GoTrue): schema `auth`, names fixed by Supabase.
    public static let supabase = AuthLibrarySchema(
        kind: .supabase,
        identities: .init(
            table: TableName(schema: "auth", "identities"), user: "user_id", provider: "provider", subject: "provider_id",
            data: "identity_data", updatedAt: "updated_at"),
        sessions: .init(
            table: TableName(schema: "auth", "sessions"), user: "user_id", createdAt: "created_at", id: "id",
            refreshTokens: (TableName(schema: "auth", "refresh_tokens"), "session_id")),
        users: TableName(schema: "auth", "users"), userID: "id")

    /// Better Auth, with `tables` (user, session, account) and its columns camelCase (its own
    /// migration) or snake_case (schemas generated for Drizzle or Prisma).
    public static func betterAuth(tables: [TableName], snakeCase: Bool) -> AuthLibrarySchema {
        let n: (String, String) -> String = { camel, snake in snakeCase ? snake : camel }
        return AuthLibrarySchema(
            kind: .betterAuth,
            identities: .init(
                table: tables[2], user: n("userId", "user_id"), provider: n("providerId", "provider_id"),
                subject: n("accountId", "account_id"), refreshToken: n("refreshToken", "refresh_token")),
            sessions: .init(table: tables[1], user: n("userId", "user_id"), createdAt: n("createdAt", "created_at")),
            users: tables[0], userID: "id")
    }

    public static let betterAuthDefaultTables = [TableName("user"), TableName("session"), TableName("account")]

    /// Auth.js: the PostgreSQL adapter's `users`/`sessions`/`accounts`, or the Prisma adapter's
    /// `User`/`Session`/`Account` (the same column names).
    public static func authjs(tables: [TableName]) -> AuthLibrarySchema {
        AuthLibrarySchema(
            kind: .authjs,
            identities: .init(
                table: tables[2], user: "userId", provider: "provider", subject: "providerAccountId", refreshToken: "refresh_token"),
            sessions: .init(table: tables[1], user: "userId"),
            users: tables[0], userID: "id")
    }

    public static let authjsPostgresTables = [TableName("users"), TableName("sessions"), TableName("accounts")]
    public static let authjsPrismaTables = [TableName("User"), TableName("Session"), TableName("Account")]

    /// Every table the worker's statements name.
    public var tables: [TableName] {
        [identities.table, sessions.table, users] + (sessions.refreshTokens.map { [$0.table] } ?? [])
    }

    /// What one event does here.
    func effect(of event: AppleEvent, decision: AccountDecision, policy: AccountDeletePolicy) -> AuthLibraryEffect {
        AuthLibraryRules.effect(
            of: event, decision: decision, policy: policy, sessionsHaveCreationTime: sessions.createdAt != nil,
            recordsAddress: identities.data != nil)
    }
}

/// The targets the worker applies events to, resolved and checked at start.
public struct AuthLibraryTargets: Sendable, Equatable {
    public var schemas: [AuthLibrarySchema]
    public var policy: AccountDeletePolicy
    /// The Apple refresh tokens the libraries store, adopted for in-app deletion and
    /// reconciliation; nil when in-app deletion is not configured.
    public var tokens: LibraryTokenAdoption?

    public init(schemas: [AuthLibrarySchema] = [], policy: AccountDeletePolicy = .unlink) {
        self.schemas = schemas
        self.policy = policy
    }

    public static let none = AuthLibraryTargets()
}
