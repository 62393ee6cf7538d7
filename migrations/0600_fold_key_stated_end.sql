-- An assertion whose stated end is before it was said ("worked at Acme until 2019", said in 2021,
-- no start) took its place in the fold when it was said, as evidence that Acme held in 2021: it
-- ended the job held then (an exclusive lineage) and, in a re-fold, could end an interval of its
-- own lineage that had been open in between. Its place is now its stated end
-- (pgmemory_internal.fold_key: least(coalesce(valid_from, ref_time), valid_to)), and a claim that
-- ended by its place ends no other lineage. The fold-order index follows the new key, and the
-- lineages with such claims are re-folded once the new rules are in place (init, after sql/:
-- flag beliefs_stale, pgmemory.storage.setup).
CREATE INDEX fact_claims_lineage_fold_key ON pgmemory.fact_claims (group_id, lineage,
    (CASE WHEN kind = 'negate' THEN coalesce(valid_to, ref_time)
          ELSE least(coalesce(valid_from, ref_time), valid_to) END));
DROP INDEX pgmemory.fact_claims_lineage_fold;

DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pgmemory.fact_claims
                WHERE kind = 'assert' AND retracted_by IS NULL AND valid_to <= coalesce(valid_from, ref_time)) THEN
        INSERT INTO pgmemory.settings (key, value) VALUES ('beliefs_stale', 'true')
        ON CONFLICT (key) DO UPDATE SET value = excluded.value;
    END IF;
END
$$;
