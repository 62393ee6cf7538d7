-- Episode ids are unique within their group only: the key of an episode is
-- (group_id, id), so one group can never find, reuse or collide with another
-- group's episode id. Provenance and mentions reference episodes by that key.
ALTER TABLE pgmemory.fact_episodes DROP CONSTRAINT fact_episodes_episode_id_fkey;
ALTER TABLE pgmemory.episode_mentions DROP CONSTRAINT episode_mentions_episode_id_fkey;
ALTER TABLE pgmemory.episodes DROP CONSTRAINT episodes_pkey;
ALTER TABLE pgmemory.episodes ADD CONSTRAINT episodes_pkey PRIMARY KEY (group_id, id);
ALTER TABLE pgmemory.fact_episodes ADD CONSTRAINT fact_episodes_episode_fkey
    FOREIGN KEY (group_id, episode_id) REFERENCES pgmemory.episodes (group_id, id) ON DELETE CASCADE;
ALTER TABLE pgmemory.episode_mentions ADD CONSTRAINT episode_mentions_episode_fkey
    FOREIGN KEY (group_id, episode_id) REFERENCES pgmemory.episodes (group_id, id) ON DELETE CASCADE;
ALTER TABLE pgmemory.episode_mentions DROP CONSTRAINT episode_mentions_pkey;
ALTER TABLE pgmemory.episode_mentions ADD CONSTRAINT episode_mentions_pkey
    PRIMARY KEY (group_id, episode_id, entity_id);
ALTER TABLE pgmemory.fact_episodes DROP CONSTRAINT fact_episodes_pkey;
ALTER TABLE pgmemory.fact_episodes ADD CONSTRAINT fact_episodes_pkey
    PRIMARY KEY (fact_id, group_id, episode_id);
DROP INDEX pgmemory.fact_episodes_episode;
CREATE INDEX fact_episodes_episode ON pgmemory.fact_episodes (group_id, episode_id);

-- The AGE mirror keys an episode's vertex by pgmemory.episode_node(group, id)
-- (sql/age/50_graph_mirror.sql): re-key the vertices mirrored so far.
UPDATE pgmemory.graph_vertices v
   SET node_id = md5('episode' || chr(31) || e.group_id || chr(31) || e.id::text)::uuid
  FROM pgmemory.episodes e
 WHERE v.node_id = e.id;
