-- Planner statistics for young tables (issue 9). Autovacuum looks at a database once per
-- autovacuum_naptime (a minute by default), and a new database's tables grow from empty to
-- thousands of rows in that time: the candidate reads and the apply's cached plans were made
-- for near-empty tables (the first 1.5k episodes of an ingest read 5x the buffers per episode
-- of the next ones). The ingest pipeline calls this every few episodes: it analyses each
-- table of the schema whose live row count grew (or shrank) eightfold since its last analysis
-- (so a growing table is analysed at about 50, 400, 3200, ... rows: O(log n) times; doubling
-- cost more in ANALYZE runs and re-planning than it saved, bench/README.md "Issue 9, session
-- 7"). Tables of 100k rows or more are left to autovacuum's own thresholds; a table being vacuumed or analysed
-- by another process is skipped (SKIP_LOCKED), so is a table the current role may not
-- analyse, and so is everything on Citus (an ANALYZE there fans out to every shard).
-- Returns the names of the tables analysed.
CREATE OR REPLACE FUNCTION pgmemory_internal.refresh_statistics()
RETURNS text[] LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    t record;
    analysed text[] := '{}';
BEGIN
    IF coalesce((pgmemory_internal.setting('distributed'))::boolean, false) THEN
        RETURN analysed;
    END IF;
    FOR t IN SELECT c.oid::regclass AS rel, c.relname::text AS name
               FROM pg_stat_user_tables s
               JOIN pg_class c ON c.oid = s.relid
              WHERE s.schemaname = 'pgmemory' AND c.relkind = 'r'
                -- grown to 8 times its analysed size (or shrunk to an eighth): the planner
                -- scales row counts by the table's pages itself, what it lacks on a young table
                -- is the column statistics. Rows updated in place (the statistics tables, the
                -- group counters) change no plan, and each ANALYZE costs 20-70 ms at 3k rows
                -- and throws away every session's cached plans that read the table.
                AND (s.n_live_tup >= 8 * greatest(c.reltuples, 6.25)
                     OR s.n_live_tup * 8 <= c.reltuples)
                AND c.reltuples < 100000
                AND pg_has_role(c.relowner, 'USAGE')
              ORDER BY c.relname
    LOOP
        EXECUTE format('ANALYZE (SKIP_LOCKED) %s', t.rel);
        analysed := analysed || t.name;
    END LOOP;
    RETURN analysed;
END
$$;
