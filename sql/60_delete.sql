-- Deleting an episode and erasing a group, consistently with the graph mirror.

-- Delete one episode of group p_group (episode ids are unique per group: an id
-- of another group does not exist here). Facts it alone supported are retracted
-- (history kept) or, when an endpoint entity is left with no mentions, removed with it.
CREATE OR REPLACE FUNCTION pgmemory.delete_episode(p_group text, p_episode uuid)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    g text := p_group;
    orphans uuid[];
    only_here uuid[];
    removed uuid[];
    retracted integer := 0;
    fid uuid;
BEGIN
    PERFORM 1 FROM pgmemory.episodes WHERE group_id = g AND id = p_episode;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'episode % does not exist', p_episode USING ERRCODE = 'P0002';
    END IF;
    PERFORM pg_advisory_xact_lock(hashtextextended(g, 7));
    only_here := ARRAY(
        SELECT fe.fact_id FROM pgmemory.fact_episodes fe
         WHERE fe.group_id = g AND fe.episode_id = p_episode
           AND NOT EXISTS (SELECT 1 FROM pgmemory.fact_episodes o
                            WHERE o.fact_id = fe.fact_id AND o.episode_id <> p_episode));
    orphans := ARRAY(
        SELECT m.entity_id FROM pgmemory.episode_mentions m
         WHERE m.group_id = g AND m.episode_id = p_episode
           AND NOT EXISTS (SELECT 1 FROM pgmemory.episode_mentions o
                            WHERE o.entity_id = m.entity_id AND o.episode_id <> p_episode));
    removed := ARRAY(
        SELECT DISTINCT f.id FROM pgmemory.facts f
         WHERE f.id = ANY (only_here)
           AND (f.source_id = ANY (orphans) OR f.target_id = ANY (orphans)));
    DELETE FROM pgmemory.facts WHERE id = ANY (removed);
    FOREACH fid IN ARRAY only_here LOOP
        IF NOT fid = ANY (removed) AND pgmemory.retract_fact(fid) THEN
            retracted := retracted + 1;
        END IF;
    END LOOP;
    DELETE FROM pgmemory.episodes WHERE group_id = g AND id = p_episode;
    DELETE FROM pgmemory.entities e
     WHERE e.id = ANY (orphans)
       AND NOT EXISTS (SELECT 1 FROM pgmemory.facts f WHERE f.source_id = e.id OR f.target_id = e.id);
    RETURN jsonb_build_object('facts_retracted', retracted, 'facts_removed', cardinality(removed),
                              'entities_removed', (SELECT count(*) FROM unnest(orphans) o
                                                    WHERE NOT EXISTS (SELECT 1 FROM pgmemory.entities e
                                                                       WHERE e.id = o)));
END
$$;

-- Erase everything of one group. Returns the number of episodes erased.
CREATE OR REPLACE FUNCTION pgmemory.erase_group(p_group text)
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    n integer;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended(p_group, 7));
    DELETE FROM pgmemory.facts WHERE group_id = p_group;
    DELETE FROM pgmemory.fact_episodes WHERE group_id = p_group;
    DELETE FROM pgmemory.community_members WHERE group_id = p_group;
    DELETE FROM pgmemory.communities WHERE group_id = p_group;
    DELETE FROM pgmemory.episode_mentions WHERE group_id = p_group;
    DELETE FROM pgmemory.episodes WHERE group_id = p_group;
    GET DIAGNOSTICS n = ROW_COUNT;
    DELETE FROM pgmemory.entity_versions WHERE group_id = p_group;
    DELETE FROM pgmemory.entities WHERE group_id = p_group;
    RETURN n;
END
$$;
