-- The single write of one episode: every decision the pipeline made, applied
-- in one call inside the caller's transaction (so all of it commits or none).

-- p_group is the episode's group (the routing key on Citus; the payload's group must match).
-- Payload: group, reference_time, new_entities, entity_updates, mentions (ids),
-- mention_summaries ({id: description}), mention_details ({id: {said_name,
-- renamed_to, labels, attributes}}: what the episode said of it), claims, usage, embedding. A claim is
-- {id, kind (assert|negate), duplicate_of (fact id or null), contradicts
-- (fact ids), source, target, relation, fact, valid_from, valid_to, embedding,
-- attributes}: the decisions only; pgmemory_internal.apply_claim turns them into
-- versions. Vectors (embedding) are given as p_vectors[n + 1] by a JSON integer n (the pipeline
-- sends its vectors that way, as one binary vector[] parameter: neither printed nor parsed as
-- text), or as pgvector text '[0.1,...]' in a JSON string, or as a JSON array of numbers.
-- Returns {claims: [what each claim did], created, duplicates, ended, withdrawn}.
DO $$ BEGIN  -- it returned void before claims existed
    IF EXISTS (SELECT 1 FROM pg_proc WHERE oid = to_regprocedure('pgmemory_internal.apply_episode(uuid, jsonb)')
                 AND prorettype = 'void'::regtype) THEN
        DROP FUNCTION pgmemory_internal.apply_episode(uuid, jsonb);
    END IF;
END $$;

-- A vector of an apply payload (see apply_episode): p_vectors[n + 1] for a JSON integer n,
-- else the pgvector text of a JSON string or array; NULL for JSON null or no value. A searched
-- CASE, not `CASE jsonb_typeof(p_value) WHEN ...`: inlined into a pushed-down INSERT ... SELECT
-- that row-level security rewrites (a restricted app login on Citus), the simple form failed
-- on the worker with "operator does not exist: text = boolean".
CREATE OR REPLACE FUNCTION pgmemory_internal.plan_vector(p_value jsonb, p_vectors vector[])
RETURNS vector LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN jsonb_typeof(p_value) = 'number' THEN p_vectors[(p_value)::integer + 1]
                WHEN jsonb_typeof(p_value) = 'string' THEN (p_value #>> '{}')::vector
                WHEN jsonb_typeof(p_value) = 'array' THEN (p_value::text)::vector
           END
$$;

CREATE OR REPLACE FUNCTION pgmemory_internal.apply_episode(p_group text, p_episode uuid, p_plan jsonb,
                                                           p_vectors vector[] DEFAULT NULL)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    g text := p_group;
    ref timestamptz := (p_plan->>'reference_time')::timestamptz;
    item jsonb;
    n bigint;
    c pgmemory.fact_claims;
    did jsonb;
    results jsonb := '[]';
    touched uuid[] := '{}';
    v_lineage uuid;
    v_contradicts uuid[];
    v_key text;
    said_keys text[] := '{}';  -- (source, relation, target) of this episode's claims so far,
    said_lins uuid[] := '{}';  -- and their lineages
    changed uuid[] := '{}';
    ended uuid[];
    v_mention text;
    v_details jsonb;
    v_labels text[];
    v_name text;
    unrenamed uuid[] := '{}';  -- entities whose new name another entity of the group has
    distributed boolean := coalesce((pgmemory_internal.setting('distributed'))::boolean, false);
BEGIN
    PERFORM pgmemory_internal.check_request_group(p_group);  -- (a group the session is not narrowed to: refused)
    IF p_plan->>'group' IS DISTINCT FROM p_group THEN
        RAISE EXCEPTION 'episode plan of group % applied to group %', p_plan->>'group', p_group
            USING ERRCODE = '22023';
    END IF;
    -- The payload's rows are selected through the episode's own row (pinned by group and id):
    -- on Citus that makes the INSERT ... SELECT one pushed down to the group's co-located shard
    -- (from jsonb alone it would go through intermediate results).
    -- Most episodes create no entity: no statement then (each would still fire the entities'
    -- statement trigger of the text statistics).
    IF jsonb_array_length(coalesce(p_plan->'new_entities', '[]')) > 0 THEN
        INSERT INTO pgmemory.entities (id, group_id, name, labels, summary, attributes)
        SELECT (e->>'id')::uuid, ep.group_id, e->>'name',
               ARRAY(SELECT jsonb_array_elements_text(e->'labels')),
               coalesce(e->>'summary', ''), coalesce(e->'attributes', '{}')
          FROM pgmemory.episodes ep CROSS JOIN jsonb_array_elements(p_plan->'new_entities') e
         WHERE ep.group_id = g AND ep.id = p_episode;
        INSERT INTO pgmemory.entity_name_vectors (group_id, entity_id, name_embedding)
        SELECT ep.group_id, (e->>'id')::uuid, pgmemory_internal.plan_vector(e->'embedding', p_vectors)
          FROM pgmemory.episodes ep CROSS JOIN jsonb_array_elements(p_plan->'new_entities') e
         WHERE ep.group_id = g AND ep.id = p_episode
           AND pgmemory_internal.plan_vector(e->'embedding', p_vectors) IS NOT NULL;
    END IF;

    FOR item IN SELECT * FROM jsonb_array_elements(p_plan->'entity_updates') LOOP
        -- A new name that another entity of the group has (an exact name, in any case, decides
        -- entity resolution) is not taken: two entities of one name would follow (a rename the
        -- LLM proposed onto a name it did not see, or that this episode introduced).
        v_name := item->>'name';
        IF v_name IS NOT NULL AND EXISTS (SELECT FROM pgmemory.entities o
                                           WHERE o.group_id = g AND lower(o.name) = lower(v_name)
                                             AND o.id <> (item->>'id')::uuid AND o.retired_at IS NULL) THEN
            v_name := NULL;
            unrenamed := unrenamed || (item->>'id')::uuid;
        END IF;
        UPDATE pgmemory.entities
           SET name = coalesce(v_name, name),
               labels = ARRAY(SELECT DISTINCT unnest(labels || ARRAY(
                            SELECT jsonb_array_elements_text(coalesce(item->'labels', '[]'))))),
               attributes = attributes || coalesce(item->'attributes', '{}')
         WHERE id = (item->>'id')::uuid AND group_id = g
           -- only when it changes something: a row rewritten the same still writes every index
           -- entry of the entity and its graph vertex (the mirror fires on SET name, labels)
           AND (name IS DISTINCT FROM coalesce(v_name, name)
                OR NOT labels @> ARRAY(SELECT jsonb_array_elements_text(coalesce(item->'labels', '[]')))
                OR attributes || coalesce(item->'attributes', '{}') IS DISTINCT FROM attributes);
    END LOOP;

    -- What the episode said about each entity (mention_details {id: {said_name, renamed_to,
    -- labels, attributes}}), so a delete can re-derive the entity from the episodes that remain.
    -- On one node one statement, in the payload's order (seq, the identity column, follows it).
    -- On Citus row by row: the identity column is volatile, and Citus pushes no
    -- INSERT ... SELECT with a volatile function down to the shard (it would collect the rows
    -- through intermediate results); an INSERT ... VALUES of the group is routed.
    IF NOT distributed THEN
        INSERT INTO pgmemory.episode_mentions (episode_id, entity_id, group_id, summary,
                                               said_name, renamed_to, labels, attributes)
        SELECT p_episode, x.m::uuid, g, coalesce(p_plan #>> ARRAY['mention_summaries', x.m], ''),
               d.v->>'said_name', CASE WHEN x.m::uuid <> ALL (unrenamed) THEN d.v->>'renamed_to' END,
               ARRAY(SELECT jsonb_array_elements_text(coalesce(d.v->'labels', '[]'))),
               coalesce(d.v->'attributes', '{}')
          FROM jsonb_array_elements_text(p_plan->'mentions') WITH ORDINALITY AS x (m, n)
          CROSS JOIN LATERAL (SELECT p_plan #> ARRAY['mention_details', x.m]) AS d (v)
         ORDER BY x.n
        ON CONFLICT DO NOTHING;
    ELSE
        FOR v_mention IN SELECT jsonb_array_elements_text(p_plan->'mentions') LOOP
            v_details := p_plan #> ARRAY['mention_details', v_mention];
            v_labels := ARRAY(SELECT jsonb_array_elements_text(coalesce(v_details->'labels', '[]')));
            INSERT INTO pgmemory.episode_mentions (episode_id, entity_id, group_id, summary,
                                                   said_name, renamed_to, labels, attributes)
            VALUES (p_episode, v_mention::uuid, g, coalesce(p_plan #>> ARRAY['mention_summaries', v_mention], ''),
                    v_details->>'said_name', CASE WHEN v_mention::uuid <> ALL (unrenamed) THEN v_details->>'renamed_to' END,
                    v_labels, coalesce(v_details->'attributes', '{}'))
            ON CONFLICT DO NOTHING;
        END LOOP;
    END IF;

    -- In fold order (pgmemory_internal.fold_order; the plan's order among equals): the belief is the
    -- same in any order, but a claim applied before one of its own episode that comes earlier in
    -- the fold is re-folded ("I left Acme two weeks ago and now work at Globex": the negation of
    -- Acme is placed two weeks back, after Globex ended Acme today).
    FOR item, n IN SELECT x.value, x.n FROM jsonb_array_elements(coalesce(p_plan->'claims', '[]')) WITH ORDINALITY AS x(value, n)
                    ORDER BY pgmemory_internal.fold_order(x.value->>'kind', (x.value->>'valid_from')::timestamptz,
                                                          nullif((x.value->>'valid_to')::timestamptz, 'infinity'),
                                                          coalesce((x.value->>'ref_time')::timestamptz, ref)), x.n LOOP
        -- Looked up first: Citus plans no subquery inside INSERT ... VALUES. Only when there is
        -- something to look up (most claims are new facts that contradict nothing): a lookup of
        -- NULL is planned anew on every call, as its custom plan always looks cheapest.
        v_lineage := NULL;
        IF item->>'duplicate_of' IS NOT NULL THEN
            v_lineage := (SELECT f.lineage FROM pgmemory.facts f
                           WHERE f.group_id = g AND f.id = (item->>'duplicate_of')::uuid
                           ORDER BY f.version_id DESC LIMIT 1);
        END IF;
        v_contradicts := '{}';
        IF jsonb_array_length(coalesce(item->'contradicts', '[]')) > 0 THEN
            v_contradicts := ARRAY(SELECT DISTINCT f.lineage FROM pgmemory.facts f
                                    WHERE f.group_id = g AND f.id IN (
                                          SELECT x::uuid FROM jsonb_array_elements_text(item->'contradicts') x));
        END IF;
        -- fold_claim stores the claim with the fact it landed on: one write of the claim row in
        -- the usual case (apply_claim reads no claim of its own; an UPDATE of the stored row was
        -- rarely HOT and rewrote its embedding and every index of fact_claims).
        c := NULL;
        c.group_id := g;
        c.episode_id := p_episode;
        c.kind := item->>'kind';
        c.id := (item->>'id')::uuid;
        -- A statement about a fact this episode already spoke of joins that lineage ("I moved to
        -- Zurich last month. I moved from Zurich to Prague yesterday.": the assertion and the
        -- negation read no candidate of each other), as add_fact joins a pair's lineage.
        v_key := concat_ws('|', item->>'source', item->>'relation', item->>'target');
        IF v_lineage IS NULL AND v_key = ANY (said_keys) THEN
            v_lineage := said_lins[array_position(said_keys, v_key)];
        END IF;
        -- A pair with no believed fact of the relation showed the extractor no duplicate candidate;
        -- a lineage of it believed nowhere now (withdrawn by a value that began with it, retracted)
        -- is joined, as add_fact joins it: a second lineage opened beside it would hold at the same
        -- time once the first is believed again (the episode that withdrew it deleted).
        IF v_lineage IS NULL THEN
            v_lineage := (SELECT fc.lineage FROM pgmemory.fact_claims fc
                           WHERE fc.group_id = g AND fc.source_id = (item->>'source')::uuid
                             AND fc.target_id = (item->>'target')::uuid AND fc.relation = item->>'relation'
                           ORDER BY fc.seq LIMIT 1);
            IF v_lineage IS NOT NULL AND EXISTS (
                    SELECT FROM pgmemory.facts f
                     WHERE f.group_id = g AND f.source_id = (item->>'source')::uuid AND f.relation = item->>'relation'
                       AND f.target_id = (item->>'target')::uuid AND upper_inf(f.recorded)) THEN
                v_lineage := NULL;  -- (believed: a candidate the extractor judged not to be the same fact)
            END IF;
        END IF;
        c.lineage := coalesce(v_lineage, c.id);
        said_keys := said_keys || v_key;
        said_lins := said_lins || c.lineage;
        c.source_id := (item->>'source')::uuid;
        c.target_id := (item->>'target')::uuid;
        c.relation := item->>'relation';
        c.fact := item->>'fact';
        c.embedding := pgmemory_internal.plan_vector(item->'embedding', p_vectors);
        c.attributes := coalesce(item->'attributes', '{}');
        c.valid_from := (item->>'valid_from')::timestamptz;
        c.valid_to := (item->>'valid_to')::timestamptz;
        c.ref_time := coalesce((item->>'ref_time')::timestamptz, ref);
        c.contradicts := v_contradicts;
        did := pgmemory_internal.fold_claim(c);
        results := results || jsonb_build_array(did || jsonb_build_object('fact', c.fact, 'n', n));
        touched := touched || ARRAY(SELECT x::uuid FROM jsonb_array_elements_text((did->'ended') || (did->'withdrawn')) x);
        IF did->>'action' NOT IN ('merged', 'unchanged') THEN
            changed := changed || (did->>'fact_id')::uuid;
        END IF;
    END LOOP;

    -- Communities: new entities join their neighbours' plurality community; the communities
    -- whose facts changed are marked for a summary refresh (sql/57_communities.sql).
    -- Read first, then call (Citus: see below).
    -- (ended: the endpoints of the facts it ended or withdrew, the only members that may leave.)
    SELECT coalesce(array_agg(DISTINCT x), '{}'), coalesce(array_agg(DISTINCT x) FILTER (WHERE f.id = ANY (touched)), '{}')
      INTO changed, ended
      FROM pgmemory.facts f, unnest(ARRAY[f.source_id, f.target_id]) x
     WHERE f.group_id = g AND f.id = ANY (changed || touched);
    PERFORM pgmemory_internal.update_communities(g,
        ARRAY(SELECT m::uuid FROM jsonb_array_elements_text(p_plan->'mentions') m),
        ARRAY(SELECT (e->>'id')::uuid FROM jsonb_array_elements(p_plan->'new_entities') e), changed, ended);

    -- Read first, then call: a call inside a statement that reads a distributed table would run
    -- nested in that shard query on Citus, where its own queries are refused.
    touched := ARRAY(
        SELECT m::uuid FROM jsonb_array_elements_text(p_plan->'mentions') m
        UNION
        SELECT unnest(ARRAY[f.source_id, f.target_id]) FROM pgmemory.facts f
         WHERE f.group_id = g AND f.id = ANY (touched));
    PERFORM pgmemory_internal.derive_summaries(g, touched);

    UPDATE pgmemory.episodes
       SET status = 'done', error = NULL, lease_owner = NULL, lease_until = NULL,
           -- Cost accumulates over attempts (failed ones were billed too);
           -- attempts are counted when an attempt takes its lease (sql/50_queue.sql).
           llm_calls = llm_calls + (p_plan #>> '{usage,calls}')::integer,
           prompt_tokens = prompt_tokens + (p_plan #>> '{usage,prompt_tokens}')::integer,
           completion_tokens = completion_tokens + (p_plan #>> '{usage,completion_tokens}')::integer,
           embedding = pgmemory_internal.plan_vector(p_plan->'embedding', p_vectors)
     WHERE id = p_episode AND group_id = g;
    RETURN pgmemory_internal.claims_summary(  -- (in the plan's order)
        coalesce((SELECT jsonb_agg(r - 'n' ORDER BY (r->>'n')::int) FROM jsonb_array_elements(results) r), '[]'));
END
$$;

-- What a list of applied claims did, in counts and the sentences created.
CREATE OR REPLACE FUNCTION pgmemory_internal.claims_summary(p_results jsonb)
RETURNS jsonb LANGUAGE sql IMMUTABLE AS $$
    SELECT jsonb_build_object(
        'claims', p_results,
        'created', coalesce((SELECT jsonb_agg(r->>'fact') FROM jsonb_array_elements(p_results) r
                              WHERE r->>'action' = 'created'), '[]'),
        'duplicates', (SELECT count(*) FROM jsonb_array_elements(p_results) r
                        WHERE r->>'action' IN ('merged', 'extended')),
        'ended', (SELECT count(DISTINCT x) FROM jsonb_array_elements(p_results) r,
                         jsonb_array_elements_text(r->'ended') x),
        'withdrawn', (SELECT count(DISTINCT x) FROM jsonb_array_elements(p_results) r,
                             jsonb_array_elements_text(r->'withdrawn') x))
$$;

-- Entity summaries: an entity is described by its latest believed, still-valid
-- facts (the five most recently recorded, as source or target; of facts recorded at
-- the same time the later version, in each branch as in the ranking, so the five never
-- depend on the plan); with none, by its latest believed facts that have ended, each
-- marked "(until <date>)". An entity with no believed facts is described by its
-- earliest live mention (so deleting the episode that described it leaves the next one's words).
-- (PL/pgSQL: its statements are planned with the group's value, so Citus routes them to
-- the group's shard.)
DO $$ BEGIN  -- it was a SQL function before
    IF EXISTS (SELECT 1 FROM pg_proc WHERE oid = to_regprocedure('pgmemory_internal.derive_summaries(text, uuid[])')
                 AND prolang = (SELECT oid FROM pg_language WHERE lanname = 'sql')) THEN
        DROP FUNCTION pgmemory_internal.derive_summaries(text, uuid[]);
    END IF;
END $$;
CREATE OR REPLACE FUNCTION pgmemory_internal.derive_summaries(p_group text, p_entities uuid[])
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v_bare uuid[];
BEGIN
    PERFORM pgmemory_internal.check_request_group(p_group);  -- (a group the session is not narrowed to: refused)
    WITH open_facts AS NOT MATERIALIZED (  -- inlined: Citus would plan a shared CTE apart
        SELECT ent.id, u.fact, u.rec, u.version_id
          FROM unnest(p_entities) AS ent (id)
          CROSS JOIN LATERAL (
                (SELECT fa.fact, lower(fa.recorded) AS rec, fa.version_id FROM pgmemory.facts fa
                  WHERE fa.group_id = p_group AND fa.source_id = ent.id AND upper_inf(fa.recorded) AND upper_inf(fa.valid)
                  ORDER BY lower(fa.recorded) DESC, fa.version_id DESC LIMIT 5)
                UNION ALL
                (SELECT fa.fact, lower(fa.recorded), fa.version_id FROM pgmemory.facts fa
                  WHERE fa.group_id = p_group AND fa.target_id = ent.id AND upper_inf(fa.recorded) AND upper_inf(fa.valid)
                  ORDER BY lower(fa.recorded) DESC, fa.version_id DESC LIMIT 5)) u
    ), ended_facts AS (
        SELECT ent.id,
               rtrim(fa.fact, '.') || ' (until ' || to_char(upper(fa.valid) AT TIME ZONE 'UTC', 'YYYY-MM-DD') || ').'
                   AS fact,
               lower(fa.recorded) AS rec, fa.version_id
          FROM unnest(p_entities) AS ent (id)
          JOIN pgmemory.facts fa ON fa.group_id = p_group AND (fa.source_id = ent.id OR fa.target_id = ent.id)
         WHERE upper_inf(fa.recorded) AND NOT upper_inf(fa.valid)
           AND NOT EXISTS (SELECT 1 FROM open_facts o WHERE o.id = ent.id)
    ), ranked AS (
        SELECT id, fact, row_number() OVER (PARTITION BY id ORDER BY rec DESC, version_id DESC) AS n
          FROM (SELECT * FROM open_facts UNION ALL SELECT * FROM ended_facts) f
    ), summaries AS (
        SELECT id, string_agg(fact, ' ' ORDER BY n) AS summary FROM ranked WHERE n <= 5 GROUP BY id
    )
    UPDATE pgmemory.entities e
       SET summary = s.summary
      FROM summaries s
     -- id = ANY: the entities are read by key (the generic plan otherwise read the group's whole
     -- entity table into a hash).
     WHERE e.group_id = p_group AND e.id = ANY (p_entities) AND e.id = s.id
       AND e.summary IS DISTINCT FROM s.summary;

    -- Without believed facts: the description of its earliest live mention. Those entities are
    -- found first (two probes that stop at the first row; an OR would read every believed fact of
    -- a hub), so their mentions are read only for them (read before the probes, every mention of
    -- a hub was read on every episode: 11 ms at 10k), and most episodes, which have none, run no
    -- UPDATE (nor its statement trigger).
    v_bare := ARRAY(SELECT ent.id FROM unnest(p_entities) AS ent (id)
                     WHERE NOT EXISTS (SELECT 1 FROM pgmemory.facts fa
                                        WHERE fa.group_id = p_group AND fa.source_id = ent.id AND upper_inf(fa.recorded))
                       AND NOT EXISTS (SELECT 1 FROM pgmemory.facts fa
                                        WHERE fa.group_id = p_group AND fa.target_id = ent.id AND upper_inf(fa.recorded)));
    IF cardinality(v_bare) > 0 THEN
        UPDATE pgmemory.entities e
           SET summary = d.summary
          FROM (SELECT n.id, coalesce((SELECT m.summary FROM pgmemory.episode_mentions m
                                        WHERE m.group_id = p_group AND m.entity_id = n.id AND m.summary <> ''
                                        ORDER BY m.seq LIMIT 1), '') AS summary
                  FROM unnest(v_bare) AS n (id)) d
         WHERE e.group_id = p_group AND e.id = d.id AND e.summary IS DISTINCT FROM d.summary;
    END IF;
END
$$;
