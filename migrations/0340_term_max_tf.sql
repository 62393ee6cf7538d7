-- The largest term frequency of each lexeme in its group and kind of text: the exact full-text
-- top k (sql/fulltext/tsvector.sql) bounds a lexeme's BM25 share by what its documents can
-- score rather than by the k1 limit (1.3 x idf; a lexeme said once per document scores at most
-- 1.02 x idf), so far fewer documents are read for a query with common words. An upper bound:
-- the triggers raise it and never lower it (a removed document leaves it as it was). NULL
-- means unknown (the loose bound is used); init rebuilds the statistics, which fills it.
ALTER TABLE pgmemory.term_stats ADD COLUMN max_tf integer;
INSERT INTO pgmemory.settings (key, value) VALUES ('text_stats_stale', 'true')
    ON CONFLICT (key) DO UPDATE SET value = 'true';
