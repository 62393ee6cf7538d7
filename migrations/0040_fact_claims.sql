-- Decided claims: every statement an episode (or a SQL writer) made about a
-- fact, with its endpoints, dates and the decisions taken on it. A fact's
-- believed versions are a deterministic fold of the live claims of its
-- lineage in ingestion order (sql/35_fact_rules.sql), so deleting an episode
-- re-folds the facts it touched as if it had never been ingested.

-- A lineage groups the validity intervals of "the same" fact (one fact id per
-- interval): re-asserting a fact after it ended opens a new interval (a new
-- fact id) in the same lineage.
ALTER TABLE pgmemory.facts ADD COLUMN lineage uuid;
UPDATE pgmemory.facts SET lineage = id;
ALTER TABLE pgmemory.facts ALTER COLUMN lineage SET NOT NULL;
CREATE INDEX facts_lineage_current ON pgmemory.facts (lineage) WHERE upper_inf(recorded);

CREATE TABLE pgmemory.fact_claims (
    seq          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,  -- ingestion order
    group_id     text NOT NULL,
    episode_id   uuid,                 -- NULL: written through the SQL API (add_fact/retract_fact)
    kind         text NOT NULL CHECK (kind IN ('assert', 'negate', 'retract')),
    id           uuid NOT NULL,        -- the fact id this claim opens if it starts a new interval
    lineage      uuid NOT NULL,        -- the lineage it was decided to belong to
    fact_id      uuid,                 -- the interval (fact id) it landed in at the last fold
    source_id    uuid NOT NULL,
    target_id    uuid NOT NULL,
    relation     text NOT NULL,
    fact         text NOT NULL,
    embedding    vector,
    attributes   jsonb NOT NULL DEFAULT '{}',
    valid_from   timestamptz,          -- stated start (NULL: not stated)
    valid_to     timestamptz,          -- stated end (NULL: not stated)
    ref_time     timestamptz NOT NULL, -- when it was said (the episode's reference time)
    contradicts  uuid[] NOT NULL DEFAULT '{}',  -- lineages this claim ends
    recorded_at  timestamptz NOT NULL DEFAULT now()
);
DO $$ BEGIN  -- a database whose embedding dimension is already fixed
    IF (SELECT value FROM pgmemory.settings WHERE key = 'embedding_dim') IS NOT NULL THEN
        EXECUTE format('ALTER TABLE pgmemory.fact_claims ALTER COLUMN embedding TYPE vector(%s)',
                       (SELECT value FROM pgmemory.settings WHERE key = 'embedding_dim')::integer);
    END IF;
END $$;
CREATE INDEX fact_claims_lineage ON pgmemory.fact_claims (group_id, lineage);
CREATE INDEX fact_claims_episode ON pgmemory.fact_claims (group_id, episode_id);
CREATE INDEX fact_claims_contradicts ON pgmemory.fact_claims USING gin (contradicts);

-- The description an episode's extraction gave each entity it mentions: a
-- fact-less entity is described by its earliest live mention.
ALTER TABLE pgmemory.episode_mentions ADD COLUMN summary text NOT NULL DEFAULT '';
ALTER TABLE pgmemory.episode_mentions ADD COLUMN seq bigint GENERATED ALWAYS AS IDENTITY;
UPDATE pgmemory.episode_mentions m SET summary = e.summary FROM pgmemory.entities e WHERE e.id = m.entity_id;

-- Erasures are logged without their content.
CREATE TABLE pgmemory.erasures (
    group_id   text NOT NULL,
    episode_id uuid NOT NULL,
    erased_at  timestamptz NOT NULL DEFAULT now(),
    facts_affected integer NOT NULL,
    entities_affected integer NOT NULL
);
CREATE INDEX erasures_group ON pgmemory.erasures (group_id, erased_at);

-- Facts believed before claims existed: one claim each, reproducing the
-- believed version, attributed to its earliest provenance episode.
INSERT INTO pgmemory.fact_claims (group_id, episode_id, kind, id, lineage, fact_id, source_id, target_id,
                                  relation, fact, embedding, attributes, valid_from, valid_to, ref_time)
SELECT f.group_id,
       (SELECT fe.episode_id FROM pgmemory.fact_episodes fe WHERE fe.fact_id = f.id
         ORDER BY fe.created_at, fe.episode_id LIMIT 1),
       'assert', f.id, f.id, f.id, f.source_id, f.target_id, f.relation, f.fact, f.embedding, f.attributes,
       lower(f.valid), upper(f.valid), coalesce(lower(f.valid), lower(f.recorded))
  FROM pgmemory.facts f
 WHERE upper_inf(f.recorded)
 ORDER BY lower(f.recorded), f.version_id;
