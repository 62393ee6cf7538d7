-- The per-group locks as row locks on rows of this table (pgmemory_internal.lock_group: the
-- writers' 'write' row; pgmemory_internal.claim_episode: the queue's 'claim' row). They were
-- advisory locks, which are cluster-wide and which any login may take on any key, so a login
-- granted one group could stall another group's writers and workers; these rows are under
-- row-level security like every per-group row, so a login sees and locks only its groups' rows.
-- Rows are never updated or deleted by pgmemory: 'write' is created by a group's first write,
-- 'claim' by the insert of its first episode (trigger episodes_claim_row, sql/50_queue.sql).
CREATE TABLE pgmemory.group_locks (
    group_id text NOT NULL,
    purpose  text NOT NULL CHECK (purpose IN ('write', 'claim')),
    PRIMARY KEY (group_id, purpose)
);

-- The claim rows of the groups that already have episodes (init holds every table locked, so no
-- episode goes in before the trigger exists).
INSERT INTO pgmemory.group_locks (group_id, purpose)
SELECT DISTINCT group_id, 'claim' FROM pgmemory.episodes;
