-- Corpus statistics for Okapi BM25 over tsvector, maintained transactionally: statement
-- triggers with transition tables add the net change of each INSERT / UPDATE / DELETE on
-- episodes, facts and entities to pgmemory.text_stats and pgmemory.term_stats (rows locked
-- in (group, term) order, so concurrent writers never deadlock on them; writers of one group
-- are serialised by the group lock anyway). Unchanged texts (status updates) write nothing.
-- Applied by init in every full-text mode.

-- Length of a document in tokens (stop words excluded): its lexemes' position counts.
CREATE OR REPLACE FUNCTION pgmemory.tsv_length(p_tsv tsvector)
RETURNS integer LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT coalesce(sum(coalesce(array_length(u.positions, 1), 1)), 0)::integer FROM unnest(p_tsv) u
$$;

-- Add documents (p_sign +1) or remove them (-1) from the statistics of p_kind.
CREATE OR REPLACE FUNCTION pgmemory.add_text_stats(
    p_kind text, p_groups text[], p_tsvs tsvector[], p_signs integer[])
RETURNS void LANGUAGE sql AS $$
    WITH docs AS (
        SELECT d.g, d.tsv, d.sign FROM unnest(p_groups, p_tsvs, p_signs) AS d (g, tsv, sign)
    ), per_group AS (
        SELECT g, sum(sign) AS docs, sum(sign * pgmemory.tsv_length(tsv)) AS len
          FROM docs GROUP BY g HAVING sum(sign) <> 0 OR sum(sign * pgmemory.tsv_length(tsv)) <> 0
    ), per_term AS (
        SELECT d.g, u.lexeme, sum(d.sign) AS n
          FROM docs d CROSS JOIN LATERAL unnest(d.tsv) u
         GROUP BY d.g, u.lexeme HAVING sum(d.sign) <> 0
    ), groups_done AS (
        INSERT INTO pgmemory.text_stats AS s (group_id, kind, docs, total_len)
        SELECT g, p_kind, docs, len FROM per_group ORDER BY g
        ON CONFLICT (group_id, kind) DO UPDATE
           SET docs = s.docs + excluded.docs, total_len = s.total_len + excluded.total_len
        RETURNING 1
    )
    INSERT INTO pgmemory.term_stats AS t (group_id, kind, term, docs)
    SELECT g, p_kind, lexeme, n FROM per_term ORDER BY g, lexeme
    ON CONFLICT (group_id, kind, term) DO UPDATE SET docs = t.docs + excluded.docs
$$;

CREATE OR REPLACE FUNCTION pgmemory.track_text_stats()
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
    ELSE
        SELECT array_agg(x.group_id), array_agg(x.tsv), array_agg(x.sign) INTO groups, tsvs, signs
          FROM (SELECT o.group_id, o.tsv, -1 AS sign FROM old_rows o
                UNION ALL SELECT n.group_id, n.tsv, 1 FROM new_rows n) x;
    END IF;
    IF groups IS NOT NULL THEN
        PERFORM pgmemory.add_text_stats(TG_ARGV[0], groups, tsvs, signs);
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
                       ' SELECT group_id, %L, count(*), sum(pgmemory.tsv_length(tsv)) FROM pgmemory.%I'
                       ' GROUP BY group_id', kind, kind);
        EXECUTE format('INSERT INTO pgmemory.term_stats (group_id, kind, term, docs)'
                       ' SELECT d.group_id, %L, u.lexeme, count(*) FROM pgmemory.%I d, unnest(d.tsv) u'
                       ' GROUP BY d.group_id, u.lexeme', kind, kind);
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
                           ' FOR EACH STATEMENT EXECUTE FUNCTION pgmemory.track_text_stats(%L)',
                           t.tbl || '_text_stats_ins', t.tbl, t.tbl);
            EXECUTE format('CREATE TRIGGER %I AFTER UPDATE ON pgmemory.%I'
                           ' REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows'
                           ' FOR EACH STATEMENT EXECUTE FUNCTION pgmemory.track_text_stats(%L)',
                           t.tbl || '_text_stats_upd', t.tbl, t.tbl);
            EXECUTE format('CREATE TRIGGER %I AFTER DELETE ON pgmemory.%I REFERENCING OLD TABLE AS old_rows'
                           ' FOR EACH STATEMENT EXECUTE FUNCTION pgmemory.track_text_stats(%L)',
                           t.tbl || '_text_stats_del', t.tbl, t.tbl);
        END IF;
    END LOOP;
END
$$;
