-- Claims stored before migration 0520 were folded by the rules of that time: in arrival order,
-- a contradiction ending only the lineages the new claim named (fact_claims.contradicts), not
-- both ways. Since then belief is the fold of claims in valid-time order with contradictions
-- holding both ways (exclusive lineages), but databases ingested before kept their old beliefs:
-- "Omar hates camping" (contradicting "loves") stayed believed after a later "Omar loves
-- camping", where the same conversation ingested now ends it. The lineages with claims recorded
-- before 0520 was applied are re-folded once the current rules are in place (init, after sql/:
-- beliefs_stale, refold_claims_before, pgmemory_internal.stale_lineages, pgmemory.storage.setup).
DO $$
DECLARE
    cutoff timestamptz := (SELECT applied_at FROM pgmemory.schema_migrations WHERE version = 520);
BEGIN
    IF cutoff IS NOT NULL AND EXISTS (SELECT 1 FROM pgmemory.fact_claims WHERE recorded_at < cutoff) THEN
        INSERT INTO pgmemory.settings (key, value) VALUES ('beliefs_stale', 'true')
        ON CONFLICT (key) DO UPDATE SET value = excluded.value;
        INSERT INTO pgmemory.settings (key, value) VALUES ('refold_claims_before', to_jsonb(cutoff))
        ON CONFLICT (key) DO UPDATE SET value = excluded.value;
    END IF;
END
$$;
