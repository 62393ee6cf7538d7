-- Full-text candidates with BM25 (pg_textsearch): ORDER BY text <@> query
-- uses the bm25 index (Block-Max WAND top-k). <@> is a negative score, so the
-- score returned is its negation. Filters run on the index scan's output, so
-- a heavily filtered search can return fewer than p_k rows.

CREATE OR REPLACE FUNCTION pgmemory_internal.fact_text_hits(
    p_groups text[], p_query text, p_k integer, p_point timestamptz, p_known_at timestamptz,
    p_superseded boolean, p_relations text[], p_bounds timestamptz[])
RETURNS TABLE (version_id bigint, score double precision) LANGUAGE sql STABLE AS $$
    SELECT f.version_id, -(f.search_text <@> to_bm25query(p_query, 'pgmemory.facts_bm25'))
      FROM pgmemory.facts f
     WHERE f.group_id = ANY (p_groups)
       AND pgmemory_internal.fact_in_view(f.valid, f.recorded, f.relation, p_point, p_known_at,
                                 p_superseded, p_relations, p_bounds, f.is_event)
     ORDER BY f.search_text <@> to_bm25query(p_query, 'pgmemory.facts_bm25') LIMIT p_k
$$;

CREATE OR REPLACE FUNCTION pgmemory_internal.entity_text_hits(
    p_groups text[], p_query text, p_k integer, p_known_at timestamptz, p_labels text[])
RETURNS TABLE (id uuid, score double precision) LANGUAGE sql STABLE AS $$
    SELECT e.id, -(e.name <@> to_bm25query(p_query, 'pgmemory.entities_bm25'))
      FROM pgmemory.entities e
     WHERE e.group_id = ANY (p_groups)
       AND (p_known_at IS NULL OR e.created_at <= p_known_at)
       AND (e.retired_at IS NULL OR e.retired_at > p_known_at)
       AND (cardinality(p_labels) = 0 OR e.labels && p_labels)
     ORDER BY e.name <@> to_bm25query(p_query, 'pgmemory.entities_bm25') LIMIT p_k
$$;

CREATE OR REPLACE FUNCTION pgmemory_internal.episode_text_hits(
    p_groups text[], p_query text, p_k integer, p_known_at timestamptz, p_as_of timestamptz)
RETURNS TABLE (id uuid, score double precision) LANGUAGE sql STABLE AS $$
    SELECT ep.id, -(ep.search_text <@> to_bm25query(p_query, 'pgmemory.episodes_bm25'))
      FROM pgmemory.episodes ep
     WHERE ep.group_id = ANY (p_groups)
       AND (p_known_at IS NULL OR ep.recorded_at <= p_known_at)
       AND (ep.retracted_at IS NULL OR ep.retracted_at > p_known_at)
       AND (p_as_of IS NULL OR ep.valid_at <= p_as_of)
     ORDER BY ep.search_text <@> to_bm25query(p_query, 'pgmemory.episodes_bm25') LIMIT p_k
$$;

DROP FUNCTION IF EXISTS pgmemory_internal.episode_rare_text_hits(text[], text, integer, timestamptz, timestamptz);

-- A bag of lexemes (the feedback words, a list question's category members): the lexemes as
-- one query text (BM25 of the whole text here, as episode_text_hits).
CREATE OR REPLACE FUNCTION pgmemory_internal.episode_lexeme_hits(
    p_groups text[], p_lexemes text[], p_k integer, p_known_at timestamptz, p_as_of timestamptz)
RETURNS TABLE (id uuid, score double precision) LANGUAGE sql STABLE AS $$
    SELECT h.id, h.score
      FROM pgmemory_internal.episode_text_hits(p_groups, array_to_string(p_lexemes, ' '), p_k, p_known_at, p_as_of) h
$$;

-- search_candidates' one-statement full text of a small group (tsvector.sql's text_one_pass) scores
-- tsvectors; pg_textsearch ranks with its own index, so here that path is never taken.
CREATE OR REPLACE FUNCTION pgmemory_internal.text_one_pass_docs() RETURNS double precision
    LANGUAGE sql STABLE AS 'SELECT 0::float8';
