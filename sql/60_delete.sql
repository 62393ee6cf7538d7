-- Deleting an episode and erasing a group, consistently with the graph mirror.

-- Delete one episode of p_group, as if it had never been ingested: its claims
-- and mentions go, the facts they touched are re-folded from the remaining
-- claims and the entities it mentioned re-derived from the remaining mentions
-- (names, labels, attributes, summaries); the differences are recorded as new
-- versions. An episode of another group is "not found".
--
-- Retract (default) rewrites no history: "what did we believe last week"
-- still answers. The episode itself is kept, marked retracted (episodes.retracted_at,
-- with its provenance links in fact_episodes): known-at reads before the retract show
-- it and cite it, current reads leave it out as if deleted; an episode added again with
-- its id replaces the kept row (pgmemory_internal.forget_retracted_episode). An episode not processed yet (pending, processing, failed) derived
-- nothing and is deleted. Entities only it introduced (no live mention, no claim) are
-- retired (entities.retired_at), not deleted: known-at queries before the
-- retract still see them and their facts' versions, current ones do not. A
-- tombstone (pgmemory.retractions) keeps what a later erase must find.
--
-- Erase (p_erase) rewrites history on purpose, but only what derives from the
-- erased episode E (see pgmemory_internal.erase_history): entities only it introduced
-- are deleted with all their facts' versions; of the other facts and entities
-- it touched, the past versions E wrote and the past versions carrying its
-- text go, and the version before each such run is believed until the next
-- surviving one (as if E had never been ingested). Logged without content in
-- pgmemory.erasures. An episode retracted earlier can still be erased (its kept row goes).
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
    renamed uuid[];
    retracted integer;
    entities_removed integer;
    written_at timestamptz;
    texts text[];
    names text[];
    attrs jsonb;
    earlier jsonb;
    written timestamptz[];
    v_status text;
    b_lineages uuid[];
    b_valid tstzrange[];
    paired uuid[];
BEGIN
    PERFORM pgmemory_internal.check_request_group(p_group);  -- (a group the session is not narrowed to: refused)
    PERFORM pgmemory_internal.lock_group(p_group);
    PERFORM pgmemory_internal.count_group_change(p_group);  -- read -> decide -> apply writers re-read (sql/50_queue.sql)
    SELECT e.status INTO v_status FROM pgmemory.episodes e
     WHERE e.id = p_episode AND e.group_id = p_group AND e.retracted_at IS NULL;
    IF NOT FOUND THEN
        IF p_erase AND EXISTS (SELECT 1 FROM pgmemory.retractions r
                                WHERE r.group_id = p_group AND r.episode_id = p_episode) THEN
            RETURN pgmemory_internal.erase_retracted(p_group, p_episode);
        END IF;
        RAISE EXCEPTION 'episode % does not exist in group %', p_episode, p_group USING ERRCODE = 'P0002';
    END IF;
    seeds := ARRAY(SELECT DISTINCT x FROM pgmemory.fact_claims fc, unnest(fc.contradicts || fc.lineage) x
                    WHERE fc.group_id = p_group AND fc.episode_id = p_episode);
    mentioned := ARRAY(SELECT m.entity_id FROM pgmemory.episode_mentions m
                        WHERE m.episode_id = p_episode AND m.group_id = p_group);
    -- What E wrote and said, before it goes (for an erase now, or later through the tombstone).
    written_at := coalesce(
        (SELECT min(fc.recorded_at) FROM pgmemory.fact_claims fc
          WHERE fc.group_id = p_group AND fc.episode_id = p_episode),
        (SELECT min(m.recorded_at) FROM pgmemory.episode_mentions m
          WHERE m.group_id = p_group AND m.episode_id = p_episode));
    texts := ARRAY(SELECT fc.fact FROM pgmemory.fact_claims fc
                    WHERE fc.group_id = p_group AND fc.episode_id = p_episode
                   UNION
                   SELECT m.summary FROM pgmemory.episode_mentions m
                    WHERE m.group_id = p_group AND m.episode_id = p_episode AND m.summary <> '');
    names := ARRAY(SELECT n FROM pgmemory.episode_mentions m, unnest(ARRAY[m.said_name, m.renamed_to]) n
                    WHERE m.group_id = p_group AND m.episode_id = p_episode AND n IS NOT NULL);
    attrs := (SELECT coalesce(jsonb_agg(jsonb_build_object(a.key, a.value)), '[]')
                FROM pgmemory.episode_mentions m, jsonb_each(m.attributes) a
               WHERE m.group_id = p_group AND m.episode_id = p_episode);
    comp := pgmemory_internal.claim_component(p_group, seeds);  -- as it was, before its claims go
    SELECT coalesce(array_agg(f.lineage), '{}'), coalesce(array_agg(f.valid), '{}') INTO b_lineages, b_valid
      FROM pgmemory.facts f WHERE f.group_id = p_group AND f.lineage = ANY (comp) AND upper_inf(f.recorded);
    DELETE FROM pgmemory.fact_claims WHERE group_id = p_group AND episode_id = p_episode;
    PERFORM pgmemory_internal.prune_retractions(p_group, comp, CASE WHEN p_erase THEN texts ELSE '{}' END);
    PERFORM pgmemory_internal.rebuild_exclusions(p_group, comp);
    IF p_erase OR v_status <> 'done' THEN
        DELETE FROM pgmemory.episodes WHERE id = p_episode AND group_id = p_group;  -- its mentions and links cascade
    ELSE  -- kept as history: its mentions go (the entities are re-derived without them), its links stay
        DELETE FROM pgmemory.episode_mentions WHERE group_id = p_group AND episode_id = p_episode;
        UPDATE pgmemory.episodes SET retracted_at = now() WHERE id = p_episode AND group_id = p_group;
        UPDATE pgmemory.fact_episodes SET retracted_at = now() WHERE group_id = p_group AND episode_id = p_episode;
    END IF;
    changed := pgmemory_internal.refold_lineages(p_group, seeds);
    FOR i IN 1 .. 3 LOOP  -- values of one slot the judge linked, holding together now (keep_slots_apart)
        paired := pgmemory_internal.keep_slots_apart(p_group, comp, b_lineages, b_valid);
        EXIT WHEN cardinality(paired) = 0;
        changed := changed || pgmemory_internal.refold_lineages(p_group, paired);
    END LOOP;

    orphans := ARRAY(
        SELECT e FROM unnest(mentioned) e
         WHERE NOT EXISTS (SELECT 1 FROM pgmemory.episode_mentions m WHERE m.group_id = p_group AND m.entity_id = e)
           AND NOT EXISTS (SELECT 1 FROM pgmemory.fact_claims fc
                            WHERE fc.group_id = p_group AND (fc.source_id = e OR fc.target_id = e)));
    removed := ARRAY(SELECT DISTINCT f.id FROM pgmemory.facts f
                      WHERE f.group_id = p_group AND (f.source_id = ANY (orphans) OR f.target_id = ANY (orphans)));
    IF p_erase THEN
        -- First the communities whose summaries may quote them (current or past members): their
        -- memberships go with them below (sql/57_communities.sql).
        PERFORM pgmemory_internal.communities_after_delete(p_group, orphans, true);
        PERFORM pgmemory_internal.delete_entities(p_group, orphans);
        entities_removed := (SELECT count(*) FROM unnest(orphans) e
                              WHERE NOT EXISTS (SELECT 1 FROM pgmemory.entities x WHERE x.group_id = p_group AND x.id = e));
    ELSE
        -- Retired, not deleted: their facts' versions (closed by the re-fold) stay as history.
        UPDATE pgmemory.entities SET retired_at = now()
         WHERE group_id = p_group AND id = ANY (orphans) AND retired_at IS NULL;
        GET DIAGNOSTICS entities_removed = ROW_COUNT;
        -- Their memberships end (history, as the entities): a community left with fewer than two
        -- current members is ended by communities_after_delete, not deleted.
        UPDATE pgmemory.community_members SET ended_at = now()
         WHERE group_id = p_group AND entity_id = ANY (orphans) AND ended_at IS NULL;
    END IF;
    retracted := (SELECT count(*) FROM unnest(changed) x
                   WHERE NOT x = ANY (removed)
                     AND NOT EXISTS (SELECT 1 FROM pgmemory.facts f
                                      WHERE f.group_id = p_group AND f.id = x AND upper_inf(f.recorded))
                     AND EXISTS (SELECT 1 FROM pgmemory.facts f
                                  WHERE f.group_id = p_group AND f.id = x AND upper(f.recorded) = now()));

    touched := ARRAY(SELECT e FROM unnest(mentioned) e
                      WHERE EXISTS (SELECT 1 FROM pgmemory.entities x
                                     WHERE x.group_id = p_group AND x.id = e AND x.retired_at IS NULL)
                     UNION
                     SELECT unnest(ARRAY[f.source_id, f.target_id]) FROM pgmemory.facts f
                      WHERE f.group_id = p_group AND f.id = ANY (changed));
    renamed := pgmemory_internal.refold_entities(p_group, mentioned);
    PERFORM pgmemory_internal.derive_summaries(p_group, touched);
    PERFORM pgmemory_internal.communities_after_delete(p_group, touched, p_erase);  -- sql/57_communities.sql

    IF p_erase THEN
        PERFORM pgmemory_internal.erase_history(p_group, comp, touched,
                                       ARRAY[written_at], texts, names, attrs);
        DELETE FROM pgmemory.fact_episodes fe
         WHERE fe.group_id = p_group AND fe.fact_id = ANY (changed)
           AND NOT EXISTS (SELECT 1 FROM pgmemory.facts f WHERE f.group_id = p_group AND f.id = fe.fact_id);
        DELETE FROM pgmemory.term_stats WHERE group_id = p_group AND docs <= 0;  -- words only it used
        INSERT INTO pgmemory.erasures (group_id, episode_id, facts_affected, entities_affected)
        VALUES (p_group, p_episode, cardinality(changed) + cardinality(removed),
                cardinality(touched) + entities_removed);
        IF EXISTS (SELECT 1 FROM pgmemory.retractions r WHERE r.group_id = p_group AND r.episode_id = p_episode) THEN
            earlier := pgmemory_internal.erase_retracted(p_group, p_episode);  -- an earlier ingestion, retracted
        END IF;
    ELSE
        written := CASE WHEN written_at IS NULL THEN '{}'::timestamptz[] ELSE ARRAY[written_at] END;
        INSERT INTO pgmemory.retractions AS r (group_id, episode_id, written_at, lineages, mentioned, retired,
                                               texts, names, attributes)
        VALUES (p_group, p_episode, written, comp, mentioned,
                orphans, texts, names, attrs)
        ON CONFLICT (group_id, episode_id) DO UPDATE
           SET retracted_at = EXCLUDED.retracted_at, written_at = r.written_at || EXCLUDED.written_at,
               lineages = r.lineages || EXCLUDED.lineages, mentioned = r.mentioned || EXCLUDED.mentioned,
               retired = r.retired || EXCLUDED.retired, texts = r.texts || EXCLUDED.texts,
               names = r.names || EXCLUDED.names, attributes = r.attributes || EXCLUDED.attributes;
    END IF;
    RETURN jsonb_build_object('facts_retracted', retracted,
                              'facts_changed', (SELECT count(*) FROM unnest(changed) x
                                                 WHERE NOT x = ANY (removed) AND EXISTS (
                                                       SELECT 1 FROM pgmemory.facts f
                                                        WHERE f.group_id = p_group AND f.id = x
                                                          AND upper_inf(f.recorded))),
                              'facts_removed', cardinality(removed) + coalesce((earlier->>'facts_removed')::integer, 0),
                              'entities_removed', entities_removed + coalesce((earlier->>'entities_removed')::integer, 0),
                              'erased', p_erase, 'renamed', to_jsonb(renamed));
END
$$;

-- The retractions (pgmemory.retract_fact) of lineages p_lineages once a deleted episode's claims
-- are gone: one that withdraws no claim now withdraws nothing and goes (it copied the fact's
-- sentence and names its entities, which it would keep believed past the episode's delete, and
-- whose text past its erase); one that still withdraws others, when its sentence is among p_texts
-- (an erased episode's), takes the sentence of the first of those instead.
CREATE OR REPLACE FUNCTION pgmemory_internal.prune_retractions(p_group text, p_lineages uuid[], p_texts text[])
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pgmemory_internal.check_request_group(p_group);  -- (a group the session is not narrowed to: refused)
    DELETE FROM pgmemory.fact_claims r
     WHERE r.group_id = p_group AND r.lineage = ANY (p_lineages) AND r.kind = 'retract'
       AND NOT EXISTS (SELECT FROM pgmemory.fact_claims c
                        WHERE c.group_id = p_group AND c.lineage = r.lineage AND c.retracted_by = r.seq);
    UPDATE pgmemory.fact_claims r
       SET fact = w.fact
      FROM (SELECT DISTINCT ON (c.retracted_by) c.retracted_by, c.fact FROM pgmemory.fact_claims c
             WHERE c.group_id = p_group AND c.lineage = ANY (p_lineages) AND c.retracted_by IS NOT NULL
             ORDER BY c.retracted_by, c.seq) w
     WHERE r.group_id = p_group AND r.seq = w.retracted_by AND r.kind = 'retract' AND r.fact = ANY (p_texts);
END
$$;

-- Delete entities of p_group with every version of their facts (and their
-- provenance) and their community memberships (current and ended: no foreign
-- key cascades them, migration 0310), when no other entity's fact needs them.
CREATE OR REPLACE FUNCTION pgmemory_internal.delete_entities(p_group text, p_entities uuid[])
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    removed uuid[] := ARRAY(SELECT DISTINCT f.id FROM pgmemory.facts f
                             WHERE f.group_id = p_group
                               AND (f.source_id = ANY (p_entities) OR f.target_id = ANY (p_entities)));
    gone uuid[];
BEGIN
    PERFORM pgmemory_internal.check_request_group(p_group);  -- (a group the session is not narrowed to: refused)
    DELETE FROM pgmemory.facts WHERE group_id = p_group AND id = ANY (removed);
    DELETE FROM pgmemory.fact_episodes WHERE group_id = p_group AND fact_id = ANY (removed);
    gone := ARRAY(SELECT e.id FROM pgmemory.entities e
                   WHERE e.group_id = p_group AND e.id = ANY (p_entities)
                     AND NOT EXISTS (SELECT 1 FROM pgmemory.facts f
                                      WHERE f.group_id = p_group AND (f.source_id = e.id OR f.target_id = e.id)));
    DELETE FROM pgmemory.community_members WHERE group_id = p_group AND entity_id = ANY (gone);
    DELETE FROM pgmemory.entities WHERE group_id = p_group AND id = ANY (gone);
END
$$;

-- Erase an episode that was retracted earlier (its row, kept as history since
-- migration 0550, is deleted with its provenance links; before it, the retract
-- deleted the row): from its tombstone, the entities that retract retired (still retired) are
-- deleted with their facts' versions, and the history it wrote or that
-- carries its text is rewritten as for any erase (pgmemory_internal.erase_history).
-- Called by pgmemory.delete_episode under the group lock.
CREATE OR REPLACE FUNCTION pgmemory_internal.erase_retracted(p_group text, p_episode uuid)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    t pgmemory.retractions;
    orphans uuid[];
    removed integer;
    gone integer;
BEGIN
    PERFORM pgmemory_internal.check_request_group(p_group);  -- (a group the session is not narrowed to: refused)
    DELETE FROM pgmemory.retractions r WHERE r.group_id = p_group AND r.episode_id = p_episode RETURNING * INTO t;
    PERFORM pgmemory_internal.prune_retractions(p_group, t.lineages, t.texts);  -- (lineages: the component then)
    DELETE FROM pgmemory.episodes e
     WHERE e.group_id = p_group AND e.id = p_episode AND e.retracted_at IS NOT NULL;  -- its links cascade
    orphans := ARRAY(SELECT e FROM unnest(t.retired) e
                      WHERE EXISTS (SELECT 1 FROM pgmemory.entities x
                                     WHERE x.group_id = p_group AND x.id = e AND x.retired_at IS NOT NULL));
    removed := (SELECT count(DISTINCT f.id) FROM pgmemory.facts f
                 WHERE f.group_id = p_group AND (f.source_id = ANY (orphans) OR f.target_id = ANY (orphans)));
    -- The communities the retract ended with their memberships go too, and the summaries of
    -- those holding an entity the episode mentioned are blanked (written while it was believed,
    -- they may quote the erased text), as an erase of a current episode does (sql/57_communities.sql).
    PERFORM pgmemory_internal.communities_after_delete(p_group, ARRAY(
        SELECT unnest(orphans)
        UNION
        SELECT e FROM unnest(t.mentioned) e
         WHERE EXISTS (SELECT 1 FROM pgmemory.entities x WHERE x.group_id = p_group AND x.id = e)), true);
    PERFORM pgmemory_internal.delete_entities(p_group, orphans);
    gone := (SELECT count(*) FROM unnest(orphans) e WHERE NOT EXISTS (SELECT 1 FROM pgmemory.entities x WHERE x.group_id = p_group AND x.id = e));
    PERFORM pgmemory_internal.erase_history(p_group, pgmemory_internal.claim_component(p_group, t.lineages),
                                   ARRAY(SELECT e FROM unnest(t.mentioned) e
                                          WHERE EXISTS (SELECT 1 FROM pgmemory.entities x
                                                         WHERE x.group_id = p_group AND x.id = e)),
                                   t.written_at, t.texts, t.names, t.attributes);
    DELETE FROM pgmemory.fact_episodes fe
     WHERE fe.group_id = p_group
       AND NOT EXISTS (SELECT 1 FROM pgmemory.facts f WHERE f.group_id = p_group AND f.id = fe.fact_id);
    DELETE FROM pgmemory.term_stats WHERE group_id = p_group AND docs <= 0;
    INSERT INTO pgmemory.erasures (group_id, episode_id, facts_affected, entities_affected)
    VALUES (p_group, p_episode, removed, cardinality(t.mentioned));
    RETURN jsonb_build_object('facts_retracted', 0, 'facts_changed', 0, 'facts_removed', removed,
                              'entities_removed', gone, 'erased', true, 'renamed', '[]'::jsonb);
END
$$;

-- The history an erase rewrites, and only that: of the facts of lineages
-- p_lineages and of the entities p_entities (and any entity version of the
-- group carrying the text), the past versions (never the believed one) that
-- the erased episode wrote (recorded at one of p_written_at, its applies'
-- transaction times) or that carry its text (a sentence or description in
-- p_texts, a name in p_names, an attribute in p_attrs) that no remaining
-- episode says, recorded since its first write (what was believed before it
-- is unchanged). Each run of removed versions is bridged by the version before
-- it, which is then believed until the next surviving version (as if the
-- episode had never been ingested); a bridged fact version equal to the one
-- after it is merged into it.
CREATE OR REPLACE FUNCTION pgmemory_internal.erase_history(
    p_group text, p_lineages uuid[], p_entities uuid[], p_written_at timestamptz[],
    p_texts text[], p_names text[], p_attrs jsonb)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    own text[];
    own_names text[];
    own_attrs jsonb;
    since timestamptz;
    gone bigint[];
    p record;
    hi timestamptz;
    nxt timestamptz;
    same_vid bigint;
    same_hi timestamptz;
    gone_ids uuid[];
    gone_lo timestamptz[];
    bridge_ids uuid[] := '{}';
    bridge_lo timestamptz[] := '{}';
    bridge_hi timestamptz[] := '{}';
BEGIN
    PERFORM pgmemory_internal.check_request_group(p_group);  -- (a group the session is not narrowed to: refused)
    -- Its text that no live claim or mention still says.
    own := ARRAY(SELECT t FROM unnest(p_texts) t
                  WHERE t <> '' AND NOT EXISTS (SELECT 1 FROM pgmemory.fact_claims fc
                                                 WHERE fc.group_id = p_group AND fc.fact = t)
                    AND NOT EXISTS (SELECT 1 FROM pgmemory.episode_mentions m
                                     WHERE m.group_id = p_group AND m.summary = t));
    own_names := ARRAY(SELECT n FROM unnest(p_names) n
                        WHERE n IS NOT NULL
                          AND NOT EXISTS (SELECT 1 FROM pgmemory.episode_mentions m
                                           WHERE m.group_id = p_group AND n IN (m.said_name, m.renamed_to))
                          AND NOT EXISTS (SELECT 1 FROM pgmemory.entities e
                                           WHERE e.group_id = p_group AND e.name = n));
    own_attrs := (SELECT coalesce(jsonb_agg(a), '[]') FROM jsonb_array_elements(p_attrs) a
                   WHERE NOT EXISTS (SELECT 1 FROM pgmemory.episode_mentions m
                                      WHERE m.group_id = p_group AND m.attributes @> a));
    -- Only versions recorded from its first write on can carry its text: one believed before it
    -- had the same words from elsewhere (an episode retracted since) or longer ones containing them.
    since := (SELECT min(w) FROM unnest(p_written_at) w);

    -- Fact versions.
    gone := ARRAY(SELECT f.version_id FROM pgmemory.facts f
                   WHERE f.group_id = p_group AND f.lineage = ANY (p_lineages) AND NOT upper_inf(f.recorded)
                     AND (lower(f.recorded) = ANY (p_written_at) OR (f.fact = ANY (own) AND lower(f.recorded) >= since)));
    FOR p IN SELECT f.version_id, f.id, upper(f.recorded) AS hi FROM pgmemory.facts f
              WHERE f.group_id = p_group AND f.lineage = ANY (p_lineages) AND NOT f.version_id = ANY (gone)
                AND NOT upper_inf(f.recorded)
                AND EXISTS (SELECT 1 FROM pgmemory.facts d WHERE d.group_id = p_group AND d.id = f.id
                               AND d.version_id = ANY (gone) AND lower(d.recorded) = upper(f.recorded)) LOOP
        hi := p.hi;
        LOOP
            SELECT upper(d.recorded) INTO nxt FROM pgmemory.facts d
             WHERE d.group_id = p_group AND d.id = p.id AND d.version_id = ANY (gone) AND lower(d.recorded) = hi;
            EXIT WHEN NOT FOUND;
            hi := nxt;
        END LOOP;
        DELETE FROM pgmemory.facts WHERE group_id = p_group AND id = p.id AND version_id = ANY (gone)
                                      AND lower(recorded) >= p.hi AND upper(recorded) <= hi;
        -- The same belief continues after the bridge: one version.
        SELECT n.version_id, upper(n.recorded) INTO same_vid, same_hi FROM pgmemory.facts n
          JOIN pgmemory.facts o ON o.group_id = p_group AND o.version_id = p.version_id
         WHERE n.group_id = p_group AND n.id = p.id AND lower(n.recorded) = hi
           AND n.valid = o.valid AND n.fact = o.fact AND n.relation = o.relation
           AND n.attributes = o.attributes;
        IF FOUND THEN
            DELETE FROM pgmemory.facts WHERE group_id = p_group AND version_id = same_vid;
            hi := same_hi;
        END IF;
        UPDATE pgmemory.facts SET recorded = tstzrange(lower(recorded), hi)
         WHERE group_id = p_group AND version_id = p.version_id;
    END LOOP;
    DELETE FROM pgmemory.facts WHERE group_id = p_group AND version_id = ANY (gone);

    -- Entity versions, keyed by entity and start (an entity's versions never overlap).
    SELECT coalesce(array_agg(v.entity_id), '{}'), coalesce(array_agg(lower(v.recorded)), '{}')
      INTO gone_ids, gone_lo
      FROM pgmemory.entity_versions v
     WHERE v.group_id = p_group
       AND ((v.entity_id = ANY (p_entities) AND lower(v.recorded) = ANY (p_written_at))
            OR (lower(v.recorded) >= since
                AND (v.name = ANY (own_names)
                     -- a sentence of the summary: as said, or ended ('<it> (until <date>).')
                     OR EXISTS (SELECT 1 FROM unnest(own) t
                                 WHERE strpos(v.summary || ' ', t || ' ') > 0
                                    OR strpos(v.summary, rtrim(t, '.') || ' (until ') > 0)
                     OR EXISTS (SELECT 1 FROM jsonb_array_elements(own_attrs) a WHERE v.attributes @> a))));
    FOR p IN SELECT v.entity_id, v.recorded FROM pgmemory.entity_versions v
              WHERE v.group_id = p_group AND cardinality(gone_ids) > 0
                AND NOT EXISTS (SELECT 1 FROM unnest(gone_ids, gone_lo) g (id, lo)
                                 WHERE g.id = v.entity_id AND g.lo = lower(v.recorded))
                AND EXISTS (SELECT 1 FROM unnest(gone_ids, gone_lo) g (id, lo)
                             WHERE g.id = v.entity_id AND g.lo = upper(v.recorded)) LOOP
        hi := upper(p.recorded);
        LOOP
            SELECT upper(v.recorded) INTO nxt FROM pgmemory.entity_versions v
             WHERE v.group_id = p_group AND v.entity_id = p.entity_id AND lower(v.recorded) = hi
               AND EXISTS (SELECT 1 FROM unnest(gone_ids, gone_lo) g (id, lo)
                            WHERE g.id = v.entity_id AND g.lo = lower(v.recorded));
            EXIT WHEN NOT FOUND;
            hi := nxt;
        END LOOP;
        bridge_ids := bridge_ids || p.entity_id;
        bridge_lo := bridge_lo || lower(p.recorded);
        bridge_hi := bridge_hi || hi;
    END LOOP;
    FOR i IN 1 .. cardinality(gone_ids) LOOP
        DELETE FROM pgmemory.entity_versions
         WHERE group_id = p_group AND entity_id = gone_ids[i] AND lower(recorded) = gone_lo[i];
    END LOOP;
    FOR i IN 1 .. cardinality(bridge_ids) LOOP
        UPDATE pgmemory.entity_versions SET recorded = tstzrange(lower(recorded), bridge_hi[i])
         WHERE group_id = p_group AND entity_id = bridge_ids[i] AND lower(recorded) = bridge_lo[i];
    END LOOP;
    -- An entity it created, still mentioned or stated (a claim, as add_fact's) by others: known from
    -- the first of those, as the slice of facts is (entities_at and search list it from then on).
    UPDATE pgmemory.entities e
       SET created_at = m.first
      FROM (SELECT u.id, min(u.at) AS first FROM (
                SELECT x.entity_id AS id, x.recorded_at AS at FROM pgmemory.episode_mentions x
                 WHERE x.group_id = p_group AND x.entity_id = ANY (p_entities)
                UNION ALL
                SELECT fc.source_id, fc.recorded_at FROM pgmemory.fact_claims fc
                 WHERE fc.group_id = p_group AND fc.source_id = ANY (p_entities)
                UNION ALL
                SELECT fc.target_id, fc.recorded_at FROM pgmemory.fact_claims fc
                 WHERE fc.group_id = p_group AND fc.target_id = ANY (p_entities)) u
             GROUP BY u.id) m
     WHERE e.group_id = p_group AND e.id = m.id AND e.created_at = ANY (p_written_at) AND m.first > e.created_at;
END
$$;

-- Erase everything of one group. Returns the number of episodes erased (not counting those
-- retracted before: kept as history only, they were no longer the group's episodes).
CREATE OR REPLACE FUNCTION pgmemory.erase_group(p_group text)
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    n integer;
BEGIN
    PERFORM pgmemory_internal.check_request_group(p_group);  -- (a group the session is not narrowed to: refused)
    PERFORM pgmemory_internal.lock_group(p_group);
    PERFORM pgmemory_internal.count_group_change(p_group);  -- read -> decide -> apply writers re-read (sql/50_queue.sql)
    DELETE FROM pgmemory.facts WHERE group_id = p_group;
    DELETE FROM pgmemory.fact_claims WHERE group_id = p_group;
    DELETE FROM pgmemory.lineage_exclusions WHERE group_id = p_group;
    DELETE FROM pgmemory.lineage_components WHERE group_id = p_group;
    DELETE FROM pgmemory.fact_episodes WHERE group_id = p_group;
    DELETE FROM pgmemory.community_members WHERE group_id = p_group;
    DELETE FROM pgmemory.communities WHERE group_id = p_group;
    DELETE FROM pgmemory.community_state WHERE group_id = p_group;
    DELETE FROM pgmemory.episode_mentions WHERE group_id = p_group;
    n := (SELECT count(*) FROM pgmemory.episodes WHERE group_id = p_group AND retracted_at IS NULL);
    DELETE FROM pgmemory.episodes WHERE group_id = p_group;
    DELETE FROM pgmemory.entity_versions WHERE group_id = p_group;
    DELETE FROM pgmemory.entities WHERE group_id = p_group;
    DELETE FROM pgmemory.retractions WHERE group_id = p_group;
    DELETE FROM pgmemory.reembed_progress WHERE group_id = p_group;
    RETURN n;
END
$$;
