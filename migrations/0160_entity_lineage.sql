-- Entity state as transaction-time history (issue 18, items 3a/3b).
-- A retracted episode's entities are retired, not deleted: "what did we believe
-- last week" still sees them and their fact history; current answers do not.
ALTER TABLE pgmemory.entities ADD COLUMN retired_at timestamptz;
COMMENT ON COLUMN pgmemory.entities.retired_at IS
    'When the entity stopped being believed (every episode that introduced it was retracted); NULL: believed';

-- What each episode said about each entity it mentions, so an entity's name,
-- labels and attributes can be re-derived from the episodes that remain after
-- a delete (a rename or attribute merge from an erased episode is undone).
-- NULL said_name: mentioned before this was recorded (state left as it is).
ALTER TABLE pgmemory.episode_mentions ADD COLUMN said_name text;
ALTER TABLE pgmemory.episode_mentions ADD COLUMN renamed_to text;
ALTER TABLE pgmemory.episode_mentions ADD COLUMN labels text[] NOT NULL DEFAULT '{}';
ALTER TABLE pgmemory.episode_mentions ADD COLUMN attributes jsonb NOT NULL DEFAULT '{}';
-- The transaction time of the apply that wrote the mention (NULL before this migration).
ALTER TABLE pgmemory.episode_mentions ADD COLUMN recorded_at timestamptz;
ALTER TABLE pgmemory.episode_mentions ALTER COLUMN recorded_at SET DEFAULT now();
