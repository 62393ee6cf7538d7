-- The work queue without a pass over it per claim (issue 9): the oldest waiting episode of a
-- group and a group's live lease are each one index probe (pgmemory_internal.claim_episode).
CREATE INDEX episodes_queue_age ON pgmemory.episodes (group_id, recorded_at)
    WHERE status IN ('pending', 'processing');
CREATE INDEX episodes_leased ON pgmemory.episodes (group_id, lease_until)
    WHERE status = 'processing';
