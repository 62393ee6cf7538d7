-- Deleting an episode and erasing a group, consistently with the graph mirror.

-- Delete one episode of p_group, as if it had never been ingested: its claims
-- go, the facts they touched are re-folded from the remaining claims and the
-- differences recorded as new versions (retract: "what did we believe last
-- week" still answers). Entities only it mentioned (and no claim uses) are
-- removed with every version of their facts. With p_erase, history is
-- rewritten on purpose: earlier versions of the re-folded facts and of the
-- touched entities go too, so its text is nowhere; the erasure is logged
-- without content. An episode of another group is "not found".
CREATE OR REPLACE FUNCTION pgmemory.delete_episode(p_group text, p_episode uuid, p_erase boolean DEFAULT false)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    seeds uuid[];
    comp uuid[];
    mentioned uuid[];
    orphans uuid[];
    removed uuid[];
    changed uuid[];
    touched uuid[];
    retracted integer;
    entities_removed integer;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended(p_group, 7));
    PERFORM pgmemory.bump_group_version(p_group);  -- read -> decide -> apply writers re-read (sql/50_queue.sql)
    IF NOT EXISTS (SELECT 1 FROM pgmemory.episodes WHERE id = p_episode AND group_id = p_group) THEN
        RAISE EXCEPTION 'episode % does not exist in group %', p_episode, p_group USING ERRCODE = 'P0002';
    END IF;
    seeds := ARRAY(SELECT DISTINCT x FROM pgmemory.fact_claims fc, unnest(fc.contradicts || fc.lineage) x
                    WHERE fc.group_id = p_group AND fc.episode_id = p_episode);
    mentioned := ARRAY(SELECT m.entity_id FROM pgmemory.episode_mentions m
                        WHERE m.episode_id = p_episode AND m.group_id = p_group);
    DELETE FROM pgmemory.fact_claims WHERE group_id = p_group AND episode_id = p_episode;
    DELETE FROM pgmemory.episodes WHERE id = p_episode AND group_id = p_group;
    changed := pgmemory.refold_lineages(p_group, seeds);

    orphans := ARRAY(
        SELECT e FROM unnest(mentioned) e
         WHERE NOT EXISTS (SELECT 1 FROM pgmemory.episode_mentions m WHERE m.group_id = p_group AND m.entity_id = e)
           AND NOT EXISTS (SELECT 1 FROM pgmemory.fact_claims fc
                            WHERE fc.group_id = p_group AND (fc.source_id = e OR fc.target_id = e)));
    removed := ARRAY(SELECT DISTINCT f.id FROM pgmemory.facts f
                      WHERE f.group_id = p_group AND (f.source_id = ANY (orphans) OR f.target_id = ANY (orphans)));
    DELETE FROM pgmemory.facts WHERE group_id = p_group AND id = ANY (removed);
    DELETE FROM pgmemory.fact_episodes WHERE group_id = p_group AND fact_id = ANY (removed);
    DELETE FROM pgmemory.entities e
     WHERE e.group_id = p_group AND e.id = ANY (orphans)
       AND NOT EXISTS (SELECT 1 FROM pgmemory.facts f
                        WHERE f.group_id = p_group AND (f.source_id = e.id OR f.target_id = e.id));
    GET DIAGNOSTICS entities_removed = ROW_COUNT;
    retracted := (SELECT count(*) FROM unnest(changed) x
                   WHERE NOT x = ANY (removed)
                     AND NOT EXISTS (SELECT 1 FROM pgmemory.facts f
                                      WHERE f.group_id = p_group AND f.id = x AND upper_inf(f.recorded))
                     AND EXISTS (SELECT 1 FROM pgmemory.facts f
                                  WHERE f.group_id = p_group AND f.id = x AND upper(f.recorded) = now()));

    touched := ARRAY(SELECT e FROM unnest(mentioned) e
                      WHERE EXISTS (SELECT 1 FROM pgmemory.entities x WHERE x.group_id = p_group AND x.id = e)
                     UNION
                     SELECT unnest(ARRAY[f.source_id, f.target_id]) FROM pgmemory.facts f
                      WHERE f.group_id = p_group AND f.id = ANY (changed));
    PERFORM pgmemory.derive_summaries(p_group, touched);
    PERFORM pgmemory.communities_after_delete(p_group, touched, p_erase);  -- sql/57_communities.sql

    IF p_erase THEN
        comp := pgmemory.claim_component(p_group, seeds);
        DELETE FROM pgmemory.facts
         WHERE group_id = p_group AND lineage = ANY (comp) AND NOT upper_inf(recorded);
        DELETE FROM pgmemory.fact_episodes fe
         WHERE fe.group_id = p_group AND fe.fact_id = ANY (changed)
           AND NOT EXISTS (SELECT 1 FROM pgmemory.facts f WHERE f.group_id = p_group AND f.id = fe.fact_id);
        DELETE FROM pgmemory.entity_versions WHERE group_id = p_group AND entity_id = ANY (touched);
        DELETE FROM pgmemory.term_stats WHERE group_id = p_group AND docs <= 0;  -- words only it used
        INSERT INTO pgmemory.erasures (group_id, episode_id, facts_affected, entities_affected)
        VALUES (p_group, p_episode, cardinality(changed) + cardinality(removed),
                cardinality(touched) + entities_removed);
    END IF;
    RETURN jsonb_build_object('facts_retracted', retracted,
                              'facts_changed', (SELECT count(*) FROM unnest(changed) x
                                                 WHERE NOT x = ANY (removed) AND EXISTS (
                                                       SELECT 1 FROM pgmemory.facts f
                                                        WHERE f.group_id = p_group AND f.id = x
                                                          AND upper_inf(f.recorded))),
                              'facts_removed', cardinality(removed),
                              'entities_removed', entities_removed, 'erased', p_erase);
END
$$;

-- Erase everything of one group. Returns the number of episodes erased.
CREATE OR REPLACE FUNCTION pgmemory.erase_group(p_group text)
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    n integer;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended(p_group, 7));
    PERFORM pgmemory.bump_group_version(p_group);  -- read -> decide -> apply writers re-read (sql/50_queue.sql)
    DELETE FROM pgmemory.facts WHERE group_id = p_group;
    DELETE FROM pgmemory.fact_claims WHERE group_id = p_group;
    DELETE FROM pgmemory.fact_episodes WHERE group_id = p_group;
    DELETE FROM pgmemory.community_members WHERE group_id = p_group;
    DELETE FROM pgmemory.communities WHERE group_id = p_group;
    DELETE FROM pgmemory.community_state WHERE group_id = p_group;
    DELETE FROM pgmemory.episode_mentions WHERE group_id = p_group;
    DELETE FROM pgmemory.episodes WHERE group_id = p_group;
    GET DIAGNOSTICS n = ROW_COUNT;
    DELETE FROM pgmemory.entity_versions WHERE group_id = p_group;
    DELETE FROM pgmemory.entities WHERE group_id = p_group;
    RETURN n;
END
$$;
