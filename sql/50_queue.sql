-- The episode work queue. Any writer (psql, an app in any language, the CLI)
-- enqueues pending episodes; `pgmemory worker` processes (claims) them. An
-- episode being processed has status 'processing' and a lease (lease_owner,
-- lease_until) that its worker renews; an expired lease is taken over, so a
-- crashed worker delays its episode by at most one lease. Within a group
-- episodes are processed one at a time, by reference time then recorded time.

-- SHA-1 of a byte string (Postgres has no built-in sha1 and contrib may be
-- absent): only used to derive name-based UUIDs identical to Python's uuid5.
CREATE OR REPLACE FUNCTION pgmemory_internal.sha1(p_data bytea)
RETURNS bytea LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
DECLARE
    m32 constant bigint := 4294967295;
    bits bigint := length(p_data)::bigint * 8;
    msg bytea := p_data || '\x80'::bytea;
    h bigint[] := ARRAY[1732584193, 4023233417, 2562383102, 271733878, 3285377520];
    w bigint[] := array_fill(0::bigint, ARRAY[80]);
    a bigint; b bigint; c bigint; d bigint; e bigint; f bigint; k bigint; t bigint;
    x bigint;
    chunk integer;
    i integer;
BEGIN
    msg := msg || decode(repeat('00', ((56 - length(msg) % 64) + 64) % 64), 'hex')
               || decode(lpad(to_hex(bits), 16, '0'), 'hex');
    FOR chunk IN 0 .. length(msg) / 64 - 1 LOOP
        FOR i IN 0 .. 15 LOOP
            w[i + 1] := (get_byte(msg, chunk * 64 + i * 4)::bigint << 24)
                      | (get_byte(msg, chunk * 64 + i * 4 + 1)::bigint << 16)
                      | (get_byte(msg, chunk * 64 + i * 4 + 2)::bigint << 8)
                      | get_byte(msg, chunk * 64 + i * 4 + 3)::bigint;
        END LOOP;
        FOR i IN 17 .. 80 LOOP
            x := w[i - 3] # w[i - 8] # w[i - 14] # w[i - 16];
            w[i] := ((x << 1) | (x >> 31)) & m32;
        END LOOP;
        a := h[1]; b := h[2]; c := h[3]; d := h[4]; e := h[5];
        FOR i IN 1 .. 80 LOOP
            IF i <= 20 THEN
                f := (b & c) | ((~b & m32) & d); k := 1518500249;
            ELSIF i <= 40 THEN
                f := b # c # d; k := 1859775393;
            ELSIF i <= 60 THEN
                f := (b & c) | (b & d) | (c & d); k := 2400959708;
            ELSE
                f := b # c # d; k := 3395469782;
            END IF;
            t := ((((a << 5) | (a >> 27)) & m32) + f + e + k + w[i]) & m32;
            e := d; d := c; c := ((b << 30) | (b >> 2)) & m32; b := a; a := t;
        END LOOP;
        h[1] := (h[1] + a) & m32; h[2] := (h[2] + b) & m32; h[3] := (h[3] + c) & m32;
        h[4] := (h[4] + d) & m32; h[5] := (h[5] + e) & m32;
    END LOOP;
    RETURN decode(lpad(to_hex(h[1]), 8, '0') || lpad(to_hex(h[2]), 8, '0') || lpad(to_hex(h[3]), 8, '0')
                  || lpad(to_hex(h[4]), 8, '0') || lpad(to_hex(h[5]), 8, '0'), 'hex');
END
$$;

-- RFC 4122 name-based UUID (version 5), equal to Python's uuid.uuid5(namespace, name).
CREATE OR REPLACE FUNCTION pgmemory_internal.uuid5(p_namespace uuid, p_name text)
RETURNS uuid LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT encode(set_byte(set_byte(substring(d FROM 1 FOR 16), 6, (get_byte(d, 6) & 15) | 80),
                           8, (get_byte(d, 8) & 63) | 128), 'hex')::uuid
      FROM pgmemory_internal.sha1(decode(replace(p_namespace::text, '-', ''), 'hex')
                         || convert_to(p_name, 'UTF8')) AS d
$$;

-- p_text without the leading and trailing whitespace Python's str.strip() removes (every character
-- str.isspace() calls whitespace, not only the space): enqueue_episode checks and stores actor and
-- content as pgmemory.ingest.episode.validate_episode does, so both derive the same episode id.
CREATE OR REPLACE FUNCTION pgmemory_internal.py_strip(p_text text)
RETURNS text LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT btrim(p_text, E'\t\n\u000b\f\r\u001c\u001d\u001e\u001f \u0085\u00a0\u1680\u2000\u2001\u2002\u2003'
                         || E'\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000')
$$;

-- The episode UUID for an id given by the writer: a UUID as is, any other
-- string derived from (group, id) exactly as pgmemory.ingest.episode.episode_uuid does.
CREATE OR REPLACE FUNCTION pgmemory_internal.episode_uuid(p_group text, p_episode_id text)
RETURNS uuid LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    hex text := replace(btrim(replace(replace(p_episode_id, 'urn:', ''), 'uuid:', ''), '{}'), '-', '');
BEGIN
    IF p_episode_id IS NULL OR pgmemory_internal.py_strip(p_episode_id) = '' THEN
        RAISE EXCEPTION 'episode_id must be a UUID or a non-empty string' USING ERRCODE = '22023';
    END IF;
    IF hex ~ '^[0-9a-fA-F]{32}$' THEN
        RETURN hex::uuid;
    END IF;
    RETURN pgmemory_internal.uuid5('5d6f1f0e-8a43-4f3c-9a52-6d0c2b7e9a11', p_group || chr(31) || p_episode_id);
END
$$;

-- A retracted episode of p_group with id p_id (kept as history for known-at reads) gives way to
-- a new episode with its id: its row goes (its provenance links cascade), as a retract before
-- migration 0550 did, so the id is said again. Returns whether there was one.
CREATE OR REPLACE FUNCTION pgmemory_internal.forget_retracted_episode(p_group text, p_id uuid)
RETURNS boolean LANGUAGE plpgsql AS $f$
BEGIN
    PERFORM pgmemory_internal.check_request_group(p_group);  -- (a group the session is not narrowed to: refused)
    DELETE FROM pgmemory.episodes WHERE group_id = p_group AND id = p_id AND retracted_at IS NOT NULL;
    RETURN FOUND;
END
$f$;

-- The 7-argument form (before metadata had a default): one function now, so calls without
-- p_metadata (positional or named) are not ambiguous between two.
DROP FUNCTION IF EXISTS pgmemory.enqueue_episode(text, text, text, text, timestamptz, text, text);
-- The 8-argument form (before p_reference_offset): one function, for the same reason.
DROP FUNCTION IF EXISTS pgmemory.enqueue_episode(text, text, text, text, timestamptz, text, text, jsonb);

-- Store a pending episode for the workers, validated like the Python API
-- (pgmemory.ingest.episode.validate_episode, with its limits: bad input raises
-- invalid_parameter_value naming the argument and the problem; nothing is written).
-- Idempotent by id: the same id with the same content, kind, actor and reference time again is a
-- no-op; with another of them it is refused, naming which.
-- p_metadata: a JSON object stored with a newly enqueued episode in the same transaction (so
-- no worker sees it without); an episode already present keeps the metadata it was stored with.
-- p_reference_offset: the speaker's UTC offset at p_reference_time (a timestamptz keeps only the
-- instant), e.g. '-05:00': relative dates ("yesterday", "last Friday") count from the speaker's
-- local date; NULL is UTC. The same instant at another offset is the same episode (as its
-- default id says): the offset it was first stored with is kept.
-- Returns the episode's UUID. Wakes listening workers (NOTIFY pgmemory_episodes, empty payload:
-- any login may LISTEN, so the notification names no group; workers claim from every group).
CREATE OR REPLACE FUNCTION pgmemory.enqueue_episode(
    p_group text, p_content text, p_kind text DEFAULT 'message', p_actor text DEFAULT NULL,
    p_reference_time timestamptz DEFAULT NULL, p_source_description text DEFAULT '',
    p_episode_id text DEFAULT NULL, p_metadata jsonb DEFAULT NULL, p_reference_offset interval DEFAULT NULL)
RETURNS uuid LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_id uuid;
    v_stored text;
    v_depth integer;
BEGIN
    PERFORM pgmemory_internal.check_request_group(p_group);  -- (a group the session is not narrowed to: refused)
    PERFORM pgmemory_internal.check_group(p_group);
    IF p_kind IS NULL OR p_kind NOT IN ('message', 'text', 'json') THEN
        RAISE EXCEPTION 'unknown episode kind %: use one of message, text, json', quote_nullable(p_kind)
              USING ERRCODE = '22023';
    END IF;
    IF p_content IS NULL OR pgmemory_internal.py_strip(p_content) = '' THEN
        RAISE EXCEPTION 'episode content is empty' USING ERRCODE = '22023';
    END IF;
    IF length(p_content) > 50000 THEN  -- (pgmemory.ingest.episode.MAX_CONTENT_CHARS)
        RAISE EXCEPTION 'episode content has % characters; the limit is 50000: split it into several episodes',
              length(p_content) USING ERRCODE = '22023';
    END IF;
    IF p_kind = 'json' THEN
        v_depth := pgmemory_internal.json_depth(p_content);
        IF v_depth > 500 THEN  -- (pgmemory.ingest.episode.MAX_JSON_DEPTH)
            RAISE EXCEPTION 'json episode nests % levels of arrays and objects; the limit is 500', v_depth
                  USING ERRCODE = '22023';
        END IF;
        BEGIN
            PERFORM p_content::json;  -- the syntax only, as Python's json.loads (jsonb refuses "\u0000")
        EXCEPTION WHEN invalid_text_representation THEN
            RAISE EXCEPTION 'json episode is not valid JSON' USING ERRCODE = '22023';
        END;
    END IF;
    IF p_reference_time IS NULL THEN
        RAISE EXCEPTION 'reference_time is required (when the episode was said or happened)'
              USING ERRCODE = '22023';
    END IF;
    PERFORM pgmemory_internal.check_time(p_reference_time, 'reference_time');
    IF p_reference_offset IS NOT NULL THEN  -- (as a datetime's utcoffset: under a day, no months)
        IF abs(extract(epoch FROM p_reference_offset)) >= 86400 OR extract(month FROM p_reference_offset) <> 0
           OR extract(year FROM p_reference_offset) <> 0 THEN
            RAISE EXCEPTION 'reference_offset % is not a UTC offset: it must be under 24 hours, e.g. ''-05:00''',
                  p_reference_offset USING ERRCODE = '22023';
        END IF;
        p_reference_offset := make_interval(secs => extract(epoch FROM p_reference_offset));  -- ('1 day -2 hours': 22:00)
    END IF;
    IF pgmemory_internal.py_strip(p_actor) = '' THEN
        RAISE EXCEPTION 'actor must be a non-empty string or NULL' USING ERRCODE = '22023';
    END IF;
    IF length(p_actor) > 200 THEN  -- (pgmemory.ingest.episode.MAX_ACTOR_CHARS)
        RAISE EXCEPTION 'actor has % characters; the limit is 200', length(p_actor) USING ERRCODE = '22023';
    END IF;
    p_actor := pgmemory_internal.py_strip(p_actor);  -- (stored, compared and in the id stripped, as in Python)
    IF p_actor ~ '[\x01-\x1f\x7f-\x9f]' THEN  -- (a name is one line, as Python checks it)
        RAISE EXCEPTION 'actor contains a control character (U+%): a speaker''s name is one line',
              upper(lpad(to_hex(ascii(substring(p_actor FROM '[\x01-\x1f\x7f-\x9f]'))), 4, '0'))
              USING ERRCODE = '22023';
    END IF;
    IF p_source_description IS NULL THEN
        RAISE EXCEPTION 'source_description must be a string' USING ERRCODE = '22023';
    END IF;
    IF length(p_source_description) > 50000 THEN  -- (MAX_CONTENT_CHARS, as Python checks it)
        RAISE EXCEPTION 'source_description has % characters; the limit is 50000', length(p_source_description)
              USING ERRCODE = '22023';
    END IF;
    IF length(p_episode_id) > 200 THEN  -- (pgmemory.ingest.episode.MAX_EPISODE_ID_CHARS)
        RAISE EXCEPTION 'episode_id has % characters; the limit is 200', length(p_episode_id) USING ERRCODE = '22023';
    END IF;
    PERFORM pgmemory_internal.check_json_object(p_metadata, 'metadata');
    -- Without an id: derived from (group, actor, reference time as a UTC instant, content)
    -- exactly as pgmemory.ingest.episode.default_episode_uuid does, so re-enqueueing is a no-op.
    v_id := CASE WHEN p_episode_id IS NOT NULL THEN pgmemory_internal.episode_uuid(p_group, p_episode_id)
                 ELSE pgmemory_internal.uuid5('5d6f1f0e-8a43-4f3c-9a52-6d0c2b7e9a11', concat_ws(chr(31), 'default', p_group,
                          coalesce(p_actor, ''),
                          to_char(p_reference_time AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS')
                          || CASE WHEN extract(microseconds FROM p_reference_time)::bigint % 1000000 <> 0
                                  THEN to_char(p_reference_time AT TIME ZONE 'UTC', '.US') ELSE '' END
                          || '+00:00', p_content)) END;
    -- The group's write lock first, as every writer of the group: the insert updates the group's
    -- episode statistics (text_stats, term_stats), which a delete_episode holding the lock also
    -- updates, so an app transaction that enqueues and then calls add_fact (or any writer) would
    -- otherwise hold those rows while waiting for the lock the delete holds while waiting for them.
    PERFORM pgmemory_internal.lock_group(p_group);
    -- A retracted episode (kept as history, sql/60_delete.sql) gives way when its id is said again.
    PERFORM pgmemory_internal.forget_retracted_episode(p_group, v_id);
    INSERT INTO pgmemory.episodes (id, group_id, kind, content, actor, source_description, valid_at, metadata,
                                   reference_offset)
    VALUES (v_id, p_group, p_kind, p_content, p_actor, p_source_description, p_reference_time,
            coalesce(p_metadata, '{}'), p_reference_offset)
    ON CONFLICT DO NOTHING;
    IF FOUND THEN
        PERFORM pg_notify('pgmemory_episodes', '');
        RETURN v_id;
    END IF;
    -- The same id again is the same episode only with the same content, kind, speaker and time.
    SELECT CASE WHEN e.content IS DISTINCT FROM p_content THEN 'content'
                WHEN e.kind IS DISTINCT FROM p_kind THEN 'kind'
                WHEN e.actor IS DISTINCT FROM p_actor THEN 'actor'
                WHEN e.valid_at IS DISTINCT FROM p_reference_time THEN 'reference_time' END
      INTO v_stored FROM pgmemory.episodes e WHERE e.group_id = p_group AND e.id = v_id;
    IF v_stored IS NOT NULL THEN
        RAISE EXCEPTION 'episode id % is already used by a different episode: its % differs',
              coalesce(p_episode_id, v_id::text), v_stored USING ERRCODE = '22023';
    END IF;
    -- The same episode again: a pending one enqueued without metadata takes the metadata given now
    -- (as the two forms, without and with metadata, did before they were one function).
    IF coalesce(p_metadata, '{}') <> '{}' THEN
        UPDATE pgmemory.episodes e SET metadata = p_metadata
         WHERE e.group_id = p_group AND e.id = v_id AND e.status = 'pending' AND e.metadata = '{}';
    END IF;
    RETURN v_id;
END
$$;

-- Take the next episode for worker p_worker, or no row when nothing is ready.
-- A group's next episode is its earliest unfinished one (reference time, then
-- recorded time, then enqueue order: seq, as turns enqueued in one transaction share recorded_at); a group with a live lease is busy; the group whose oldest
-- unfinished episode waits longest goes first. One claimer per group at
-- a time (its 'claim' row of pgmemory.group_locks, FOR UPDATE SKIP LOCKED, so claimers skip
-- each other's groups instead of waiting; apart from the writers' 'write' row, so a claim never
-- waits for an apply), FOR UPDATE SKIP LOCKED on the episode; nothing in it waits for another
-- session's lock. Run it in its own short transaction.
-- An episode that already took queue_max_attempts leases (setting; 5) without finishing is
-- poisoned: it is failed with an error saying so instead of being claimed again.
-- A few index probes per group with work, whatever the backlog (migration 0300):
-- the groups are walked in the queue index (the next group_id above the last), each
-- group's oldest episode and live lease are one probe each.
-- p_skip: groups the caller sets aside for now (a worker that found a group's write lock held by
-- another session past lock_timeout goes on with the other groups, sql below and worker.py).
-- p_reachable_only (Citus): find the groups with work through reachable_queued_groups() instead of
-- the walk, whose statements read every shard and so fail while one worker is down; the groups
-- of the other workers are claimed meanwhile (worker.py uses it once a claim named a node down).
DO $$ BEGIN  -- earlier signatures: two overloads would make a shorter call ambiguous
    IF to_regprocedure('pgmemory_internal.claim_episode(text, interval)') IS NOT NULL THEN
        DROP FUNCTION pgmemory_internal.claim_episode(text, interval);
    END IF;
    IF to_regprocedure('pgmemory_internal.claim_episode(text, interval, text[])') IS NOT NULL THEN
        DROP FUNCTION pgmemory_internal.claim_episode(text, interval, text[]);
    END IF;
END $$;

-- The groups with unfinished episodes (pending or processing) that can be read now. On one node,
-- all of them. On Citus, each worker reads its own shards of pgmemory.episodes on a connection of
-- its own (master_run_on_worker, which reports a node it cannot reach instead of failing), so the
-- groups of a stopped worker are left out rather than failing the whole read. Shard names come
-- from Citus's catalog, never from a caller.
CREATE OR REPLACE FUNCTION pgmemory_internal.reachable_queued_groups()
RETURNS text[] LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    found text[] := '{}';
    nodes text[];
    ports integer[];
    commands text[];
    r record;
BEGIN
    IF NOT coalesce((pgmemory_internal.setting('distributed'))::boolean, false) THEN
        RETURN ARRAY(SELECT DISTINCT q.group_id FROM pgmemory.episodes q
                      WHERE q.status IN ('pending', 'processing') ORDER BY 1);
    END IF;
    SELECT array_agg(c.nodename), array_agg(c.nodeport), array_agg(c.command)
      INTO nodes, ports, commands
      FROM (SELECT n.nodename, n.nodeport,
                   'SELECT array_agg(DISTINCT q.group_id)::text FROM ('
                   || string_agg(format('SELECT e.group_id FROM %s e WHERE e.status IN (''pending'', ''processing'')',
                                        shard_name('pgmemory.episodes'::regclass, s.shardid)), ' UNION ALL ')
                   || ') q' AS command
              FROM pg_dist_shard s
              JOIN pg_dist_placement p ON p.shardid = s.shardid
              JOIN pg_dist_node n ON n.groupid = p.groupid AND n.noderole = 'primary'
             WHERE s.logicalrelid = 'pgmemory.episodes'::regclass
             GROUP BY n.nodename, n.nodeport) c;
    FOR r IN SELECT w.success, w.result FROM master_run_on_worker(nodes, ports, commands, true) w LOOP
        -- (a node that failed, "failed to connect to host:port" or any other error: its groups wait)
        IF r.success AND nullif(r.result, '') IS NOT NULL THEN
            found := found || r.result::text[];
        END IF;
    END LOOP;
    RETURN ARRAY(SELECT DISTINCT x FROM unnest(found) AS x ORDER BY 1);
END
$$;

CREATE OR REPLACE FUNCTION pgmemory_internal.claim_episode(p_worker text, p_lease interval DEFAULT '5 minutes',
                                                           p_skip text[] DEFAULT '{}',
                                                           p_reachable_only boolean DEFAULT false)
RETURNS TABLE (group_id text, episode_id uuid)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    g text;
    candidates text[];
    n integer := 1;
    v_id uuid;
    v_now timestamptz;  -- Citus refuses volatile calls (clock_timestamp) inside an UPDATE
    ready text[] := '{}';
    waiting timestamptz[] := '{}';
    v_attempts integer;
    -- Leases an episode may take without finishing before it is failed as poisoned.
    max_attempts integer := greatest(coalesce((pgmemory_internal.setting('queue_max_attempts'))::integer, 5), 1);
BEGIN
    PERFORM pgmemory_internal.check_writer('pgmemory.episodes', 'a worker');  -- (an analyst's read-only login)
    IF p_reachable_only THEN
        candidates := pgmemory_internal.reachable_queued_groups();
        g := candidates[1];
    ELSE
        g := (SELECT min(q.group_id) FROM pgmemory.episodes q WHERE q.status IN ('pending', 'processing'));
    END IF;
    WHILE g IS NOT NULL LOOP
        IF NOT EXISTS (SELECT 1 FROM pgmemory.episodes b
                        WHERE b.group_id = g AND b.status = 'processing' AND b.lease_until > clock_timestamp()) THEN
            ready := ready || g;
            waiting := waiting || (SELECT min(a.recorded_at) FROM pgmemory.episodes a
                                    WHERE a.group_id = g AND a.status IN ('pending', 'processing'));
        END IF;
        IF p_reachable_only THEN
            n := n + 1;
            g := candidates[n];
        ELSE
            g := (SELECT min(q.group_id) FROM pgmemory.episodes q
                   WHERE q.status IN ('pending', 'processing') AND q.group_id > g);
        END IF;
    END LOOP;
    FOR g IN SELECT r.g FROM unnest(ready, waiting) AS r (g, t) WHERE r.g <> ALL (coalesce(p_skip, '{}'))
              ORDER BY r.t, r.g LOOP
        -- The group's 'claim' row (made with its first episode): skipped when another claimer
        -- holds it, or when it is missing (deleted by hand: the group's next episode makes it).
        PERFORM FROM pgmemory.group_locks l WHERE l.group_id = g AND l.purpose = 'claim' FOR UPDATE SKIP LOCKED;
        CONTINUE WHEN NOT FOUND;
        -- Statements from here on see what the group's previous claimer committed.
        CONTINUE WHEN EXISTS (SELECT 1 FROM pgmemory.episodes b
                               WHERE b.group_id = g AND b.status = 'processing'
                                 AND b.lease_until > clock_timestamp());
        LOOP
            SELECT h.id, h.attempts INTO v_id, v_attempts FROM pgmemory.episodes h
             WHERE h.group_id = g AND h.status IN ('pending', 'processing')
             ORDER BY h.valid_at, h.recorded_at, h.seq LIMIT 1;
            EXIT WHEN v_id IS NULL OR v_attempts < max_attempts;
            -- A poisoned episode: every lease taken on it ended unfinished (the process working on
            -- it was killed, or lost Postgres, each time). It fails, so its group goes on.
            -- SKIP LOCKED: a session holding the row (a login of this group) must not stall the claims.
            v_now := clock_timestamp();
            UPDATE pgmemory.episodes e
               SET status = 'failed', lease_owner = NULL, lease_until = NULL,
                   error = format('gave up after %s attempts that did not finish (the process working on it '
                                  'was lost each time); `pgmemory retry` tries it again', e.attempts)
             WHERE e.group_id = g AND e.id IN (
                     SELECT l.id FROM pgmemory.episodes l
                      WHERE l.group_id = g AND l.id = v_id
                        AND (l.status = 'pending' OR (l.status = 'processing' AND l.lease_until <= v_now))
                        FOR UPDATE SKIP LOCKED);
            EXIT WHEN NOT FOUND;  -- taken meanwhile: leave the group to its taker
        END LOOP;
        CONTINUE WHEN v_id IS NULL OR v_attempts >= max_attempts;
        v_now := clock_timestamp();
        UPDATE pgmemory.episodes e
           SET status = 'processing', lease_owner = p_worker, lease_until = v_now + p_lease,
               attempts = e.attempts + 1
         WHERE e.group_id = g AND e.id IN (
                 SELECT l.id FROM pgmemory.episodes l
                  WHERE l.group_id = g AND l.id = v_id
                    AND (l.status = 'pending' OR (l.status = 'processing' AND l.lease_until <= v_now))
                    FOR UPDATE SKIP LOCKED);
        IF FOUND THEN
            group_id := g;
            episode_id := v_id;
            RETURN NEXT;
            RETURN;
        END IF;
    END LOOP;
END
$$;

-- Lease one given episode (in-process ingestion and `retry`): 'leased' when
-- this caller now holds it (pending, failed or an expired lease), 'done' when
-- it is finished, 'busy' when another live lease holds it, or when it is unfinished (not failed)
-- and another process holds a live lease on another episode of its group (a worker is processing
-- the group: its queued episodes wait for it, so the group's order is kept; a failed episode,
-- already out of order, may be retried meanwhile).
CREATE OR REPLACE FUNCTION pgmemory_internal.lease_episode(p_group text, p_episode uuid, p_worker text,
                                                  p_lease interval DEFAULT '5 minutes')
RETURNS text LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_status text;
    v_now timestamptz := clock_timestamp();  -- Citus refuses volatile calls inside an UPDATE
BEGIN
    PERFORM pgmemory_internal.check_request_group(p_group);  -- (a group the session is not narrowed to: refused)
    -- The group's 'claim' row, as claim_episode takes it (a claim is one short statement): a
    -- claimer's lease committed meanwhile is seen by the check below, and a claimer skips the group
    -- while this takes it.
    PERFORM FROM pgmemory.group_locks l WHERE l.group_id = p_group AND l.purpose = 'claim' FOR UPDATE;
    IF EXISTS (SELECT 1 FROM pgmemory.episodes b
                WHERE b.group_id = p_group AND b.id <> p_episode AND b.status = 'processing'
                  AND b.lease_until > clock_timestamp() AND b.lease_owner IS DISTINCT FROM p_worker)
       AND NOT EXISTS (SELECT 1 FROM pgmemory.episodes f
                        WHERE f.group_id = p_group AND f.id = p_episode AND f.status = 'failed') THEN
        SELECT CASE WHEN e.status = 'done' THEN 'done' ELSE 'busy' END INTO v_status
          FROM pgmemory.episodes e WHERE e.group_id = p_group AND e.id = p_episode;
        RETURN v_status;
    END IF;
    v_now := clock_timestamp();
    UPDATE pgmemory.episodes e
       SET status = 'processing', lease_owner = p_worker, lease_until = v_now + p_lease,
           attempts = e.attempts + 1
     WHERE e.group_id = p_group AND e.id = p_episode
       AND (e.status IN ('pending', 'failed') OR (e.status = 'processing' AND e.lease_until <= v_now))
    RETURNING 'leased' INTO v_status;
    IF FOUND THEN
        RETURN v_status;
    END IF;
    SELECT CASE WHEN e.status = 'done' THEN 'done' ELSE 'busy' END INTO v_status
      FROM pgmemory.episodes e WHERE e.group_id = p_group AND e.id = p_episode;
    RETURN v_status;
END
$$;

-- Extend a lease this worker holds; false when it is no longer this worker's.
CREATE OR REPLACE FUNCTION pgmemory_internal.renew_lease(p_group text, p_episode uuid, p_worker text,
                                                p_lease interval DEFAULT '5 minutes')
RETURNS boolean LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_now timestamptz := clock_timestamp();  -- Citus refuses volatile calls inside an UPDATE
BEGIN
    PERFORM pgmemory_internal.check_request_group(p_group);  -- (a group the session is not narrowed to: refused)
    UPDATE pgmemory.episodes e SET lease_until = v_now + p_lease
     WHERE e.group_id = p_group AND e.id = p_episode AND e.status = 'processing'
       AND e.lease_owner = p_worker;
    RETURN FOUND;
END
$$;

-- End an attempt that did not apply: the LLM cost is always added (it was
-- billed); while this worker still holds the lease (and, given p_attempt, the
-- lease of that attempt: `attempts` as it took it) the episode becomes
-- 'failed' with p_error, or 'pending' again when p_error is NULL (a worker
-- stopping gives its episode back). An attempt that lost its connection during
-- its apply does not know whether the apply committed: with p_attempt, an
-- episode found 'done' by that very attempt (status 'done', attempts = p_attempt:
-- each lease counts one, and 'done' is final) had its cost added by the apply,
-- so nothing is added twice.
CREATE OR REPLACE FUNCTION pgmemory_internal.end_attempt(p_group text, p_episode uuid, p_worker text,
                                                p_error text, p_calls integer, p_prompt_tokens integer,
                                                p_completion_tokens integer, p_attempt integer)
RETURNS void LANGUAGE sql VOLATILE AS $$
    SELECT pgmemory_internal.check_request_group(p_group);  -- (a group the session is not narrowed to: refused)
    -- (each condition written out: a SET expression sees the row as it is when it is updated)
    UPDATE pgmemory.episodes e
       SET llm_calls = e.llm_calls + CASE WHEN p_attempt IS NOT NULL AND e.status = 'done'
                                               AND e.attempts = p_attempt THEN 0 ELSE p_calls END,
           prompt_tokens = e.prompt_tokens + CASE WHEN p_attempt IS NOT NULL AND e.status = 'done'
                                                       AND e.attempts = p_attempt THEN 0 ELSE p_prompt_tokens END,
           completion_tokens = e.completion_tokens + CASE WHEN p_attempt IS NOT NULL AND e.status = 'done'
                                                               AND e.attempts = p_attempt
                                                          THEN 0 ELSE p_completion_tokens END,
           status = CASE WHEN e.lease_owner IS NOT DISTINCT FROM p_worker AND e.status = 'processing'
                              AND (p_attempt IS NULL OR e.attempts = p_attempt)
                         THEN CASE WHEN p_error IS NULL THEN 'pending' ELSE 'failed' END ELSE e.status END,
           error = CASE WHEN e.lease_owner IS NOT DISTINCT FROM p_worker AND e.status = 'processing'
                             AND (p_attempt IS NULL OR e.attempts = p_attempt)
                        THEN left(p_error, 2000) ELSE e.error END,
           lease_owner = CASE WHEN e.lease_owner IS NOT DISTINCT FROM p_worker
                                   AND (p_attempt IS NULL OR e.attempts = p_attempt)
                              THEN NULL ELSE e.lease_owner END,
           lease_until = CASE WHEN e.lease_owner IS NOT DISTINCT FROM p_worker
                                   AND (p_attempt IS NULL OR e.attempts = p_attempt)
                              THEN NULL ELSE e.lease_until END
     WHERE e.group_id = p_group AND e.id = p_episode
$$;

-- Give back an episode whose group was busy (its write lock held by another session past
-- lock_timeout): 'pending' again while this worker holds the lease, its LLM cost added, and the
-- attempt not counted (the episode did nothing wrong: a group held busy for long must not make
-- it "poisoned", claim_episode's max attempts).
CREATE OR REPLACE FUNCTION pgmemory_internal.set_aside_episode(p_group text, p_episode uuid, p_worker text,
                                                               p_calls integer, p_prompt_tokens integer,
                                                               p_completion_tokens integer)
RETURNS void LANGUAGE sql VOLATILE AS $$
    SELECT pgmemory_internal.check_request_group(p_group);  -- (a group the session is not narrowed to: refused)
    UPDATE pgmemory.episodes e SET attempts = greatest(e.attempts - 1, 0)
     WHERE e.group_id = p_group AND e.id = p_episode AND e.status = 'processing'
       AND e.lease_owner = p_worker;
    SELECT pgmemory_internal.end_attempt(p_group, p_episode, p_worker, NULL, p_calls, p_prompt_tokens,
                                         p_completion_tokens, NULL);
$$;

-- Take the group's write lock until the transaction ends: the lock every writer of the group
-- takes first (apply_if_unchanged, add_fact, retract_fact, delete_episode, erase_group,
-- detect_communities, enqueue_episode). A row lock on the group's 'write' row of pgmemory.group_locks, not an
-- advisory lock: row-level security hides another group's row, so a login can neither see nor
-- lock it (any login may take any advisory lock). The row is created by the group's first write
-- (a concurrent creator's insert is waited for, then locked). A caller holding the lock across
-- several statements calls this: on Citus it is delegated even inside a transaction block
-- (force_delegation, pgmemory/storage/citus.py), so it runs on the group's worker like the
-- delegated writers (the row lock is held on the worker's shard wherever it is taken from).
CREATE OR REPLACE FUNCTION pgmemory_internal.lock_group(p_group text)
RETURNS void LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    PERFORM pgmemory_internal.check_request_group(p_group);  -- (a group the session is not narrowed to: refused)
    PERFORM pgmemory_internal.check_group(p_group);  -- (every writer of a group comes here first)
    PERFORM pgmemory_internal.check_writer('pgmemory.group_locks', format('writing group %s', p_group));
    LOOP
        PERFORM FROM pgmemory.group_locks l WHERE l.group_id = p_group AND l.purpose = 'write' FOR UPDATE;
        EXIT WHEN FOUND;
        -- Missing (the group's first write; a login that does not see the group fails here on
        -- row-level security, told in one line naming both): created, then locked by the next round.
        BEGIN
            INSERT INTO pgmemory.group_locks (group_id, purpose) VALUES (p_group, 'write') ON CONFLICT DO NOTHING;
        EXCEPTION WHEN insufficient_privilege THEN
            RAISE EXCEPTION 'login % may not write group % (not among its groups; the owner grants it: pgmemory grant)',
                  pgmemory_internal.session_role(), p_group USING ERRCODE = '42501';
        END;
    END LOOP;
END
$$;

-- Every group with an episode has its 'claim' row, the queue's per-group lock (claim_episode):
-- made by the statement that inserts the group's first episode, so a worker never creates one
-- (it would wait on another session's uncommitted insert of it, stalling every group's claims).
CREATE OR REPLACE FUNCTION pgmemory_internal.add_claim_rows()
RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    g text;
BEGIN
    FOR g IN SELECT DISTINCT n.group_id FROM new_rows n LOOP
        INSERT INTO pgmemory.group_locks (group_id, purpose) VALUES (g, 'claim') ON CONFLICT DO NOTHING;
    END LOOP;
    RETURN NULL;
END
$$;

-- Created once (init must not drop and recreate what is current), or remade when it calls
-- another function (a helper moved back to schema pgmemory, tests/test_sql_api.py).
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = 'pgmemory.episodes'::regclass
                                               AND tgname = 'episodes_claim_row'
                                               AND tgfoid = 'pgmemory_internal.add_claim_rows()'::regprocedure) THEN
        DROP TRIGGER IF EXISTS episodes_claim_row ON pgmemory.episodes;
        CREATE TRIGGER episodes_claim_row AFTER INSERT ON pgmemory.episodes REFERENCING NEW TABLE AS new_rows
            FOR EACH STATEMENT EXECUTE FUNCTION pgmemory_internal.add_claim_rows();
    END IF;
END
$$;

-- Queue state per group: what psql users watch (and `pgmemory worker` reports).
CREATE OR REPLACE VIEW pgmemory.episode_queue AS
SELECT group_id,
       count(*) FILTER (WHERE status = 'pending') AS pending,
       count(*) FILTER (WHERE status = 'processing') AS processing,
       count(*) FILTER (WHERE status = 'failed') AS failed,
       min(valid_at) FILTER (WHERE status = 'pending') AS oldest_pending,
       max(lease_until) FILTER (WHERE status = 'processing') AS lease_until
  FROM pgmemory.episodes
 WHERE status <> 'done'
 GROUP BY group_id;

-- Apply one episode's decisions in a single statement (so no transaction sits idle between
-- round trips): under the group lock, if this worker still holds the episode's lease and the
-- group's counter is still p_version (nothing changed since the candidates were read), apply
-- them (pgmemory_internal.apply_episode; p_vectors: the vectors the plan refers to by number)
-- and count the change. Returns {"state": s, "applied": what
-- apply_episode returned} with s 'applied', 'changed' (nothing written: read again), 'done'
-- (already applied) or 'lost' (the lease is someone else's now).
CREATE OR REPLACE FUNCTION pgmemory_internal.apply_if_unchanged(p_group text, p_episode uuid, p_worker text,
                                                       p_version bigint, p_plan jsonb,
                                                       p_vectors vector[] DEFAULT NULL)
RETURNS jsonb LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_status text;
    v_owner text;
    v_applied jsonb;
BEGIN
    PERFORM pgmemory_internal.check_request_group(p_group);  -- (a group the session is not narrowed to: refused)
    PERFORM pgmemory_internal.lock_group(p_group);
    SELECT e.status, e.lease_owner INTO v_status, v_owner
      FROM pgmemory.episodes e WHERE e.group_id = p_group AND e.id = p_episode FOR UPDATE;
    IF v_status IS NULL OR v_status = 'done' THEN
        RETURN jsonb_build_object('state', 'done');
    END IF;
    IF v_owner IS DISTINCT FROM p_worker THEN
        RETURN jsonb_build_object('state', 'lost');
    END IF;
    IF pgmemory_internal.group_version(p_group) <> p_version THEN
        RETURN jsonb_build_object('state', 'changed');
    END IF;
    v_applied := pgmemory_internal.apply_episode(p_group, p_episode, p_plan, p_vectors);
    PERFORM pgmemory_internal.count_group_change(p_group);
    RETURN jsonb_build_object('state', 'applied', 'applied', v_applied);
END
$$;
