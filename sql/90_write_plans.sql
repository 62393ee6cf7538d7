-- Generic plans for the write path (issue 9). The entry points of ingestion and of the SQL
-- writers' API run the same few dozen statements for every episode; with the default
-- plan_cache_mode the planner kept choosing custom plans and re-planned each of them on every
-- call (derive_summaries alone: 3-5 ms of planning per episode against 0.4 ms with its generic
-- plan; bench/README.md, "Ingestion"). Every statement here reads by the group and by keys, so
-- one generic plan serves every call. The SET clause holds for the calls they make (apply_episode,
-- apply_claim, derive_summaries, the triggers ...). Not on Citus, which routes a statement by the
-- group's value and cannot plan these with parameters (as sql/fulltext/tsvector.sql).
-- Last in sql/: CREATE OR REPLACE drops a function's SET clauses, so this runs after them all.
DO $plan$
DECLARE
    f regprocedure;
BEGIN
    FOR f IN
        SELECT x::regprocedure FROM unnest(ARRAY[
            'pgmemory_internal.apply_if_unchanged(text, uuid, text, bigint, jsonb)',
            'pgmemory_internal.apply_episode(text, uuid, jsonb)',
            'pgmemory_internal.read_entity_candidates(text, text[], vector[])',
            'pgmemory_internal.read_fact_candidates(text, uuid[], uuid[], text[], vector[])',
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
