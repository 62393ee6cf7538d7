-- Full text over entity NAMES alone: an as-of search must not let an entity
-- match through summary text written after the time asked about, so it
-- matches names here and slice-derived text in sql/65_entities_as_of.sql.
CREATE INDEX entities_name_tsv ON pgmemory.entities USING gin (to_tsvector('english', name));
