-- The temporal rules: how a decided claim changes what we believe. Python (or
-- any SQL writer) only decides what a statement is (a new fact, a repeat of a
-- lineage, a negation, which lineages it contradicts, with its dates); these
-- functions turn that into fact versions. A fact's believed versions are the
-- fold of its lineage's live claims in ingestion order, so ingesting
-- (pgmemory_internal.apply_claim on the current belief) and re-folding after a delete
-- (pgmemory_internal.refold_lineages from nothing) follow the same rules.
--
-- Rules for one claim c, with its evidence start es = coalesce(valid_from, ref_time):
-- assert:  merge into the believed intervals of its lineage that overlap or
--          touch [es, valid_to or forever]: the start moves back to es (an
--          earlier episode extends it; an unknown start takes the stated one),
--          a stated end ends an open interval, intervals it bridges are joined.
--          With none (never stated, or ended before es: a return to an earlier
--          state), it opens a new interval, a new fact id in the same lineage.
--          Then each contradicted lineage's interval that is valid at es ends
--          at es (withdrawn if it started exactly then); one that starts after
--          es (a late-arriving statement about the past) is never ended:
--          instead the new claim's interval ends where it begins.
-- negate:  the open intervals of its lineage that started before
--          t = coalesce(valid_to, ref_time) end at t; with no interval at all
--          the statement is recorded as an interval ending at t.
-- retract: the fact it names is withdrawn (history kept).

-- Apply one claim to its group's believed facts; returns what it did as
-- {fact_id, action (created|extended|merged|ended|withdrawn|unchanged), ended, withdrawn}.
CREATE OR REPLACE FUNCTION pgmemory_internal.apply_claim(c pgmemory.fact_claims)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    es timestamptz := coalesce(c.valid_from, c.ref_time);
    t timestamptz;
    landed uuid;
    action text := 'unchanged';
    cur record;
    ids uuid[];
    lo timestamptz;
    hi timestamptz;
    any_unknown_lo boolean;
    any_open boolean;
    new_lo timestamptz;
    new_hi timestamptz;
    cap timestamptz;
    ended uuid[] := '{}';
    withdrawn uuid[] := '{}';
BEGIN
    IF c.kind = 'retract' THEN
        IF EXISTS (SELECT 1 FROM pgmemory.facts f
                    WHERE f.id = c.id AND f.group_id = c.group_id AND upper_inf(f.recorded)) THEN
            PERFORM pgmemory.withdraw_fact(c.group_id, c.id);
            RETURN jsonb_build_object('fact_id', c.id, 'action', 'withdrawn', 'ended', '[]'::jsonb,
                                      'withdrawn', jsonb_build_array(c.id));
        END IF;
        RETURN jsonb_build_object('fact_id', c.id, 'action', 'unchanged', 'ended', '[]'::jsonb,
                                  'withdrawn', '[]'::jsonb);
    END IF;

    IF c.kind = 'negate' THEN
        t := coalesce(c.valid_to, c.ref_time);
        IF NOT EXISTS (SELECT 1 FROM pgmemory.facts f WHERE f.group_id = c.group_id
                          AND f.lineage = c.lineage AND upper_inf(f.recorded)) THEN
            PERFORM pgmemory.record_fact(c.id, c.group_id, c.source_id, c.target_id, c.relation, c.fact,
                                         CASE WHEN c.valid_from < t THEN c.valid_from END, t,
                                         c.embedding, c.attributes, c.episode_id, c.lineage);
            RETURN jsonb_build_object('fact_id', c.id, 'action', 'created', 'ended', '[]'::jsonb,
                                      'withdrawn', '[]'::jsonb);
        END IF;
        FOR cur IN SELECT f.id, lower(f.valid) AS lo FROM pgmemory.facts f
                    WHERE f.group_id = c.group_id AND f.lineage = c.lineage AND upper_inf(f.recorded)
                      AND upper_inf(f.valid) AND (lower_inf(f.valid) OR lower(f.valid) < t)
                    ORDER BY lower(f.valid) NULLS FIRST, f.version_id LOOP
            PERFORM pgmemory.correct_fact(c.group_id, cur.id, cur.lo, t);
            ended := ended || cur.id;
            landed := coalesce(landed, cur.id);
        END LOOP;
        IF landed IS NULL THEN
            SELECT f.id INTO landed FROM pgmemory.facts f
             WHERE f.group_id = c.group_id AND f.lineage = c.lineage AND upper_inf(f.recorded)
             ORDER BY lower(f.valid) NULLS FIRST, f.version_id LIMIT 1;
        ELSE
            action := 'ended';
        END IF;
        IF c.episode_id IS NOT NULL THEN
            INSERT INTO pgmemory.fact_episodes (fact_id, episode_id, group_id)
            VALUES (landed, c.episode_id, c.group_id) ON CONFLICT DO NOTHING;
        END IF;
        RETURN jsonb_build_object('fact_id', landed, 'action', action, 'ended', to_jsonb(ended),
                                  'withdrawn', '[]'::jsonb);
    END IF;

    -- assert: the believed intervals of the lineage that overlap or touch the claim.
    SELECT array_agg(f.id ORDER BY lower(f.valid) NULLS FIRST, f.version_id), bool_or(lower_inf(f.valid)),
           min(lower(f.valid)), bool_or(upper_inf(f.valid)), max(upper(f.valid))
      INTO ids, any_unknown_lo, lo, any_open, hi
      FROM pgmemory.facts f
     WHERE f.group_id = c.group_id AND f.lineage = c.lineage AND upper_inf(f.recorded)
       AND (lower_inf(f.valid) OR lower(f.valid) <= coalesce(c.valid_to, 'infinity'))
       AND (upper_inf(f.valid) OR es <= upper(f.valid));
    IF ids IS NULL THEN
        landed := c.id;
        action := 'created';
        -- Without the episode: its provenance row is written once, below, for every outcome.
        PERFORM pgmemory.record_fact(c.id, c.group_id, c.source_id, c.target_id, c.relation, c.fact,
                                     CASE WHEN c.valid_to IS NULL OR c.valid_from < c.valid_to
                                          THEN c.valid_from END, c.valid_to,
                                     c.embedding, c.attributes, NULL, c.lineage);
    ELSE
        landed := ids[1];
        action := 'merged';
        new_lo := CASE WHEN any_unknown_lo THEN c.valid_from ELSE least(lo, es) END;
        new_hi := CASE WHEN any_open THEN c.valid_to
                       WHEN c.valid_to IS NULL THEN hi ELSE greatest(hi, c.valid_to) END;
        IF new_lo >= new_hi THEN
            new_lo := NULL;
        END IF;
        FOR i IN 2 .. cardinality(ids) LOOP
            PERFORM pgmemory.withdraw_fact(c.group_id, ids[i]);
            withdrawn := withdrawn || ids[i];
        END LOOP;
        SELECT lower(f.valid), upper(f.valid) INTO lo, hi FROM pgmemory.facts f
         WHERE f.group_id = c.group_id AND f.id = landed AND upper_inf(f.recorded);
        -- An interval opened by a negation ("I left Initech", read before "I work at
        -- Initech") takes the asserting sentence, so the belief does not depend on the
        -- order in which the two episodes were processed.
        IF EXISTS (SELECT 1 FROM pgmemory.fact_claims o
                     JOIN pgmemory.facts f ON f.group_id = o.group_id AND f.id = o.id AND upper_inf(f.recorded)
                    WHERE o.group_id = c.group_id AND o.id = landed AND o.kind = 'negate'
                      AND f.fact = o.fact AND f.fact <> c.fact) THEN
            PERFORM pgmemory.correct_fact(c.group_id, landed, new_lo, new_hi, NULL, c.fact, c.embedding);
            action := 'extended';
        ELSIF lo IS DISTINCT FROM new_lo OR hi IS DISTINCT FROM new_hi THEN
            PERFORM pgmemory.correct_fact(c.group_id, landed, new_lo, new_hi);
            action := 'extended';
        END IF;
    END IF;
    IF c.episode_id IS NOT NULL THEN
        INSERT INTO pgmemory.fact_episodes (fact_id, episode_id, group_id)
        VALUES (landed, c.episode_id, c.group_id) ON CONFLICT DO NOTHING;
    END IF;

    -- contradictions: end what held at es; never end what only began after es.
    IF cardinality(c.contradicts) > 0 THEN  -- most claims contradict nothing: no statement then
        FOR cur IN SELECT f.id, lower(f.valid) AS lo, upper(f.valid) AS hi FROM pgmemory.facts f
                    WHERE f.group_id = c.group_id AND f.lineage = ANY (c.contradicts) AND f.lineage <> c.lineage
                      AND upper_inf(f.recorded)
                    ORDER BY f.version_id LOOP
            CONTINUE WHEN cur.hi IS NOT NULL AND cur.hi <= es;
            IF cur.lo IS NOT NULL AND es < cur.lo THEN
                cap := least(cap, cur.lo);
            ELSIF cur.lo IS NOT NULL AND es <= cur.lo THEN
                PERFORM pgmemory.withdraw_fact(c.group_id, cur.id);
                withdrawn := withdrawn || cur.id;
            ELSE
                PERFORM pgmemory.correct_fact(c.group_id, cur.id, cur.lo, es);
                ended := ended || cur.id;
                IF c.episode_id IS NOT NULL THEN
                    INSERT INTO pgmemory.fact_episodes (fact_id, episode_id, group_id)
                    VALUES (cur.id, c.episode_id, c.group_id) ON CONFLICT DO NOTHING;
                END IF;
            END IF;
        END LOOP;
    END IF;
    IF cap IS NOT NULL THEN
        SELECT lower(f.valid), upper(f.valid) INTO lo, hi FROM pgmemory.facts f
         WHERE f.group_id = c.group_id AND f.id = landed AND upper_inf(f.recorded);
        IF hi IS NULL OR hi > cap THEN
            PERFORM pgmemory.correct_fact(c.group_id, landed, CASE WHEN lo < cap THEN lo END, cap);
        END IF;
    END IF;
    RETURN jsonb_build_object('fact_id', landed, 'action', action, 'ended', to_jsonb(ended),
                              'withdrawn', to_jsonb(withdrawn));
END
$$;

-- The lineages whose belief depends on p_seeds: joined through contradictions
-- in both directions (an interval's end can depend on a claim of another
-- lineage, and a late claim's own end on the lineage it contradicts).
CREATE OR REPLACE FUNCTION pgmemory_internal.claim_component(p_group text, p_seeds uuid[])
RETURNS uuid[] LANGUAGE plpgsql STABLE AS $$
DECLARE
    comp uuid[] := ARRAY(SELECT DISTINCT s FROM unnest(p_seeds) s WHERE s IS NOT NULL);
    grown uuid[];
BEGIN
    LOOP
        grown := ARRAY(
            SELECT DISTINCT x FROM (
                SELECT unnest(comp) AS x
                UNION ALL
                SELECT unnest(fc.contradicts || fc.lineage) FROM pgmemory.fact_claims fc
                 WHERE fc.group_id = p_group AND (fc.lineage = ANY (comp) OR fc.contradicts && comp)) u);
        EXIT WHEN cardinality(grown) = cardinality(comp);
        comp := grown;
    END LOOP;
    RETURN comp;
END
$$;

-- Re-fold the lineages of p_seeds (and those they depend on) from their live
-- claims, writing only the differences as new versions: a fact believed
-- exactly as before keeps its version. Returns the fact ids of the component
-- whose belief changed (old and new ids).
CREATE OR REPLACE FUNCTION pgmemory_internal.refold_lineages(p_group text, p_seeds uuid[])
RETURNS uuid[] LANGUAGE plpgsql AS $$
DECLARE
    comp uuid[] := pgmemory_internal.claim_component(p_group, p_seeds);
    c pgmemory.fact_claims;
    landed uuid;
    r record;
    changed uuid[];
BEGIN
    IF cardinality(comp) = 0 THEN
        RETURN '{}';
    END IF;
    DELETE FROM pgmemory.facts
     WHERE group_id = p_group AND lineage = ANY (comp) AND upper_inf(recorded) AND lower(recorded) = now();
    UPDATE pgmemory.facts SET recorded = tstzrange(lower(recorded), now())
     WHERE group_id = p_group AND lineage = ANY (comp) AND upper_inf(recorded);
    FOR c IN SELECT * FROM pgmemory.fact_claims
              WHERE group_id = p_group AND lineage = ANY (comp) ORDER BY seq LOOP
        landed := (pgmemory_internal.apply_claim(c)->>'fact_id')::uuid;
        IF c.fact_id IS DISTINCT FROM landed THEN
            UPDATE pgmemory.fact_claims SET fact_id = landed WHERE group_id = p_group AND seq = c.seq;
        END IF;
    END LOOP;
    -- Believed as before: drop the new version and keep believing the old one.
    FOR r IN SELECT n.version_id AS new_version, o.version_id AS old_version
               FROM pgmemory.facts n
               JOIN pgmemory.facts o ON o.id = n.id AND o.group_id = n.group_id
                AND upper(o.recorded) = now() AND o.valid = n.valid AND o.fact = n.fact
              WHERE n.group_id = p_group AND n.lineage = ANY (comp)
                AND upper_inf(n.recorded) AND lower(n.recorded) = now() LOOP
        DELETE FROM pgmemory.facts WHERE group_id = p_group AND version_id = r.new_version;
        UPDATE pgmemory.facts SET recorded = tstzrange(lower(recorded), NULL)
         WHERE group_id = p_group AND version_id = r.old_version;
    END LOOP;
    changed := ARRAY(SELECT DISTINCT f.id FROM pgmemory.facts f
                      WHERE f.group_id = p_group AND f.lineage = ANY (comp)
                        AND (lower(f.recorded) = now() OR upper(f.recorded) = now()));
    INSERT INTO pgmemory.fact_episodes (fact_id, episode_id, group_id)
    SELECT fc.fact_id, fc.episode_id, fc.group_id FROM pgmemory.fact_claims fc  -- the group from the source: pushed down on Citus
     WHERE fc.group_id = p_group AND fc.lineage = ANY (comp) AND fc.episode_id IS NOT NULL
       AND fc.fact_id IS NOT NULL AND fc.kind <> 'retract'
    ON CONFLICT DO NOTHING;
    RETURN changed;
END
$$;
