-- Which entities were ever renamed (session 15): pgmemory.fact_versions names a version's
-- endpoints as they were when the version was recorded, and only an entity that once had
-- another name needs that look-up in entity_versions; the others keep plain joins (looking
-- for other names per entity at every read cost the view 5-10x). Set by the entity-versions
-- trigger when a name changes (sql/20_entity_versions.sql); backfilled here from the versions
-- kept so far. A column of entities, so it shares their key, tenant policy and distribution.
ALTER TABLE pgmemory.entities ADD COLUMN renamed boolean NOT NULL DEFAULT false;
UPDATE pgmemory.entities e SET renamed = true
 WHERE EXISTS (SELECT 1 FROM pgmemory.entity_versions v
                WHERE v.group_id = e.group_id AND v.entity_id = e.id AND v.name <> e.name);
-- The few renamed entities of a group, for the view's branches that start from them.
CREATE INDEX entities_renamed ON pgmemory.entities (group_id, id) WHERE renamed;
