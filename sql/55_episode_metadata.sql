-- Episode metadata: a JSON object the writer attaches to an episode (a session,
-- a source, a user id), stored with it and usable as a search filter.

-- enqueue_episode with metadata: the same checks and id rules as the 7-argument
-- form (sql/50_queue.sql), and the object stored with a newly enqueued episode in
-- the same transaction (so no worker sees it without). An episode already
-- present keeps the metadata it was stored with.
CREATE OR REPLACE FUNCTION pgmemory.enqueue_episode(
    p_group text, p_content text, p_kind text, p_actor text, p_reference_time timestamptz,
    p_source_description text, p_episode_id text, p_metadata jsonb)
RETURNS uuid LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_id uuid;
BEGIN
    IF p_metadata IS NOT NULL AND jsonb_typeof(p_metadata) <> 'object' THEN
        RAISE EXCEPTION 'metadata must be a JSON object, got %', jsonb_typeof(p_metadata) USING ERRCODE = '22023';
    END IF;
    v_id := pgmemory.enqueue_episode(p_group, p_content, p_kind, p_actor, p_reference_time,
                                     p_source_description, p_episode_id);
    IF coalesce(p_metadata, '{}') <> '{}' THEN
        UPDATE pgmemory.episodes e SET metadata = p_metadata
         WHERE e.group_id = p_group AND e.id = v_id AND e.status = 'pending' AND e.metadata = '{}';
    END IF;
    RETURN v_id;
END
$$;

-- Does a search hit match a metadata filter (jsonb containment, '{}' matches
-- all)? An episode by its own metadata; a fact when one of the episodes it came
-- from matches; an entity when a matching episode mentions it; a community never
-- (it is not tied to episodes).
CREATE OR REPLACE FUNCTION pgmemory_internal.hit_matches_metadata(p_kind text, p_group text, p_id uuid, p_filter jsonb)
RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT CASE
        WHEN p_filter IS NULL OR p_filter = '{}' THEN true
        WHEN p_kind = 'episode' THEN EXISTS (
            SELECT FROM pgmemory.episodes e
             WHERE e.group_id = p_group AND e.id = p_id AND e.metadata @> p_filter)
        WHEN p_kind = 'fact' THEN EXISTS (
            SELECT FROM pgmemory.fact_episodes fe
              JOIN pgmemory.episodes e ON e.group_id = fe.group_id AND e.id = fe.episode_id
             WHERE fe.group_id = p_group AND fe.fact_id = p_id AND e.metadata @> p_filter)
        WHEN p_kind = 'entity' THEN EXISTS (
            SELECT FROM pgmemory.episode_mentions m
              JOIN pgmemory.episodes e ON e.group_id = m.group_id AND e.id = m.episode_id
             WHERE m.group_id = p_group AND m.entity_id = p_id AND e.metadata @> p_filter)
        ELSE false
    END
$$;
