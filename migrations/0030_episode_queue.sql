-- The episode lifecycle: whoever processes an episode holds a lease on it
-- (status 'processing', lease_owner, lease_until; an expired lease may be taken
-- over), and every group has a change counter that the write path checks
-- before applying decisions made from candidates read without the lock.
ALTER TABLE pgmemory.episodes
    ADD COLUMN lease_owner text,
    ADD COLUMN lease_until timestamptz;

-- The work queue: unfinished episodes of each group in processing order.
CREATE INDEX episodes_queue ON pgmemory.episodes (group_id, valid_at, recorded_at)
    WHERE status IN ('pending', 'processing');

CREATE TABLE pgmemory.group_versions (
    group_id text PRIMARY KEY,
    version  bigint NOT NULL DEFAULT 0
);
