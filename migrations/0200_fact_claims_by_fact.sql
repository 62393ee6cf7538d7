-- The claims of one fact id (apply_claim asks whether the interval it merges into was opened by a
-- negation; retractions and deletes look claims up by fact): an index probe instead of a scan of
-- all the group's claims, which grew with every episode (issue 9: flat ingest cost).
CREATE INDEX fact_claims_fact ON pgmemory.fact_claims (group_id, id);
