-- A lineage's claims in fold order (pgmemory_internal.fold_key, written out: an index expression
-- calls no function of ours, which Citus would have to create on the workers first). fold_claim
-- asks which claims of a lineage and its exclusive lineages come after a new claim; a person's
-- employers are ~75 lineages with ~330 claims at 10k episodes, all read to find the few (usually
-- none) after it. It replaces the (group_id, lineage) index, a prefix of it.
CREATE INDEX fact_claims_lineage_fold ON pgmemory.fact_claims (group_id, lineage,
    (CASE WHEN kind = 'negate' THEN coalesce(valid_to, ref_time) ELSE coalesce(valid_from, ref_time) END));
DROP INDEX pgmemory.fact_claims_lineage;
