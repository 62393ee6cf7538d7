-- As-of answers (issue 18.4).
-- Full text over entity NAMES alone: an as-of search must not let an entity
-- match through summary text written after the time asked about, so it
-- matches names here and slice facts in sql/65_entities_as_of.sql.
CREATE INDEX entities_name_tsv ON pgmemory.entities USING gin (to_tsvector('english', name));

-- An entity's facts latest-started first: an as-of summary reads the few
-- facts that started last before T without scanning all of a hub's facts.
-- They replace the plain source_id / target_id indexes (same leading column,
-- so foreign-key checks still use them).
CREATE INDEX facts_source_started ON pgmemory.facts (source_id, lower(valid) DESC NULLS LAST);
CREATE INDEX facts_target_started ON pgmemory.facts (target_id, lower(valid) DESC NULLS LAST);
DROP INDEX pgmemory.facts_source;
DROP INDEX pgmemory.facts_target;
