-- The documents that say each lexeme twice or more (keys: a fact's version_id, an episode's or
-- entity's id), at most pgmemory_internal.repeated_cap() of them; NULL: unknown (more than the
-- cap, or not computed yet). The exact full-text top k (sql/fulltext/tsvector.sql) bounds the
-- share of a document saying a lexeme once by idf x the BM25 factor of one occurrence, and reads
-- the listed documents by key instead of the lexeme's whole posting list when only they can
-- reach the k-th score. A superset: the triggers add keys and never remove them. init rebuilds
-- the statistics, which fills it (1M facts: a few seconds).
ALTER TABLE pgmemory.term_stats ADD COLUMN repeated text[];
INSERT INTO pgmemory.settings (key, value) VALUES ('text_stats_stale', 'true')
    ON CONFLICT (key) DO UPDATE SET value = 'true';
