-- Generic plans for the apply step of the write path (issue 9). The apply entry points run the
-- same few dozen statements for every episode; with the default plan_cache_mode the planner kept
-- choosing custom plans and re-planned each of them on every call (derive_summaries alone: 3-5 ms
-- of planning per episode against 0.4 ms with its generic plan; bench/README.md, "Ingestion").
-- Every statement they run reads by the group and by keys, so one generic plan serves every call.
-- The SET clause holds for the calls they make (apply_claim, derive_summaries, the triggers ...).
-- Not the candidate reads (sql/40_ingest_candidates.sql): their nearest-name search needs the
-- value of its LIMIT to choose the HNSW index (a generic plan read a 18k-entity group 5x slower).
-- Not on Citus, which routes a statement by the group's value and cannot plan these with
-- parameters (as sql/fulltext/tsvector.sql). Last in sql/: CREATE OR REPLACE drops a function's
-- SET clauses, so this runs after them all.
DO $plan$
DECLARE
    f regprocedure;
BEGIN
    FOR f IN
        SELECT x::regprocedure FROM unnest(ARRAY[
            'pgmemory_internal.apply_if_unchanged(text, uuid, text, bigint, jsonb)',
            'pgmemory_internal.apply_episode(text, uuid, jsonb)',
            'pgmemory.add_fact(text, text, text, text, text, timestamptz, timestamptz, boolean, boolean, jsonb, timestamptz, vector, vector, vector)',
            'pgmemory.retract_fact(text, uuid)']) x
    LOOP
        IF EXISTS (SELECT FROM pg_extension WHERE extname = 'citus') THEN
            EXECUTE format('ALTER FUNCTION %s RESET plan_cache_mode', f);
        ELSE
            EXECUTE format('ALTER FUNCTION %s SET plan_cache_mode = force_generic_plan', f);
        END IF;
    END LOOP;
END
$plan$;
