-- Beliefs are the fold of their lineages' claims by the temporal rules (sql/35_fact_rules.sql),
-- and a re-fold from the claims gives what ingestion gave. Rules changed since databases were
-- ingested without their beliefs being folded again, except for the two changes of the fold's
-- order (0600, 0640): before 0520 claims were folded in arrival order with contradictions one
-- way ("Omar hates camping" stayed believed beside a later "Omar loves camping"), and until the
-- wording rules of 2 December a statement told late about an earlier time kept the later
-- sentence ("has a dog named Pepper" where "adopted a cat named Pepper" comes first). So the
-- lineages of every claim stored before this migration are re-folded once, by the rules in
-- place (init, after sql/: beliefs_stale, refold_claims_before, pgmemory_internal.stale_lineages,
-- pgmemory.storage.setup); a re-fold writes only the versions that differ.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pgmemory.fact_claims) THEN  -- (SELECT 1: Citus plans no empty target list)
        INSERT INTO pgmemory.settings (key, value) VALUES ('beliefs_stale', 'true')
        ON CONFLICT (key) DO UPDATE SET value = excluded.value;
        INSERT INTO pgmemory.settings (key, value) VALUES ('refold_claims_before', to_jsonb(now()))
        ON CONFLICT (key) DO UPDATE SET value = excluded.value;
    END IF;
END
$$;
