-- Full-text candidates ranked by Okapi BM25 computed from Postgres' own tsvector (the
-- default mode; needs no extension, cannot hang). Corpus statistics per group come from
-- pgmemory.text_stats / term_stats (kept by sql/fulltext/text_stats.sql); candidates are the
-- rows matching any query lexeme (GIN). sql/fulltext/bm25.sql defines the same functions
-- with pg_textsearch (opt-in).
--
-- k1 = 0.3 and b = 0.1 were chosen on the two LoCoMo dev conversations
-- (bench/fulltext_ranking.py, cross-validated between them; figures in bench/README.md):
-- short chat turns want term frequency to saturate fast and length to matter little.

-- The Okapi BM25 share of one query lexeme occurring p_tf times in a document of p_len
-- distinct lexemes (k1 = 0.3, b = 0.1). The candidate functions below find documents term by
-- term through the GIN index (tsv @@ one lexeme), read tf with ts_rank_cd (with unit weights
-- and no normalisation, a one-lexeme query's cover density is its occurrence count) and sum
-- per document, so no tsvector is unnested per row: that cost ~80 us a row, 30 ms for a
-- LoCoMo question naming a speaker (issue 17). The length counts distinct lexemes, not
-- positions; with b = 0.1 that moves a score by a fraction of a percent (same recall on the
-- LoCoMo dev file, bench/fulltext_ranking.py).
-- tf (k1 + 1) / (tf + K) is written (k1 + 1) (1 - K / (tf + K)), with tf once: inlined, the
-- ts_rank_cd that gives tf then runs once per lexeme and row, not twice (float constants: no
-- numeric arithmetic per row).
CREATE OR REPLACE FUNCTION pgmemory_internal.bm25_term(p_tf double precision, p_len integer, p_avgdl double precision)
RETURNS double precision LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT 1.3::float8 * (1 - 0.3::float8 * (0.9::float8 + 0.1::float8 * p_len / p_avgdl)
                              / (p_tf + 0.3::float8 * (0.9::float8 + 0.1::float8 * p_len / p_avgdl)))
$$;

-- The query's lexemes known to each searched group: idf = ln(1 + (N - df + 0.5) / (df + 0.5)),
-- a one-lexeme tsquery, the group's mean document length, df, whether the lexeme is common
-- for a top p_k (the rarest lexemes are rare until they hold 2 x p_k documents together, the
-- rest is common: a speaker's name in a chat, a common word in 100k facts), and the largest
-- share of the score a document can get from it: idf x the BM25 factor of its largest term
-- frequency in the group's shortest document (text_stats.min_len; length 0 when unknown; 1.3 x
-- idf, the k1 limit, when max_tf is unknown), that largest term frequency (NULL: unknown; 1: a
-- document holding the lexeme says it once), the keys of the documents saying it twice or more
-- (term_stats.repeated; NULL: unknown), and bound1, the largest share of a document saying it
-- once. A document of exactly the shortest length scores its bound: the bounds are raised by a
-- factor 1 + 1e-9 (far above the rounding of a sum of shares), so that a set of lexemes whose
-- bound is the k-th score can hold no document scoring it (text_top_k stops there).

-- The statistics of a group's lexemes for bm25_terms (one SQL statement: inlined into its two
-- statements, which differ only in the `common` column): idf, the lexeme as a tsquery, the
-- group's average length, df, and the bounds described above.
CREATE OR REPLACE FUNCTION pgmemory_internal.bm25_term_rows(p_group text, p_kind text, p_lexemes text[])
RETURNS TABLE (group_id text, term text, idf double precision, tq tsquery, avgdl double precision, df bigint,
               bound double precision, max_tf integer, repeated text[], bound1 double precision)
LANGUAGE sql STABLE AS $$
    SELECT s.group_id, t.term, ln(1 + (s.docs - t.docs + 0.5) / (t.docs + 0.5))::double precision AS idf,
             quote_literal(t.term)::tsquery AS tq,
             greatest(s.total_len::double precision / greatest(s.docs, 1), 1) AS avgdl, t.docs::bigint AS df,
             (ln(1 + (s.docs - t.docs + 0.5) / (t.docs + 0.5))
                 * coalesce(pgmemory_internal.bm25_term(t.max_tf, coalesce(s.min_len, 0),
                                                        greatest(s.total_len::double precision / greatest(s.docs, 1), 1))
                            * (1 + 1e-9), 1.3))::double precision AS bound,
             t.max_tf, t.repeated,
             (ln(1 + (s.docs - t.docs + 0.5) / (t.docs + 0.5))
                 * pgmemory_internal.bm25_term(1, coalesce(s.min_len, 0),
                                               greatest(s.total_len::double precision / greatest(s.docs, 1), 1))
                 * (1 + 1e-9))::double precision AS bound1
        FROM pgmemory.text_stats s
        JOIN pgmemory.term_stats t ON t.group_id = p_group AND t.kind = s.kind
       WHERE s.group_id = p_group AND s.kind = p_kind AND t.docs > 0 AND t.term = ANY (p_lexemes)
$$;

DO $$
BEGIN  -- the result gained columns (bound, max_tf, repeated, bound1): an older definition must go first
    IF EXISTS (SELECT FROM pg_proc
                WHERE oid = to_regprocedure('pgmemory_internal.bm25_terms(text, text[], text, integer)')
                  AND NOT 'bound1' = ANY (proargnames)) THEN
        DROP FUNCTION pgmemory_internal.bm25_terms(text, text[], text, integer);
    END IF;
END
$$;
CREATE OR REPLACE FUNCTION pgmemory_internal.bm25_terms(p_kind text, p_groups text[], p_query text, p_k integer)
RETURNS TABLE (group_id text, idf double precision, tq tsquery, avgdl double precision, df bigint,
               common boolean, bound double precision, max_tf integer, repeated text[], bound1 double precision)
LANGUAGE plpgsql STABLE AS $$
#variable_conflict use_column
DECLARE
    g text;
    lexemes text[] := tsvector_to_array(to_tsvector('english', p_query));
    most integer := pgmemory_internal.text_max_lexemes();
    kept text[];
BEGIN
    -- One group per statement, pinned by equality: on Citus `= ANY (groups)` here (a join and a
    -- window) read the statistics of all 32 shards, over the network for the other worker's
    -- (48 ms of a 70 ms one-group search on the worker).
    -- p_k NULL: `common` is not computed (NULL), which spares the window and its sort (~40 us a call;
    -- text_top_k does not use it). The two statements differ only in that column.
    FOREACH g IN ARRAY p_groups LOOP
        -- (a long query: the group's rarest lexemes of the kind, query_lexemes)
        kept := CASE WHEN cardinality(lexemes) > most AND most > 0
                     THEN pgmemory_internal.query_lexemes(ARRAY[g], p_kind, lexemes) ELSE lexemes END;
        IF p_k IS NULL THEN
            RETURN QUERY
            SELECT x.group_id, x.idf, x.tq, x.avgdl, x.df, NULL::boolean, x.bound, x.max_tf, x.repeated, x.bound1
              FROM pgmemory_internal.bm25_term_rows(g, p_kind, kept) x;
        ELSE
            RETURN QUERY
            SELECT x.group_id, x.idf, x.tq, x.avgdl, x.df,
                   sum(x.df) OVER (ORDER BY x.df, x.term ROWS UNBOUNDED PRECEDING) - x.df >= 2 * p_k,
                   x.bound, x.max_tf, x.repeated, x.bound1
              FROM pgmemory_internal.bm25_term_rows(g, p_kind, kept) x;
        END IF;
    END LOOP;
END
$$;
DROP FUNCTION IF EXISTS pgmemory.bm25_weights(text, text[], text);
DROP FUNCTION IF EXISTS pgmemory_internal.bm25_terms(text, text[], text);

-- The per-row scorer of earlier versions (it unnested every candidate's tsvector): gone.
DROP FUNCTION IF EXISTS pgmemory.bm25_score(tsvector, text[], double precision[], double precision);

-- One method for every kind (facts, entities, episodes): the exact BM25 top p_k by upper bounds
-- over sets of lexemes. A lexeme's share is at most its bound (bm25_terms), so a document can
-- beat the current p_k-th score (theta) only if the bounds of the lexemes it holds add up to
-- theta. The query's
-- lexemes (at most 10 units: beyond that the commonest form one unit, any of them) are combined
-- into every set, highest bound first (the bound of a document saying each unit once, bound1:
-- the few that say one twice are listed in term_stats.repeated and read by key in step 2):
--   1. the documents holding every unit of each of the first 2 x n sets (GIN intersections, few
--      rows) are scored and theta raised, while a set's bound can still beat theta; then, while
--      fewer than p_k documents are scored, the documents of single units, rarest first;
--   2. one query reads the documents not scored yet that hold a (smallest) set whose bound
--      reaches theta (with theta 0: any unit); a set holding one read whole in step 1 is left out.
--      Here too a unit's bound is bound1; the documents listed as saying a unit twice are read
--      by key.
-- text_scores reads and scores the documents of one probe and keeps its best p_k (a document
-- beaten by p_k others of one probe is beaten overall; one found by two probes is kept once);
-- text_top_k drives the steps.

-- One query term's share of a document's BM25 score: 0 unless the document is of the term's group
-- and holds its lexeme (text_scores sums the shares of the query's terms). The term frequency is 1
-- when no document says the lexeme twice (p_max_tf 1), else ts_rank_cd's count, which allocates
-- per call (a third of a probe's time when every row paid it). When no document says it more than
-- 32 times the count is read from ts_rank instead, a quarter of ts_rank_cd's cost: with unit weights
-- a one-lexeme ts_rank is H(tf) / (pi^2 / 6), H(tf) = 1 + 1/4 + ... + 1/tf^2, and
-- 1 / (pi^2 / 6 - H(tf)) lies in (tf + 0.5, tf + 0.6] (tests/test_fulltext.py checks tf 1-40 against
-- ts_rank_cd; far beyond, ts_rank's float4 sum could blur it).
DROP FUNCTION IF EXISTS pgmemory_internal.bm25_share(text, tsvector, text, double precision, tsquery,
                                                     double precision);
CREATE OR REPLACE FUNCTION pgmemory_internal.bm25_share(
    p_group text, p_tsv tsvector, p_term_group text, p_idf double precision, p_tq tsquery, p_avgdl double precision,
    p_max_tf integer)
RETURNS double precision LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN p_term_group = p_group AND p_tsv @@ p_tq
                THEN p_idf * pgmemory_internal.bm25_term(
                         CASE WHEN p_max_tf = 1 THEN 1
                              WHEN p_max_tf <= 32 THEN round(1 / (1.6449340668482264::float8 - 1.6449340668482264::float8
                                                                  * ts_rank('{1,1,1,1}'::real[], p_tsv, p_tq, 0)) - 0.5)
                              ELSE ts_rank_cd('{1,1,1,1}'::real[], p_tsv, p_tq, 0) END,
                         length(p_tsv), p_avgdl)
                ELSE 0 END
$$;

-- The best p_k of documents of group p_group (their keys and tsvectors; a NULL key is out of view)
-- scoring at least p_min, by BM25 over the query's terms (their group, idf, tsquery, the group's
-- average length and largest term frequency, in the order their shares are summed): best first,
-- exact ties by key. The one definition of a score: text_scores (a probe's documents) and
-- text_one_pass (all of a small group's) call it, inlined into their statement.
CREATE OR REPLACE FUNCTION pgmemory_internal.text_scored(
    p_group text, p_keys text[], p_docs tsvector[], p_terms_group text[], p_terms_idf double precision[],
    p_terms_tq tsquery[], p_terms_avgdl double precision[], p_terms_tf integer[], p_min double precision,
    p_k integer)
RETURNS TABLE (key text, score double precision) LANGUAGE sql STABLE AS $$
    SELECT x.key, x.score FROM (
        SELECT d.key,
               pgmemory_internal.bm25_share(p_group, d.tsv, w.g1, w.i1, w.q1, w.a1, w.t1)
               + pgmemory_internal.bm25_share(p_group, d.tsv, w.g2, w.i2, w.q2, w.a2, w.t2)
               + pgmemory_internal.bm25_share(p_group, d.tsv, w.g3, w.i3, w.q3, w.a3, w.t3)
               + pgmemory_internal.bm25_share(p_group, d.tsv, w.g4, w.i4, w.q4, w.a4, w.t4)
               + CASE WHEN cardinality(p_terms_tq) > 4 THEN (
                     SELECT coalesce(sum(pgmemory_internal.bm25_share(p_group, d.tsv, r.group_id, r.idf, r.tq,
                                                                      r.avgdl, r.tf)), 0)
                       FROM unnest(w.rg, w.ri, w.rq, w.ra, w.rt) AS r (group_id, idf, tq, avgdl, tf))
                 ELSE 0 END AS score
          FROM unnest(p_keys, p_docs) AS d (key, tsv)
         -- the first four terms as columns of one row, read once (array subscripts per row cost
         -- more than the score itself), and the rest, summed by a join for longer queries (four
         -- written out: each one more costs every probe its setup, which LoCoMo-sized probes feel)
         CROSS JOIN (SELECT
                       p_terms_group[1] AS g1, p_terms_idf[1] AS i1, p_terms_tq[1] AS q1,
                       p_terms_avgdl[1] AS a1, p_terms_tf[1] AS t1,
                       p_terms_group[2] AS g2, p_terms_idf[2] AS i2, p_terms_tq[2] AS q2,
                       p_terms_avgdl[2] AS a2, p_terms_tf[2] AS t2,
                       p_terms_group[3] AS g3, p_terms_idf[3] AS i3, p_terms_tq[3] AS q3,
                       p_terms_avgdl[3] AS a3, p_terms_tf[3] AS t3,
                       p_terms_group[4] AS g4, p_terms_idf[4] AS i4, p_terms_tq[4] AS q4,
                       p_terms_avgdl[4] AS a4, p_terms_tf[4] AS t4,
                       p_terms_group[5:] AS rg, p_terms_idf[5:] AS ri, p_terms_tq[5:] AS rq,
                       p_terms_avgdl[5:] AS ra, p_terms_tf[5:] AS rt
                OFFSET 0) w
         WHERE d.key IS NOT NULL  -- out of view
        OFFSET 0) x  -- the score computed once, not again in the filter
     WHERE x.score >= p_min
     ORDER BY x.score DESC, length(x.key), x.key COLLATE "C" LIMIT p_k
$$;

-- The best p_k documents of kind p_kind holding p_probe (BM25 score at least p_min; best first,
-- exact ties by key), per searched group, in view. Per group, two statements: the documents'
-- keys and tsvectors from the kind's table (the GIN index alone: the view test is in the
-- aggregate, a NULL key out of view, not in the WHERE, where the planner would AND it with the
-- bitmap of a partial index on current facts, ~97k entries per lexeme at 100k facts; one CASE, not
-- a FILTER on each of the two aggregates, which ran the test twice), then their scores from those arrays,
-- of which only the best p_k leave (a top-N sort): no second visit to the table. The first reads
-- one table pinned by `group_id =`, with no join, subquery or CTE: on Citus that is a fast-path
-- query, planned on the shard directly (a statement with a join, a subquery or a CTE is planned
-- there three times on every call: 2-4 ms a probe, ~40 ms of a one-group search). Keys are text
-- (a fact's version_id, an entity's or episode's id). PL/pgSQL: Citus plans no SQL function
-- reading its tables with parameters.
DROP FUNCTION IF EXISTS pgmemory_internal.text_scores(  -- the form that excluded scored documents
    text, text[], tsquery, text[], text[], text[], double precision[], tsquery[], double precision[],
    timestamptz, timestamptz, timestamptz, boolean, text[], timestamptz[], text[]);
DROP FUNCTION IF EXISTS pgmemory_internal.text_scores(  -- the form without p_keys
    text, text[], tsquery, text[], double precision[], tsquery[], double precision[], integer[],
    timestamptz, timestamptz, timestamptz, boolean, text[], timestamptz[], text[], double precision, integer);
-- With p_keys (not NULL) the documents are those keys (the primary key's index; p_probe unused):
-- text_top_k reads the few documents that say a lexeme twice that way.
CREATE OR REPLACE FUNCTION pgmemory_internal.text_scores(
    p_kind text, p_groups text[], p_probe tsquery,
    p_terms_group text[], p_terms_idf double precision[], p_terms_tq tsquery[], p_terms_avgdl double precision[],
    p_terms_tf integer[], p_known_at timestamptz, p_point timestamptz, p_as_of timestamptz, p_superseded boolean,
    p_relations text[], p_bounds timestamptz[], p_labels text[], p_min double precision, p_k integer,
    p_keys text[] DEFAULT NULL)
RETURNS TABLE (group_id text, key text, score double precision) LANGUAGE plpgsql STABLE AS $$
#variable_conflict use_column
DECLARE
    g text;
    keys text[];
    docs tsvector[];
BEGIN
    FOREACH g IN ARRAY p_groups LOOP
        IF p_keys IS NULL THEN
            IF p_kind = 'facts' AND p_known_at IS NULL AND NOT coalesce(p_superseded, false)
               AND cardinality(p_relations) = 0 AND cardinality(array_remove(p_bounds, NULL)) = 0 THEN
                -- the current facts with no other filter (the usual search): fact_in_view for those
                -- arguments, written out (its generic plan tests all eleven conditions on every row:
                -- ~15% of reading a probe's rows)
                SELECT coalesce(array_agg(CASE WHEN upper_inf(f.recorded) AND pgmemory.holds_at(f.valid, f.is_event, p_point)
                                               THEN f.version_id::text END), '{}'),
                       coalesce(array_agg(f.tsv), '{}')
                  INTO keys, docs
                  FROM pgmemory.facts f
                 WHERE f.group_id = g AND f.tsv @@ p_probe;
            ELSIF p_kind = 'facts' THEN
                SELECT coalesce(array_agg(CASE WHEN pgmemory_internal.fact_in_view(
                           f.valid, f.recorded, f.relation, p_point, p_known_at, p_superseded, p_relations, p_bounds,
                           f.is_event) THEN f.version_id::text END), '{}'),
                       coalesce(array_agg(f.tsv), '{}')
                  INTO keys, docs
                  FROM pgmemory.facts f
                 WHERE f.group_id = g AND f.tsv @@ p_probe;
            ELSIF p_kind = 'entities' THEN
                SELECT coalesce(array_agg(CASE WHEN (p_known_at IS NULL OR e.created_at <= p_known_at)
                           AND (e.retired_at IS NULL OR e.retired_at > p_known_at)
                           AND (cardinality(p_labels) = 0 OR e.labels && p_labels) THEN e.id::text END), '{}'),
                       coalesce(array_agg(e.tsv), '{}')
                  INTO keys, docs
                  FROM pgmemory.entities e
                 WHERE e.group_id = g AND e.tsv @@ p_probe;
            ELSE
                SELECT coalesce(array_agg(CASE WHEN (p_known_at IS NULL OR ep.recorded_at <= p_known_at)
                           AND (ep.retracted_at IS NULL OR ep.retracted_at > p_known_at)
                           AND (p_as_of IS NULL OR ep.valid_at <= p_as_of) THEN ep.id::text END), '{}'),
                       coalesce(array_agg(ep.tsv), '{}')
                  INTO keys, docs
                  FROM pgmemory.episodes ep
                 WHERE ep.group_id = g AND ep.tsv @@ p_probe;
            END IF;
        ELSIF p_kind = 'facts' THEN
            SELECT coalesce(array_agg(CASE WHEN pgmemory_internal.fact_in_view(
                       f.valid, f.recorded, f.relation, p_point, p_known_at, p_superseded, p_relations, p_bounds,
                       f.is_event) THEN f.version_id::text END), '{}'),
                   coalesce(array_agg(f.tsv), '{}')
              INTO keys, docs
              FROM pgmemory.facts f
             WHERE f.group_id = g AND f.version_id = ANY (p_keys::bigint[]);
        ELSIF p_kind = 'entities' THEN
            SELECT coalesce(array_agg(CASE WHEN (p_known_at IS NULL OR e.created_at <= p_known_at)
                       AND (e.retired_at IS NULL OR e.retired_at > p_known_at)
                       AND (cardinality(p_labels) = 0 OR e.labels && p_labels) THEN e.id::text END), '{}'),
                   coalesce(array_agg(e.tsv), '{}')
              INTO keys, docs
              FROM pgmemory.entities e
             WHERE e.group_id = g AND e.id = ANY (p_keys::uuid[]);
        ELSE
            SELECT coalesce(array_agg(CASE WHEN (p_known_at IS NULL OR ep.recorded_at <= p_known_at)
                       AND (ep.retracted_at IS NULL OR ep.retracted_at > p_known_at)
                       AND (p_as_of IS NULL OR ep.valid_at <= p_as_of) THEN ep.id::text END), '{}'),
                   coalesce(array_agg(ep.tsv), '{}')
              INTO keys, docs
              FROM pgmemory.episodes ep
             WHERE ep.group_id = g AND ep.id = ANY (p_keys::uuid[]);
        END IF;
        CONTINUE WHEN cardinality(keys) = 0;  -- (a set of words in no document: no scoring statement)
        RETURN QUERY
        SELECT g, s.key, s.score
          FROM pgmemory_internal.text_scored(g, keys, docs, p_terms_group, p_terms_idf, p_terms_tq, p_terms_avgdl,
                                             p_terms_tf, p_min, p_k) s;
    END LOOP;
END
$$;

-- The exact BM25 top p_k of kind p_kind ('facts', 'entities' or 'episodes'; the view arguments
-- of other kinds are ignored): (group, key, score), best first, exact ties by key (a shorter
-- key first, so version ids order as numbers).
CREATE OR REPLACE FUNCTION pgmemory_internal.text_top_k(
    p_kind text, p_groups text[], p_query text, p_k integer, p_known_at timestamptz, p_point timestamptz,
    p_as_of timestamptz, p_superseded boolean, p_relations text[], p_bounds timestamptz[], p_labels text[])
RETURNS TABLE (group_id text, key text, score double precision) LANGUAGE plpgsql STABLE AS $$
#variable_conflict use_column
DECLARE
    terms_group text[];
    terms_idf double precision[];
    terms_tq tsquery[];
    terms_avgdl double precision[];
    terms_tf integer[];
    terms_df bigint[];
    terms_bound double precision[];
    terms_bound1 double precision[];  -- the bound of a document not listed in terms_rep
    terms_rep text[];            -- the keys saying the lexeme twice, comma-separated (NULL: none needed)
    unit_tq tsquery[];           -- the lexemes, rarest first; the last may be several (OR)
    unit_bound double precision[];
    unit_bound1 double precision[];  -- the bound of a document not listed in unit_rep
    unit_rep text[];             -- the keys of the documents that may say the unit twice
    unit_df bigint[];            -- documents holding the unit (summed over the groups)
    mask_df bigint[];            -- the documents of each set's units, summed (its probe's cost)
    spent double precision := 0; -- the cost of the sets probed beyond the first 2 x n, in rows
    cost double precision;
    rare_left bigint;            -- the documents of the rarest unit not read whole yet
    n integer;
    masks integer[];             -- every non-empty set of units, highest bound1 first
    mask_bound double precision[];   -- the sum of the units' bound1
    mask_est double precision[];     -- the documents holding each set if its units were independent
    batch integer[];             -- step 1: sets probed together (one OR of their units' ANDs)
    batched integer := 0;        -- the last position of masks probed in a batch
    est double precision;        -- the documents a batch is expected to hold
    correlated boolean := false; -- a set held far more documents than estimated: no batches
    before integer;
    rep_keys text[];             -- step 2: the documents read by key
    theta double precision := 0;
    seen_group text[] := '{}';
    seen text[] := '{}';
    seen_score double precision[] := '{}';
    done integer[] := '{}';      -- the sets whose documents are all scored
    probe tsquery;
    i integer;
    j integer;
    m integer;
    b integer;
    q tsquery;
    lexemes integer;             -- distinct query lexemes known to the groups
    postings bigint;             -- the documents holding them, summed over lexemes and groups
BEGIN
    IF p_kind IS NULL OR p_kind NOT IN ('facts', 'entities', 'episodes') THEN
        RAISE EXCEPTION 'unknown text kind: %', p_kind USING ERRCODE = '22023';
    END IF;
    -- (the rows sorted once, rarest first, for aggregates that keep their input's order: an ORDER BY
    -- in each of nine aggregates was nine sorts; `common` is not needed)
    SELECT array_agg(t.group_id), array_agg(t.idf), array_agg(t.tq), array_agg(t.avgdl), array_agg(t.max_tf),
           array_agg(t.bound), array_agg(t.df),
           array_agg(CASE WHEN t.repeated IS NOT NULL AND t.max_tf IS DISTINCT FROM 1 THEN t.bound1 ELSE t.bound END),
           array_agg(CASE WHEN t.max_tf IS DISTINCT FROM 1 THEN nullif(array_to_string(t.repeated, ','), '') END),
           count(DISTINCT t.tq), sum(t.df), string_agg(DISTINCT t.tq::text, ' | ')::tsquery
      INTO terms_group, terms_idf, terms_tq, terms_avgdl, terms_tf, terms_bound, terms_df, terms_bound1, terms_rep,
           lexemes, postings, probe
      FROM (SELECT * FROM pgmemory_internal.bm25_terms(p_kind, p_groups, p_query, NULL) x
             ORDER BY x.df, x.tq::text) t;
    IF terms_tq IS NULL OR p_k < 1 THEN
        RETURN;
    END IF;
    -- One pass when the query's lexemes hold few documents: every document holding any of them
    -- scored in one text_scores call (theta 0: the exhaustive BM25, the same scores, view and tie
    -- order), no units or sets. Chosen by cost: the one pass scores at most `postings` rows; the
    -- steps below plan to probe the first 2 x n sets (n units: lexemes, at most 10) and step 2,
    -- each probe priced at pgmemory.text_probe_rows rows (100, as step 1 prices a set's probe;
    -- 0: never one pass, as tests set to cover the steps on small data).
    IF postings <= coalesce(nullif(current_setting('pgmemory.text_probe_rows', true), '')::float8, 100)
                   * (least(2 * least(lexemes, 10), (1 << least(lexemes, 10)) - 1) + 1) THEN
        RETURN QUERY
        SELECT h.group_id, h.key, h.score
          FROM pgmemory_internal.text_scores(p_kind, p_groups, probe, terms_group, terms_idf, terms_tq, terms_avgdl,
                                             terms_tf, p_known_at, p_point, p_as_of, p_superseded, p_relations,
                                             p_bounds, p_labels, 0, p_k) h
         ORDER BY h.score DESC, length(h.key), h.key COLLATE "C" LIMIT p_k;
        RETURN;
    END IF;
    probe := NULL;
    -- Units: one per lexeme (statistics are per group: a lexeme of several groups is one unit with
    -- the largest bound), the commonest merged into the tenth. A unit's second bound (bound1) holds
    -- for the documents not in its list of keys: those say each of its lexemes once (a lexeme
    -- whose list is unknown keeps its full bound there).
    SELECT array_agg(u.tq ORDER BY u.r), array_agg(u.df ORDER BY u.r), array_agg(u.b ORDER BY u.r),
           array_agg(u.b1 ORDER BY u.r), array_agg(u.rep ORDER BY u.r)
      INTO unit_tq, unit_df, unit_bound, unit_bound1, unit_rep
      FROM (SELECT least(x.r, 10) AS r, string_agg(x.tq::text, ' | ')::tsquery AS tq, sum(x.df) AS df,
                   sum(x.b) AS b, sum(x.b1) AS b1, string_agg(x.rep, ',') AS rep
              FROM (SELECT row_number() OVER (ORDER BY min(w.ord)) AS r, w.tq, sum(w.df) AS df,
                           max(w.bound) AS b, max(w.bound1) AS b1, string_agg(w.rep, ',') AS rep
                      FROM unnest(terms_tq, terms_df, terms_bound, terms_bound1, terms_rep) WITH ORDINALITY
                           AS w (tq, df, bound, bound1, rep, ord)
                     GROUP BY w.tq) x
             GROUP BY least(x.r, 10)) u;
    n := cardinality(unit_tq);
    -- Sets by the bound of the documents not listed (all but a few): a set whose bound1 is below
    -- theta is not probed, its listed documents are read by key in step 2.
    SELECT array_agg(m.mask ORDER BY m.b DESC, m.mask), array_agg(m.b ORDER BY m.b DESC, m.mask),
           array_agg(m.df ORDER BY m.b DESC, m.mask), array_agg(m.e ORDER BY m.b DESC, m.mask)
      INTO masks, mask_bound, mask_df, mask_est
      FROM (SELECT g AS mask, s.b, s.df, s.e
              FROM generate_series(1, (1 << n) - 1) AS g
             -- the documents of the searched groups, from a lexeme's idf and df in each
             CROSS JOIN (SELECT sum(y.docs) AS docs_total
                           FROM (SELECT DISTINCT ON (x.g) (exp(x.idf) - 1) * (x.df + 0.5) + x.df - 0.5 AS docs
                                   FROM unnest(terms_group, terms_idf, terms_df) AS x (g, idf, df)) y) t
             CROSS JOIN LATERAL (SELECT sum(unit_bound1[b + 1]) AS b, sum(unit_df[b + 1]) AS df,
                                        t.docs_total * exp(sum(ln(greatest(unit_df[b + 1], 1)
                                                                   / greatest(t.docs_total, 1)))) AS e
                                   FROM generate_series(0, n - 1) AS b WHERE g & (1 << b) <> 0) s) m;
    -- Step 1: the documents holding whole sets, best sets first (at most 2 x n sets), then, while
    -- fewer than p_k documents are scored, more sets of several units (GIN intersections: few rows
    -- each) as long as their probes cost less than reading the rarest unit left whole (a probe
    -- ~ 100 rows plus its units' posting lists; measured at 1M facts: "when did Patrick C. Walker
    -- visit Seattle" read all 4,805 "walker" facts for the last 5 of 30 documents, which a few
    -- more sets held; in small groups, LoCoMo, the rare units are cheaper than any probe), then
    -- single units, rarest first. While fewer than p_k documents are scored, every set is probed
    -- in turn until they are: so the sets of several units that follow one another among the first
    -- 2 x n are probed together (one OR: one GIN scan and one scoring statement instead of one
    -- each, ~0.3 ms a probe; "when did Eric A. Moore visit Rotterdam" probed 7 sets of 0-6
    -- documents one by one), as many as hold about p_k documents if their units were independent:
    -- after one set probed alone, and only if no set probed alone held far more than that estimate
    -- (the words of "Massive Dynamic Motors" are in the same documents: their sets hold hundreds).
    FOR i IN 1 .. cardinality(masks) + n LOOP
        IF i <= cardinality(masks) THEN
            CONTINUE WHEN i <= batched;
            j := masks[i];
            EXIT WHEN i > 2 * n AND cardinality(seen) >= p_k;
            IF i > 2 * n THEN
                CONTINUE WHEN j & (j - 1) = 0;
                cost := 100 + mask_df[i] / 1600.0;
                CONTINUE WHEN spent + cost > rare_left;
                spent := spent + cost;
            END IF;
            EXIT WHEN mask_bound[i] < theta OR (theta > 0 AND mask_bound[i] = theta);
            -- a set whose successor (probed next, among the first 2 x n) is a subset of it: that probe
            -- reads its documents again, so while fewer than p_k are scored it is left to that one
            CONTINUE WHEN i < 2 * n AND i < cardinality(masks) AND cardinality(seen) < p_k
                          AND masks[i + 1] & j = masks[i + 1] AND masks[i + 1] & (masks[i + 1] - 1) <> 0;
        ELSE
            EXIT WHEN cardinality(seen) >= p_k;
            j := 1 << (i - cardinality(masks) - 1);
            CONTINUE WHEN j = ANY (done);
        END IF;
        batch := ARRAY[j];
        IF i <= 2 * n AND theta = 0 AND j & (j - 1) <> 0 AND cardinality(done) > 0 AND NOT correlated THEN
            batched := i;
            est := cardinality(seen) + mask_est[i];
            WHILE batched < least(2 * n, cardinality(masks)) AND est < p_k
                  AND masks[batched + 1] & (masks[batched + 1] - 1) <> 0 LOOP
                batched := batched + 1;
                batch := batch || masks[batched];
                est := est + mask_est[batched];
            END LOOP;
        END IF;
        -- the OR of the batch's sets, each the AND of its units (tsquery operators: plain
        -- expressions, where a statement building the text cost ~10% of a call's CPU with the others)
        probe := NULL;
        FOREACH m IN ARRAY batch LOOP
            q := NULL;
            FOR b IN 0 .. n - 1 LOOP
                IF m & (1 << b) <> 0 THEN
                    q := CASE WHEN q IS NULL THEN unit_tq[b + 1] ELSE q && unit_tq[b + 1] END;
                END IF;
            END LOOP;
            probe := CASE WHEN probe IS NULL THEN q ELSE probe || q END;
        END LOOP;
        before := cardinality(seen);
        SELECT seen_group || coalesce(array_agg(h.group_id), '{}'), seen || coalesce(array_agg(h.key), '{}'),
               seen_score || coalesce(array_agg(h.score), '{}')
          INTO seen_group, seen, seen_score
          FROM pgmemory_internal.text_scores(p_kind, p_groups, probe, terms_group, terms_idf, terms_tq, terms_avgdl,
                                             terms_tf, p_known_at, p_point, p_as_of, p_superseded, p_relations, p_bounds,
                                             p_labels, theta, p_k) h
         WHERE NOT EXISTS (SELECT FROM unnest(seen_group, seen) AS y (group_id, key)
                            WHERE y.group_id = h.group_id AND y.key = h.key);
        done := done || batch;
        IF i <= 2 * n AND cardinality(batch) = 1 AND cardinality(seen) - before > 2 + 4 * mask_est[i] THEN
            correlated := true;  -- e.g. the words of a company's name: their sets hold about the same documents
        END IF;
        IF j & (j - 1) = 0 OR rare_left IS NULL THEN
            rare_left := NULL;
            FOR b IN 0 .. n - 1 LOOP
                IF (1 << b) <> ALL (done) THEN
                    rare_left := least(rare_left, unit_df[b + 1]);
                END IF;
            END LOOP;
            rare_left := coalesce(rare_left, 0);
        END IF;
        IF cardinality(seen) >= p_k THEN
            theta := (SELECT s FROM unnest(seen_score) AS s ORDER BY s DESC OFFSET p_k - 1 LIMIT 1);
        END IF;
    END LOOP;
    -- Step 2: every other document that could still reach theta. One not listed as saying a unit
    -- twice scores at most the units' bound1 it holds: it holds a set whose bound1 reaches theta
    -- (the smallest such sets suffice; with theta 0, any single unit), read through the GIN index.
    -- A listed one is read by its key (the lists of the units whose bound1 is below theta: with a
    -- unit at or above, its documents are read through the index; none of a unit read whole in
    -- step 1). So a common word said twice by a few documents is not read whole for their sake.
    probe := (SELECT string_agg('(' || (SELECT string_agg('(' || unit_tq[b + 1]::text || ')', ' & ')
                                          FROM generate_series(0, n - 1) AS b WHERE m.mask & (1 << b) <> 0) || ')', ' | ')
                FROM unnest(masks, mask_bound) AS m (mask, bound)
               WHERE m.bound >= theta AND (theta = 0 AND m.mask & (m.mask - 1) = 0
                     OR theta > 0 AND NOT EXISTS (  -- minimal: no unit can be left out
                         SELECT FROM generate_series(0, n - 1) AS b
                          WHERE m.mask & (1 << b) <> 0 AND m.bound - unit_bound1[b + 1] >= theta))
                 -- a set none of whose documents is unscored: it holds a set read whole in step 1
                 AND NOT EXISTS (SELECT FROM unnest(done) AS d WHERE d & m.mask = d))::tsquery;
    -- The keys of a unit are read when a listed document can reach theta: it holds a set with the
    -- unit, holding no set read whole, whose full bounds (bound1 is not theirs) reach theta.
    IF theta > 0 AND cardinality(array_remove(unit_rep, NULL)) > 0 THEN
        rep_keys := (SELECT array_remove(string_to_array(string_agg(unit_rep[b + 1], ','), ','), '')
                       FROM generate_series(0, n - 1) AS b
                      WHERE unit_bound1[b + 1] < theta AND unit_rep[b + 1] IS NOT NULL AND (1 << b) <> ALL (done)
                        AND EXISTS (SELECT FROM unnest(masks) AS m (mask)
                                     WHERE m.mask & (1 << b) <> 0
                                       AND (SELECT sum(unit_bound[c + 1]) FROM generate_series(0, n - 1) AS c
                                             WHERE m.mask & (1 << c) <> 0) >= theta
                                       AND NOT EXISTS (SELECT FROM unnest(done) AS d WHERE d & m.mask = d)));
        IF cardinality(rep_keys) > 0 THEN
            SELECT seen_group || coalesce(array_agg(h.group_id), '{}'), seen || coalesce(array_agg(h.key), '{}'),
                   seen_score || coalesce(array_agg(h.score), '{}')
              INTO seen_group, seen, seen_score
              FROM pgmemory_internal.text_scores(p_kind, p_groups, NULL, terms_group, terms_idf, terms_tq, terms_avgdl,
                                                 terms_tf, p_known_at, p_point, p_as_of, p_superseded, p_relations,
                                                 p_bounds, p_labels, theta, p_k, rep_keys) h
             WHERE NOT EXISTS (SELECT FROM unnest(seen_group, seen) AS y (group_id, key)
                                WHERE y.group_id = h.group_id AND y.key = h.key);
        END IF;
    END IF;
    RETURN QUERY
    SELECT a.group_id, a.key, a.score FROM (
        SELECT h.group_id, h.key, h.score
          FROM pgmemory_internal.text_scores(p_kind, p_groups, probe, terms_group, terms_idf, terms_tq, terms_avgdl,
                                             terms_tf, p_known_at, p_point, p_as_of, p_superseded, p_relations, p_bounds,
                                             p_labels, theta, p_k) h
         WHERE probe IS NOT NULL
        UNION SELECT * FROM unnest(seen_group, seen, seen_score)) a (group_id, key, score)
     ORDER BY a.score DESC, length(a.key), a.key COLLATE "C" LIMIT p_k;
END
$$;

-- Generic plans: a custom plan of text_scores (three kinds' branches) per probe cost 3-10 ms of
-- planning at 100k facts, more than most probes (bench/fulltext_kinds.py); the generic plan reads
-- each kind's GIN index all the same (the view test is not in the WHERE). Not on Citus, which
-- routes a query by the group's value and cannot plan these with parameters.
DO $plan$
BEGIN
    IF EXISTS (SELECT FROM pg_extension WHERE extname = 'citus') THEN
        ALTER FUNCTION pgmemory_internal.text_top_k(text, text[], text, integer, timestamptz, timestamptz, timestamptz,
                                                    boolean, text[], timestamptz[], text[]) RESET plan_cache_mode;
    ELSE
        ALTER FUNCTION pgmemory_internal.text_top_k(text, text[], text, integer, timestamptz, timestamptz, timestamptz,
                                                    boolean, text[], timestamptz[], text[])
            SET plan_cache_mode = force_generic_plan;
    END IF;
END
$plan$;

-- The exact BM25 top p_k of one group's documents of kind p_kind in one statement: every document
-- in view holding a query lexeme, scored (text_top_k's one pass without its PL/pgSQL layers: at
-- LoCoMo scale the full text of an edge-only search was ~35% of its server CPU, half of it the
-- statements and function entries of text_top_k, bm25_terms and text_scores around a dozen facts).
-- search_candidates calls it for the facts of one group holding few (text_one_pass_docs()).
-- The same terms and shares as text_top_k, summed in its order: by tsquery, the order its
-- aggregates receive its terms in (the planner sorts their input by tq for its DISTINCT aggregates;
-- one group has one term per lexeme), so the scores are the same to the last bit
-- (tests/test_fulltext_one_statement.py compares the two paths row by row).
CREATE OR REPLACE FUNCTION pgmemory_internal.text_one_pass(
    p_kind text, p_group text, p_query text, p_k integer, p_known_at timestamptz, p_point timestamptz,
    p_as_of timestamptz, p_superseded boolean, p_relations text[], p_bounds timestamptz[], p_labels text[])
RETURNS TABLE (key text, score double precision) LANGUAGE sql STABLE AS $$
    WITH terms AS (
        SELECT array_agg(t.group_id) AS tg, array_agg(t.idf) AS ti, array_agg(t.tq) AS tq, array_agg(t.avgdl) AS ta,
               array_agg(t.max_tf) AS tf, string_agg(t.tq::text, ' | ')::tsquery AS probe
          FROM (SELECT x.* FROM pgmemory_internal.bm25_term_rows(p_group, p_kind, (
                    -- (a long query: the group's rarest lexemes of the kind, query_lexemes)
                    SELECT CASE WHEN cardinality(l.a) <= pgmemory_internal.text_max_lexemes()
                                     OR pgmemory_internal.text_max_lexemes() < 1 THEN l.a
                                ELSE pgmemory_internal.query_lexemes(ARRAY[p_group], p_kind, l.a) END
                      FROM (SELECT tsvector_to_array(to_tsvector('english', p_query)) AS a) l)) x
                 ORDER BY x.tq) t
    ),
    -- the documents in view holding a lexeme, as text_scores reads them (the branches of other
    -- kinds fold away where p_kind is a constant, as in search_candidates)
    docs AS (
        SELECT coalesce(array_agg(d.key), '{}') AS keys, coalesce(array_agg(d.tsv), '{}') AS tsvs
          FROM (SELECT f.version_id::text AS key, f.tsv FROM pgmemory.facts f
                 WHERE p_kind = 'facts' AND f.group_id = p_group AND f.tsv @@ (SELECT t.probe FROM terms t)
                   AND pgmemory_internal.fact_in_view(f.valid, f.recorded, f.relation, p_point, p_known_at, p_superseded,
                                                      p_relations, p_bounds, f.is_event)
                UNION ALL
                SELECT e.id::text, e.tsv FROM pgmemory.entities e
                 WHERE p_kind = 'entities' AND e.group_id = p_group AND e.tsv @@ (SELECT t.probe FROM terms t)
                   AND (p_known_at IS NULL OR e.created_at <= p_known_at)
                   AND (e.retired_at IS NULL OR e.retired_at > p_known_at)
                   AND (cardinality(p_labels) = 0 OR e.labels && p_labels)
                UNION ALL
                SELECT ep.id::text, ep.tsv FROM pgmemory.episodes ep
                 WHERE p_kind = 'episodes' AND ep.group_id = p_group AND ep.tsv @@ (SELECT t.probe FROM terms t)
                   AND (p_known_at IS NULL OR ep.recorded_at <= p_known_at)
                   AND (ep.retracted_at IS NULL OR ep.retracted_at > p_known_at)
                   AND (p_as_of IS NULL OR ep.valid_at <= p_as_of)) d
    )
    SELECT s.key, s.score
      FROM terms, docs,
           pgmemory_internal.text_scored(p_group, docs.keys, docs.tsvs, terms.tg, terms.ti, terms.tq, terms.ta, terms.tf,
                                         0, p_k) s
$$;

-- The most documents of a kind a group may hold for its full text to be the one statement
-- (text_one_pass) rather than text_top_k: 2 x pgmemory.text_probe_rows (200 by default), where
-- text_top_k would take its one pass anyway (the query's n lexemes hold at most 200 x n documents,
-- below its cost bound of 100 x (2 n + 1) for n up to 10); 0 (never) with text_probe_rows 0, as
-- tests set to cover the steps, and on Citus, which plans no SQL function reading its tables
-- (text_top_k's statements each read one table pinned by the group, routed there).
DO $one$
BEGIN
    IF EXISTS (SELECT FROM pg_extension WHERE extname = 'citus') THEN
        CREATE OR REPLACE FUNCTION pgmemory_internal.text_one_pass_docs() RETURNS double precision
            LANGUAGE sql STABLE AS 'SELECT 0::float8';
    ELSE
        CREATE OR REPLACE FUNCTION pgmemory_internal.text_one_pass_docs() RETURNS double precision
            LANGUAGE sql STABLE AS $$
                SELECT 2 * coalesce(nullif(current_setting('pgmemory.text_probe_rows', true), '')::float8, 100)
            $$;
    END IF;
END
$one$;

-- The full-text hits of each kind (the signatures search_candidates calls; bm25.sql defines the
-- same with pg_textsearch).
CREATE OR REPLACE FUNCTION pgmemory_internal.fact_text_hits(
    p_groups text[], p_query text, p_k integer, p_point timestamptz, p_known_at timestamptz,
    p_superseded boolean, p_relations text[], p_bounds timestamptz[])
RETURNS TABLE (version_id bigint, score double precision) LANGUAGE sql STABLE AS $$
    SELECT h.key::bigint, h.score
      FROM pgmemory_internal.text_top_k('facts', p_groups, p_query, p_k, p_known_at, p_point, NULL, p_superseded,
                                        p_relations, p_bounds, '{}') h
$$;

CREATE OR REPLACE FUNCTION pgmemory_internal.entity_text_hits(
    p_groups text[], p_query text, p_k integer, p_known_at timestamptz, p_labels text[])
RETURNS TABLE (id uuid, score double precision) LANGUAGE sql STABLE AS $$
    SELECT h.key::uuid, h.score
      FROM pgmemory_internal.text_top_k('entities', p_groups, p_query, p_k, p_known_at, NULL, NULL, NULL,
                                        NULL, NULL, p_labels) h
$$;

CREATE OR REPLACE FUNCTION pgmemory_internal.episode_text_hits(
    p_groups text[], p_query text, p_k integer, p_known_at timestamptz, p_as_of timestamptz)
RETURNS TABLE (id uuid, score double precision) LANGUAGE sql STABLE AS $$
    SELECT h.key::uuid, h.score
      FROM pgmemory_internal.text_top_k('episodes', p_groups, p_query, p_k, p_known_at, NULL, p_as_of, NULL,
                                        NULL, NULL, '{}') h
$$;

-- The episodes holding any of the rare lexemes of p_lexemes (those not common for a top p_k:
-- rarest first, the lexemes that together hold about 2 x p_k documents), by BM25 over those
-- lexemes, best p_k first. For a bag of words chosen outside the query (the pseudo-relevance
-- feedback words and a list question's category members, search_candidates): one GIN probe and
-- one scoring pass, without text_top_k's bounds, whose probes cost more than the few rows they
-- save here. Lexemes no episode of a group holds are ignored.
CREATE OR REPLACE FUNCTION pgmemory_internal.episode_lexeme_hits(
    p_groups text[], p_lexemes text[], p_k integer, p_known_at timestamptz, p_as_of timestamptz)
RETURNS TABLE (id uuid, score double precision) LANGUAGE plpgsql STABLE AS $$
#variable_conflict use_column
DECLARE
    g text;
    terms_group text[] := '{}';
    terms_idf double precision[] := '{}';
    terms_tq tsquery[] := '{}';
    terms_avgdl double precision[] := '{}';
    terms_tf integer[] := '{}';
    probe tsquery;
BEGIN
    IF p_k < 1 OR cardinality(p_lexemes) = 0 THEN
        RETURN;
    END IF;
    -- One group per statement, pinned by equality (on Citus one routed query each; bm25_terms).
    FOREACH g IN ARRAY p_groups LOOP
        SELECT terms_group || array_agg(t.group_id), terms_idf || array_agg(t.idf), terms_tq || array_agg(t.tq),
               terms_avgdl || array_agg(t.avgdl), terms_tf || array_agg(t.max_tf)
          INTO terms_group, terms_idf, terms_tq, terms_avgdl, terms_tf
          FROM (SELECT x.*, sum(x.df) OVER (ORDER BY x.df, x.term ROWS UNBOUNDED PRECEDING) - x.df >= 2 * p_k AS common
                  FROM pgmemory_internal.bm25_term_rows(g, 'episodes', p_lexemes) x) t
         WHERE NOT t.common;
    END LOOP;
    SELECT string_agg(DISTINCT q::text, ' | ')::tsquery INTO probe FROM unnest(terms_tq) q;
    IF probe IS NULL THEN
        RETURN;
    END IF;
    RETURN QUERY
    SELECT h.key::uuid, h.score
      FROM pgmemory_internal.text_scores('episodes', p_groups, probe, terms_group, terms_idf, terms_tq, terms_avgdl,
                                         terms_tf, p_known_at, NULL, p_as_of, NULL, NULL, NULL, '{}', 0, p_k) h
     ORDER BY h.score DESC, h.key LIMIT p_k;
END
$$;

DROP FUNCTION IF EXISTS pgmemory_internal.episode_rare_text_hits(text[], text, integer, timestamptz, timestamptz);
