-- Okapi BM25 over tsvector needs corpus statistics per group: documents and their total
-- length per kind of text (episodes, facts, entities), and the document frequency of each
-- lexeme. Kept by triggers in the writers' own transactions (sql/fulltext/text_stats.sql);
-- init fills them for rows written before they existed (the flag below).
CREATE TABLE pgmemory.text_stats (
    group_id  text NOT NULL,
    kind      text NOT NULL CHECK (kind IN ('episodes', 'facts', 'entities')),
    docs      bigint NOT NULL,
    total_len bigint NOT NULL,
    PRIMARY KEY (group_id, kind)
);
CREATE TABLE pgmemory.term_stats (
    group_id text NOT NULL,
    kind     text NOT NULL CHECK (kind IN ('episodes', 'facts', 'entities')),
    term     text NOT NULL,
    docs     bigint NOT NULL,
    PRIMARY KEY (group_id, kind, term)
);
INSERT INTO pgmemory.settings (key, value) VALUES ('text_stats_stale', 'true')
    ON CONFLICT (key) DO UPDATE SET value = 'true';
