-- Communities (issue 12): a full detection replaces a group's communities and
-- keeps the replaced ones as ended versions (ended_at set, members kept with
-- it); between detections new entities join communities dynamically. A
-- community needs a new name/summary when its revision is ahead of the
-- revision its summary was written from.
ALTER TABLE pgmemory.communities
    ADD COLUMN ended_at timestamptz,                       -- NULL: current
    ADD COLUMN revision integer NOT NULL DEFAULT 1,        -- bumped when members or their facts change
    ADD COLUMN summarized_revision integer NOT NULL DEFAULT 0,  -- the revision name/summary describe
    ADD COLUMN summary_kind text NOT NULL DEFAULT 'none'
        CHECK (summary_kind IN ('none', 'extractive', 'llm'));
CREATE INDEX communities_current ON pgmemory.communities (group_id) WHERE ended_at IS NULL;

ALTER TABLE pgmemory.community_members
    ADD COLUMN how text NOT NULL DEFAULT 'detected' CHECK (how IN ('detected', 'joined')),
    ADD COLUMN ended_at timestamptz;                       -- set with its community's
-- An entity is a member of at most one current community of its group.
CREATE UNIQUE INDEX community_members_current ON pgmemory.community_members (group_id, entity_id)
    WHERE ended_at IS NULL;

-- Per group: the last full detection and the drift since (members that joined
-- dynamically, new connected entities left without one), and the LLM cost of
-- community summaries (they belong to no episode).
CREATE TABLE pgmemory.community_state (
    group_id             text PRIMARY KEY,
    detected_at          timestamptz,
    members_at_detection integer NOT NULL DEFAULT 0,
    drift                integer NOT NULL DEFAULT 0,
    llm_calls            integer NOT NULL DEFAULT 0,
    prompt_tokens        integer NOT NULL DEFAULT 0,
    completion_tokens    integer NOT NULL DEFAULT 0
);
