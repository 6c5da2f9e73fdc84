import SiwaPostgres

/// What `doctor` reads: the catalogs only, which every login may read (no table of siwa's).
/// Built-ins are called as `pg_catalog.` names: a function planted in a writable schema cannot
/// stand in for them.
enum DoctorStatements {
    struct Identity {
        var login: String
        var superuser: Bool
        /// nil when schema `siwa` does not exist.
        var schemaOwner: String?
        var ownsSchema: Bool
    }

    /// The login, whether it is a superuser, and whether it owns schema `siwa` (or inherits its owner's privileges).
    static let identity = Statement<Void, Identity>(
        "doctor_identity",
        """
        SELECT r.rolname::text AS login, r.rolsuper AS superuser,
               pg_catalog.pg_get_userbyid(n.nspowner)::text AS schema_owner,
               coalesce(pg_catalog.pg_has_role(r.oid, n.nspowner, 'USAGE'), false) AS owns_schema
        FROM pg_catalog.pg_roles r
        LEFT JOIN pg_catalog.pg_namespace n ON n.nspname = 'siwa'
        WHERE r.rolname = current_user
        """,
        decode: { row throws(PostgresError) in
            Identity(
                login: try row.text("login"), superuser: try row.bool("superuser"), schemaOwner: try row.optionalText("schema_owner"),
                ownsSchema: try row.bool("owns_schema"))
        })

    /// Every privilege on schema `siwa` and its objects held by PUBLIC, by one of siwa's roles
    /// (`$1`), by any other role named `siwa_*` (a role added beside them, or a login given a
    /// grant of its own) or by the login itself, read from the catalogs (ACLs, default ACLs where none is
    /// set, column ACLs), with the memberships between siwa's roles and their attributes, spelled
    /// as `GrantMatrix.expected` is. An owner's own privileges are not listed.
    static let grants = Statement<[String], String>(
        "doctor_grants",
        """
        WITH objects AS (
            SELECT c.relname::text AS name, coalesce(c.relacl, pg_catalog.acldefault('r', c.relowner)) AS acl, c.relowner AS owner
            FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
            WHERE n.nspname = 'siwa' AND c.relkind IN ('r', 'v', 'm', 'S', 'p', 'f')
            UNION ALL
            SELECT p.proname::text, coalesce(p.proacl, pg_catalog.acldefault('f', p.proowner)), p.proowner
            FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = 'siwa'
            UNION ALL
            SELECT 'schema ' || n.nspname::text, coalesce(n.nspacl, pg_catalog.acldefault('n', n.nspowner)), n.nspowner
            FROM pg_catalog.pg_namespace n WHERE n.nspname = 'siwa'
        ), granted AS (
            SELECT o.name, x.grantee, x.privilege_type FROM objects o, pg_catalog.aclexplode(o.acl) x WHERE x.grantee <> o.owner
            UNION ALL
            SELECT c.relname::text || '(' || pg_catalog.string_agg(a.attname::text, ',' ORDER BY a.attname::text) || ')',
                   x.grantee, x.privilege_type
            FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_class c ON c.oid = a.attrelid
                 JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace, pg_catalog.aclexplode(a.attacl) x
            WHERE n.nspname = 'siwa' AND a.attacl IS NOT NULL AND x.grantee <> c.relowner
            GROUP BY c.relname, x.grantee, x.privilege_type
        )
        SELECT CASE WHEN g.grantee = 0 THEN 'PUBLIC' ELSE r.rolname::text END || ' ' || g.privilege_type || ' ' || g.name AS privilege
        FROM granted g LEFT JOIN pg_catalog.pg_roles r ON r.oid = g.grantee
        WHERE g.grantee = 0 OR r.rolname = ANY ($1::text[]) OR r.rolname LIKE 'siwa\\_%' OR r.rolname = current_user
        UNION ALL
        SELECT m.rolname::text || ' MEMBER ' || r.rolname::text
        FROM pg_catalog.pg_auth_members am JOIN pg_catalog.pg_roles r ON r.oid = am.roleid
             JOIN pg_catalog.pg_roles m ON m.oid = am.member
        WHERE r.rolname = ANY ($1::text[]) AND m.rolname = ANY ($1::text[])
        UNION ALL
        SELECT rolname::text || ' ATTRIBUTE ' || pg_catalog.concat_ws(',', CASE WHEN rolsuper THEN 'SUPERUSER' END,
            CASE WHEN rolcanlogin THEN 'LOGIN' END, CASE WHEN rolbypassrls THEN 'BYPASSRLS' END,
            CASE WHEN rolcreaterole THEN 'CREATEROLE' END, CASE WHEN rolcreatedb THEN 'CREATEDB' END)
        FROM pg_catalog.pg_roles WHERE rolname = ANY ($1::text[])
          AND (rolsuper OR rolcanlogin OR rolbypassrls OR rolcreaterole OR rolcreatedb)
        """,
        bind: { roles in [SQLEncoding.array(roles)] },
        decode: { row throws(PostgresError) in try row.text("privilege") })

    /// Who may create objects in the schemas `$1` (where a configured auth library keeps its
    /// tables): each grantee of CREATE (PUBLIC as `PUBLIC`) and each schema's owner, superusers
    /// and siwa's own roles left out (siwa's roles create nothing there).
    static let schemaCreators = Statement<[String], (schema: String, role: String)>(
        "doctor_schema_creators",
        """
        SELECT DISTINCT c.schema_name, c.role_name FROM (
            SELECT n.nspname::text AS schema_name,
                   CASE WHEN a.grantee OPERATOR(pg_catalog.=) 0::oid THEN 'PUBLIC' ELSE pg_catalog.pg_get_userbyid(a.grantee)::text END AS role_name,
                   a.grantee
            FROM pg_catalog.pg_namespace n,
                 pg_catalog.aclexplode(COALESCE(n.nspacl, pg_catalog.acldefault('n', n.nspowner))) a
            WHERE n.nspname::text OPERATOR(pg_catalog.=) ANY ($1::text[]) AND a.privilege_type OPERATOR(pg_catalog.=) 'CREATE'
        ) c
        WHERE c.role_name NOT LIKE 'siwa\\_%'
          AND NOT EXISTS (SELECT FROM pg_catalog.pg_roles r WHERE r.oid OPERATOR(pg_catalog.=) c.grantee AND r.rolsuper)
        ORDER BY 1, 2
        """,
        bind: { [SQLEncoding.array($0)] },
        decode: { row throws(PostgresError) in (try row.text("schema_name"), try row.text("role_name")) })

    /// The roles of `$1` the login is a member of, directly or through other roles.
    static let memberships = Statement<[String], String>(
        "doctor_memberships",
        """
        WITH RECURSIVE member_of AS (
            SELECT am.roleid AS roleid FROM pg_catalog.pg_auth_members am JOIN pg_catalog.pg_roles r ON r.oid = am.member
            WHERE r.rolname = current_user
            UNION
            SELECT am.roleid FROM pg_catalog.pg_auth_members am JOIN member_of m ON am.member = m.roleid
        )
        SELECT r.rolname::text AS role FROM member_of m JOIN pg_catalog.pg_roles r ON r.oid = m.roleid
        WHERE r.rolname = ANY ($1::text[])
        """,
        bind: { roles in [SQLEncoding.array(roles)] },
        decode: { row throws(PostgresError) in try row.text("role") })
}
