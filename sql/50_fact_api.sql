-- Writing facts from SQL, for apps in any language: the same claims and the
-- same temporal rules (sql/35_fact_rules.sql) as ingested episodes.

-- The entity named p_name in p_group (exact, case-insensitive), created if missing.
CREATE OR REPLACE FUNCTION pgmemory_internal.entity_by_name(p_group text, p_name text, p_embedding vector DEFAULT NULL,
                                                   OUT entity_id uuid, OUT created boolean)
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pgmemory_internal.check_request_group(p_group);  -- (a group the session is not narrowed to: refused)
    SELECT e.id INTO entity_id FROM pgmemory.entities e
     WHERE e.group_id = p_group AND lower(e.name) = lower(p_name) AND e.retired_at IS NULL
     ORDER BY e.created_at, e.id LIMIT 1;
    created := NOT FOUND;
    IF created THEN
        entity_id := gen_random_uuid();
        INSERT INTO pgmemory.entities (id, group_id, name) VALUES (entity_id, p_group, p_name);
        IF p_embedding IS NOT NULL THEN
            INSERT INTO pgmemory.entity_name_vectors (group_id, entity_id, name_embedding)
            VALUES (p_group, entity_id, p_embedding);
        END IF;
    END IF;
END
$$;

-- State that p_source p_relation p_target (p_fact is the sentence), valid
-- from p_valid_from to p_valid_to (NULL: not stated). Entities are resolved
-- by name in any case and created if missing; a fact with the same relation from the
-- same source to the same target (believed, else one no longer believed) is
-- repeated (dedupe within the pair, in the same direction, as ingestion decides):
-- its lineage's interval is extended when it overlaps or touches, else a new one opens. p_negated: the
-- relation ended at p_valid_to (or p_reference_time). p_functional: one value
-- per source (one employer, one home), so other targets of the relation end.
-- Returns {fact_id, action, source_id, target_id, entities_created, ended, withdrawn}; action
-- 'withdrawn' with no fact_id: the statement is kept but believed nowhere (another value of a
-- functional relation, still true, begins where it does).
CREATE OR REPLACE FUNCTION pgmemory.add_fact(
    p_group text, p_source text, p_relation text, p_target text, p_fact text,
    p_valid_from timestamptz DEFAULT NULL, p_valid_to timestamptz DEFAULT NULL,
    p_negated boolean DEFAULT false, p_functional boolean DEFAULT false,
    p_attributes jsonb DEFAULT '{}', p_reference_time timestamptz DEFAULT NULL,
    p_embedding vector DEFAULT NULL, p_source_embedding vector DEFAULT NULL,
    p_target_embedding vector DEFAULT NULL)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    rel text := upper(regexp_replace(btrim(coalesce(p_relation, '')), '[^A-Za-z0-9]+', '_', 'g'));
    src record;
    tgt record;
    dup uuid;
    new_id uuid := gen_random_uuid();
    c pgmemory.fact_claims;
    did jsonb;
    created text[] := '{}';
    ends uuid[] := '{}';
    touched uuid[];
BEGIN
    PERFORM pgmemory_internal.check_request_group(p_group);  -- (a group the session is not narrowed to: refused)
    IF coalesce(btrim(p_group), '') = '' THEN
        RAISE EXCEPTION 'group must be a non-empty string' USING ERRCODE = '22023';
    END IF;
    IF p_group = '*' THEN
        RAISE EXCEPTION 'group ''*'' is reserved: it means every group in grants and API keys' USING ERRCODE = '22023';
    END IF;
    IF coalesce(btrim(p_source), '') = '' OR coalesce(btrim(p_target), '') = '' THEN
        RAISE EXCEPTION 'source and target must be non-empty entity names' USING ERRCODE = '22023';
    END IF;
    PERFORM pgmemory_internal.check_group(p_group);  -- (printable, at most 200 characters)
    -- The limits Memory.add_fact checks, on the arguments as given: names and relations are btree
    -- keys (pgmemory.validate.MAX_ENTITY_NAME_CHARS, MAX_RELATION_CHARS); the fact is stored and
    -- copied into entity summaries (pgmemory.ingest.episode.MAX_CONTENT_CHARS).
    IF length(p_source) > 400 THEN
        RAISE EXCEPTION 'source has % characters; the limit is 400', length(p_source) USING ERRCODE = '22023';
    END IF;
    IF length(p_relation) > 100 THEN
        RAISE EXCEPTION 'relation has % characters; the limit is 100', length(p_relation) USING ERRCODE = '22023';
    END IF;
    IF length(p_target) > 400 THEN
        RAISE EXCEPTION 'target has % characters; the limit is 400', length(p_target) USING ERRCODE = '22023';
    END IF;
    IF length(p_fact) > 50000 THEN
        RAISE EXCEPTION 'fact has % characters; the limit is 50000', length(p_fact) USING ERRCODE = '22023';
    END IF;
    IF lower(btrim(p_source)) = lower(btrim(p_target)) THEN
        RAISE EXCEPTION 'source and target are the same entity %', p_source USING ERRCODE = '22023';
    END IF;
    IF rel !~ '^[A-Z][A-Z0-9_]*$' THEN
        RAISE EXCEPTION 'relation % must start with a letter (e.g. WORKS_FOR)', p_relation USING ERRCODE = '22023';
    END IF;
    IF coalesce(btrim(p_fact), '') = '' THEN
        RAISE EXCEPTION 'fact must be a non-empty sentence' USING ERRCODE = '22023';
    END IF;
    PERFORM pgmemory_internal.check_json_object(p_attributes, 'attributes');
    PERFORM pgmemory_internal.check_time(p_valid_from, 'valid_from', '-infinity');
    PERFORM pgmemory_internal.check_time(p_valid_to, 'valid_to', 'infinity');
    PERFORM pgmemory_internal.check_time(p_reference_time, 'reference_time');
    IF p_valid_from >= p_valid_to THEN
        RAISE EXCEPTION 'valid_from % is not before valid_to %', p_valid_from, p_valid_to USING ERRCODE = '22023';
    END IF;
    PERFORM pgmemory_internal.lock_group(p_group);
    PERFORM pgmemory_internal.count_group_change(p_group);  -- read -> decide -> apply writers re-read (sql/50_queue.sql)
    SELECT * INTO src FROM pgmemory_internal.entity_by_name(p_group, btrim(p_source), p_source_embedding);
    SELECT * INTO tgt FROM pgmemory_internal.entity_by_name(p_group, btrim(p_target), p_target_embedding);
    IF src.created THEN created := created || btrim(p_source); END IF;
    IF tgt.created THEN created := created || btrim(p_target); END IF;
    -- The pair's lineage of this relation: the believed one, else one no longer believed (its
    -- interval withdrawn by a contradiction, or retracted), so the statement said again joins it
    -- rather than opening a second lineage that could hold at the same time once the other returns;
    -- else that of a statement believed nowhere (withdrawn as it came: no fact version, a claim).
    SELECT f.lineage INTO dup FROM pgmemory.facts f
     WHERE f.group_id = p_group AND f.relation = rel
       AND f.source_id = src.entity_id AND f.target_id = tgt.entity_id
     ORDER BY upper_inf(f.recorded) DESC, lower(f.recorded) LIMIT 1;
    IF dup IS NULL THEN
        SELECT fc.lineage INTO dup FROM pgmemory.fact_claims fc
         WHERE fc.group_id = p_group AND fc.relation = rel
           AND fc.source_id = src.entity_id AND fc.target_id = tgt.entity_id
         ORDER BY fc.seq LIMIT 1;
    END IF;
    -- One value per source: every other target's lineage, believed or not (one withdrawn now may be
    -- believed again when what withdrew it is retracted, and must then end where this begins), from
    -- its versions and its statements (one believed nowhere has no version).
    IF p_functional THEN  -- computed first: Citus plans no subquery inside INSERT ... VALUES
        ends := ARRAY(SELECT f.lineage FROM pgmemory.facts f
                       WHERE f.group_id = p_group AND f.source_id = src.entity_id
                         AND f.relation = rel AND f.target_id <> tgt.entity_id
                      UNION
                      SELECT fc.lineage FROM pgmemory.fact_claims fc
                       WHERE fc.group_id = p_group AND fc.source_id = src.entity_id
                         AND fc.relation = rel AND fc.target_id <> tgt.entity_id);
    END IF;
    c.group_id := p_group;
    c.kind := CASE WHEN p_negated THEN 'negate' ELSE 'assert' END;
    c.id := new_id;
    c.lineage := coalesce(dup, new_id);
    c.source_id := src.entity_id;
    c.target_id := tgt.entity_id;
    c.relation := rel;
    c.fact := btrim(p_fact);
    c.embedding := p_embedding;
    c.attributes := coalesce(p_attributes, '{}');
    c.valid_from := p_valid_from;
    c.valid_to := p_valid_to;
    c.ref_time := coalesce(p_reference_time, now());
    c.contradicts := ends;
    did := pgmemory_internal.fold_claim(c);
    -- Read first, then call (a call nested in a shard query cannot query on Citus).
    touched := ARRAY(
        SELECT unnest(ARRAY[src.entity_id, tgt.entity_id])
        UNION
        SELECT unnest(ARRAY[f.source_id, f.target_id]) FROM pgmemory.facts f
         WHERE f.group_id = p_group AND f.id IN (
               SELECT x::uuid FROM jsonb_array_elements_text((did->'ended') || (did->'withdrawn')) x));
    PERFORM pgmemory_internal.derive_summaries(p_group, touched);
    PERFORM pgmemory_internal.update_communities(p_group, ARRAY[src.entity_id, tgt.entity_id],  -- sql/57_communities.sql
        ARRAY(SELECT x.id FROM (VALUES (src.entity_id, src.created), (tgt.entity_id, tgt.created)) x (id, made)
               WHERE x.made), ARRAY[src.entity_id, tgt.entity_id],
        ARRAY(SELECT unnest(ARRAY[f.source_id, f.target_id]) FROM pgmemory.facts f
               WHERE f.group_id = p_group AND f.id IN (
                     SELECT x::uuid FROM jsonb_array_elements_text((did->'ended') || (did->'withdrawn')) x)));
    RETURN did || jsonb_build_object('source_id', src.entity_id, 'target_id', tgt.entity_id,
                                     'relation', rel, 'entities_created', to_jsonb(created));
END
$$;

-- We no longer believe fact p_fact of p_group (history kept: a new
-- transaction-time version). Recorded as a claim, and the claims behind the fact
-- (those of its lineage whose place in the fold lies within its validity interval)
-- are marked retracted_by it: folds leave them out, so the lineage is re-folded
-- without them (what only they ended holds again) and a later re-fold (a delete)
-- keeps it retracted. Returns {fact_id, action: withdrawn, ended (none), withdrawn (it, and
-- facts that only its claims made believed), changed (facts believed with another interval now,
-- such as one it had ended)}.
CREATE OR REPLACE FUNCTION pgmemory.retract_fact(p_group text, p_fact uuid)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    c pgmemory.fact_claims;
    lo timestamptz;
    hi timestamptz;
    changed uuid[];
    touched uuid[];
    comp uuid[];
    b_lineages uuid[];
    b_valid tstzrange[];
    paired uuid[];
BEGIN
    PERFORM pgmemory_internal.check_request_group(p_group);  -- (a group the session is not narrowed to: refused)
    PERFORM pgmemory_internal.lock_group(p_group);
    PERFORM pgmemory_internal.count_group_change(p_group);  -- read -> decide -> apply writers re-read (sql/50_queue.sql)
    SELECT lower(f.valid), upper(f.valid) INTO lo, hi FROM pgmemory.facts f
     WHERE f.id = p_fact AND f.group_id = p_group AND upper_inf(f.recorded);
    INSERT INTO pgmemory.fact_claims (group_id, kind, id, lineage, fact_id, source_id, target_id, relation, fact,
                                      ref_time)
    SELECT p_group, 'retract', f.id, f.lineage, f.id, f.source_id, f.target_id, f.relation, f.fact, now()
      FROM pgmemory.facts f
     WHERE f.id = p_fact AND f.group_id = p_group AND upper_inf(f.recorded)
    RETURNING * INTO c;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'fact % is not believed in group %', p_fact, p_group USING ERRCODE = 'P0002';
    END IF;
    -- The component as it was: a lineage that only the retracted claims made exclusive with this
    -- one is re-folded too (what they ended holds again).
    comp := pgmemory_internal.claim_component(p_group, ARRAY[c.lineage]);
    SELECT coalesce(array_agg(f.lineage), '{}'), coalesce(array_agg(f.valid), '{}') INTO b_lineages, b_valid
      FROM pgmemory.facts f WHERE f.group_id = p_group AND f.lineage = ANY (comp) AND upper_inf(f.recorded);
    -- (Not a claim that landed on another believed interval of the lineage: one touching this one
    -- at a bound has its own claims there, such as the negation that ended the one before.)
    UPDATE pgmemory.fact_claims fc SET retracted_by = c.seq
     WHERE fc.group_id = p_group AND fc.lineage = c.lineage AND fc.kind <> 'retract' AND fc.retracted_by IS NULL
       AND (fc.fact_id = p_fact
            OR ((lo IS NULL OR pgmemory_internal.fold_key(fc.kind, fc.valid_from, fc.valid_to, fc.ref_time) >= lo)
                AND (hi IS NULL OR pgmemory_internal.fold_key(fc.kind, fc.valid_from, fc.valid_to, fc.ref_time) <= hi)
                AND NOT EXISTS (SELECT FROM pgmemory.facts o
                                 WHERE o.group_id = p_group AND o.id = fc.fact_id AND o.id <> p_fact
                                   AND upper_inf(o.recorded))));
    PERFORM pgmemory_internal.rebuild_exclusions(p_group, comp);
    changed := pgmemory_internal.refold_lineages(p_group, comp);
    FOR i IN 1 .. 3 LOOP  -- values of one slot the judge linked, holding together now (keep_slots_apart)
        paired := pgmemory_internal.keep_slots_apart(p_group, comp, b_lineages, b_valid);
        EXIT WHEN cardinality(paired) = 0;
        changed := changed || pgmemory_internal.refold_lineages(p_group, paired);
    END LOOP;
    -- Read first, then call (a call nested in a shard query cannot query on Citus).
    touched := ARRAY(SELECT DISTINCT unnest(ARRAY[f.source_id, f.target_id]) FROM pgmemory.facts f
                      WHERE f.group_id = p_group AND f.id = ANY (changed || p_fact));
    PERFORM pgmemory_internal.derive_summaries(p_group, touched);
    PERFORM pgmemory_internal.update_communities(p_group, '{}', '{}', touched);
    -- Of the other facts the re-fold changed: those no longer believed (withdrawn) and those
    -- believed with another interval (changed: what only the retracted claims ended holds again).
    RETURN jsonb_build_object(
        'fact_id', p_fact, 'action', 'withdrawn', 'ended', '[]'::jsonb,
        'withdrawn', to_jsonb(p_fact || ARRAY(
            SELECT DISTINCT x FROM unnest(changed) x
             WHERE x <> p_fact AND NOT EXISTS (SELECT FROM pgmemory.facts f WHERE f.group_id = p_group
                                                  AND f.id = x AND upper_inf(f.recorded)))),
        'changed', to_jsonb(ARRAY(
            SELECT DISTINCT x FROM unnest(changed) x
             WHERE x <> p_fact AND EXISTS (SELECT FROM pgmemory.facts f WHERE f.group_id = p_group
                                              AND f.id = x AND upper_inf(f.recorded)))));
END
$$;
