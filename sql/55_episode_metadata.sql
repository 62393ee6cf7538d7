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

-- The search's metadata filter is applied inside search_candidates (sql/70_search.sql).
DROP FUNCTION IF EXISTS pgmemory_internal.hit_matches_metadata(text, text, uuid, jsonb);
