-- A retracted episode (pgmemory.delete_episode without erase) stays as history: its row is kept,
-- marked with the transaction time of the retract, so a read as known at an earlier time still
-- shows it and the facts citing it (fact_episodes keeps its links). Current reads leave out the
-- rows with retracted_at set, as if deleted; an erase removes the row. Before this column the
-- retract deleted the row: those episodes are gone (their tombstones in pgmemory.retractions stay).
ALTER TABLE pgmemory.episodes ADD COLUMN retracted_at timestamptz;
-- Its provenance links are marked with the same time, so a read of a fact's episodes leaves out
-- the retracted ones by a column of the link (no probe of episodes per link).
ALTER TABLE pgmemory.fact_episodes ADD COLUMN retracted_at timestamptz;
