-- Corpus statistics for Okapi BM25 over tsvector, maintained transactionally: statement
-- triggers with transition tables add the net change of each INSERT / UPDATE / DELETE on
-- episodes, facts and entities to pgmemory.text_stats and pgmemory.term_stats (rows locked
-- in (group, term) order, so concurrent writers never deadlock on them; writers of one group
-- are serialised by the group lock anyway). Unchanged texts (status updates) write nothing.
-- term_stats.max_tf bounds each lexeme's term frequency (for the exact top k's upper bounds).
-- Applied by init in every full-text mode. On Citus the same triggers run (init allows
-- triggers on distributed tables): they fire on the shard, and the statistics rows they write
-- belong to the same group, hence to a co-located shard on the same worker, written locally in
-- the same transaction (tests/test_citus.py checks BM25 statistics and search there).

-- Length of a document in tokens (stop words excluded): its lexemes' position counts.
CREATE OR REPLACE FUNCTION pgmemory_internal.tsv_length(p_tsv tsvector)
RETURNS integer LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT coalesce(sum(coalesce(array_length(u.positions, 1), 1)), 0)::integer FROM unnest(p_tsv) u
$$;

-- Add documents (p_sign +1) or remove them (-1) from the statistics of p_kind. A count that
-- reaches zero deletes its row: an erased group leaves none of its words behind.
CREATE OR REPLACE FUNCTION pgmemory_internal.add_text_stats(
    p_kind text, p_groups text[], p_tsvs tsvector[], p_signs integer[])
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    gone_groups text[];
    gone_terms text[];
BEGIN
    WITH docs AS (
        SELECT d.g, d.sign, pgmemory_internal.tsv_length(d.tsv) AS len
          FROM unnest(p_groups, p_tsvs, p_signs) AS d (g, tsv, sign)
    ), per_group AS (
        SELECT g, sum(sign) AS docs, sum(sign * len) AS len
          FROM docs GROUP BY g HAVING sum(sign) <> 0 OR sum(sign * len) <> 0
    ), changed AS (
        INSERT INTO pgmemory.text_stats AS s (group_id, kind, docs, total_len)
        SELECT g, p_kind, docs, len FROM per_group ORDER BY g
        ON CONFLICT (group_id, kind) DO UPDATE
           SET docs = s.docs + excluded.docs, total_len = s.total_len + excluded.total_len
        RETURNING s.group_id, s.docs
    )
    SELECT array_agg(group_id) INTO gone_groups FROM changed WHERE docs <= 0;
    IF gone_groups IS NOT NULL THEN
        DELETE FROM pgmemory.text_stats WHERE kind = p_kind AND group_id = ANY (gone_groups);
    END IF;

    -- max_tf only rises (an upper bound of the lexeme's term frequency; NULL: unknown, stays so):
    -- a text rewritten with a lexeme said more often raises it even when df does not change.
    WITH per_term AS (
        SELECT d.g, u.lexeme, sum(d.sign) AS n,
               max(coalesce(array_length(u.positions, 1), 1)) FILTER (WHERE d.sign > 0) AS tf
          FROM unnest(p_groups, p_tsvs, p_signs) AS d (g, tsv, sign) CROSS JOIN LATERAL unnest(d.tsv) u
         GROUP BY d.g, u.lexeme
        HAVING sum(d.sign) <> 0 OR max(coalesce(array_length(u.positions, 1), 1)) FILTER (WHERE d.sign > 0) > 1
    ), changed AS (
        INSERT INTO pgmemory.term_stats AS t (group_id, kind, term, docs, max_tf)
        SELECT g, p_kind, lexeme, n, tf FROM per_term ORDER BY g, lexeme
        ON CONFLICT (group_id, kind, term) DO UPDATE
           SET docs = t.docs + excluded.docs,
               max_tf = CASE WHEN t.max_tf IS NOT NULL THEN greatest(t.max_tf, excluded.max_tf) END
        RETURNING t.group_id, t.term, t.docs
    )
    SELECT array_agg(group_id), array_agg(term) INTO gone_groups, gone_terms FROM changed WHERE docs <= 0;
    IF gone_groups IS NOT NULL THEN
        DELETE FROM pgmemory.term_stats t USING unnest(gone_groups, gone_terms) AS z (g, term)
         WHERE t.group_id = z.g AND t.kind = p_kind AND t.term = z.term;
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION pgmemory_internal.track_text_stats()
RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    groups text[];
    tsvs tsvector[];
    signs integer[];
BEGIN
    IF TG_OP = 'INSERT' THEN
        SELECT array_agg(group_id), array_agg(tsv), array_agg(1) INTO groups, tsvs, signs FROM new_rows;
    ELSIF TG_OP = 'DELETE' THEN
        SELECT array_agg(group_id), array_agg(tsv), array_agg(-1) INTO groups, tsvs, signs FROM old_rows;
    ELSIF TG_ARGV[0] = 'facts' THEN  -- only rows whose text changed (not closed versions)
        SELECT array_agg(x.group_id), array_agg(x.tsv), array_agg(x.sign) INTO groups, tsvs, signs
          FROM old_rows o JOIN new_rows n ON n.group_id = o.group_id AND n.version_id = o.version_id
         CROSS JOIN LATERAL (VALUES (o.group_id, o.tsv, -1), (n.group_id, n.tsv, 1)) AS x (group_id, tsv, sign)
         WHERE o.tsv IS DISTINCT FROM n.tsv;
    ELSE  -- episodes, entities: only rows whose text changed (not status or embedding updates)
        SELECT array_agg(x.group_id), array_agg(x.tsv), array_agg(x.sign) INTO groups, tsvs, signs
          FROM old_rows o JOIN new_rows n ON n.group_id = o.group_id AND n.id = o.id
         CROSS JOIN LATERAL (VALUES (o.group_id, o.tsv, -1), (n.group_id, n.tsv, 1)) AS x (group_id, tsv, sign)
         WHERE o.tsv IS DISTINCT FROM n.tsv;
    END IF;
    IF groups IS NOT NULL THEN
        PERFORM pgmemory_internal.add_text_stats(TG_ARGV[0], groups, tsvs, signs);
    END IF;
    RETURN NULL;
END
$$;

-- Recompute every statistic from the tables (bulk loads that bypass triggers, and the rows
-- written before the statistics existed); clears the text_stats_stale flag.
CREATE OR REPLACE FUNCTION pgmemory.rebuild_text_stats()
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    kind text;
BEGIN
    DELETE FROM pgmemory.text_stats;
    DELETE FROM pgmemory.term_stats;
    FOREACH kind IN ARRAY ARRAY['episodes', 'facts', 'entities'] LOOP
        EXECUTE format('INSERT INTO pgmemory.text_stats (group_id, kind, docs, total_len)'
                       ' SELECT group_id, %L, count(*), sum(pgmemory_internal.tsv_length(tsv)) FROM pgmemory.%I'
                       ' GROUP BY group_id', kind, kind);
        EXECUTE format('INSERT INTO pgmemory.term_stats (group_id, kind, term, docs, max_tf)'
                       ' SELECT d.group_id, %L, u.lexeme, count(*), max(coalesce(array_length(u.positions, 1), 1))'
                       ' FROM pgmemory.%I d, unnest(d.tsv) u GROUP BY d.group_id, u.lexeme', kind, kind);
    END LOOP;
    DELETE FROM pgmemory.settings WHERE key = 'text_stats_stale';
END
$$;

-- Triggers are created once (init must not drop and recreate what is current).
DO $$
DECLARE
    t record;
BEGIN
    FOR t IN SELECT * FROM (VALUES ('episodes'), ('facts'), ('entities')) AS v (tbl) LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = format('pgmemory.%I', t.tbl)::regclass
                                                   AND tgname = t.tbl || '_text_stats_ins') THEN
            EXECUTE format('CREATE TRIGGER %I AFTER INSERT ON pgmemory.%I REFERENCING NEW TABLE AS new_rows'
                           ' FOR EACH STATEMENT EXECUTE FUNCTION pgmemory_internal.track_text_stats(%L)',
                           t.tbl || '_text_stats_ins', t.tbl, t.tbl);
            EXECUTE format('CREATE TRIGGER %I AFTER UPDATE ON pgmemory.%I'
                           ' REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows'
                           ' FOR EACH STATEMENT EXECUTE FUNCTION pgmemory_internal.track_text_stats(%L)',
                           t.tbl || '_text_stats_upd', t.tbl, t.tbl);
            EXECUTE format('CREATE TRIGGER %I AFTER DELETE ON pgmemory.%I REFERENCING OLD TABLE AS old_rows'
                           ' FOR EACH STATEMENT EXECUTE FUNCTION pgmemory_internal.track_text_stats(%L)',
                           t.tbl || '_text_stats_del', t.tbl, t.tbl);
        END IF;
    END LOOP;
END
$$;
