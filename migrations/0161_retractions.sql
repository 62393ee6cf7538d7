-- A retracted episode leaves a tombstone, so it can still be erased later (a
-- user's deletion request after a retract): what its erase must find in the
-- history the retract kept. Erasing it removes the tombstone. Retracting the
-- same episode id again (re-ingested in between) adds to the arrays.
CREATE TABLE pgmemory.retractions (
    group_id     text NOT NULL,
    episode_id   uuid NOT NULL,
    retracted_at timestamptz NOT NULL DEFAULT now(),
    written_at   timestamptz[] NOT NULL DEFAULT '{}',  -- its ingestions' transaction times
    lineages     uuid[] NOT NULL DEFAULT '{}',         -- the fact lineages its claims touched
    mentioned    uuid[] NOT NULL DEFAULT '{}',         -- the entities it mentioned
    retired      uuid[] NOT NULL DEFAULT '{}',         -- the entities the retract retired
    texts        text[] NOT NULL DEFAULT '{}',         -- its fact sentences and entity descriptions
    names        text[] NOT NULL DEFAULT '{}',         -- the entity names it said
    attributes   jsonb NOT NULL DEFAULT '[]',          -- the entity attributes it said, one object each
    PRIMARY KEY (group_id, episode_id)
);
