-- φ search: candidates from cosine (pgvector HNSW), full text (BM25 via
-- pg_textsearch, or tsvector ranking) and BFS over facts, entities,
-- communities and episodes, with every filter applied, in one call.
-- Returns one row per (kind, item) with its rank in each method and the
-- details the caller needs, so a search is one round trip.

-- An OR query of the query's lexemes (plainto_tsquery would AND them).
CREATE OR REPLACE FUNCTION pgmemory_internal.or_tsquery(p_query text)
RETURNS tsquery LANGUAGE sql IMMUTABLE AS $$
    SELECT coalesce(string_agg(quote_literal(lexeme), ' | '), '')::tsquery
      FROM unnest(tsvector_to_array(to_tsvector('english', p_query))) AS lexeme
$$;

-- The most distinct query lexemes a full text scores: pgmemory.text_max_lexemes (32 by default;
-- 0: no bound). Full text costs grow with the lexemes scored (a GIN probe of each, every
-- candidate's share of each): a pasted document of 4,000 characters (510 lexemes) took 1.9 s at 10k
-- episodes, 36 ms with the bound (bench/long_queries.py). The LoCoMo dev questions hold at most 11
-- lexemes: no ordinary question is cut.
CREATE OR REPLACE FUNCTION pgmemory_internal.text_max_lexemes() RETURNS integer LANGUAGE sql STABLE AS $$
    SELECT coalesce(nullif(current_setting('pgmemory.text_max_lexemes', true), '')::integer, 32)
$$;

-- Of a query's lexemes, those that the full text of kind p_kind ('facts', 'entities' or 'episodes')
-- scores: all of them, or of more than text_max_lexemes(), the rarest that many in the groups'
-- documents of the kind (the highest idf BM25 gives; df summed over the groups, ties by lexeme),
-- in lexeme order. PL/pgSQL, one group per statement pinned by equality: Citus routes each to the
-- group's shard.
CREATE OR REPLACE FUNCTION pgmemory_internal.query_lexemes(p_groups text[], p_kind text, p_lexemes text[])
RETURNS text[] LANGUAGE plpgsql STABLE AS $$
DECLARE
    most integer := pgmemory_internal.text_max_lexemes();
    g text;
    held text[] := '{}';     -- the lexemes known to each group, and their df there
    held_df bigint[] := '{}';
BEGIN
    IF cardinality(p_lexemes) <= most OR most < 1 THEN
        RETURN p_lexemes;
    END IF;
    FOREACH g IN ARRAY p_groups LOOP
        SELECT held || array_agg(t.term), held_df || array_agg(t.docs) INTO held, held_df
          FROM pgmemory.term_stats t
         WHERE t.group_id = g AND t.kind = p_kind AND t.docs > 0 AND t.term = ANY (p_lexemes);
    END LOOP;
    RETURN ARRAY(SELECT r.term FROM (SELECT x.term FROM unnest(held, held_df) AS x (term, docs)
                                      GROUP BY x.term ORDER BY sum(x.docs), x.term LIMIT most) r
                  ORDER BY r.term);
END
$$;

-- The OR of the query's lexemes that a full text of kind p_kind scores (query_lexemes): the
-- communities' full text and the entities' of an as-of search, which rank with ts_rank_cd.
CREATE OR REPLACE FUNCTION pgmemory_internal.or_tsquery(p_groups text[], p_kind text, p_query text)
RETURNS tsquery LANGUAGE sql STABLE AS $$
    SELECT coalesce(string_agg(quote_literal(lexeme), ' | '), '')::tsquery
      FROM unnest(pgmemory_internal.query_lexemes(p_groups, p_kind,
                                                  tsvector_to_array(to_tsvector('english', p_query)))) AS lexeme
$$;

-- Does the query name the episode's actor, as pgmemory/search/rerank.py's named_speakers decides:
-- the actor's words (\w+ of its casefold) appear in a row among p_query_words (the query's words
-- so, computed by the caller, joined by spaces). NULL when SQL cannot decide it the same way: an
-- actor with a non-ASCII character (lower() and the regex classes are not casefold() and \w
-- there); on ASCII, casefold() is lower() in the C collation and \w is [a-z0-9_].
CREATE OR REPLACE FUNCTION pgmemory_internal.names_speaker(p_actor text, p_query_words text)
RETURNS boolean LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN p_actor IS NULL OR p_actor = '' THEN false
                WHEN p_actor !~ '^[\x01-\x7f]*$' THEN NULL
                ELSE strpos(' ' || p_query_words || ' ', ' ' || w.words || ' ') > 0 AND w.words <> '' END
      FROM (SELECT btrim(regexp_replace(lower(p_actor COLLATE "C"), '[^a-z0-9_]+', ' ', 'g')) AS words) w
$$;

-- Refuse ids that are not entities of the caller's groups (SQLSTATE 22023), so
-- no id of another group can enter a query. The message is the same for an id
-- of another group and for one that does not exist: it reveals nothing.
CREATE OR REPLACE FUNCTION pgmemory_internal.require_group_entities(p_groups text[], p_ids uuid[], p_what text)
RETURNS void LANGUAGE plpgsql STABLE AS $$
DECLARE
    bad uuid;
BEGIN
    SELECT s INTO bad FROM unnest(p_ids) AS s
     WHERE s IS NOT NULL
       AND NOT EXISTS (SELECT 1 FROM pgmemory.entities e WHERE e.id = s AND e.group_id = ANY (p_groups))
     LIMIT 1;
    IF bad IS NOT NULL THEN
        RAISE EXCEPTION '% % is not an entity of the searched groups', p_what, bad USING ERRCODE = '22023';
    END IF;
END
$$;

-- Entities within p_depth hops of p_seeds over believed facts visible at the
-- given time point(s), with their distance (no AGE needed). Seeds must be
-- entities of p_groups (refused otherwise). Expands one
-- frontier per hop, never revisiting an entity; p_max_entities (NULL: no
-- limit) stops the walk once that many entities are reached, which keeps the
-- nearest ones because BFS visits them in distance order.
CREATE OR REPLACE FUNCTION pgmemory.bfs_entities(
    p_groups text[], p_seeds uuid[], p_depth integer,
    p_as_of timestamptz DEFAULT NULL, p_known_at timestamptz DEFAULT NULL,
    p_max_entities integer DEFAULT NULL)
RETURNS TABLE (entity_id uuid, distance integer) LANGUAGE plpgsql STABLE AS $$
DECLARE
    seen uuid[] := ARRAY(SELECT DISTINCT s FROM unnest(p_seeds) AS s WHERE s IS NOT NULL);
    frontier uuid[] := seen;
    d integer := 0;
BEGIN
    PERFORM pgmemory_internal.require_group_entities(p_groups, seen, 'bfs seed');
    RETURN QUERY SELECT s, 0 FROM unnest(seen) AS s;
    WHILE d < p_depth AND cardinality(frontier) > 0
          AND (p_max_entities IS NULL OR cardinality(seen) < p_max_entities) LOOP
        d := d + 1;
        frontier := ARRAY(
            SELECT DISTINCT x.n FROM (
                SELECT f.target_id AS n FROM pgmemory.facts f
                 WHERE f.source_id = ANY (frontier) AND f.group_id = ANY (p_groups)
                   AND (CASE WHEN p_known_at IS NULL THEN upper_inf(f.recorded) ELSE f.recorded @> p_known_at END)
                   AND pgmemory.holds_at(f.valid, f.is_event, p_as_of)
                UNION ALL
                SELECT f.source_id FROM pgmemory.facts f
                 WHERE f.target_id = ANY (frontier) AND f.group_id = ANY (p_groups)
                   AND (CASE WHEN p_known_at IS NULL THEN upper_inf(f.recorded) ELSE f.recorded @> p_known_at END)
                   AND pgmemory.holds_at(f.valid, f.is_event, p_as_of)) x
             WHERE x.n <> ALL (seen));
        seen := seen || frontier;
        RETURN QUERY SELECT n, d FROM unnest(frontier) AS n;
    END LOOP;
END
$$;

-- Is a fact version in view: believed at p_known_at (now when NULL, or any time
-- when superseded versions are wanted), valid at p_point (any time when NULL),
-- of one of p_relations (any when empty), with its four time fields inside
-- p_bounds (see search_candidates). Inlined by the planner.
CREATE OR REPLACE FUNCTION pgmemory_internal.fact_in_view(
    p_valid tstzrange, p_recorded tstzrange, p_relation text, p_point timestamptz,
    p_known_at timestamptz, p_superseded boolean, p_relations text[], p_bounds timestamptz[],
    p_event boolean DEFAULT false)
RETURNS boolean LANGUAGE sql IMMUTABLE AS $$
    SELECT (CASE WHEN p_known_at IS NOT NULL THEN p_recorded @> p_known_at
                 ELSE p_superseded OR upper_inf(p_recorded) END)
       AND pgmemory.holds_at(p_valid, p_event, p_point)
       AND (cardinality(p_relations) = 0 OR p_relation = ANY (p_relations))
       AND (p_bounds[1] IS NULL OR lower(p_valid) >= p_bounds[1])
       AND (p_bounds[2] IS NULL OR lower(p_valid) <= p_bounds[2])
       AND (p_bounds[3] IS NULL OR upper(p_valid) >= p_bounds[3])
       AND (p_bounds[4] IS NULL OR upper(p_valid) <= p_bounds[4])
       AND (p_bounds[5] IS NULL OR lower(p_recorded) >= p_bounds[5])
       AND (p_bounds[6] IS NULL OR lower(p_recorded) <= p_bounds[6])
       AND (p_bounds[7] IS NULL OR upper(p_recorded) >= p_bounds[7])
       AND (p_bounds[8] IS NULL OR upper(p_recorded) <= p_bounds[8])
$$;

-- The group's latest done episodes (as recorded at p_known_at; NULL: now; a retracted one until its
-- retract), newest first: the
-- default BFS seeds are the entities they mention. A search of several groups on Citus reads
-- each group's with this (delegated) and keeps the latest overall, as one node does.
CREATE OR REPLACE FUNCTION pgmemory_internal.latest_episodes(p_group text, p_known_at timestamptz, p_n integer)
RETURNS TABLE (id uuid, valid_at timestamptz) LANGUAGE sql STABLE AS $$
    SELECT e.id, e.valid_at FROM pgmemory.episodes e
     WHERE e.group_id = p_group AND e.status = 'done' AND (p_known_at IS NULL OR e.recorded_at <= p_known_at)
       AND (e.retracted_at IS NULL OR e.retracted_at > p_known_at)
     ORDER BY e.valid_at DESC LIMIT p_n
$$;

-- Which of p_ids are entities of the group: a search of several groups on Citus sends each
-- group's call only that group's BFS seeds and centre.
CREATE OR REPLACE FUNCTION pgmemory_internal.entities_of_group(p_group text, p_ids uuid[])
RETURNS SETOF uuid LANGUAGE sql STABLE AS $$
    SELECT e.id FROM pgmemory.entities e WHERE e.group_id = p_group AND e.id = ANY (p_ids)
$$;

-- Options beyond the filters: kinds, methods, candidates (k per method), bfs_* (see
-- SearchConfig), center, neighbours, prf_docs / prf_terms (pseudo-relevance feedback), members (the
-- full-text lexemes of a list question's category members, pgmemory/search/categories.py); metadata (a hit is kept when it matches: facts and
-- entities through their episodes; applied after ranking, so ranks are those of the unfiltered
-- lists); for a search of several groups merged outside (pgmemory/search/fanout.py):
-- with_keys (each row's detail gets 'keys', the sort key of each of its methods, lower first,
-- 'via', the fact versions that brought an episode, and 'matches' instead of filtering by
-- metadata) and bfs_seed_episodes (BFS seeds from these episodes instead of the latest ones);
-- single_node (the caller expects one node: on a distributed database a search of several
-- groups then fails with SQLSTATE PMDST instead of running each group in turn); fuse
-- ({k, weights, limit, episodes}: the caller fuses each kind's lists by plain RRF and keeps `limit`,
-- so only the facts, entities and episodes that can be among those are returned; `episodes`,
-- {neighbour_weight, speaker_weight, query_words} or null, is how it reranks episodes after RRF:
-- null when it does otherwise, e.g. by session proximity, and then every episode is returned).
-- The options search_candidates reads, parsed in one call (jsonb_populate_record) as it starts:
-- six ARRAY(SELECT jsonb_array_elements_text(..)) were an executor run each, ~0.07 ms of every
-- call. Re-created by init (nothing stores it; search_candidates names it in its body only).
DROP TYPE IF EXISTS pgmemory_internal.search_options CASCADE;
CREATE TYPE pgmemory_internal.search_options AS (
    candidates integer, kinds text[], methods text[], as_of timestamptz, known_at timestamptz,
    include_invalidated boolean, include_superseded boolean, relation_types text[], labels text[],
    valid_at_from timestamptz, valid_at_to timestamptz, invalid_at_from timestamptz, invalid_at_to timestamptz,
    created_at_from timestamptz, created_at_to timestamptz, expired_at_from timestamptz, expired_at_to timestamptz,
    bfs_depth integer, bfs_recent_episodes integer, bfs_max_entities integer, bfs_seeds uuid[], center uuid,
    neighbours integer, neighbour_span integer, neighbour_window_s integer, prf_docs integer, prf_terms integer,
    with_keys boolean, bfs_seed_episodes uuid[], members text[]);

CREATE OR REPLACE FUNCTION pgmemory.search_candidates(
    p_groups text[], p_query text, p_embedding vector, p_opts jsonb)
RETURNS TABLE (kind text, id uuid, version_id bigint, ranks jsonb, detail jsonb)
LANGUAGE plpgsql STABLE
SET hnsw.iterative_scan = 'relaxed_order'
AS $$
#variable_conflict use_column
DECLARE
    o pgmemory_internal.search_options := jsonb_populate_record(NULL::pgmemory_internal.search_options, p_opts);
    k integer := coalesce(o.candidates, 30);
    kinds text[] := coalesce(NULLIF(o.kinds, '{}'), ARRAY['facts', 'entities', 'communities', 'episodes']);
    methods text[] := coalesce(NULLIF(o.methods, '{}'), ARRAY['cosine', 'fulltext']);
    as_of timestamptz := o.as_of;
    known_at timestamptz := o.known_at;
    -- An as-of search shows entities through the slice of facts (sql/65_entities_as_of.sql).
    as_of_view boolean := as_of IS NOT NULL OR known_at IS NOT NULL;
    include_invalid boolean := coalesce(o.include_invalidated, false);
    include_superseded boolean := coalesce(o.include_superseded, false);
    relations text[] := coalesce(o.relation_types, '{}');
    want_labels text[] := coalesce(o.labels, '{}');
    -- valid_at, invalid_at, created_at, expired_at ranges: [from, to] each (NULL = open)
    bounds timestamptz[] := ARRAY[o.valid_at_from, o.valid_at_to, o.invalid_at_from, o.invalid_at_to,
                                  o.created_at_from, o.created_at_to, o.expired_at_from, o.expired_at_to];
    bfs_depth integer := coalesce(o.bfs_depth, 2);
    bfs_recent integer := coalesce(o.bfs_recent_episodes, 3);
    bfs_max integer := coalesce(o.bfs_max_entities, 2000);
    seeds uuid[] := coalesce(o.bfs_seeds, '{}');
    center uuid := o.center;
    -- Neighbouring turns: the `neighbour_span` previous and next episodes (by valid_at, then
    -- arrival) of the best `neighbours` episode candidates, within `neighbour_window_s` of the hit.
    neighbours integer := coalesce(o.neighbours, 0);
    neighbour_span integer := coalesce(o.neighbour_span, 1);
    neighbour_window interval := make_interval(secs => coalesce(o.neighbour_window_s, 1800));
    -- Lexical pseudo-relevance feedback: the `prf_terms` best lexemes of the best `prf_docs`
    -- full-text hits of episodes (not in the query) are one more full-text query. 0 = off.
    prf_docs integer := coalesce(o.prf_docs, 0);
    prf_terms integer := coalesce(o.prf_terms, 10);
    prf_lexemes text[];
    query_lexemes text[];  -- (PRF only: parsed there)
    -- A list question's category members (lexemes): the episodes holding the rare ones are the
    -- "members" list ("Which cities has Jon visited?" -> the turns naming Rome or Paris).
    members text[] := coalesce(o.members, '{}');
    with_keys boolean := coalesce(o.with_keys, false);
    meta_filter jsonb := NULLIF(NULLIF(p_opts->'metadata', 'null'::jsonb), '{}'::jsonb);
    -- The caller's fusion of the fact lists when it is plain RRF (SearchConfig.rrf_k, the method
    -- weights and the result limit): facts it would rank below the limit are not described (their
    -- entities, episodes and JSON were most of the rows' cost). Not with with_keys (ranks are
    -- merged across groups outside) nor a metadata filter (it drops hits after ranking).
    fuse jsonb := CASE WHEN NOT with_keys AND meta_filter IS NULL THEN NULLIF(p_opts->'fuse', 'null'::jsonb) END;
    fuse_k float8 := coalesce((fuse->>'k')::float8, 60);
    fuse_limit integer := (fuse->>'limit')::integer;
    -- Episodes: RRF, + the neighbour bonus, x the speaker factor (pgmemory/search/rerank.py) bound
    -- the final score, so only the episodes that can reach the limit-th are described.
    fuse_episodes jsonb := NULLIF(fuse->'episodes', 'null'::jsonb);
    neighbour_weight float8 := coalesce((fuse_episodes->>'neighbour_weight')::float8, 0);
    speaker_weight float8 := coalesce((fuse_episodes->>'speaker_weight')::float8, 0);
    query_words text := coalesce(fuse_episodes->>'query_words', '');
    seed_episodes uuid[] := o.bfs_seed_episodes;
    point timestamptz;
    tq tsquery;  -- the query's lexemes ORed (communities only: parsed there)
    gid text;
    -- The group filter: with one group an equality (Citus routes a query to one shard only
    -- when every distributed table is pinned by '=': '= ANY' pins it in simple queries only).
    one text := CASE WHEN cardinality(p_groups) = 1 THEN p_groups[1] END;
    -- Each method's candidates, best first (a list's position is the method's rank). Every
    -- step is its own statement: either it reads the tables of the searched groups directly
    -- or it calls a function, never both, so on Citus each is one routed query (a function
    -- called inside a shard query could not query) and the planner inlines nothing there.
    recent_groups text[] := '{}';
    recent_ids uuid[] := '{}';
    recent_times timestamptz[] := '{}';
    fact_cos bigint[] := '{}';
    fact_text bigint[] := '{}';
    fact_text_score float8[] := '{}';
    fact_bfs bigint[] := '{}';
    reach_ids uuid[] := '{}';
    reach_dist integer[] := '{}';
    center_ids uuid[] := '{}';
    center_dist integer[] := '{}';
    ent_cos uuid[] := '{}';
    ent_text uuid[] := '{}';
    ent_text_score float8[] := '{}';
    ent_bfs uuid[] := '{}';
    com_cos uuid[] := '{}';
    com_text uuid[] := '{}';
    epi_facts uuid[] := '{}';
    epi_cos uuid[] := '{}';
    epi_text uuid[] := '{}';
    epi_text_score float8[] := '{}';
    epi_prf uuid[] := '{}';
    epi_prf_score float8[] := '{}';
    epi_members uuid[] := '{}';
    epi_members_score float8[] := '{}';
    epi_via jsonb := '{}';  -- episode id -> the fact versions that brought it (with_keys)
    -- With a metadata filter: the hits that match (NULL: no filter).
    keep_facts uuid[];
    keep_entities uuid[];
    keep_episodes uuid[];
    near_ids uuid[] := '{}';
    near_hits uuid[] := '{}';
    near_dist integer[] := '{}';
    w_cosine float8;  -- the facts' method weights (fuse), read once for the usual view's statement
    w_fulltext float8;
    w_bfs float8;
    hidden uuid;  -- an id passed for a search of no visible group
    out_of_range text;
    unknown jsonb := p_opts - ARRAY['candidates', 'kinds', 'methods', 'as_of', 'known_at', 'include_invalidated',
        'include_superseded', 'relation_types', 'labels', 'valid_at_from', 'valid_at_to', 'invalid_at_from',
        'invalid_at_to', 'created_at_from', 'created_at_to', 'expired_at_from', 'expired_at_to', 'bfs_depth',
        'bfs_recent_episodes', 'bfs_max_entities', 'bfs_seeds', 'center', 'neighbours', 'neighbour_span',
        'neighbour_window_s', 'prf_docs', 'prf_terms', 'with_keys', 'bfs_seed_episodes', 'metadata', 'fuse',
        'single_node', 'with_embeddings', 'members'];
BEGIN
    IF p_groups IS NULL THEN  -- (an empty array searches nothing)
        RAISE EXCEPTION 'p_groups must be an array of group ids' USING ERRCODE = '22023';
    END IF;
    IF cardinality(p_groups) > 1 THEN  -- (a group named twice counted its full-text hits twice)
        gid := (SELECT x FROM unnest(p_groups) x GROUP BY x HAVING count(*) > 1 LIMIT 1);
        IF gid IS NOT NULL THEN
            RAISE EXCEPTION 'p_groups names group % more than once', quote_literal(gid) USING ERRCODE = '22023';
        END IF;
    END IF;
    -- The options as the Python surfaces check them (SearchConfig.validate): a misspelt option,
    -- kind or method searched nothing, silently, and a negative count failed deep inside.
    IF unknown <> '{}'::jsonb THEN
        RAISE EXCEPTION 'unknown search option(s) %: see pgmemory.search_candidates in docs/sql.md',
            (SELECT string_agg(key, ', ') FROM jsonb_object_keys(unknown) AS key) USING ERRCODE = '22023';
    END IF;
    IF NOT kinds <@ ARRAY['facts', 'entities', 'communities', 'episodes'] THEN
        RAISE EXCEPTION 'unknown search kind(s) in %: use facts, entities, communities, episodes', kinds
            USING ERRCODE = '22023';
    END IF;
    IF NOT methods <@ ARRAY['cosine', 'fulltext', 'bfs'] THEN
        RAISE EXCEPTION 'unknown search method(s) in %: use cosine, fulltext, bfs', methods USING ERRCODE = '22023';
    END IF;
    out_of_range := CASE
        WHEN k NOT BETWEEN 1 AND 1000 THEN format('candidates %s (1-1000)', k)
        WHEN bfs_depth NOT BETWEEN 1 AND 5 THEN format('bfs_depth %s (1-5)', bfs_depth)
        WHEN bfs_recent NOT BETWEEN 1 AND 100 THEN format('bfs_recent_episodes %s (1-100)', bfs_recent)
        WHEN bfs_max NOT BETWEEN 1 AND 100000 THEN format('bfs_max_entities %s (1-100000)', bfs_max)
        WHEN cardinality(seeds) > 1000 THEN format('bfs_seeds: %s ids (at most 1000)', cardinality(seeds))
        WHEN neighbours NOT BETWEEN 0 AND 100 THEN format('neighbours %s (0-100)', neighbours)
        WHEN neighbour_span NOT BETWEEN 1 AND 10 THEN format('neighbour_span %s (1-10)', neighbour_span)
        WHEN o.neighbour_window_s NOT BETWEEN 0 AND 31 * 86400
            THEN format('neighbour_window_s %s (0-2678400)', o.neighbour_window_s)
        WHEN prf_docs NOT BETWEEN 0 AND 100 THEN format('prf_docs %s (0-100)', prf_docs)
        WHEN prf_terms NOT BETWEEN 1 AND 50 THEN format('prf_terms %s (1-50)', prf_terms)
        WHEN cardinality(members) > 20000 THEN format('members: %s lexemes (at most 20000)', cardinality(members)) END;
    IF out_of_range IS NOT NULL THEN
        RAISE EXCEPTION 'search option out of range: %', out_of_range USING ERRCODE = '22023';
    END IF;
    -- The search runs with its owner's rights where init could make that safe (no row-level
    -- security inside, so the planner keeps every index: sql/catalog/tenancy.sql): it searches
    -- only the groups the session may see, which is what row-level security would have let it read.
    p_groups := pgmemory_internal.session_groups(p_groups);
    one := CASE WHEN cardinality(p_groups) = 1 THEN p_groups[1] END;
    -- No group the session sees: nothing to read, and no query to run (pinned to no group, one
    -- would read every shard, which Citus refuses inside a delegated call); an id the caller
    -- passed is of no searched group, refused as below.
    IF cardinality(p_groups) = 0 THEN
        hidden := coalesce((SELECT s FROM unnest(seeds) AS s WHERE s IS NOT NULL LIMIT 1), center);
        IF hidden IS NOT NULL THEN
            RAISE EXCEPTION '% % is not an entity of the searched groups',
                CASE WHEN hidden = center AND NOT coalesce(hidden = ANY (seeds), false) THEN 'center' ELSE 'bfs seed' END, hidden
                USING ERRCODE = '22023';
        END IF;
        RETURN;
    END IF;
    -- On Citus several groups fan out: each group's search runs routed to its worker (ranks are
    -- then per group), merged here on the coordinator.
    IF cardinality(p_groups) > 1 AND coalesce((pgmemory_internal.setting('distributed'))::boolean, false) THEN
        -- A caller that took the database for one node (Memory reads the setting once when it
        -- opens) is told, so that it fans out instead: init distributed the database since.
        IF coalesce((p_opts->>'single_node')::boolean, false) THEN
            RAISE EXCEPTION 'pgmemory is distributed on Citus now: search several groups by fan-out'
                USING ERRCODE = 'PMDST';
        END IF;
        RETURN QUERY SELECT s.* FROM unnest(p_groups) AS g (gid)
                      CROSS JOIN LATERAL pgmemory.search_candidates(ARRAY[g.gid], p_query, p_embedding, p_opts) s;
        RETURN;
    END IF;
    -- Every id the caller passes must be an entity of the searched groups.
    IF cardinality(seeds) > 0 THEN  -- (a call costs ~0.2 ms even with nothing to check)
        PERFORM pgmemory_internal.require_group_entities(p_groups, seeds, 'bfs seed');
    END IF;
    IF center IS NOT NULL THEN
        PERFORM pgmemory_internal.require_group_entities(p_groups, ARRAY[center], 'center');
    END IF;
    -- Without an explicit valid-time point, "now" unless ended facts are wanted.
    point := coalesce(as_of, CASE WHEN include_invalid THEN NULL ELSE now() END);
    IF 'bfs' = ANY (methods) AND cardinality(seeds) = 0 THEN
        IF seed_episodes IS NOT NULL THEN  -- chosen by the caller (one group's call)
            recent_ids := seed_episodes;
            recent_groups := array_fill(one, ARRAY[cardinality(seed_episodes)]);
        ELSE
            -- The entities of the latest done episodes (each group's latest, then the latest overall).
            FOREACH gid IN ARRAY p_groups LOOP
                SELECT recent_groups || coalesce(array_agg(gid), '{}'), recent_ids || coalesce(array_agg(r.id), '{}'),
                       recent_times || coalesce(array_agg(r.valid_at), '{}')
                  INTO recent_groups, recent_ids, recent_times
                  FROM pgmemory_internal.latest_episodes(gid, known_at, bfs_recent) r;
            END LOOP;
            SELECT coalesce(array_agg(r.g), '{}'), coalesce(array_agg(r.id), '{}') INTO recent_groups, recent_ids
              FROM (SELECT * FROM unnest(recent_groups, recent_ids, recent_times) AS u (g, id, t)
                     ORDER BY u.t DESC LIMIT bfs_recent) r;
        END IF;
        seeds := ARRAY(
            SELECT DISTINCT m.entity_id FROM pgmemory.episode_mentions m
              JOIN unnest(recent_groups, recent_ids) AS r (g, id) ON m.group_id = r.g AND m.episode_id = r.id
             WHERE (m.group_id = one OR one IS NULL AND m.group_id = ANY (p_groups)));
    END IF;

    -- Each cosine list (facts here; entities, communities and episodes below the same way) is
    -- re-sorted by its exact distance (ties by version or id): the HNSW
    -- scan's relaxed order (hnsw.iterative_scan) and an exact plan of the same statement may list
    -- the same k facts in another order, so ranks would depend on a connection's cached plan.
    -- The sort key is `c.d + 0`, not `c.d` (pgvector's own advice for relaxed order): the planner
    -- takes the subquery's ORDER BY distance as already sorted and would only sort rows of equal
    -- distance (an Incremental Sort), keeping the scan's out-of-order rows where they came once the
    -- list is longer than the 32 rows such a sort first sorts whole (a metadata filter's widened pool,
    -- a larger `candidates`; tests/test_search_cosine_order.py).
    -- The current facts with no other filter (the usual search) as fact_in_view says them for those
    -- arguments, written out: the custom plan of this statement inlined fact_in_view (its SQL text
    -- parsed) and folded its eleven tests at every call (~6% of an edge-only search's CPU at 100k).
    -- pgmemory.holds_at written out too (sql/25_valid_time.sql, the same test): inlining it parsed
    -- and analysed its SQL text at every call's planning (~1.5% of an edge-only call's CPU at 100k).
    IF 'facts' = ANY (kinds) AND 'cosine' = ANY (methods) AND p_embedding IS NOT NULL AND known_at IS NULL
       AND NOT include_superseded AND cardinality(relations) = 0 AND cardinality(array_remove(bounds, NULL)) = 0 THEN
        fact_cos := ARRAY(
            SELECT c.version_id FROM (
                SELECT f.version_id, f.embedding <=> p_embedding AS d FROM pgmemory.facts f
                 WHERE (f.group_id = one OR one IS NULL AND f.group_id = ANY (p_groups))
                   AND upper_inf(f.recorded)
                   AND (point IS NULL OR f.valid @> point
                        OR (f.is_event AND NOT lower_inf(f.valid) AND lower(f.valid) <= point))
                 ORDER BY f.embedding <=> p_embedding
                 LIMIT k) c
             ORDER BY c.d + 0, c.version_id);
    ELSIF 'facts' = ANY (kinds) AND 'cosine' = ANY (methods) AND p_embedding IS NOT NULL THEN
        -- Any other view: the facts' HNSW index holds the current versions only (a correction
        -- would otherwise insert the same vector twice, the version it closes and the new one), so
        -- the nearest current versions in view come from it (upper_inf written out for the planner)
        -- and, for past beliefs, the nearest closed ones in view are ranked exactly (as known at a
        -- time, those recorded before it and closed after it).
        fact_cos := ARRAY(
            SELECT c.version_id FROM (
                (SELECT f.version_id, f.embedding <=> p_embedding AS d FROM pgmemory.facts f
                  WHERE (f.group_id = one OR one IS NULL AND f.group_id = ANY (p_groups))
                    AND upper_inf(f.recorded)
                    AND pgmemory_internal.fact_in_view(f.valid, f.recorded, f.relation, point, known_at,
                                              include_superseded, relations, bounds, f.is_event)
                  ORDER BY f.embedding <=> p_embedding
                  LIMIT k)
                UNION ALL
                (SELECT f.version_id, f.embedding <=> p_embedding FROM pgmemory.facts f
                  WHERE (f.group_id = one OR one IS NULL AND f.group_id = ANY (p_groups))
                    AND (known_at IS NOT NULL OR include_superseded)
                    AND NOT upper_inf(f.recorded) AND (known_at IS NULL OR f.recorded @> known_at)
                    AND pgmemory_internal.fact_in_view(f.valid, f.recorded, f.relation, point, known_at,
                                              include_superseded, relations, bounds, f.is_event)
                  ORDER BY f.embedding <=> p_embedding, f.version_id  -- (exact: ties by version)
                  LIMIT k)) c
             ORDER BY c.d + 0, c.version_id
             LIMIT k);
    END IF;
    -- One group holding few facts (at most text_one_pass_docs(), 200), in the usual view: the full
    -- text in one statement (text_one_pass, sql/fulltext/tsvector.sql: the same rows and scores as
    -- text_top_k), with the view's arguments as constants, so that fact_in_view folds to its two
    -- tests when planned. text_top_k's PL/pgSQL layers around a dozen facts were ~35% of an
    -- edge-only search's server CPU at LoCoMo scale; the test of the group's size costs the other
    -- searches one small statement (a branch of one statement for both would start the one pass's
    -- plan nodes at every call: +6% for text_top_k at 100k facts).
    IF 'facts' = ANY (kinds) AND 'fulltext' = ANY (methods) AND one IS NOT NULL AND known_at IS NULL
       AND NOT include_superseded AND cardinality(relations) = 0 AND cardinality(array_remove(bounds, NULL)) = 0
       AND pgmemory_internal.text_one_pass_docs() > 0
       AND EXISTS (SELECT FROM pgmemory.text_stats s
                    WHERE s.group_id = one AND s.kind = 'facts' AND s.docs <= pgmemory_internal.text_one_pass_docs()) THEN
        SELECT coalesce(array_agg(h.key::bigint ORDER BY h.score DESC, h.key::bigint), '{}'),
               coalesce(array_agg(h.score ORDER BY h.score DESC, h.key::bigint), '{}')
          INTO fact_text, fact_text_score
          FROM pgmemory_internal.text_one_pass('facts', one, p_query, k, NULL, point, NULL, false, '{}', '{}', '{}') h
         WHERE h.score > 0;
    ELSIF 'facts' = ANY (kinds) AND 'fulltext' = ANY (methods) THEN
        SELECT coalesce(array_agg(h.version_id ORDER BY h.score DESC, h.version_id), '{}'),
               coalesce(array_agg(h.score ORDER BY h.score DESC, h.version_id), '{}')
          INTO fact_text, fact_text_score
          FROM pgmemory_internal.fact_text_hits(p_groups, p_query, k, point, known_at, include_superseded, relations, bounds) h
         WHERE h.score > 0;
    END IF;
    IF 'bfs' = ANY (methods) AND cardinality(seeds) > 0 THEN
        SELECT coalesce(array_agg(b.entity_id), '{}'), coalesce(array_agg(b.distance), '{}')
          INTO reach_ids, reach_dist
          FROM pgmemory.bfs_entities(p_groups, seeds, bfs_depth, point, known_at, bfs_max) b;
    END IF;
    IF 'facts' = ANY (kinds) AND cardinality(reach_ids) > 0 THEN
        fact_bfs := ARRAY(
            SELECT f.version_id
              FROM pgmemory.facts f
              JOIN unnest(reach_ids, reach_dist) AS rs (entity_id, distance) ON rs.entity_id = f.source_id
              JOIN unnest(reach_ids, reach_dist) AS rt (entity_id, distance) ON rt.entity_id = f.target_id
             WHERE (f.group_id = one OR one IS NULL AND f.group_id = ANY (p_groups))
               AND pgmemory_internal.fact_in_view(f.valid, f.recorded, f.relation, point, known_at,
                                         include_superseded, relations, bounds, f.is_event)
             ORDER BY least(rs.distance, rt.distance), lower(f.recorded) DESC
             LIMIT k);
    END IF;

    IF 'entities' = ANY (kinds) AND 'cosine' = ANY (methods) AND p_embedding IS NOT NULL THEN
        ent_cos := ARRAY(
            SELECT c.id FROM (
                SELECT e.id, v.name_embedding <=> p_embedding AS d FROM pgmemory.entity_name_vectors v
                  JOIN pgmemory.entities e ON e.group_id = v.group_id AND e.id = v.entity_id
                 WHERE (v.group_id = one OR one IS NULL AND v.group_id = ANY (p_groups))
                   AND (known_at IS NULL OR e.created_at <= known_at)
                   AND (e.retired_at IS NULL OR e.retired_at > known_at)
                   AND (cardinality(want_labels) = 0 OR e.labels && want_labels)
                   AND (NOT as_of_view OR EXISTS (SELECT FROM pgmemory_internal.slice_facts_of(e.group_id, e.id, point, known_at)))
                 ORDER BY v.name_embedding <=> p_embedding
                 LIMIT k) c
             ORDER BY c.d + 0, c.id);
    END IF;
    IF 'entities' = ANY (kinds) AND 'fulltext' = ANY (methods) AND NOT as_of_view THEN
        SELECT coalesce(array_agg(h.id ORDER BY h.score DESC, h.id), '{}'),
               coalesce(array_agg(h.score ORDER BY h.score DESC, h.id), '{}')
          INTO ent_text, ent_text_score
          FROM pgmemory_internal.entity_text_hits(p_groups, p_query, k, known_at, want_labels) h
         WHERE h.score > 0;
    ELSIF 'entities' = ANY (kinds) AND 'fulltext' = ANY (methods) THEN
        SELECT coalesce(array_agg(h.id ORDER BY h.score DESC, h.id), '{}'),
               coalesce(array_agg(h.score ORDER BY h.score DESC, h.id), '{}')
          INTO ent_text, ent_text_score
          FROM pgmemory_internal.entity_text_hits_as_of(
                   p_groups, p_query, k, point, known_at, want_labels,
                   CASE WHEN 'facts' = ANY (kinds) AND NOT include_superseded THEN fact_text END) h
         WHERE h.score > 0;
    END IF;
    IF 'entities' = ANY (kinds) AND cardinality(reach_ids) > 0 THEN
        ent_bfs := ARRAY(
            SELECT rc.entity_id
              FROM unnest(reach_ids, reach_dist) AS rc (entity_id, distance)
              JOIN pgmemory.entities e ON (e.group_id = one OR one IS NULL AND e.group_id = ANY (p_groups)) AND e.id = rc.entity_id
             WHERE (known_at IS NULL OR e.created_at <= known_at)
               AND (e.retired_at IS NULL OR e.retired_at > known_at)
               AND (cardinality(want_labels) = 0 OR e.labels && want_labels)
               AND (NOT as_of_view OR EXISTS (SELECT FROM pgmemory_internal.slice_facts_of(e.group_id, e.id, point, known_at)))
             ORDER BY rc.distance, rc.entity_id
             LIMIT k);
    END IF;

    IF 'communities' = ANY (kinds) AND NOT as_of_view AND 'cosine' = ANY (methods) AND p_embedding IS NOT NULL THEN
        com_cos := ARRAY(
            SELECT c.id FROM (
                SELECT cm.id, cm.name_embedding <=> p_embedding AS d FROM pgmemory.communities cm
                 WHERE (cm.group_id = one OR one IS NULL AND cm.group_id = ANY (p_groups)) AND cm.ended_at IS NULL
                   AND cm.name_embedding IS NOT NULL  -- not yet named by a refresh: no distance to rank by
                 ORDER BY cm.name_embedding <=> p_embedding LIMIT k) c
             ORDER BY c.d + 0, c.id);
    END IF;
    IF 'communities' = ANY (kinds) AND NOT as_of_view AND 'fulltext' = ANY (methods) THEN
        tq := pgmemory_internal.or_tsquery(p_query);
        -- a long query (an OR of n lexemes has 2n - 1 nodes): its rarest lexemes among the
        -- entities, whose names name communities
        IF numnode(tq) > 2 * pgmemory_internal.text_max_lexemes() - 1 AND pgmemory_internal.text_max_lexemes() > 0 THEN
            tq := pgmemory_internal.or_tsquery(p_groups, 'entities', p_query);
        END IF;
        com_text := ARRAY(
            SELECT cm.id FROM pgmemory.communities cm
             WHERE (cm.group_id = one OR one IS NULL AND cm.group_id = ANY (p_groups)) AND cm.tsv @@ tq
               AND cm.ended_at IS NULL  -- current communities (ended versions are history)
             ORDER BY ts_rank_cd(cm.tsv, tq) DESC, cm.id LIMIT k);  -- (ties: in id order, as every list)
    END IF;

    -- Distances from the node_distance reranker's centre entity (computed once, only with one).
    IF center IS NOT NULL THEN
        SELECT coalesce(array_agg(b.entity_id), '{}'), coalesce(array_agg(b.distance), '{}')
          INTO center_ids, center_dist
          FROM pgmemory.bfs_entities(p_groups, ARRAY[center], 3, point, known_at) b;
    END IF;

    IF 'episodes' = ANY (kinds) THEN
        -- Episodes that the best facts came from: graph evidence for the raw record.
        SELECT coalesce(array_agg(x.episode_id ORDER BY x.r, x.episode_id), '{}'),
               coalesce(jsonb_object_agg(x.episode_id, x.via) FILTER (WHERE with_keys), '{}')
          INTO epi_facts, epi_via
          FROM (SELECT fe.episode_id, min(fr.r) AS r, jsonb_agg(DISTINCT fr.version_id) AS via
                  FROM (SELECT * FROM unnest(fact_cos) WITH ORDINALITY AS c (version_id, r)
                        UNION ALL SELECT * FROM unnest(fact_text) WITH ORDINALITY AS t (version_id, r)) fr
                  JOIN pgmemory.facts f ON (f.group_id = one OR one IS NULL AND f.group_id = ANY (p_groups)) AND f.version_id = fr.version_id
                  JOIN pgmemory.fact_episodes fe ON fe.group_id = f.group_id AND fe.fact_id = f.id
                  JOIN pgmemory.episodes ep ON ep.group_id = fe.group_id AND ep.id = fe.episode_id
                 WHERE (known_at IS NULL OR ep.recorded_at <= known_at)
                   AND (ep.retracted_at IS NULL OR ep.retracted_at > known_at)  -- retracted: history only
                   AND (as_of IS NULL OR ep.valid_at <= as_of)
                 GROUP BY fe.episode_id
                 ORDER BY min(fr.r), fe.episode_id
                 LIMIT k) x;
        IF 'cosine' = ANY (methods) AND p_embedding IS NOT NULL THEN
            epi_cos := ARRAY(
                SELECT c.id FROM (
                    SELECT ep.id, ep.embedding <=> p_embedding AS d FROM pgmemory.episodes ep
                     WHERE (ep.group_id = one OR one IS NULL AND ep.group_id = ANY (p_groups))
                       AND (known_at IS NULL OR ep.recorded_at <= known_at)
                       AND (ep.retracted_at IS NULL OR ep.retracted_at > known_at)
                       AND (as_of IS NULL OR ep.valid_at <= as_of)
                     ORDER BY ep.embedding <=> p_embedding LIMIT k) c
                 ORDER BY c.d + 0, c.id);
        END IF;
        IF 'fulltext' = ANY (methods) THEN
            SELECT coalesce(array_agg(h.id ORDER BY h.score DESC, h.id), '{}'),
                   coalesce(array_agg(h.score ORDER BY h.score DESC, h.id), '{}')
              INTO epi_text, epi_text_score
              FROM pgmemory_internal.episode_text_hits(p_groups, p_query, k, known_at, as_of) h
             WHERE h.score > 0;
        END IF;
        -- Pseudo-relevance feedback (lexical, RM3-like): the feedback episodes are the best
        -- `prf_docs` full-text hits; each of their lexemes not in the query and held by at least
        -- two episodes weighs its idf summed over the feedback episodes holding it; the best
        -- `prf_terms` lexemes, without the query's own (the fulltext list has those), rank the
        -- episodes holding their rare ones by BM25 as the "prf" list.
        IF 'fulltext' = ANY (methods) AND prf_docs > 0 THEN
            query_lexemes := tsvector_to_array(to_tsvector('english', p_query));
            SELECT array_agg(t.term ORDER BY t.w DESC, t.term) INTO prf_lexemes
              FROM (SELECT u.lexeme AS term,
                           sum(ln(1 + (st.docs - ts.docs + 0.5::float8) / (ts.docs + 0.5::float8))) AS w  -- float8: ln of numeric is slow
                      FROM unnest(epi_text[1:prf_docs]) AS fb (id)
                      JOIN pgmemory.episodes ep ON (ep.group_id = one OR one IS NULL AND ep.group_id = ANY (p_groups))
                           AND ep.id = fb.id
                     CROSS JOIN LATERAL unnest(ep.tsv) AS u (lexeme, positions, weights)
                      JOIN pgmemory.term_stats ts ON ts.group_id = ep.group_id AND ts.kind = 'episodes' AND ts.term = u.lexeme
                      JOIN pgmemory.text_stats st ON st.group_id = ep.group_id AND st.kind = 'episodes'
                     WHERE ts.docs >= 2 AND u.lexeme <> ALL (query_lexemes)
                     GROUP BY u.lexeme
                     ORDER BY 2 DESC, 1 LIMIT prf_terms) t;
            IF prf_lexemes IS NOT NULL THEN
                SELECT coalesce(array_agg(h.id ORDER BY h.score DESC, h.id), '{}'),
                       coalesce(array_agg(h.score ORDER BY h.score DESC, h.id), '{}')
                  INTO epi_prf, epi_prf_score
                  FROM pgmemory_internal.episode_lexeme_hits(p_groups, prf_lexemes, k, known_at, as_of) h
                 WHERE h.score > 0;
            END IF;
        END IF;
        IF 'fulltext' = ANY (methods) AND cardinality(members) > 0 THEN
            SELECT coalesce(array_agg(h.id ORDER BY h.score DESC, h.id), '{}'),
                   coalesce(array_agg(h.score ORDER BY h.score DESC, h.id), '{}')
              INTO epi_members, epi_members_score
              FROM pgmemory_internal.episode_lexeme_hits(p_groups, members, k, known_at, as_of) h
             WHERE h.score > 0;
        END IF;
    END IF;

    -- The turns next to the best episode candidates (best rank in any method first; not the
    -- category members': a turn naming Rome is evidence, the turns around it are not): a bounded
    -- range on (group, valid_at) each way, the arrival order (seq) breaking equal times.
    IF 'episodes' = ANY (kinds) AND neighbours > 0 THEN
        SELECT coalesce(array_agg(n.id), '{}'), coalesce(array_agg(sd.id), '{}'), coalesce(array_agg(n.d), '{}')
          INTO near_ids, near_hits, near_dist
          FROM (SELECT h.id, min(h.r) AS best FROM (
                    SELECT x.id, x.r FROM unnest(epi_facts) WITH ORDINALITY AS x (id, r)
                    UNION ALL SELECT x.id, x.r FROM unnest(epi_cos) WITH ORDINALITY AS x (id, r)
                    UNION ALL SELECT x.id, x.r FROM unnest(epi_text) WITH ORDINALITY AS x (id, r)
                    UNION ALL SELECT x.id, x.r FROM unnest(epi_prf) WITH ORDINALITY AS x (id, r)) h
                 GROUP BY h.id ORDER BY 2, 1 LIMIT neighbours) s
          JOIN pgmemory.episodes sd ON (sd.group_id = one OR one IS NULL AND sd.group_id = ANY (p_groups)) AND sd.id = s.id
         CROSS JOIN LATERAL (
            (SELECT x.id, (row_number() OVER (ORDER BY x.valid_at, x.seq))::integer AS d
               FROM pgmemory.episodes x
              WHERE (x.group_id = one OR one IS NULL AND x.group_id = ANY (p_groups)) AND x.group_id = sd.group_id
                AND x.valid_at >= sd.valid_at AND x.valid_at <= sd.valid_at + neighbour_window
                AND (x.valid_at, x.seq) > (sd.valid_at, sd.seq)
                AND (known_at IS NULL OR x.recorded_at <= known_at)
                AND (x.retracted_at IS NULL OR x.retracted_at > known_at)
                AND (as_of IS NULL OR x.valid_at <= as_of)
              ORDER BY x.valid_at, x.seq LIMIT neighbour_span)
            UNION ALL
            (SELECT x.id, (row_number() OVER (ORDER BY x.valid_at DESC, x.seq DESC))::integer AS d
               FROM pgmemory.episodes x
              WHERE (x.group_id = one OR one IS NULL AND x.group_id = ANY (p_groups)) AND x.group_id = sd.group_id
                AND x.valid_at <= sd.valid_at AND x.valid_at >= sd.valid_at - neighbour_window
                AND (x.valid_at, x.seq) < (sd.valid_at, sd.seq)
                AND (known_at IS NULL OR x.recorded_at <= known_at)
                AND (x.retracted_at IS NULL OR x.retracted_at > known_at)
              ORDER BY x.valid_at DESC, x.seq DESC LIMIT neighbour_span)) n;
    END IF;

    -- A metadata filter keeps the hits that match it (after ranking: the ranks stay those of the
    -- unfiltered lists): an episode by its own metadata, a fact through the episodes it came
    -- from, an entity through the episodes that mention it, a community never.
    IF meta_filter IS NOT NULL THEN
        keep_facts := ARRAY(
            SELECT DISTINCT f.id FROM pgmemory.facts f
              JOIN pgmemory.fact_episodes fe ON fe.group_id = f.group_id AND fe.fact_id = f.id
              JOIN pgmemory.episodes e ON e.group_id = fe.group_id AND e.id = fe.episode_id
             WHERE (f.group_id = one OR one IS NULL AND f.group_id = ANY (p_groups))
               AND f.version_id = ANY (fact_cos || fact_text || fact_bfs) AND e.metadata @> meta_filter
               AND (e.retracted_at IS NULL OR e.retracted_at > known_at));
        keep_entities := ARRAY(
            SELECT DISTINCT m.entity_id FROM pgmemory.episode_mentions m
              JOIN pgmemory.episodes e ON e.group_id = m.group_id AND e.id = m.episode_id
             WHERE (m.group_id = one OR one IS NULL AND m.group_id = ANY (p_groups))
               AND m.entity_id = ANY (ent_cos || ent_text || ent_bfs) AND e.metadata @> meta_filter);
        keep_episodes := ARRAY(
            SELECT e.id FROM pgmemory.episodes e
             WHERE (e.group_id = one OR one IS NULL AND e.group_id = ANY (p_groups))
               AND e.id = ANY (epi_facts || epi_cos || epi_text || epi_prf || epi_members || near_ids)
               AND e.metadata @> meta_filter);
    END IF;

    -- One statement per kind, run only when the kind has candidates (a generic plan of one
    -- statement for all four joins every kind's tables even when their lists are empty).
    -- Facts of one group in the usual view (no known_at, keys, metadata filter, centre or vectors
    -- asked for): the statement below with what those options would add left out and the method
    -- weights read once, the same rows. Its generic plan (plpgsql keeps one) reads each fact by the
    -- group's key where the general statement's skip-scans facts_pkey for the group (three index
    -- searches a fact), and it starts no plan nodes for entity_versions, the centre or the keys:
    -- at 100k, the statement alone ~1.46 -> ~1.16 ms of server CPU (x0.79), an edge-only call x0.97-0.98
    -- (bench/README.md, "Issue 17, session 12").
    IF cardinality(fact_cos) + cardinality(fact_text) + cardinality(fact_bfs) > 0 AND one IS NOT NULL
       AND known_at IS NULL AND NOT with_keys AND meta_filter IS NULL AND cardinality(center_ids) = 0
       AND NOT coalesce((p_opts->>'with_embeddings')::boolean, false) THEN
        -- (the weights as the statement below reads them per row: the same float8 values)
        w_cosine := coalesce((fuse->'weights'->>'cosine')::float8, 1);
        w_fulltext := coalesce((fuse->'weights'->>'fulltext')::float8, 1);
        w_bfs := coalesce((fuse->'weights'->>'bfs')::float8, 1);
        RETURN QUERY
        -- (each method's rank as a column: the ranks' JSON is built for the described facts only, the
        -- same object jsonb_object_agg makes; a list names a version at most once)
        WITH fact_ranked AS (
            SELECT h.version_id, min(h.r) FILTER (WHERE h.method = 1) AS r_cosine,
                   min(h.r) FILTER (WHERE h.method = 2) AS r_fulltext, min(h.r) FILTER (WHERE h.method = 3) AS r_bfs,
                   sum(h.w / (fuse_k + h.r)) AS fused FROM (
                SELECT x.version_id, 1 AS method, x.r::integer AS r, w_cosine AS w
                  FROM unnest(fact_cos) WITH ORDINALITY AS x (version_id, r)
                UNION ALL SELECT x.version_id, 2, x.r::integer, w_fulltext
                  FROM unnest(fact_text) WITH ORDINALITY AS x (version_id, r)
                UNION ALL SELECT x.version_id, 3, x.r::integer, w_bfs
                  FROM unnest(fact_bfs) WITH ORDINALITY AS x (version_id, r)) h
             GROUP BY h.version_id
        ),
        fact_hits AS (
            SELECT * FROM fact_ranked fr
             WHERE fuse_limit IS NULL
                OR fr.fused >= coalesce((SELECT y.fused FROM fact_ranked y ORDER BY y.fused DESC
                                          OFFSET fuse_limit - 1 LIMIT 1), '-infinity') - 1e-9
        )
        SELECT 'fact'::text, f.id, f.version_id,
               jsonb_strip_nulls(jsonb_build_object('cosine', fh.r_cosine, 'fulltext', fh.r_fulltext, 'bfs', fh.r_bfs)),
               jsonb_build_object(
                   'group_id', f.group_id, 'relation', f.relation, 'fact', f.fact,
                   'source_id', f.source_id, 'source', s.name, 'target_id', f.target_id, 'target', t.name,
                   'valid_from', lower(f.valid), 'valid_to', upper(f.valid),
                   'valid_from_unknown', lower_inf(f.valid),
                   'recorded_from', lower(f.recorded), 'recorded_to', upper(f.recorded),
                   'attributes', f.attributes,
                   'episodes', fx.episodes,
                   'said_offset', (SELECT extract(epoch FROM ep.reference_offset)::integer FROM pgmemory.episodes ep
                                    WHERE ep.group_id = one AND ep.id = fx.first_episode),
                   'distance', NULL::integer, 'embedding', NULL::text)
          FROM fact_hits fh
          JOIN pgmemory.facts f ON f.group_id = one AND f.version_id = fh.version_id
          JOIN pgmemory.entities s ON s.group_id = one AND s.id = f.source_id
          JOIN pgmemory.entities t ON t.group_id = one AND t.id = f.target_id
          -- Its episodes, the first of which gives its speaker's offset (the context names a day by it)
          CROSS JOIN LATERAL (
              SELECT coalesce(jsonb_agg(fe.episode_id ORDER BY fe.created_at), '[]') AS episodes,
                     (array_agg(fe.episode_id ORDER BY fe.created_at))[1] AS first_episode
                FROM pgmemory.fact_episodes fe
               WHERE fe.group_id = one AND fe.fact_id = f.id
                 AND fe.retracted_at IS NULL) fx;  -- a retracted episode: history only
    ELSIF cardinality(fact_cos) + cardinality(fact_text) + cardinality(fact_bfs) > 0 THEN
        RETURN QUERY
        WITH fact_ranked AS (
            SELECT h.version_id, jsonb_object_agg(h.method, h.r) AS ranks, max(h.s) AS text_score,
                   sum(coalesce((fuse->'weights'->>h.method)::float8, 1) / (fuse_k + h.r)) AS fused FROM (
                SELECT x.version_id, 'cosine' AS method, x.r::integer AS r, NULL::float8 AS s
                  FROM unnest(fact_cos) WITH ORDINALITY AS x (version_id, r)
                UNION ALL SELECT x.version_id, 'fulltext', x.r::integer, x.s
                  FROM unnest(fact_text, fact_text_score) WITH ORDINALITY AS x (version_id, s, r)
                UNION ALL SELECT x.version_id, 'bfs', x.r::integer, NULL FROM unnest(fact_bfs) WITH ORDINALITY AS x (version_id, r)) h
             GROUP BY h.version_id
        ),
        -- With `fuse` (see above), only the facts whose RRF score reaches the limit-th one (less a
        -- margin for the order of summation) are described; the others could not be returned.
        fact_hits AS (
            SELECT * FROM fact_ranked fr
             WHERE fuse_limit IS NULL
                OR fr.fused >= coalesce((SELECT y.fused FROM fact_ranked y ORDER BY y.fused DESC
                                          OFFSET fuse_limit - 1 LIMIT 1), '-infinity') - 1e-9
        ),
        from_center AS (
            SELECT * FROM unnest(center_ids, center_dist) AS b (entity_id, distance)
        )
        SELECT 'fact'::text, f.id, f.version_id, fh.ranks, jsonb_build_object(
                   'group_id', f.group_id, 'relation', f.relation, 'fact', f.fact,
                   -- An endpoint's name as recorded at known_at, when it has changed since (its
                   -- entity_versions row then; versions do not overlap). Without known_at (the usual
                   -- view) the current name, with no probe of entity_versions (two LEFT JOINs that
                   -- matched nothing there probed its index twice per fact).
                   'source_id', f.source_id,
                   'source', CASE WHEN known_at IS NULL THEN s.name ELSE coalesce(
                                 (SELECT sv.name FROM pgmemory.entity_versions sv
                                   WHERE sv.group_id = s.group_id AND (sv.group_id = one OR one IS NULL)
                                     AND sv.entity_id = s.id AND sv.recorded @> known_at), s.name) END,
                   'target_id', f.target_id,
                   'target', CASE WHEN known_at IS NULL THEN t.name ELSE coalesce(
                                 (SELECT tv.name FROM pgmemory.entity_versions tv
                                   WHERE tv.group_id = t.group_id AND (tv.group_id = one OR one IS NULL)
                                     AND tv.entity_id = t.id AND tv.recorded @> known_at), t.name) END,
                   'valid_from', lower(f.valid), 'valid_to', upper(f.valid),
                   'valid_from_unknown', lower_inf(f.valid),
                   'recorded_from', lower(f.recorded), 'recorded_to', upper(f.recorded),
                   'attributes', f.attributes,
                   'episodes', fx.episodes,
                   'said_offset', (SELECT extract(epoch FROM ep.reference_offset)::integer FROM pgmemory.episodes ep
                                    WHERE ep.group_id = f.group_id AND (ep.group_id = one OR one IS NULL)
                                      AND ep.id = fx.first_episode),
                   'distance', (SELECT min(b.distance) FROM from_center b
                                 WHERE b.entity_id IN (f.source_id, f.target_id)),
                   'embedding', CASE WHEN (p_opts->>'with_embeddings')::boolean THEN f.embedding::text END)
               || CASE WHEN with_keys THEN jsonb_build_object(
                      'matches', meta_filter IS NULL OR f.id = ANY (keep_facts),
                      'keys', jsonb_strip_nulls(jsonb_build_object(
                          'cosine', CASE WHEN fh.ranks->'cosine' IS NOT NULL THEN f.embedding <=> p_embedding END,
                          'fulltext', -fh.text_score,
                          'bfs', CASE WHEN fh.ranks->'bfs' IS NOT NULL THEN jsonb_build_array(
                                     (SELECT min(r.d) FROM unnest(reach_ids, reach_dist) AS r (id, d)
                                       WHERE r.id IN (f.source_id, f.target_id)),
                                     -extract(epoch FROM lower(f.recorded))) END)))
                  ELSE '{}'::jsonb END
          FROM fact_hits fh
          JOIN pgmemory.facts f ON (f.group_id = one OR one IS NULL AND f.group_id = ANY (p_groups)) AND f.version_id = fh.version_id
          JOIN pgmemory.entities s ON s.group_id = f.group_id AND s.id = f.source_id
          JOIN pgmemory.entities t ON t.group_id = f.group_id AND t.id = f.target_id
          -- Its episodes (as known at known_at), the first of which gives its speaker's offset
          CROSS JOIN LATERAL (
              SELECT coalesce(jsonb_agg(fe.episode_id ORDER BY fe.created_at), '[]') AS episodes,
                     (array_agg(fe.episode_id ORDER BY fe.created_at))[1] AS first_episode
                FROM pgmemory.fact_episodes fe
               WHERE fe.group_id = f.group_id AND (fe.group_id = one OR one IS NULL) AND fe.fact_id = f.id
                 AND (known_at IS NULL OR fe.created_at <= known_at)
                 AND (fe.retracted_at IS NULL OR fe.retracted_at > known_at)) fx  -- retracted by then
         WHERE meta_filter IS NULL OR with_keys OR f.id = ANY (keep_facts);
    END IF;
    IF cardinality(ent_cos) + cardinality(ent_text) + cardinality(ent_bfs) > 0 THEN
        RETURN QUERY
        WITH ent_hits AS (
            SELECT h.id, jsonb_object_agg(h.method, h.r) AS ranks, max(h.s) AS text_score,
                   sum(coalesce((fuse->'weights'->>h.method)::float8, 1) / (fuse_k + h.r)) AS fused FROM (
                SELECT x.id, 'cosine' AS method, x.r::integer AS r, NULL::float8 AS s FROM unnest(ent_cos) WITH ORDINALITY AS x (id, r)
                UNION ALL SELECT x.id, 'fulltext', x.r::integer, x.s FROM unnest(ent_text, ent_text_score) WITH ORDINALITY AS x (id, s, r)
                UNION ALL SELECT x.id, 'bfs', x.r::integer, NULL FROM unnest(ent_bfs) WITH ORDINALITY AS x (id, r)) h
             GROUP BY h.id
        ),
        -- Each candidate with its summary; with `fuse`, the caller ranks entities by RRF, those
        -- with a summary first (rerank.described_first), and keeps `limit`: only the entities that
        -- reach the limit-th one in that order (less a margin for the order of summation) are
        -- described. One join and one window: a statement with more steps costs more to plan.
        ent_rows AS (
            SELECT eh.*, e.group_id, e.name, e.labels, e.attributes, sm.summary,
                   coalesce(sm.summary, '') <> '' AS described
              FROM ent_hits eh
              JOIN pgmemory.entities e ON (e.group_id = one OR one IS NULL AND e.group_id = ANY (p_groups)) AND e.id = eh.id
             CROSS JOIN LATERAL (SELECT CASE WHEN as_of_view THEN (SELECT sa.summary FROM pgmemory_internal.entity_summary_at(
                                                 e.group_id, e.id, point, known_at) sa)
                                             ELSE e.summary END AS summary) sm
        ),
        ent_cut AS (
            SELECT r.*, nth_value(r.described, fuse_limit) OVER w AS cut_described,
                   nth_value(r.fused, fuse_limit) OVER w AS cut_fused
              FROM ent_rows r
            WINDOW w AS (ORDER BY r.described DESC, r.fused DESC ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING)
        ),
        ent_kept AS (
            SELECT c.* FROM ent_cut c
             WHERE c.cut_fused IS NULL OR (c.described, c.fused) >= (c.cut_described, c.cut_fused - 1e-9)
        ),
        from_center AS (
            SELECT * FROM unnest(center_ids, center_dist) AS b (entity_id, distance)
        )
        SELECT 'entity', eh.id, NULL::bigint, eh.ranks, jsonb_build_object(
                   'group_id', eh.group_id, 'name', coalesce(ev.name, eh.name),
                   'summary', eh.summary,
                   'labels', coalesce(ev.labels, eh.labels), 'attributes', coalesce(ev.attributes, eh.attributes),
                   'mentions', (SELECT count(*) FROM pgmemory.episode_mentions m
                                 WHERE m.group_id = eh.group_id AND (m.group_id = one OR one IS NULL) AND m.entity_id = eh.id),
                   'distance', (SELECT b.distance FROM from_center b WHERE b.entity_id = eh.id),
                   'embedding', CASE WHEN (p_opts->>'with_embeddings')::boolean THEN (
                                    SELECT nv.name_embedding::text FROM pgmemory.entity_name_vectors nv
                                     WHERE nv.group_id = eh.group_id AND (nv.group_id = one OR one IS NULL)
                                       AND nv.entity_id = eh.id) END)
               || CASE WHEN with_keys THEN jsonb_build_object(
                      'matches', meta_filter IS NULL OR eh.id = ANY (keep_entities),
                      'keys', jsonb_strip_nulls(jsonb_build_object(
                          'cosine', CASE WHEN eh.ranks->'cosine' IS NOT NULL THEN (
                                        SELECT nv.name_embedding <=> p_embedding FROM pgmemory.entity_name_vectors nv
                                         WHERE nv.group_id = eh.group_id AND (nv.group_id = one OR one IS NULL)
                                           AND nv.entity_id = eh.id) END,
                          'fulltext', -eh.text_score,
                          'bfs', CASE WHEN eh.ranks->'bfs' IS NOT NULL THEN jsonb_build_array(
                                     (SELECT min(r.d) FROM unnest(reach_ids, reach_dist) AS r (id, d) WHERE r.id = eh.id)) END)))
                  ELSE '{}'::jsonb END
          FROM ent_kept eh
          LEFT JOIN pgmemory.entity_versions ev ON (ev.group_id = one OR one IS NULL AND ev.group_id = ANY (p_groups)) AND ev.group_id = eh.group_id
               AND ev.entity_id = eh.id AND ev.recorded @> coalesce(known_at, '-infinity')
         WHERE meta_filter IS NULL OR with_keys OR eh.id = ANY (keep_entities);
    END IF;
    IF cardinality(com_cos) + cardinality(com_text) > 0 THEN
        RETURN QUERY
        WITH com_hits AS (
            SELECT h.id, jsonb_object_agg(h.method, h.r) AS ranks FROM (
                SELECT x.id, 'cosine' AS method, x.r::integer AS r FROM unnest(com_cos) WITH ORDINALITY AS x (id, r)
                UNION ALL SELECT x.id, 'fulltext', x.r::integer FROM unnest(com_text) WITH ORDINALITY AS x (id, r)) h
             GROUP BY h.id
        )
        SELECT 'community', cm.id, NULL::bigint, ch.ranks, jsonb_build_object(
                   'group_id', cm.group_id, 'name', cm.name, 'summary', cm.summary,
                   'embedding', CASE WHEN (p_opts->>'with_embeddings')::boolean THEN cm.name_embedding::text END)
               || CASE WHEN with_keys THEN jsonb_build_object(
                      'matches', meta_filter IS NULL,
                      'keys', jsonb_strip_nulls(jsonb_build_object(
                          'cosine', CASE WHEN ch.ranks->'cosine' IS NOT NULL THEN cm.name_embedding <=> p_embedding END,
                          'fulltext', CASE WHEN ch.ranks->'fulltext' IS NOT NULL THEN -ts_rank_cd(cm.tsv, tq) END)))
                  ELSE '{}'::jsonb END
          FROM com_hits ch JOIN pgmemory.communities cm ON (cm.group_id = one OR one IS NULL AND cm.group_id = ANY (p_groups)) AND cm.id = ch.id
         WHERE meta_filter IS NULL OR with_keys;
    END IF;
    IF cardinality(epi_facts) + cardinality(epi_cos) + cardinality(epi_text) + cardinality(epi_prf)
       + cardinality(epi_members) + cardinality(near_ids) > 0 THEN
        RETURN QUERY
        WITH epi_hits AS (
            SELECT h.id, jsonb_object_agg(h.method, h.r) AS ranks, max(h.s) FILTER (WHERE h.method = 'fulltext') AS text_score,
                   max(h.s) FILTER (WHERE h.method = 'prf') AS prf_score,
                   max(h.s) FILTER (WHERE h.method = 'members') AS members_score,
                   sum(coalesce((fuse->'weights'->>h.method)::float8, 1) / (fuse_k + h.r)) AS fused FROM (
                SELECT x.id, 'facts' AS method, x.r::integer AS r, NULL::float8 AS s FROM unnest(epi_facts) WITH ORDINALITY AS x (id, r)
                UNION ALL SELECT x.id, 'cosine', x.r::integer, NULL FROM unnest(epi_cos) WITH ORDINALITY AS x (id, r)
                UNION ALL SELECT x.id, 'fulltext', x.r::integer, x.s FROM unnest(epi_text, epi_text_score) WITH ORDINALITY AS x (id, s, r)
                UNION ALL SELECT x.id, 'prf', x.r::integer, x.s FROM unnest(epi_prf, epi_prf_score) WITH ORDINALITY AS x (id, s, r)
                UNION ALL SELECT x.id, 'members', x.r::integer, x.s
                            FROM unnest(epi_members, epi_members_score) WITH ORDINALITY AS x (id, s, r)) h
             GROUP BY h.id
        ),
        near AS (
            SELECT * FROM unnest(near_ids, near_hits, near_dist) AS x (id, hit, d)
        ),
        -- Each episode with its ranks, and, for a neighbour, {hit: distance in turns}; `fused`: its
        -- RRF score plus the neighbour bonus (rerank.neighbours) when fuse.episodes asks for it.
        epi_all AS (
            SELECT coalesce(h.id, nb.id) AS id, coalesce(h.ranks, '{}'::jsonb) AS ranks, h.text_score, h.prf_score,
                   h.members_score, nb.hits,
                   coalesce(h.fused, 0) + neighbour_weight * coalesce(nb.bonus, 0) AS fused
              FROM epi_hits h
              FULL JOIN (SELECT n.id, jsonb_object_agg(n.hit, n.d) AS hits, max(s.fused / n.d) AS bonus
                           FROM near n LEFT JOIN epi_hits s ON s.id = n.hit GROUP BY n.id) nb
                ON nb.id = h.id
        ),
        -- Each episode with what is returned of it (one join; its vector only when asked for).
        epi_rows AS (
            SELECT eph.*, ep.group_id, ep.content, ep.kind, ep.actor, ep.valid_at, ep.recorded_at, ep.source_description,
                   extract(epoch FROM ep.reference_offset)::integer AS said_offset,
                   CASE WHEN with_keys OR (p_opts->>'with_embeddings')::boolean THEN ep.embedding END AS embedding
              FROM epi_all eph
              JOIN pgmemory.episodes ep ON ep.id = eph.id AND (ep.group_id = one OR one IS NULL AND ep.group_id = ANY (p_groups))
        ),
        speakers AS MATERIALIZED (  -- each actor once (no actor: '', never named)
            SELECT s.actor, CASE WHEN fuse_episodes IS NOT NULL AND speaker_weight > 0
                                 THEN pgmemory_internal.names_speaker(s.actor, query_words) ELSE false END AS named
              FROM (SELECT DISTINCT coalesce(x.actor, '') AS actor FROM epi_rows x) s
        ),
        -- With fuse.episodes, each episode's final score (rerank.py: RRF, + the neighbour bonus,
        -- x the speaker factor) lies in [low, high]: they differ only when SQL cannot tell whether
        -- the query names the actor (names_speaker is NULL). An episode whose `high` is below the
        -- limit-th `low` (less a margin for the order of summation) cannot be returned: `top` is
        -- false (NULL: no cut, fewer candidates than the limit or no fuse.episodes).
        epi_cut AS (
            SELECT b.*, b.high >= nth_value(b.low, CASE WHEN fuse_episodes IS NOT NULL THEN fuse_limit END)
                                     OVER (ORDER BY b.low DESC ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING)
                                  - 1e-9 AS top
              FROM (SELECT r.*, r.fused * CASE WHEN sp.named THEN 1 + speaker_weight ELSE 1 END AS low,
                           r.fused * CASE WHEN sp.named IS NOT FALSE THEN 1 + speaker_weight ELSE 1 END AS high
                      FROM epi_rows r JOIN speakers sp ON sp.actor = coalesce(r.actor, '')) b
        )
        -- Returned: those that can reach the top, and the hits such a neighbour takes its bonus
        -- from: the caller fuses the rows it receives (rerank.py stays the one definition of the
        -- final score; the bounds here only prune), so it scores that neighbour the same as when
        -- every candidate is returned.
        SELECT 'episode', eph.id, NULL::bigint, eph.ranks, jsonb_build_object(
                   'group_id', eph.group_id, 'content', eph.content, 'kind', eph.kind, 'actor', eph.actor,
                   'valid_at', eph.valid_at, 'said_offset', eph.said_offset, 'recorded_at', eph.recorded_at,
                   'source_description', eph.source_description,
                   'neighbour_of', eph.hits,
                   'embedding', CASE WHEN (p_opts->>'with_embeddings')::boolean THEN eph.embedding::text END)
               || CASE WHEN with_keys THEN jsonb_build_object(
                      'matches', meta_filter IS NULL OR eph.id = ANY (keep_episodes),
                      'via', epi_via->(eph.id::text),
                      'keys', jsonb_strip_nulls(jsonb_build_object(
                          'cosine', CASE WHEN eph.ranks->'cosine' IS NOT NULL THEN eph.embedding <=> p_embedding END,
                          'fulltext', -eph.text_score, 'prf', -eph.prf_score, 'members', -eph.members_score)))
                  ELSE '{}'::jsonb END
          FROM epi_cut eph
         WHERE (meta_filter IS NULL OR with_keys OR eph.id = ANY (keep_episodes))
           AND (eph.top IS NOT FALSE
                OR eph.id IN (SELECT n.hit FROM near n JOIN epi_cut t ON t.id = n.id WHERE t.top IS NOT FALSE));
    END IF;
END
$$;

-- The search of one group: what every one-group search calls. On Citus it is delegated to
-- the worker that holds the group (its first argument is the group), so the whole search
-- runs there, against that group's shards only. One SQL statement, so on one node the planner
-- inlines it: the call is search_candidates' alone (a plpgsql layer copied every row through a
-- second tuplestore). On Citus its SET clause (storage/citus.py) keeps it a function, delegated.
CREATE OR REPLACE FUNCTION pgmemory.search_group(
    p_group text, p_query text, p_embedding vector, p_opts jsonb)
RETURNS TABLE (kind text, id uuid, version_id bigint, ranks jsonb, detail jsonb)
LANGUAGE sql STABLE AS $$
    SELECT * FROM pgmemory.search_candidates(ARRAY[p_group], p_query, p_embedding, p_opts)
$$;
