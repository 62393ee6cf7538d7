-- Ingestion reads the believed facts around one entity on every episode:
-- index exactly those rows (partial on the open transaction-time range).
CREATE INDEX facts_current_source ON pgmemory.facts (source_id, relation) WHERE upper_inf(recorded);
CREATE INDEX facts_current_target ON pgmemory.facts (target_id) WHERE upper_inf(recorded);
CREATE INDEX facts_current_source_recent ON pgmemory.facts (source_id, lower(recorded) DESC)
    WHERE upper_inf(recorded) AND upper_inf(valid);
CREATE INDEX facts_current_target_recent ON pgmemory.facts (target_id, lower(recorded) DESC)
    WHERE upper_inf(recorded) AND upper_inf(valid);
