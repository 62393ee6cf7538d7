-- Corpus statistics for Okapi BM25 over tsvector, maintained transactionally: statement
-- triggers with transition tables add the net change of each INSERT / UPDATE / DELETE on
-- episodes, facts and entities to pgmemory.text_stats and pgmemory.term_stats (rows locked
-- in (group, term) order, so concurrent writers never deadlock on them; writers of one group
-- are serialised by the group lock anyway). Unchanged texts (status updates) write nothing;
-- an UPDATE of episodes or facts fires a row trigger only for the rows whose text changed (no
-- code path rewrites the text of many of them at once; such a statement would lock each row's
-- terms in turn).
-- text_stats.min_len bounds the length of a group's documents from below and term_stats.max_tf each
-- lexeme's term frequency from above (for the exact top k's upper bounds), and
-- term_stats.repeated lists the documents that say the lexeme twice or more (at most
-- pgmemory_internal.repeated_cap() keys; beyond, NULL: unknown), so the top k reads only those
-- when a document saying the lexeme once cannot reach the k-th score.
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
-- One group at a time (a statement's rows are almost always of one group), every write pinned
-- by group_id = that group: on Citus each is routed to the group's co-located shards on this
-- worker. (An INSERT ... SELECT FROM unnest(...) has no distributed table in its SELECT, so
-- Citus would run it through intermediate results: 56 of 124 ms per applied episode. The
-- term counts are therefore selected through the group's own text_stats row, written just
-- before, which makes the INSERT ... SELECT one Citus pushes down to the co-located shard.)
-- The most keys term_stats.repeated holds before it becomes NULL (unknown): 48 ids of episodes
-- or entities (uuids) stay below the 2 kB at which Postgres would move the row's array out of
-- line (TOAST) and rewrite it there at every insert of the lexeme. Facts at 100k / 1M: 10 / 13
-- of 663 / 792 lexemes are said twice by more documents than that.
CREATE OR REPLACE FUNCTION pgmemory_internal.repeated_cap()
RETURNS integer LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT 48 $$;

-- p_keys: each document's key (a fact's version_id, an episode's or entity's id), for the
-- documents that say a lexeme twice or more (term_stats.repeated). A document's keys are listed
-- when a version saying the lexeme twice is added and never removed: the list is a superset
-- (a removed or rewritten document may stay listed; the reader scores what it finds).
DROP FUNCTION IF EXISTS pgmemory_internal.add_text_stats(text, text[], tsvector[], integer[]);
CREATE OR REPLACE FUNCTION pgmemory_internal.add_text_stats(
    p_kind text, p_groups text[], p_tsvs tsvector[], p_signs integer[], p_keys text[])
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v_group text;
    v_docs bigint;
    v_len bigint;
    v_min integer;               -- the shortest added non-empty document (distinct lexemes)
    v_left bigint;
    v_terms text[];
    v_counts bigint[];
    v_tfs integer[];
    v_reps text[];               -- per lexeme, the keys saying it twice, comma-separated (NULL: none)
    v_removed boolean;
BEGIN
    -- The length is tsv_length written out: a SQL function with a FROM is not inlined, and its
    -- call per document cost ~0.07 ms of ~0.6 per call of this function (two documents).
    FOR v_group, v_docs, v_len, v_min IN
        SELECT d.g, sum(d.sign), sum(d.sign * l.len), min(length(d.tsv)) FILTER (WHERE d.sign > 0 AND length(d.tsv) > 0)
          FROM unnest(p_groups, p_tsvs, p_signs) AS d (g, tsv, sign)
         CROSS JOIN LATERAL (SELECT coalesce(sum(coalesce(array_length(u.positions, 1), 1)), 0) AS len
                               FROM unnest(d.tsv) u) l
         GROUP BY d.g ORDER BY d.g
    LOOP
        SELECT array_agg(t.lexeme ORDER BY t.lexeme), array_agg(t.n ORDER BY t.lexeme),
               array_agg(t.tf ORDER BY t.lexeme), array_agg(t.rep ORDER BY t.lexeme), coalesce(min(t.n) < 0, false)
          INTO v_terms, v_counts, v_tfs, v_reps, v_removed
          FROM (SELECT u.lexeme, sum(d.sign) AS n,
                       max(coalesce(array_length(u.positions, 1), 1)) FILTER (WHERE d.sign > 0) AS tf,
                       string_agg(d.key, ',') FILTER (WHERE d.sign > 0 AND array_length(u.positions, 1) > 1) AS rep
                  FROM unnest(p_groups, p_tsvs, p_signs, p_keys) AS d (g, tsv, sign, key)
                 CROSS JOIN LATERAL unnest(d.tsv) u
                 WHERE d.g = v_group GROUP BY u.lexeme
                HAVING sum(d.sign) <> 0
                    OR max(coalesce(array_length(u.positions, 1), 1)) FILTER (WHERE d.sign > 0) > 1) t;
        CONTINUE WHEN v_docs = 0 AND v_len = 0 AND v_terms IS NULL;
        -- min_len only falls (a lower bound: NULL, unknown, stays so; a removal leaves it).
        INSERT INTO pgmemory.text_stats AS s (group_id, kind, docs, total_len, min_len)
        VALUES (v_group, p_kind, v_docs, v_len, v_min)
        ON CONFLICT (group_id, kind) DO UPDATE
           SET docs = s.docs + excluded.docs, total_len = s.total_len + excluded.total_len,
               min_len = CASE WHEN s.min_len IS NOT NULL THEN least(s.min_len, excluded.min_len) END
        RETURNING s.docs INTO v_left;
        IF v_terms IS NOT NULL THEN
            -- max_tf only rises (an upper bound of the lexeme's term frequency; NULL: unknown,
            -- stays so): a text rewritten with a lexeme said more often raises it even when df
            -- does not change. repeated only grows (NULL: unknown, stays so; beyond the cap it
            -- becomes NULL); keys it holds already (an entity's summary rewritten) are not added.
            INSERT INTO pgmemory.term_stats AS t (group_id, kind, term, docs, max_tf, repeated)
            SELECT s.group_id, p_kind, x.term, x.n, x.tf,
                   CASE WHEN x.rep IS NULL THEN '{}'
                        WHEN array_length(string_to_array(x.rep, ','), 1) <= pgmemory_internal.repeated_cap()
                        THEN string_to_array(x.rep, ',') END
              FROM pgmemory.text_stats s CROSS JOIN unnest(v_terms, v_counts, v_tfs, v_reps) AS x (term, n, tf, rep)
             WHERE s.group_id = v_group AND s.kind = p_kind
             ORDER BY x.term
            ON CONFLICT (group_id, kind, term) DO UPDATE
               SET docs = t.docs + excluded.docs,
                   max_tf = CASE WHEN t.max_tf IS NOT NULL THEN greatest(t.max_tf, excluded.max_tf) END,
                   repeated = CASE WHEN t.repeated IS NULL OR cardinality(excluded.repeated) = 0
                                        OR excluded.repeated <@ t.repeated THEN t.repeated
                                   WHEN cardinality(t.repeated) + cardinality(excluded.repeated)
                                        <= pgmemory_internal.repeated_cap()
                                   THEN t.repeated || excluded.repeated END;
            IF v_removed THEN
                DELETE FROM pgmemory.term_stats
                 WHERE group_id = v_group AND kind = p_kind AND term = ANY (v_terms) AND docs <= 0;
            END IF;
        END IF;
        IF v_left <= 0 THEN
            DELETE FROM pgmemory.text_stats WHERE group_id = v_group AND kind = p_kind;
        END IF;
    END LOOP;
END
$$;

CREATE OR REPLACE FUNCTION pgmemory_internal.track_text_stats()
RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    groups text[];
    tsvs tsvector[];
    signs integer[];
    keys text[];
BEGIN
    -- Episodes and facts: a row trigger that fires only for an UPDATE that changed the row's text
    -- (WHEN OLD.tsv IS DISTINCT FROM NEW.tsv, see below).
    IF TG_LEVEL = 'ROW' AND TG_ARGV[0] = 'facts' THEN
        PERFORM pgmemory_internal.add_text_stats('facts', ARRAY[OLD.group_id, NEW.group_id], ARRAY[OLD.tsv, NEW.tsv],
                                                 ARRAY[-1, 1], ARRAY[NULL, NEW.version_id::text]);
        RETURN NULL;
    ELSIF TG_LEVEL = 'ROW' THEN
        PERFORM pgmemory_internal.add_text_stats(TG_ARGV[0], ARRAY[OLD.group_id, NEW.group_id],
                                                 ARRAY[OLD.tsv, NEW.tsv], ARRAY[-1, 1], ARRAY[NULL, NEW.id::text]);
        RETURN NULL;
    END IF;
    IF TG_OP = 'INSERT' AND TG_ARGV[0] = 'facts' THEN
        SELECT array_agg(group_id), array_agg(tsv), array_agg(1), array_agg(version_id::text)
          INTO groups, tsvs, signs, keys FROM new_rows;
    ELSIF TG_OP = 'INSERT' THEN
        SELECT array_agg(group_id), array_agg(tsv), array_agg(1), array_agg(id::text)
          INTO groups, tsvs, signs, keys FROM new_rows;
    ELSIF TG_OP = 'DELETE' THEN  -- keys only of added documents
        SELECT array_agg(group_id), array_agg(tsv), array_agg(-1), array_agg(NULL::text)
          INTO groups, tsvs, signs, keys FROM old_rows;
    ELSE  -- an UPDATE of entities: only rows whose text changed
        SELECT array_agg(x.group_id), array_agg(x.tsv), array_agg(x.sign), array_agg(x.key)
          INTO groups, tsvs, signs, keys
          FROM old_rows o JOIN new_rows n ON n.group_id = o.group_id AND n.id = o.id
         CROSS JOIN LATERAL (VALUES (o.group_id, o.tsv, -1, NULL), (n.group_id, n.tsv, 1, n.id::text))
                   AS x (group_id, tsv, sign, key)
         WHERE o.tsv IS DISTINCT FROM n.tsv;
    END IF;
    IF groups IS NOT NULL THEN
        PERFORM pgmemory_internal.add_text_stats(TG_ARGV[0], groups, tsvs, signs, keys);
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
        EXECUTE format('INSERT INTO pgmemory.text_stats (group_id, kind, docs, total_len, min_len)'
                       ' SELECT group_id, %L, count(*), sum(pgmemory_internal.tsv_length(tsv)),'
                       '        min(length(tsv)) FILTER (WHERE length(tsv) > 0) FROM pgmemory.%I'
                       ' GROUP BY group_id', kind, kind);
        EXECUTE format('INSERT INTO pgmemory.term_stats (group_id, kind, term, docs, max_tf, repeated)'
                       ' SELECT d.group_id, %L, u.lexeme, count(*), max(coalesce(array_length(u.positions, 1), 1)),'
                       '        CASE WHEN count(*) FILTER (WHERE array_length(u.positions, 1) > 1)'
                       '                  <= pgmemory_internal.repeated_cap()'
                       '             THEN coalesce(array_agg(d.%I::text) FILTER (WHERE array_length(u.positions, 1) > 1),'
                       '                           ''{}'') END'
                       ' FROM pgmemory.%I d, unnest(d.tsv) u GROUP BY d.group_id, u.lexeme', kind,
                       CASE WHEN kind = 'facts' THEN 'version_id' ELSE 'id' END, kind);
    END LOOP;
    DELETE FROM pgmemory.settings WHERE key = 'text_stats_stale';
END
$$;

-- Triggers are created once (init must not drop and recreate what is current).
-- The UPDATE trigger of episodes and facts is a row trigger with a WHEN clause: their UPDATEs
-- rarely change the text (the episode's status and vector, a closed fact version's recorded range:
-- ~1.4 per ingested episode), and a statement trigger fired for each of them, captured the old and
-- new rows (vectors included) and found no text changed; a trigger with a column list or a WHEN
-- clause cannot have transition tables. Entities keep the statement trigger: a summary UPDATE
-- changes the text of several rows at once, counted in one call.
DO $$
DECLARE
    t record;
BEGIN
    FOR t IN SELECT * FROM (VALUES ('episodes', true), ('facts', true), ('entities', false)) AS v (tbl, by_row) LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = format('pgmemory.%I', t.tbl)::regclass
                                                   AND tgname = t.tbl || '_text_stats_ins') THEN
            EXECUTE format('CREATE TRIGGER %I AFTER INSERT ON pgmemory.%I REFERENCING NEW TABLE AS new_rows'
                           ' FOR EACH STATEMENT EXECUTE FUNCTION pgmemory_internal.track_text_stats(%L)',
                           t.tbl || '_text_stats_ins', t.tbl, t.tbl);
            EXECUTE format('CREATE TRIGGER %I AFTER DELETE ON pgmemory.%I REFERENCING OLD TABLE AS old_rows'
                           ' FOR EACH STATEMENT EXECUTE FUNCTION pgmemory_internal.track_text_stats(%L)',
                           t.tbl || '_text_stats_del', t.tbl, t.tbl);
        END IF;
        -- The UPDATE trigger: made when missing, or remade when its level is not the wanted one
        -- (databases made before the row trigger).
        IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = format('pgmemory.%I', t.tbl)::regclass
                                                   AND tgname = t.tbl || '_text_stats_upd'
                                                   AND (tgtype::integer & 1 = 1) = t.by_row) THEN
            EXECUTE format('DROP TRIGGER IF EXISTS %I ON pgmemory.%I', t.tbl || '_text_stats_upd', t.tbl);
            IF t.by_row THEN
                EXECUTE format('CREATE TRIGGER %I AFTER UPDATE ON pgmemory.%I'
                               ' FOR EACH ROW WHEN (OLD.tsv IS DISTINCT FROM NEW.tsv)'
                               ' EXECUTE FUNCTION pgmemory_internal.track_text_stats(%L)',
                               t.tbl || '_text_stats_upd', t.tbl, t.tbl);
            ELSE
                EXECUTE format('CREATE TRIGGER %I AFTER UPDATE ON pgmemory.%I'
                               ' REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows'
                               ' FOR EACH STATEMENT EXECUTE FUNCTION pgmemory_internal.track_text_stats(%L)',
                               t.tbl || '_text_stats_upd', t.tbl, t.tbl);
            END IF;
        END IF;
    END LOOP;
END
$$;
