-- Indexes whose columns are the leading columns of another index on the same table: every write
-- of a row inserted an entry into both, and any read one answers the other answers the same way
-- (a lookup by group reads the group's prefix of the wider one). entities_labels (GIN on labels)
-- served no query: every label filter is within one group and written `cardinality(labels) = 0
-- OR labels && ...`, which no index answers.
--   episodes_group_time (group_id, valid_at)        episodes_timeline (group_id, valid_at, seq)
--   entities_group (group_id)                        entities_pkey (group_id, id)
--   entity_versions_group (group_id)                 entity_versions_pkey (group_id, entity_id, recorded)
--   communities_group (group_id)                     communities_pkey (group_id, id)
DROP INDEX IF EXISTS pgmemory.episodes_group_time;
DROP INDEX IF EXISTS pgmemory.entities_group;
DROP INDEX IF EXISTS pgmemory.entities_labels;
DROP INDEX IF EXISTS pgmemory.entity_versions_group;
DROP INDEX IF EXISTS pgmemory.communities_group;
