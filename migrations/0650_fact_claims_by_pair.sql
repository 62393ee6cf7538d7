-- add_fact joins a statement to its entity pair's lineage. A statement whose interval was withdrawn
-- at once (a value of a functional relation that another, still true, began with) writes no fact
-- version, only its claim: the pair's lineage is then found among the claims, by this index (and a
-- functional statement finds every other value of the relation among them too).
CREATE INDEX fact_claims_pair ON pgmemory.fact_claims (group_id, source_id, target_id);
