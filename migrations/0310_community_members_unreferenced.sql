-- Community memberships lose their two foreign keys (issue 12). A full detection writes a
-- membership per entity of the group (20,000 at 100k facts), and each row fired two per-row
-- referential checks (a query and a row lock each): 40,000 trigger calls, about half of the
-- membership write. Only pgmemory's own functions write memberships, with entity ids read from
-- the group's facts and community ids they just created, under the group lock; the functions
-- that delete entities or communities (sql/60_delete.sql pgmemory_internal.delete_entities,
-- pgmemory.erase_group; sql/57_communities.sql communities_after_delete) delete their
-- memberships in the same statement set, so none is left pointing at nothing.
ALTER TABLE pgmemory.community_members
    DROP CONSTRAINT IF EXISTS community_members_community_fkey,
    DROP CONSTRAINT IF EXISTS community_members_entity_fkey;
