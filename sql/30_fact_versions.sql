-- Bi-temporal primitives. A fact is a sequence of immutable versions sharing
-- one id; the believed version has an open `recorded` range. Corrections
-- close that range at the transaction time and write a new version.

-- Build a valid-time range; NULL bounds mean "unknown", +-infinity "forever".
CREATE OR REPLACE FUNCTION pgmemory_internal.valid_range(p_from timestamptz, p_to timestamptz)
RETURNS tstzrange LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF p_from IS NOT NULL AND p_to IS NOT NULL AND p_from >= p_to THEN
        RAISE EXCEPTION 'valid range is empty: valid_from % is not before valid_to %', p_from, p_to
            USING ERRCODE = '22023';
    END IF;
    -- An end of +infinity is an open end: stored as NULL, so "open" has one form that every
    -- rule and index (upper_inf) recognises. A start of -infinity stays: "since forever".
    RETURN tstzrange(p_from, CASE WHEN p_to = 'infinity' THEN NULL ELSE p_to END, '[)');
END
$$;

-- Transaction time never runs backwards: a version is recorded at now(), the start of the
-- writing transaction, which may precede the commit of a concurrent writer of the group that
-- recorded a version after it (a transaction that began before taking the group lock, or a
-- statement that waited for it). Closing or extending such a version at now() would end it
-- before it began, so the writer is refused with serialization_failure (40001) and retries in
-- a new transaction (Memory.add_fact / retract_fact and ingestion do). Raised for fact p_id of
-- p_group, recorded from p_recorded.
CREATE OR REPLACE FUNCTION pgmemory_internal.fact_changed_since_start(p_group text, p_id uuid,
                                                                   p_recorded timestamptz)
RETURNS void LANGUAGE plpgsql STABLE AS $$
BEGIN
    RAISE EXCEPTION 'fact % of group % changed after this transaction began (a concurrent writer): retry the transaction',
        p_id, p_group
        USING ERRCODE = '40001',
              DETAIL = format('Its current version was recorded at %s; this transaction began at %s.',
                              p_recorded, now());
END
$$;

-- Refuse (40001) a write to lineages p_lineages of p_group when one of their believed versions
-- was recorded after this transaction began (see fact_changed_since_start).
CREATE OR REPLACE FUNCTION pgmemory_internal.check_lineages_since_start(p_group text, p_lineages uuid[])
RETURNS void LANGUAGE plpgsql STABLE AS $$
DECLARE
    later uuid;
    later_at timestamptz;
BEGIN
    SELECT f.id, lower(f.recorded) INTO later, later_at FROM pgmemory.facts f
     WHERE f.group_id = p_group AND f.lineage = ANY (p_lineages) AND upper_inf(f.recorded)
       AND lower(f.recorded) > now()
     LIMIT 1;
    IF FOUND THEN
        PERFORM pgmemory_internal.fact_changed_since_start(p_group, later, later_at);
    END IF;
END
$$;

-- Record the first version of fact p_id (optionally citing an episode).
CREATE OR REPLACE FUNCTION pgmemory.record_fact(
    p_id uuid, p_group text, p_source uuid, p_target uuid, p_relation text, p_fact text,
    p_valid_from timestamptz, p_valid_to timestamptz,
    p_embedding vector DEFAULT NULL, p_attributes jsonb DEFAULT '{}', p_episode uuid DEFAULT NULL,
    p_lineage uuid DEFAULT NULL)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    new_version bigint;
BEGIN
    IF EXISTS (SELECT 1 FROM pgmemory.facts WHERE group_id = p_group AND id = p_id AND upper_inf(recorded)) THEN
        RAISE EXCEPTION 'fact % already has a current version; use pgmemory.correct_fact', p_id
            USING ERRCODE = '23505';
    END IF;
    -- A new interval of an existing lineage: its decision read the lineage's belief, which must
    -- not have been recorded after this transaction's time (see fact_changed_since_start).
    IF p_lineage IS NOT NULL AND p_lineage <> p_id THEN
        PERFORM pgmemory_internal.check_lineages_since_start(p_group, ARRAY[p_lineage]);
    END IF;
    INSERT INTO pgmemory.facts (id, group_id, source_id, target_id, relation, fact,
                                attributes, embedding, valid, lineage)
    VALUES (p_id, p_group, p_source, p_target, p_relation, p_fact,
            coalesce(p_attributes, '{}'), p_embedding, pgmemory_internal.valid_range(p_valid_from, p_valid_to),
            coalesce(p_lineage, p_id))
    RETURNING version_id INTO new_version;
    IF p_episode IS NOT NULL THEN
        INSERT INTO pgmemory.fact_episodes (fact_id, episode_id, group_id)
        VALUES (p_id, p_episode, p_group) ON CONFLICT DO NOTHING;
    END IF;
    RETURN new_version;
END
$$;

-- The correction primitive: close the believed version of fact p_id of group p_group at the
-- transaction time and write a new version with the corrected valid range
-- (and optionally a corrected sentence). A version written earlier in the
-- same transaction was never visible to anyone, so it is corrected in place.
CREATE OR REPLACE FUNCTION pgmemory.correct_fact(
    p_group text, p_id uuid, p_valid_from timestamptz, p_valid_to timestamptz,
    p_episode uuid DEFAULT NULL, p_fact text DEFAULT NULL, p_embedding vector DEFAULT NULL)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    cur pgmemory.facts;
    new_version bigint;
    new_valid tstzrange;
BEGIN
    PERFORM pgmemory_internal.check_request_group(p_group);  -- (a group the session is not narrowed to: refused)
    new_valid := pgmemory_internal.valid_range(p_valid_from, p_valid_to);
    SELECT * INTO cur FROM pgmemory.facts
     WHERE group_id = p_group AND id = p_id AND upper_inf(recorded) FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'fact % has no current version to correct', p_id USING ERRCODE = 'P0002';
    END IF;
    IF lower(cur.recorded) > now() THEN
        PERFORM pgmemory_internal.fact_changed_since_start(p_group, p_id, lower(cur.recorded));
    END IF;
    IF lower(cur.recorded) = now() THEN
        UPDATE pgmemory.facts
           SET valid = new_valid,
               fact = coalesce(p_fact, fact),
               embedding = CASE WHEN p_fact IS NULL THEN embedding ELSE p_embedding END
         WHERE group_id = p_group AND version_id = cur.version_id;
        new_version := cur.version_id;
    ELSE
        UPDATE pgmemory.facts SET recorded = tstzrange(lower(recorded), now())
         WHERE group_id = p_group AND version_id = cur.version_id;
        INSERT INTO pgmemory.facts (id, group_id, source_id, target_id, relation, fact,
                                    attributes, embedding, valid, lineage)
        VALUES (cur.id, cur.group_id, cur.source_id, cur.target_id, cur.relation,
                coalesce(p_fact, cur.fact), cur.attributes,
                CASE WHEN p_fact IS NULL THEN cur.embedding ELSE p_embedding END, new_valid, cur.lineage)
        RETURNING version_id INTO new_version;
    END IF;
    IF p_episode IS NOT NULL THEN
        INSERT INTO pgmemory.fact_episodes (fact_id, episode_id, group_id)
        VALUES (p_id, p_episode, cur.group_id) ON CONFLICT DO NOTHING;
    END IF;
    RETURN new_version;
END
$$;

-- Invalidation: the fact stopped being true at p_invalid_at (valid start kept).
CREATE OR REPLACE FUNCTION pgmemory.invalidate_fact(
    p_group text, p_id uuid, p_invalid_at timestamptz, p_episode uuid DEFAULT NULL)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    cur_valid tstzrange;
BEGIN
    PERFORM pgmemory_internal.check_request_group(p_group);  -- (a group the session is not narrowed to: refused)
    SELECT valid INTO cur_valid FROM pgmemory.facts WHERE group_id = p_group AND id = p_id AND upper_inf(recorded);
    IF NOT FOUND THEN
        RAISE EXCEPTION 'fact % has no current version to invalidate', p_id USING ERRCODE = 'P0002';
    END IF;
    RETURN pgmemory.correct_fact(p_group, p_id, lower(cur_valid), p_invalid_at, p_episode);
END
$$;

-- Withdrawal: we no longer believe fact p_id at all (its history is kept; a
-- version written in this same transaction was never seen and just goes).
-- The primitive under retraction; writers use pgmemory.retract_fact(group, id).
CREATE OR REPLACE FUNCTION pgmemory.withdraw_fact(p_group text, p_id uuid)
RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    later_at timestamptz;
BEGIN
    PERFORM pgmemory_internal.check_request_group(p_group);  -- (a group the session is not narrowed to: refused)
    DELETE FROM pgmemory.facts
     WHERE group_id = p_group AND id = p_id AND upper_inf(recorded) AND lower(recorded) = now();
    IF FOUND THEN
        RETURN true;
    END IF;
    -- Only a version recorded before now() can end at now() (see fact_changed_since_start).
    UPDATE pgmemory.facts SET recorded = tstzrange(lower(recorded), now())
     WHERE group_id = p_group AND id = p_id AND upper_inf(recorded) AND lower(recorded) < now();
    IF FOUND THEN
        RETURN true;
    END IF;
    SELECT lower(recorded) INTO later_at FROM pgmemory.facts
     WHERE group_id = p_group AND id = p_id AND upper_inf(recorded);
    IF FOUND THEN
        PERFORM pgmemory_internal.fact_changed_since_start(p_group, p_id, later_at);
    END IF;
    RETURN false;
END
$$;

-- The four query shapes. "True at T" is pgmemory.holds_at: a state valid at T, or a
-- one-off event that had happened by T.

-- What is true now, as we know it now.
CREATE OR REPLACE FUNCTION pgmemory.facts_current(p_group text)
RETURNS SETOF pgmemory.facts LANGUAGE sql STABLE AS $$
    SELECT * FROM pgmemory.facts
     WHERE group_id = p_group AND pgmemory.holds_at(valid, is_event, now()) AND upper_inf(recorded)
$$;

-- What was true at p_valid_at, as we know it now.
CREATE OR REPLACE FUNCTION pgmemory.facts_valid_at(p_group text, p_valid_at timestamptz)
RETURNS SETOF pgmemory.facts LANGUAGE sql STABLE AS $$
    SELECT * FROM pgmemory.facts
     WHERE group_id = p_group AND pgmemory.holds_at(valid, is_event, p_valid_at) AND upper_inf(recorded)
$$;

-- What we believed at p_known_at about p_valid_at.
CREATE OR REPLACE FUNCTION pgmemory.facts_as_of(
    p_group text, p_valid_at timestamptz, p_known_at timestamptz)
RETURNS SETOF pgmemory.facts LANGUAGE sql STABLE AS $$
    SELECT * FROM pgmemory.facts
     WHERE group_id = p_group AND pgmemory.holds_at(valid, is_event, p_valid_at) AND recorded @> p_known_at
$$;

-- Every version of fact p_id of group p_group, oldest belief first (scoped to
-- the group like every read: another group's fact id returns nothing).
CREATE OR REPLACE FUNCTION pgmemory.fact_history(p_group text, p_id uuid)
RETURNS SETOF pgmemory.facts LANGUAGE sql STABLE AS $$
    SELECT * FROM pgmemory.facts WHERE group_id = p_group AND id = p_id ORDER BY lower(recorded), version_id
$$;
