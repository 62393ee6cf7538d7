-- Generic plans where the write path measurably re-planned (issue 9). derive_summaries runs the
-- same two statements for every applied episode; with the default plan_cache_mode the planner
-- kept choosing custom plans and re-planned both on every call: 3.2-4.8 ms per call against
-- 0.41 ms with the generic plan (200 calls on a 2k-episode group; bench/README.md, "Issue 9,
-- session 5"). Both read by the group and by entity keys, so one generic plan serves every call.
-- read_fact_candidates (both fact candidate sets of an episode, one call per episode): its custom
-- plan cost more to plan than to run (1.7-1.9 ms planning, 1.1-1.2 ms execution at 1.5k
-- episodes); the generic plan returned the same rows in 150 of 150 interleaved calls at 5.2 ms
-- against 13.1 ms per call (load 6.5; bench/README.md, "Issue 9, session 6"). Its limits are
-- constants, so the generic plan keeps the index reads. The SET clause stops the function being
-- inlined into the caller's statement, so its body's plan is cached with the function.
-- apply_episode (and so every statement it runs, the triggers' too: the setting holds for the
-- calls it makes): with the default plan_cache_mode its statements over arrays (the touched and
-- changed entities, the claims' lineages, the text statistics' rows) were re-planned on every
-- call, as an array's custom plan always looks cheaper; planning was 3.5% of an ingesting
-- backend's CPU and is 0.0% with generic plans (perf, bench/README.md "Issue 9, session 10").
-- Their statements read by group and key, so one generic plan serves every call; plans made while
-- a new group's tables are small are replaced when refresh_statistics analyses them. (Session 5
-- measured this with no gain beyond the noise of a load of 10-15.) The entity candidates: the nearest-name search needs the value of its LIMIT to choose
-- the HNSW index (a generic plan read an 18k-entity group 5x slower). With a constant LIMIT a
-- generic plan keeps the index (1.2 -> 0.36 ms per call at 10k episodes, bench/README.md "Issue 9,
-- session 8") but reads every group through it, while a custom plan can read a small group of a
-- large shared table exactly by its key: filtered to such a group, the index read stops
-- (hnsw.max_scan_tuples) before it meets the group's names. So entity_candidates_generic (constant
-- limits) is generic and read_entity_candidates calls it only for a group that holds most of the
-- table (holds_most_entities), where the custom plan is the same; other groups keep custom plans.
-- Not on Citus, which routes a statement by the group's value and cannot plan these with
-- parameters (as sql/fulltext/tsvector.sql). Last in sql/: CREATE OR REPLACE drops a function's
-- SET clauses, so this runs after them all.
DO $plan$
BEGIN
    IF EXISTS (SELECT FROM pg_extension WHERE extname = 'citus') THEN
        ALTER FUNCTION pgmemory_internal.derive_summaries(text, uuid[]) RESET plan_cache_mode;
        ALTER FUNCTION pgmemory_internal.read_fact_candidates(text, uuid[], uuid[], text[], vector[], timestamptz[])
            RESET plan_cache_mode;
        ALTER FUNCTION pgmemory_internal.entity_candidates_generic(text, text[], vector[]) RESET plan_cache_mode;
        ALTER FUNCTION pgmemory_internal.apply_episode(text, uuid, jsonb, vector[]) RESET plan_cache_mode;
    ELSE
        ALTER FUNCTION pgmemory_internal.derive_summaries(text, uuid[]) SET plan_cache_mode = force_generic_plan;
        ALTER FUNCTION pgmemory_internal.read_fact_candidates(text, uuid[], uuid[], text[], vector[], timestamptz[])
            SET plan_cache_mode = force_generic_plan;
        ALTER FUNCTION pgmemory_internal.entity_candidates_generic(text, text[], vector[])
            SET plan_cache_mode = force_generic_plan;
        ALTER FUNCTION pgmemory_internal.apply_episode(text, uuid, jsonb, vector[]) SET plan_cache_mode = force_generic_plan;
    END IF;
END
$plan$;
