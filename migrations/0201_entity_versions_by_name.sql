-- Which names an entity had: reusing a stored name embedding asks whether any earlier version of
-- the entity had another name (pgmemory/ingest/embed_episode.py). With this index that is two
-- range probes, not a read of every version of the entity (a hub gets one per summary change,
-- so the read grew with every episode; issue 9: flat ingest cost).
CREATE INDEX entity_versions_names ON pgmemory.entity_versions (group_id, entity_id, name);
