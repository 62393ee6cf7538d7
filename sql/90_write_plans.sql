-- Generic plans where the write path measurably re-planned (issue 9). derive_summaries runs the
-- same two statements for every applied episode; with the default plan_cache_mode the planner
-- kept choosing custom plans and re-planned both on every call: 3.2-4.8 ms per call against
-- 0.41 ms with the generic plan (200 calls on a 2k-episode group; bench/README.md, "Issue 9,
-- session 5"). Both read by the group and by entity keys, so one generic plan serves every call.
-- Not the whole apply step nor the candidate reads: forcing generic plans there showed no gain in
-- the same-run ingest benchmark, and the nearest-name search needs the value of its LIMIT to
-- choose the HNSW index (a generic plan read an 18k-entity group 5x slower).
-- Not on Citus, which routes a statement by the group's value and cannot plan these with
-- parameters (as sql/fulltext/tsvector.sql). Last in sql/: CREATE OR REPLACE drops a function's
-- SET clauses, so this runs after them all.
DO $plan$
BEGIN
    IF EXISTS (SELECT FROM pg_extension WHERE extname = 'citus') THEN
        ALTER FUNCTION pgmemory_internal.derive_summaries(text, uuid[]) RESET plan_cache_mode;
    ELSE
        ALTER FUNCTION pgmemory_internal.derive_summaries(text, uuid[]) SET plan_cache_mode = force_generic_plan;
    END IF;
END
$plan$;
