-- Tenancy enforced by the database: roles, the groups a session may see, and row-level
-- security on every table of schema pgmemory. Applied by init after every other file.
--
-- Roles (cluster-wide, created when missing):
--   the owner (whoever runs init/migrations) owns the tables and is not subject to RLS;
--   pgmemory_app      read/write on every table but the AGE mirror's bookkeeping (graph_vertices,
--                     graph_edges: written by the mirror's triggers only); groups narrowed per transaction;
--   pgmemory_analyst  read-only: the analyst views and the tables under them;
--   pgmemory_reader   a member of pgmemory_analyst granted every group, which `pgmemory sql`
--                     takes (SET LOCAL ROLE) when run by the owner; no login is given it.
-- Logins get groups with `pgmemory grant ROLE GROUP ...` (rows of pgmemory.role_groups, keyed by
-- the role itself: grants are not inherited, so a group role's grants never leak to members).
-- On the embedded server init also creates the login pgmemory_app_login (pgmemory.storage.app_login),
-- which Memory uses by default. Every function runs with the caller's rights except the search
-- (pgmemory.search_candidates: the session's groups, read with the owner's rights, see below)
-- and the AGE mirror's trigger functions.

-- The functions row-level security calls to learn the session's groups resolve every name with
-- search_path pinned to pg_catalog (pg_temp last): they run with the caller's rights, so on the
-- caller's search_path a login that may create functions in a schema it searches (its own, as
-- Postgres' secure schema pattern gives each user) could shadow a built-in they call (unnest,
-- array_remove, ...) and so widen its own groups.
--
-- The groups this transaction asked for with set_config('pgmemory.groups', '["a", "b"]', true)
-- (NULL: no narrowing asked; a value that is not a JSON array of strings is an error).
CREATE OR REPLACE FUNCTION pgmemory_internal.requested_groups()
RETURNS text[] LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT CASE WHEN nullif(current_setting('pgmemory.groups', true), '') IS NOT NULL THEN
                ARRAY(SELECT jsonb_array_elements_text(current_setting('pgmemory.groups', true)::jsonb)) END
$$;

-- The groups role p_role sees under row-level security: '{*}' when it sees every group (granted
-- '*' and no narrowing asked), else the requested groups that are granted (all requested ones
-- when '*' is granted), or the granted ones when none were requested. Grants are rows of
-- pgmemory.role_groups keyed by the role itself.
CREATE OR REPLACE FUNCTION pgmemory_internal.visible_groups_of(p_role name)
RETURNS text[] LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    granted text[] := ARRAY(SELECT g.group_id FROM pgmemory.role_groups g WHERE g.role_name = p_role);
    requested text[] := pgmemory_internal.requested_groups();
BEGIN
    IF requested IS NULL THEN
        RETURN granted;
    ELSIF '*' = ANY (granted) THEN
        RETURN array_remove(requested, '*');
    END IF;
    RETURN ARRAY(SELECT unnest(requested) INTERSECT SELECT unnest(granted));
END
$$;

-- The groups this session sees, for row-level security (visible_groups_of the current role).
-- One call per statement and table (an initplan), so every policy costs one lookup of the
-- role's grants.
CREATE OR REPLACE FUNCTION pgmemory_internal.visible_groups()
RETURNS text[] LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RETURN pgmemory_internal.visible_groups_of(current_user);
END
$$;

-- The role the session's statements run as outside SECURITY DEFINER functions: the SET ROLE in
-- force, else the login. A SECURITY DEFINER function changes current_user to its owner but
-- neither of these, so it can tell whose groups to honour.
CREATE OR REPLACE FUNCTION pgmemory_internal.session_role()
RETURNS name LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT coalesce(nullif(current_setting('role'), 'none'), session_user::text)::name
$$;

-- Of p_groups, the ones the session role sees, in their order: all of them when that role is
-- not subject to row-level security on pgmemory's tables (a superuser, BYPASSRLS, or a member
-- of their owner), else those among visible_groups_of(session role). The search
-- (pgmemory.search_candidates) runs with its owner's rights on the groups this returns, so it
-- sees exactly what row-level security would have shown the caller.
CREATE OR REPLACE FUNCTION pgmemory_internal.session_groups(p_groups text[])
RETURNS text[] LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    who name := pgmemory_internal.session_role();
    visible text[];
BEGIN
    IF EXISTS (SELECT FROM pg_roles r WHERE r.rolname = who AND (r.rolsuper OR r.rolbypassrls))
       OR pg_has_role(who, (SELECT c.relowner FROM pg_class c WHERE c.oid = 'pgmemory.facts'::regclass), 'USAGE') THEN
        RETURN p_groups;
    END IF;
    visible := pgmemory_internal.visible_groups_of(who);
    IF '*' = ANY (visible) THEN
        RETURN p_groups;
    END IF;
    RETURN ARRAY(SELECT g FROM unnest(p_groups) WITH ORDINALITY AS u (g, i) WHERE g = ANY (visible) ORDER BY i);
END
$$;

-- The roles that may create objects in schemas p_schemas but are not trusted as the owner is:
-- every role but superusers and those that may act as the owner of pgmemory's tables (PUBLIC's
-- grants included: every role has them; pg_database_owner is judged by the database's owner, its
-- one member). The search runs with its owner's rights only where none may create in the
-- schemas on its search_path (below): one that may could plant a function there that the search
-- calls ahead of pg_catalog's (an exact match, say public.unnest(text[])). `pgmemory doctor` and
-- init (pgmemory.storage.setup) read it too.
CREATE OR REPLACE FUNCTION pgmemory_internal.untrusted_creators(p_schemas name[])
RETURNS TABLE (role_name name, schema_name name) LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT w.rolname, s.nspname
      FROM pg_roles w, pg_namespace s
     WHERE s.nspname = ANY (p_schemas) AND NOT w.rolsuper AND w.rolname <> 'pg_database_owner'
       AND NOT pg_has_role(w.oid, (SELECT c.relowner FROM pg_class c WHERE c.oid = 'pgmemory.facts'::regclass), 'MEMBER')
       AND has_schema_privilege(w.oid, s.oid, 'CREATE')
     ORDER BY 2, 1
$$;

-- Does the search run with its owner's rights exactly where it may (see above)? Init runs again
-- when not (a role was granted or refused CREATE on one of those schemas since).
CREATE OR REPLACE FUNCTION pgmemory_internal.search_rights_current()
RETURNS boolean LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
    SELECT p.prosecdef = NOT EXISTS (
               SELECT FROM pgmemory_internal.untrusted_creators(ARRAY['pgmemory', 'pgmemory_internal',
                   (SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
                     WHERE e.extname = 'vector')]))
      FROM pg_proc p WHERE p.pronamespace = 'pgmemory'::regnamespace AND p.proname = 'search_candidates'
$$;

DO $tenancy$
DECLARE
    r record;
    policy_sql text;
    policy_name name;
    vector_schema name;
    -- group_id or '*' among the visible groups: one initplan per table reference. Citus refuses
    -- subqueries in policies of distributed tables: there the function is called per row.
    tenant text := 'ARRAY[group_id, ''*''] && (SELECT pgmemory_internal.visible_groups())';
BEGIN
    IF EXISTS (SELECT FROM pg_extension WHERE extname = 'citus') THEN
        tenant := 'ARRAY[group_id, ''*''] && pgmemory_internal.visible_groups()';
    END IF;
    -- Roles: cluster-wide; another database of the cluster may be creating them right now.
    FOR r IN SELECT * FROM (VALUES ('pgmemory_app'), ('pgmemory_analyst'), ('pgmemory_reader')) AS t(role) LOOP
        IF to_regrole(r.role) IS NULL THEN
            BEGIN
                EXECUTE format('CREATE ROLE %I NOLOGIN', r.role);
            EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
            END;
        END IF;
    END LOOP;
    IF NOT pg_has_role('pgmemory_reader', 'pgmemory_analyst', 'MEMBER') THEN
        GRANT pgmemory_analyst TO pgmemory_reader;
    END IF;
    IF NOT pg_has_role(current_user, 'pgmemory_reader', 'USAGE') THEN
        EXECUTE format('GRANT pgmemory_reader TO %I', current_user);
    END IF;
    INSERT INTO pgmemory.role_groups (role_name, group_id) VALUES ('pgmemory_reader', '*')
        ON CONFLICT DO NOTHING;

    -- Privileges.
    GRANT USAGE ON SCHEMA pgmemory TO pgmemory_app, pgmemory_analyst;
    -- The helpers the public functions and the engine call (row-level security still applies
    -- under them: none runs with its owner's rights but the AGE mirror's trigger functions).
    GRANT USAGE ON SCHEMA pgmemory_internal TO pgmemory_app, pgmemory_analyst;
    GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA pgmemory TO pgmemory_app;
    -- No right on the id counters: every group draws from them, so reading one (last_value,
    -- nextval) would show how much the other tenants write. Identity columns need none to insert.
    REVOKE ALL ON ALL SEQUENCES IN SCHEMA pgmemory FROM pgmemory_app, pgmemory_analyst;
    -- An erase VACUUMs the tables that held the text (Memory.delete_episode(erase=True)), so dead
    -- row versions do not keep it until autovacuum: Postgres 17+ lets a non-owner with MAINTAIN
    -- (before 17 only the owner can; the erase then leaves it to autovacuum).
    IF current_setting('server_version_num')::int >= 170000 THEN
        EXECUTE 'GRANT MAINTAIN ON ALL TABLES IN SCHEMA pgmemory TO pgmemory_app';
    END IF;
    REVOKE INSERT, UPDATE, DELETE ON pgmemory.role_groups, pgmemory.schema_migrations FROM pgmemory_app;
    -- The AGE mirror's bookkeeping is written by the mirror's trigger functions (owner's rights)
    -- and read by nothing else an app runs: no right on it, so no tenant can read another group's
    -- node ids or break its mirror (the tenant policy below holds as well).
    REVOKE ALL ON pgmemory.graph_vertices, pgmemory.graph_edges FROM pgmemory_app;
    GRANT SELECT ON pgmemory.fact_versions, pgmemory.believed_facts, pgmemory.current_facts,
                    pgmemory.entity_history, pgmemory.episode_log, pgmemory.entity_mentions,
                    pgmemory.episode_queue, pgmemory.role_groups,
                    pgmemory.facts, pgmemory.entities, pgmemory.entity_name_vectors, pgmemory.entity_versions,
                    pgmemory.fact_episodes,
                    pgmemory.episodes, pgmemory.episode_mentions, pgmemory.communities,
                    pgmemory.community_members, pgmemory.community_state, pgmemory.settings, pgmemory.schema_migrations,
                    pgmemory.text_stats, pgmemory.term_stats
          TO pgmemory_analyst;

    -- The search runs with the owner's rights, on the groups the session may see
    -- (pgmemory_internal.session_groups): under row-level security the planner may not use an
    -- index for a non-leakproof operator (tsvector @@, ranges, jsonb containment) ahead of the
    -- policy, which cost searches 1.5-1.8x (bench/rls.py). Only where no untrusted role can
    -- create objects in the schemas on its search_path (else it stays with the caller's rights):
    -- pgmemory_internal.untrusted_creators.
    SELECT n.nspname INTO vector_schema FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
     WHERE e.extname = 'vector';
    IF NOT EXISTS (SELECT FROM pgmemory_internal.untrusted_creators(
                                   ARRAY['pgmemory', 'pgmemory_internal', vector_schema])) THEN
        EXECUTE format('ALTER FUNCTION pgmemory.search_candidates(text[], text, %I.vector, jsonb) SECURITY DEFINER'
                       ' SET search_path = pg_catalog, pgmemory, pgmemory_internal, %I, pg_temp',
                       vector_schema, vector_schema);
    END IF;

    -- Views run with the caller's rights, so the caller's row-level security applies under them.
    FOR r IN SELECT c.relname FROM pg_class c
              WHERE c.relnamespace = 'pgmemory'::regnamespace AND c.relkind = 'v' LOOP
        EXECUTE format('ALTER VIEW pgmemory.%I SET (security_invoker = true)', r.relname);
    END LOOP;

    -- Row-level security on every table, fail-closed: a table with group_id gets the tenant
    -- policy; the few global tables get theirs; any other table gets none (nobody but the owner
    -- sees its rows) until a policy is written for it here.
    FOR r IN
        SELECT c.relname,
               EXISTS (SELECT FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attname = 'group_id'
                          AND NOT a.attisdropped) AS tenant
          FROM pg_class c
         WHERE c.relnamespace = 'pgmemory'::regnamespace AND c.relkind IN ('r', 'p')
    LOOP
        EXECUTE format('ALTER TABLE pgmemory.%I ENABLE ROW LEVEL SECURITY', r.relname);
        policy_sql := CASE
            WHEN r.relname IN ('settings', 'schema_migrations') THEN
                format('CREATE POLICY readable ON pgmemory.%I FOR SELECT USING (true)', r.relname)
            WHEN r.relname = 'role_groups' THEN
                'CREATE POLICY own_grants ON pgmemory.role_groups FOR SELECT USING (role_name = current_user)'
            -- The servers' API keys (hashes and the groups each may use): read by a server's login,
            -- which sees every group (keys are looked up before a request is narrowed); written by
            -- the owner only (`pgmemory keys`). No subquery (Citus refuses them in policies): the
            -- table is small, so a call per row costs nothing.
            WHEN r.relname = 'api_keys' THEN
                'CREATE POLICY servers ON pgmemory.api_keys FOR SELECT USING (ARRAY[''*''] && pgmemory_internal.visible_groups())'
            WHEN r.tenant THEN format('CREATE POLICY tenant ON pgmemory.%I USING (%s) WITH CHECK (%s)',
                                      r.relname, tenant, tenant)
        END;
        FOR policy_name IN SELECT p.polname FROM pg_policy p
                             WHERE p.polrelid = format('pgmemory.%I', r.relname)::regclass
                               -- ('mirror': the open policy the mirror's tables had before migration 0530)
                               AND p.polname IN ('tenant', 'readable', 'own_grants', 'mirror', 'servers') LOOP
            EXECUTE format('DROP POLICY %I ON pgmemory.%I', policy_name, r.relname);
        END LOOP;
        IF policy_sql IS NOT NULL THEN
            EXECUTE policy_sql;
        END IF;
    END LOOP;
END
$tenancy$;
