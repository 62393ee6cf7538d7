-- Every key includes group_id (issue 14): one schema that a single node and a Citus
-- cluster distributed by group_id share. Primary, unique and foreign keys of the
-- per-group tables lead with group_id, so Citus can co-locate a group's rows on one
-- worker, and a lookup by id is always a lookup by (group, id). Episodes, their
-- mentions and provenance were keyed so since 0020; this does entities, their
-- versions, facts, claims, communities and community members.

-- Foreign keys that reference a key about to change go first.
ALTER TABLE pgmemory.facts DROP CONSTRAINT IF EXISTS facts_source_id_fkey;
ALTER TABLE pgmemory.facts DROP CONSTRAINT IF EXISTS facts_target_id_fkey;
ALTER TABLE pgmemory.entity_versions DROP CONSTRAINT IF EXISTS entity_versions_entity_id_fkey;
ALTER TABLE pgmemory.episode_mentions DROP CONSTRAINT IF EXISTS episode_mentions_entity_id_fkey;
ALTER TABLE pgmemory.community_members DROP CONSTRAINT IF EXISTS community_members_community_id_fkey;
ALTER TABLE pgmemory.community_members DROP CONSTRAINT IF EXISTS community_members_entity_id_fkey;

ALTER TABLE pgmemory.entities DROP CONSTRAINT entities_pkey;
ALTER TABLE pgmemory.entities ADD CONSTRAINT entities_pkey PRIMARY KEY (group_id, id);
ALTER TABLE pgmemory.communities DROP CONSTRAINT communities_pkey;
ALTER TABLE pgmemory.communities ADD CONSTRAINT communities_pkey PRIMARY KEY (group_id, id);

ALTER TABLE pgmemory.entity_versions DROP CONSTRAINT entity_versions_pkey;
ALTER TABLE pgmemory.entity_versions ADD CONSTRAINT entity_versions_pkey
    PRIMARY KEY (group_id, entity_id, recorded);
ALTER TABLE pgmemory.entity_versions ADD CONSTRAINT entity_versions_entity_fkey
    FOREIGN KEY (group_id, entity_id) REFERENCES pgmemory.entities (group_id, id) ON DELETE CASCADE;

ALTER TABLE pgmemory.facts DROP CONSTRAINT facts_pkey;
ALTER TABLE pgmemory.facts ADD CONSTRAINT facts_pkey PRIMARY KEY (group_id, version_id);
DROP INDEX pgmemory.facts_one_current;
CREATE UNIQUE INDEX facts_one_current ON pgmemory.facts (group_id, id) WHERE upper_inf(recorded);
ALTER TABLE pgmemory.facts ADD CONSTRAINT facts_source_fkey
    FOREIGN KEY (group_id, source_id) REFERENCES pgmemory.entities (group_id, id);
ALTER TABLE pgmemory.facts ADD CONSTRAINT facts_target_fkey
    FOREIGN KEY (group_id, target_id) REFERENCES pgmemory.entities (group_id, id);

ALTER TABLE pgmemory.episode_mentions ADD CONSTRAINT episode_mentions_entity_fkey
    FOREIGN KEY (group_id, entity_id) REFERENCES pgmemory.entities (group_id, id) ON DELETE CASCADE;
DROP INDEX pgmemory.episode_mentions_entity;
CREATE INDEX episode_mentions_entity ON pgmemory.episode_mentions (group_id, entity_id);

ALTER TABLE pgmemory.community_members DROP CONSTRAINT community_members_pkey;
ALTER TABLE pgmemory.community_members ADD CONSTRAINT community_members_pkey
    PRIMARY KEY (group_id, community_id, entity_id);
ALTER TABLE pgmemory.community_members ADD CONSTRAINT community_members_community_fkey
    FOREIGN KEY (group_id, community_id) REFERENCES pgmemory.communities (group_id, id) ON DELETE CASCADE;
ALTER TABLE pgmemory.community_members ADD CONSTRAINT community_members_entity_fkey
    FOREIGN KEY (group_id, entity_id) REFERENCES pgmemory.entities (group_id, id) ON DELETE CASCADE;
DROP INDEX pgmemory.community_members_entity;
CREATE INDEX community_members_entity ON pgmemory.community_members (group_id, entity_id);

ALTER TABLE pgmemory.fact_claims DROP CONSTRAINT fact_claims_pkey;
ALTER TABLE pgmemory.fact_claims ADD CONSTRAINT fact_claims_pkey PRIMARY KEY (group_id, seq);

-- Provenance of a fact is looked up by (group, fact id).
CREATE INDEX fact_episodes_fact ON pgmemory.fact_episodes (group_id, fact_id);
