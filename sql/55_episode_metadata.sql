-- Episode metadata: a JSON object the writer attaches to an episode (a session,
-- a source, a user id), stored with it and usable as a search filter.

-- enqueue_episode takes it as p_metadata (sql/50_queue.sql).

-- The search's metadata filter is applied inside search_candidates (sql/70_search.sql).
DROP FUNCTION IF EXISTS pgmemory_internal.hit_matches_metadata(text, text, uuid, jsonb);
