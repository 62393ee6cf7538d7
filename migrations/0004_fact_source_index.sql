-- Every foreign key gets a btree led by its column: facts.source_id had only
-- composite or partial indexes, so deleting an entity scanned all facts.
CREATE INDEX facts_source ON pgmemory.facts (source_id);
