-- The length (distinct lexemes) of the shortest non-empty document of each group and kind of text:
-- the exact full-text top k (sql/fulltext/tsvector.sql) bounds a lexeme's BM25 share by what a
-- document of that length can score instead of one of length 0. With b = 0.1 lengths move a share
-- by ~2%, but that is where the k-th score of a common word's documents lies ("Larry A. Clark
-- origami" read all 527 "origami" facts to find none reaching it). A lower bound: the triggers
-- lower it, never raise it (a removed document leaves it as it was). NULL means unknown (the
-- length-0 bound is used); init rebuilds the statistics, which fills it.
ALTER TABLE pgmemory.text_stats ADD COLUMN min_len integer;
INSERT INTO pgmemory.settings (key, value) VALUES ('text_stats_stale', 'true')
    ON CONFLICT (key) DO UPDATE SET value = 'true';
