-- Every PL/pgSQL function of pgmemory's schemas resolves names on a pinned search_path (pg_temp
-- last), set here unless it pins its own (the search, the AGE mirror's triggers, the tenancy
-- helpers, bfs_entities_age). Applied by init after every other file, once stale functions are
-- dropped (an ALTER here would otherwise count as re-creating one).
--
-- Why: PL/pgSQL resolves the types of a function's variables once, when a session first calls
-- it, and keeps that compiled function for the session whoever calls it next. The search
-- (SECURITY DEFINER) and the mirror's triggers call helpers that any login may call too. A login
-- that first called one on its own search_path, with a temporary domain named like a built-in
-- type (`uuid`, `jsonb`, `text`; pg_temp is searched first for types when the path leaves it
-- out) whose check calls the login's function, had that function run as the owner when the
-- search or a mirror trigger called the helper next. A helper with a pinned path is compiled on
-- that path whoever calls it first. SQL functions are parsed again when the path differs.
-- pgvector's schema (often public) is on the path only of the functions that name its types or
-- operators: where untrusted roles may create objects there, the others (the mirror's helpers,
-- which run as the owner) must not find theirs.
DO $search_paths$
DECLARE
    r record;
    vector_schema name := (SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
                            WHERE e.extname = 'vector');
    vector_types oid[] := ARRAY[to_regtype(format('%I.vector', vector_schema)),
                                to_regtype(format('%I.vector[]', vector_schema))];
BEGIN
    FOR r IN SELECT p.oid::regprocedure AS fn,
                    p.prosrc ~ '\mvector\M|<=>|<->|<#>' OR p.prorettype = ANY (vector_types)
                    OR EXISTS (SELECT FROM unnest(p.proargtypes) a WHERE a = ANY (vector_types)) AS vectors
               FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
              WHERE p.pronamespace IN ('pgmemory'::regnamespace, 'pgmemory_internal'::regnamespace)
                AND l.lanname = 'plpgsql'
                AND NOT EXISTS (SELECT FROM unnest(p.proconfig) AS c WHERE c LIKE 'search_path=%') LOOP
        IF r.vectors THEN
            EXECUTE format('ALTER FUNCTION %s SET search_path = pg_catalog, pgmemory, pgmemory_internal, %I, pg_temp',
                           r.fn, vector_schema);
        ELSE
            EXECUTE format('ALTER FUNCTION %s SET search_path = pg_catalog, pgmemory, pgmemory_internal, pg_temp', r.fn);
        END IF;
    END LOOP;
END
$search_paths$;
