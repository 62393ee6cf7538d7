-- The temporal rules: how a decided claim changes what we believe. Python (or
-- any SQL writer) only decides what a statement is (a new fact, a repeat of a
-- lineage, a negation, which lineages it contradicts, with its dates); these
-- functions turn that into fact versions. A fact's believed versions are the
-- fold of its lineage's live claims in valid-time order (fold_key: an assertion
-- at its evidence start, a negation at its end; at one point, fold_order: the one
-- with the earlier stated end first, then the earlier said, then arrival order),
-- so the belief does not depend on the order in which statements
-- arrive: a statement that comes last in that order is applied to the current
-- belief (pgmemory_internal.fold_claim, the usual case), any other re-folds the
-- lineages it touches (pgmemory_internal.refold_lineages, as after a delete).
--
-- Rules for one claim c, with its evidence start es = coalesce(valid_from, ref_time), or its stated
-- end when that is earlier (a claim that it held until a time before it was said: "worked at Acme
-- until 2019", said in 2021, is evidence up to 2019, not in 2021):
-- assert:  merge into the believed intervals of its lineage that overlap or
--          touch [es, valid_to or forever]: the start moves back to es (an
--          earlier episode extends it; an unknown start takes the stated one),
--          a stated end ends an open interval, intervals it bridges are joined;
--          a claim with no stated end made at or after the end of an interval
--          it touches opens that interval again.
--          With none (never stated, or ended before es: a return to an earlier
--          state), it opens a new interval, a new fact id in the same lineage; with
--          no stated start it starts at es when its lineage has earlier claims
--          (intervals of one lineage never overlap), else unknown (unknown_start).
--          Then, when the claim holds at es (not one that ended by then), each
--          exclusive lineage's interval that is valid at es ends at es (withdrawn
--          if it started exactly then). Exclusive: a lineage this
--          one's claims contradict, or whose claims contradict it (a contradiction
--          holds both ways: Acme -> Globex -> Acme ends Globex when Acme returns).
--          One that starts after es (a late-arriving statement about the past) is
--          never ended: instead the new claim's interval ends where it begins.
-- negate:  the open intervals of its lineage that started before
--          t = coalesce(valid_to, ref_time) end at t; with no interval at all
--          the statement is recorded as an interval ending at t. One with a
--          stated start is first folded as an assertion from that start to t
--          (fold_claim), then as a negation at t.
-- retract: (pgmemory.retract_fact) the claims behind the fact it names are
--          marked retracted_by and left out of every fold, and the lineage is
--          re-folded without them.

-- Where a claim takes its place in a fold: an assertion at its evidence start (its stated start,
-- else when it was said, but not after its stated end), a negation at the end it states (or when
-- it was said). (Written out the same in the index fact_claims_lineage_fold_key, migration 0600.)
CREATE OR REPLACE FUNCTION pgmemory_internal.fold_key(p_kind text, p_valid_from timestamptz,
                                                      p_valid_to timestamptz, p_ref_time timestamptz)
RETURNS timestamptz LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN p_kind = 'negate' THEN coalesce(p_valid_to, p_ref_time)
                ELSE least(coalesce(p_valid_from, p_ref_time), p_valid_to) END
$$;

-- A claim's full place in the fold, compared as an array: its fold_key, then at one key the claim
-- with the earlier stated end (an open one last: of two values of a functional relation said to
-- start the same day, the one still true ends believed, whichever arrived first; an end stated
-- at a point comes before a start stated there), then the earlier said. Equal places keep
-- arrival order (fact_claims.seq).
CREATE OR REPLACE FUNCTION pgmemory_internal.fold_order(p_kind text, p_valid_from timestamptz,
                                                        p_valid_to timestamptz, p_ref_time timestamptz)
RETURNS timestamptz[] LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT ARRAY[pgmemory_internal.fold_key(p_kind, p_valid_from, p_valid_to, p_ref_time),
                 coalesce(p_valid_to, 'infinity'), p_ref_time]
$$;

-- The lineages that cannot hold at the same time as p_lineage: those its live claims (and
-- p_contradicts, a claim not stored yet) contradict, and those whose live claims contradict it
-- (pgmemory.lineage_exclusions, kept by add_exclusions and rebuild_exclusions).
CREATE OR REPLACE FUNCTION pgmemory_internal.exclusive_lineages(p_group text, p_lineage uuid, p_contradicts uuid[])
RETURNS uuid[] LANGUAGE plpgsql STABLE AS $$
BEGIN  -- (PL/pgSQL: its plan is kept by the session; a SQL function's was made again in every transaction)
    RETURN (SELECT coalesce(array_agg(DISTINCT x), '{}') FROM (
        SELECT unnest(p_contradicts) AS x
        UNION ALL
        SELECT e.other FROM pgmemory.lineage_exclusions e WHERE e.group_id = p_group AND e.lineage = p_lineage) u
     WHERE x <> p_lineage);
END
$$;

-- A claim of p_lineage contradicting p_contradicts was stored: its pairs not yet known are added
-- (both ways), and the components they join become one.
CREATE OR REPLACE FUNCTION pgmemory_internal.add_exclusions(p_group text, p_lineage uuid, p_contradicts uuid[])
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    fresh uuid[] := ARRAY(SELECT DISTINCT x FROM unnest(p_contradicts) x
                           WHERE x IS NOT NULL AND x <> p_lineage
                             AND NOT EXISTS (SELECT 1 FROM pgmemory.lineage_exclusions e
                                              WHERE e.group_id = p_group AND e.lineage = p_lineage AND e.other = x));
    comps uuid[];
    target uuid;
BEGIN
    PERFORM pgmemory_internal.check_request_group(p_group);  -- (a group the session is not narrowed to: refused)
    IF cardinality(fresh) = 0 THEN  -- the usual case: a repeat names lineages already exclusive
        RETURN;
    END IF;
    INSERT INTO pgmemory.lineage_exclusions (group_id, lineage, other)
    SELECT p_group, a, b FROM unnest(fresh) x, LATERAL (VALUES (p_lineage, x), (x, p_lineage)) v(a, b)
    ON CONFLICT DO NOTHING;
    comps := ARRAY(SELECT DISTINCT k.component FROM pgmemory.lineage_components k
                    WHERE k.group_id = p_group AND k.lineage = ANY (fresh || p_lineage));
    target := coalesce((SELECT min(x::text)::uuid FROM unnest(comps) x), p_lineage);
    IF cardinality(comps) > 1 THEN
        UPDATE pgmemory.lineage_components SET component = target
         WHERE group_id = p_group AND component = ANY (comps) AND component <> target;
    END IF;
    INSERT INTO pgmemory.lineage_components (group_id, lineage, component)
    SELECT p_group, l, target FROM unnest(fresh || p_lineage) l
    ON CONFLICT DO NOTHING;
END
$$;

-- Two lineages of one slot: the same source and relation, as their believed versions say (before
-- the re-fold that follows a delete, a lineage whose claims went is still believed).
CREATE OR REPLACE FUNCTION pgmemory_internal.same_slot(p_group text, p_a uuid, p_b uuid)
RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT coalesce((SELECT (fa.source_id, fa.relation) = (fb.source_id, fb.relation)
                       FROM (SELECT f.source_id, f.relation FROM pgmemory.facts f
                              WHERE f.lineage = p_a AND upper_inf(f.recorded) AND f.group_id = p_group LIMIT 1) fa,
                            (SELECT f.source_id, f.relation FROM pgmemory.facts f
                              WHERE f.lineage = p_b AND upper_inf(f.recorded) AND f.group_id = p_group LIMIT 1) fb),
                    false)
$$;

-- A lineage's first live claim (an assertion before a negation, then in arrival order), or NULL.
CREATE OR REPLACE FUNCTION pgmemory_internal.first_live_claim(p_group text, p_lineage uuid)
RETURNS bigint LANGUAGE sql STABLE AS $$
    SELECT fc.seq FROM pgmemory.fact_claims fc
     WHERE fc.group_id = p_group AND fc.lineage = p_lineage AND fc.retracted_by IS NULL AND fc.kind <> 'retract'
     ORDER BY fc.kind <> 'assert', fc.seq LIMIT 1
$$;

-- rebuild_exclusions: the pair (p_lineage, p_other) kept on the live claim p_seq of p_lineage.
CREATE OR REPLACE FUNCTION pgmemory_internal.keep_exclusion(p_group text, p_seq bigint, p_lineage uuid, p_other uuid)
RETURNS void LANGUAGE sql AS $$
    SELECT pgmemory_internal.check_request_group(p_group);  -- (a group the session is not narrowed to: refused)
    UPDATE pgmemory.fact_claims SET contradicts = contradicts || p_other
     WHERE group_id = p_group AND seq = p_seq AND NOT p_other = ANY (contradicts);
    INSERT INTO pgmemory.lineage_exclusions (group_id, lineage, other)
    VALUES (p_group, p_lineage, p_other), (p_group, p_other, p_lineage)
    ON CONFLICT DO NOTHING;
$$;

-- After a delete or retract re-folded p_lineages: two lineages of one slot that the judge linked
-- (a path of exclusive pairs within the slot) and that hold at the same time now, though they did
-- not before (p_before_lineages / p_before_valid: the believed intervals then), are made exclusive
-- (on the first live claim of the one that starts later, as the judge would have said of it had
-- the other still held when it was said). Initech (2019), Acme (2020), Globex (2021, after Acme),
-- Acme's 2020 statement deleted: Initech now runs past 2021, and Globex, judged when Initech had
-- ended, never contradicted it. Overlaps that held before (two jobs at once, said so) are left.
-- Returns the lineages paired (to re-fold).
CREATE OR REPLACE FUNCTION pgmemory_internal.keep_slots_apart(p_group text, p_lineages uuid[],
                                                              p_before_lineages uuid[], p_before_valid tstzrange[])
RETURNS uuid[] LANGUAGE plpgsql AS $$
DECLARE
    pa uuid;
    pb uuid;
    paired uuid[] := '{}';
BEGIN
    PERFORM pgmemory_internal.check_request_group(p_group);  -- (a group the session is not narrowed to: refused)
    FOR pa, pb IN
        WITH RECURSIVE now_iv AS (
            SELECT f.lineage, f.source_id, f.relation, f.valid FROM pgmemory.facts f
             WHERE f.group_id = p_group AND f.lineage = ANY (p_lineages) AND upper_inf(f.recorded)),
        slot_edges AS (  -- exclusive pairs within one slot, among p_lineages
            SELECT e.lineage AS a, e.other AS b FROM pgmemory.lineage_exclusions e
             WHERE e.group_id = p_group AND e.lineage = ANY (p_lineages) AND e.other = ANY (p_lineages)
               AND pgmemory_internal.same_slot(p_group, e.lineage, e.other)),
        reach (start, lineage) AS (
            SELECT a, b FROM slot_edges
            UNION
            SELECT r.start, s.b FROM reach r JOIN slot_edges s ON s.a = r.lineage),
        together AS (
            SELECT DISTINCT x.lineage AS a, y.lineage AS b,
                   min(lower(x.valid)) OVER (PARTITION BY x.lineage, y.lineage) AS a_lo,
                   min(lower(y.valid)) OVER (PARTITION BY x.lineage, y.lineage) AS b_lo
              FROM now_iv x JOIN now_iv y
                ON y.source_id = x.source_id AND y.relation = x.relation AND x.lineage < y.lineage
               AND x.valid && y.valid)
        SELECT CASE WHEN o.a_lo > o.b_lo THEN o.a ELSE o.b END, CASE WHEN o.a_lo > o.b_lo THEN o.b ELSE o.a END
          FROM together o
         WHERE EXISTS (SELECT FROM reach r WHERE r.start = o.a AND r.lineage = o.b)
           AND NOT EXISTS (SELECT FROM pgmemory.lineage_exclusions e
                            WHERE e.group_id = p_group AND e.lineage = o.a AND e.other = o.b)
           AND NOT EXISTS (SELECT FROM unnest(p_before_lineages, p_before_valid) bx (l, v),
                                       unnest(p_before_lineages, p_before_valid) by_ (l, v)
                            WHERE bx.l = o.a AND by_.l = o.b AND bx.v && by_.v)
    LOOP
        CONTINUE WHEN pgmemory_internal.first_live_claim(p_group, pa) IS NULL;
        UPDATE pgmemory.fact_claims SET contradicts = contradicts || pb
         WHERE group_id = p_group AND seq = pgmemory_internal.first_live_claim(p_group, pa);
        PERFORM pgmemory_internal.add_exclusions(p_group, pa, ARRAY[pb]);  -- (the pair, and the components it joins)
        paired := paired || pa || pb;
    END LOOP;
    RETURN paired;
END
$$;

-- Claims of p_lineages (whole components) were retracted or deleted: their pairs and components
-- are made again from the live claims (a component may fall apart).
--
-- Except what one slot (a source and a relation: one employer, one home town) still implies. The
-- judge sees only the values still valid at a statement's place (contradiction_candidates), so
-- "Initech (2019), Globex (2021), Acme (2024)" stores Globex -> Initech and Acme -> Globex, never
-- Acme -> Initech. A pair of one slot that goes with its claims is kept: when both lineages still
-- have live claims, on the first of them (the pair is of the two values, which the judge would
-- have said again of the remaining statement); when one is gone (Globex's only episode deleted),
-- it passes to the lineages of that slot whose live claims contradicted the gone one (Acme ->
-- Initech), as the judge would have said had the gone one never been. Without it, deleting the
-- Globex episode left Initech believed to this day beside Acme.
CREATE OR REPLACE FUNCTION pgmemory_internal.rebuild_exclusions(p_group text, p_lineages uuid[])
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    placed uuid[] := '{}';
    root uuid;
    comp uuid[];
    grown uuid[];
    old_a uuid[];
    old_b uuid[];
    pa uuid;
    pb uuid;
    keep uuid;
    gone uuid;
    live_a boolean;
    live_b boolean;
    n uuid;
    n_seq bigint;
BEGIN
    PERFORM pgmemory_internal.check_request_group(p_group);  -- (a group the session is not narrowed to: refused)
    -- (Pairs are symmetric and p_lineages is closed under them: every pair touching it is in it.)
    SELECT array_agg(e.lineage), array_agg(e.other) INTO old_a, old_b
      FROM pgmemory.lineage_exclusions e
     WHERE e.group_id = p_group AND e.lineage = ANY (p_lineages) AND e.lineage < e.other
       AND pgmemory_internal.same_slot(p_group, e.lineage, e.other);
    DELETE FROM pgmemory.lineage_exclusions WHERE group_id = p_group AND lineage = ANY (p_lineages);
    DELETE FROM pgmemory.lineage_components WHERE group_id = p_group AND lineage = ANY (p_lineages);
    -- Both ways, one statement each, the group taken from the claim's row: an INSERT ... SELECT
    -- Citus pushes down to the group's shards also when the function runs on the coordinator (a
    -- call inside a transaction, as a server's request makes it); one with a UNION it pulled to the
    -- coordinator and copied back, which row-level security refuses ("COPY FROM not supported").
    INSERT INTO pgmemory.lineage_exclusions (group_id, lineage, other)
    SELECT fc.group_id, fc.lineage, x FROM pgmemory.fact_claims fc, unnest(fc.contradicts) x
     WHERE fc.group_id = p_group AND fc.lineage = ANY (p_lineages) AND fc.retracted_by IS NULL AND x <> fc.lineage
    ON CONFLICT DO NOTHING;
    INSERT INTO pgmemory.lineage_exclusions (group_id, lineage, other)
    SELECT fc.group_id, x, fc.lineage FROM pgmemory.fact_claims fc, unnest(fc.contradicts) x
     WHERE fc.group_id = p_group AND fc.lineage = ANY (p_lineages) AND fc.retracted_by IS NULL AND x <> fc.lineage
    ON CONFLICT DO NOTHING;
    FOR pa, pb IN SELECT x.a, x.b FROM unnest(old_a, old_b) AS x (a, b)
                 WHERE NOT EXISTS (SELECT FROM pgmemory.lineage_exclusions e
                                    WHERE e.group_id = p_group AND e.lineage = x.a AND e.other = x.b) LOOP
        live_a := pgmemory_internal.first_live_claim(p_group, pa) IS NOT NULL;
        live_b := pgmemory_internal.first_live_claim(p_group, pb) IS NOT NULL;
        IF live_a AND live_b THEN
            PERFORM pgmemory_internal.keep_exclusion(p_group, pgmemory_internal.first_live_claim(p_group, pa), pa, pb);
        ELSIF live_a OR live_b THEN
            keep := CASE WHEN live_a THEN pa ELSE pb END;
            gone := CASE WHEN live_a THEN pb ELSE pa END;
            FOR n, n_seq IN SELECT DISTINCT ON (fc.lineage) fc.lineage, fc.seq FROM pgmemory.fact_claims fc
                             WHERE fc.group_id = p_group AND gone = ANY (fc.contradicts) AND fc.retracted_by IS NULL
                               AND fc.kind <> 'retract' AND fc.lineage <> keep AND NOT keep = ANY (fc.contradicts)
                               AND pgmemory_internal.same_slot(p_group, fc.lineage, keep)
                             ORDER BY fc.lineage, fc.seq LOOP
                PERFORM pgmemory_internal.keep_exclusion(p_group, n_seq, n, keep);
            END LOOP;
        END IF;
    END LOOP;
    FOR root IN SELECT DISTINCT e.lineage FROM pgmemory.lineage_exclusions e
                 WHERE e.group_id = p_group AND e.lineage = ANY (p_lineages) LOOP
        CONTINUE WHEN root = ANY (placed);
        comp := ARRAY[root];
        LOOP
            grown := ARRAY(SELECT DISTINCT x FROM (
                               SELECT unnest(comp) AS x
                               UNION ALL
                               SELECT e.other FROM pgmemory.lineage_exclusions e
                                WHERE e.group_id = p_group AND e.lineage = ANY (comp)) u);
            EXIT WHEN cardinality(grown) = cardinality(comp);
            comp := grown;
        END LOOP;
        -- (Through the group's own 'write' row of group_locks, which its callers hold, the group
        -- taken from that row: pushed down to the group's shards also from the coordinator; with
        -- no table read Citus copied the rows there, which row-level security refuses.)
        INSERT INTO pgmemory.lineage_components (group_id, lineage, component)
        SELECT gl.group_id, l, root FROM pgmemory.group_locks gl CROSS JOIN unnest(comp) l
         WHERE gl.group_id = p_group AND gl.purpose = 'write';
        placed := placed || comp;
    END LOOP;
END
$$;

-- The lineages whose belief a change of the fold's order may have left stale, by group: those with
-- a claim that it held until a time before it was said (placed at its end since migration 0600),
-- and those with claims at one fold_key that fold_order now orders against their arrival (of one
-- lineage, or of two exclusive ones; migration 0640), and, given p_before, those with a claim
-- recorded before it (folded by an older version's rules: migration 0660). Init
-- re-folds them once (beliefs_stale, pgmemory.storage.setup). Joins on the group only, so on Citus
-- each runs on its shards.
DROP FUNCTION IF EXISTS pgmemory_internal.stale_lineages();
CREATE OR REPLACE FUNCTION pgmemory_internal.stale_lineages(p_before timestamptz DEFAULT NULL)
RETURNS TABLE (group_id text, lineages uuid[]) LANGUAGE sql STABLE AS $$
    SELECT s.group_id, array_agg(DISTINCT s.lineage) FROM (
        SELECT fc.group_id, fc.lineage FROM pgmemory.fact_claims fc
         WHERE fc.kind = 'assert' AND fc.retracted_by IS NULL AND fc.valid_to <= coalesce(fc.valid_from, fc.ref_time)
        UNION ALL
        SELECT fc.group_id, fc.lineage FROM pgmemory.fact_claims fc
         WHERE fc.recorded_at < p_before AND fc.kind <> 'retract'
        UNION ALL
        SELECT a.group_id, unnest(ARRAY[a.lineage, b.lineage]) FROM pgmemory.fact_claims a
          JOIN pgmemory.fact_claims b ON b.group_id = a.group_id AND b.seq > a.seq
           AND pgmemory_internal.fold_key(b.kind, b.valid_from, b.valid_to, b.ref_time)
               = pgmemory_internal.fold_key(a.kind, a.valid_from, a.valid_to, a.ref_time)
           AND pgmemory_internal.fold_order(b.kind, b.valid_from, b.valid_to, b.ref_time)
               < pgmemory_internal.fold_order(a.kind, a.valid_from, a.valid_to, a.ref_time)
          LEFT JOIN pgmemory.lineage_exclusions e ON e.group_id = a.group_id AND e.lineage = a.lineage
           AND e.other = b.lineage
         WHERE a.kind <> 'retract' AND b.kind <> 'retract' AND a.retracted_by IS NULL AND b.retracted_by IS NULL
           AND (b.lineage = a.lineage OR e.lineage IS NOT NULL)) s
     GROUP BY s.group_id ORDER BY s.group_id
$$;

DROP FUNCTION IF EXISTS pgmemory_internal.interval_id(pgmemory.fact_claims);  -- (now inside refold_lineages)

-- Where an interval of claim c's lineage starts when no start is known (c says none, or one not
-- before its end), c's interval ending at p_hi: intervals of one lineage never overlap, and an
-- unknown start means "as far back as we know". For the lineage's first claim in fold order that
-- is unknown (NULL). After earlier claims (a return to an earlier state, said without a start) it
-- is c's evidence start, not before; when that is its end (a claim that it held until a time
-- before it was said), the latest end of the lineage's believed intervals by then (other than
-- p_skip's), else unknown. (refold_lineages applies the same rule in memory; fold_claim re-folds
-- instead of applying in place when a later claim of that last kind could see a changed end.)
CREATE OR REPLACE FUNCTION pgmemory_internal.unknown_start(c pgmemory.fact_claims, p_hi timestamptz,
                                                          p_skip uuid[] DEFAULT '{}')
RETURNS timestamptz LANGUAGE plpgsql STABLE AS $$
DECLARE
    es timestamptz := least(coalesce(c.valid_from, c.ref_time), c.valid_to);  -- (fold_key of an assertion)
BEGIN
    IF es < coalesce(p_hi, 'infinity') THEN
        RETURN CASE WHEN EXISTS (
            SELECT FROM pgmemory.fact_claims fc
             WHERE fc.group_id = c.group_id AND fc.lineage = c.lineage AND fc.kind <> 'retract'
               AND fc.retracted_by IS NULL
               AND pgmemory_internal.fold_key(fc.kind, fc.valid_from, fc.valid_to, fc.ref_time) <= es
               AND pgmemory_internal.fold_order(fc.kind, fc.valid_from, fc.valid_to, fc.ref_time)
                   <= pgmemory_internal.fold_order(c.kind, c.valid_from, c.valid_to, c.ref_time)) THEN es END;
    END IF;
    RETURN (SELECT max(upper(f.valid)) FROM pgmemory.facts f
             WHERE f.group_id = c.group_id AND f.lineage = c.lineage AND upper_inf(f.recorded)
               AND upper(f.valid) <= es AND f.id <> ALL (p_skip));
END
$$;

-- Apply one claim to its group's believed facts, in place (p_excl: its exclusive lineages, when
-- known); returns what it did as
-- {fact_id, action (created|extended|merged|ended|withdrawn|unchanged), ended, withdrawn}.
-- The same rules as refold_lineages' fold in memory, step by step on the stored belief (the
-- usual, cheap case); tests/test_fact_rules.py checks that the two agree on random statements.
DROP FUNCTION IF EXISTS pgmemory_internal.apply_claim(pgmemory.fact_claims);
DROP FUNCTION IF EXISTS pgmemory_internal.apply_claim(pgmemory.fact_claims, boolean);
DROP FUNCTION IF EXISTS pgmemory_internal.apply_claim(pgmemory.fact_claims, boolean, uuid[]);
CREATE OR REPLACE FUNCTION pgmemory_internal.apply_claim(c pgmemory.fact_claims, p_excl uuid[] DEFAULT NULL)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    es timestamptz := least(coalesce(c.valid_from, c.ref_time), c.valid_to);  -- (fold_key of an assertion)
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
    sentence text;
    first_fact text;  -- the wording of the merged interval, when it changes
    first_emb vector;
    excl uuid[];
    ended uuid[] := '{}';
    withdrawn uuid[] := '{}';
BEGIN
    IF c.kind = 'negate' THEN
        t := coalesce(c.valid_to, c.ref_time);
        IF NOT EXISTS (SELECT 1 FROM pgmemory.facts f WHERE f.group_id = c.group_id
                          AND f.lineage = c.lineage AND upper_inf(f.recorded)) THEN
            landed := c.id;
            PERFORM pgmemory.record_fact(landed, c.group_id, c.source_id, c.target_id, c.relation, c.fact,
                                         CASE WHEN c.valid_from < t THEN c.valid_from END, t,
                                         c.embedding, c.attributes, c.episode_id, c.lineage);
            RETURN jsonb_build_object('fact_id', landed, 'action', 'created', 'ended', '[]'::jsonb,
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
        new_lo := CASE WHEN c.valid_to IS NULL OR c.valid_from < c.valid_to THEN c.valid_from END;
        IF new_lo IS NULL THEN
            new_lo := pgmemory_internal.unknown_start(c, c.valid_to);
        END IF;
        -- Without the episode: its provenance row is written once, below, for every outcome.
        PERFORM pgmemory.record_fact(landed, c.group_id, c.source_id, c.target_id, c.relation, c.fact,
                                     new_lo, c.valid_to, c.embedding, c.attributes, NULL, c.lineage);
    ELSE
        landed := ids[1];
        action := 'merged';
        -- An unknown start takes a stated one (the claim's, or that of an interval it joins), but
        -- not past the evidence of the claims already in it (in fold order they come first:
        -- "works at Acme", said in 2021, then "since 2022"); with no stated start it stays unknown.
        new_lo := CASE WHEN NOT any_unknown_lo THEN least(lo, es)
                       WHEN c.valid_from IS NOT NULL OR lo IS NOT NULL THEN least(lo, es, (
                           SELECT min(pgmemory_internal.fold_key(fc.kind, fc.valid_from, fc.valid_to, fc.ref_time))
                             FROM pgmemory.fact_claims fc
                            WHERE fc.group_id = c.group_id AND fc.lineage = c.lineage AND fc.fact_id = ANY (ids)
                              AND fc.kind = 'assert' AND fc.retracted_by IS NULL)) END;
        new_hi := CASE WHEN any_open THEN c.valid_to
                       WHEN c.valid_to IS NULL AND es >= hi THEN NULL  -- said to hold from where it ended
                       WHEN c.valid_to IS NULL THEN hi ELSE greatest(hi, c.valid_to) END;
        IF new_lo >= new_hi THEN
            new_lo := pgmemory_internal.unknown_start(c, new_hi, ids);
        END IF;
        FOR i IN 2 .. cardinality(ids) LOOP
            PERFORM pgmemory.withdraw_fact(c.group_id, ids[i]);
            withdrawn := withdrawn || ids[i];
        END LOOP;
        IF cardinality(ids) > 1 THEN  -- the joined intervals' claims now land on the first
            UPDATE pgmemory.fact_claims SET fact_id = landed
             WHERE group_id = c.group_id AND lineage = c.lineage AND fact_id = ANY (ids[2:]);
        END IF;
        SELECT lower(f.valid), upper(f.valid), f.fact INTO lo, hi, sentence FROM pgmemory.facts f
         WHERE f.group_id = c.group_id AND f.id = landed AND upper_inf(f.recorded);
        -- The sentence is that of the interval's first assertion in fold order (a claim told
        -- late about an earlier time brings its wording, as folding it in its place would; an
        -- interval opened by a negation takes the first asserting sentence), so the belief,
        -- wording included, does not depend on the order the statements arrived in. Of intervals
        -- it joins, that of the first assertion before it among all their claims (the interval it
        -- lands on, first by start, may be a later one's: one with an unknown start); of one, its
        -- own stands when an assertion comes before it; else the claim's own.
        SELECT fc.fact, fc.embedding INTO first_fact, first_emb FROM pgmemory.fact_claims fc
         WHERE fc.group_id = c.group_id AND fc.lineage = c.lineage AND fc.fact_id = ANY (ids)
           AND fc.kind = 'assert' AND fc.retracted_by IS NULL
           AND pgmemory_internal.fold_key(fc.kind, fc.valid_from, fc.valid_to, fc.ref_time) <= es
           AND pgmemory_internal.fold_order(fc.kind, fc.valid_from, fc.valid_to, fc.ref_time)
               <= pgmemory_internal.fold_order(c.kind, c.valid_from, c.valid_to, c.ref_time)
         ORDER BY pgmemory_internal.fold_order(fc.kind, fc.valid_from, fc.valid_to, fc.ref_time), fc.seq LIMIT 1;
        IF NOT FOUND THEN
            first_fact := c.fact;
            first_emb := c.embedding;
        ELSIF cardinality(ids) = 1 THEN
            first_fact := NULL;  -- (its wording stands)
        END IF;
        IF sentence <> first_fact THEN
            PERFORM pgmemory.correct_fact(c.group_id, landed, new_lo, new_hi, NULL, first_fact, first_emb);
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

    -- contradictions (both ways): end what held at es; never end what only began after es. (Not
    -- for a claim that ended by es: that it held until then ends nothing else.)
    excl := CASE WHEN c.valid_to <= es THEN '{}'
                 ELSE coalesce(p_excl, pgmemory_internal.exclusive_lineages(c.group_id, c.lineage, c.contradicts)) END;
    IF cardinality(excl) > 0 THEN  -- most claims contradict nothing: no statement then
        FOR cur IN SELECT f.id, lower(f.valid) AS lo, upper(f.valid) AS hi FROM pgmemory.facts f
                    WHERE f.group_id = c.group_id AND f.lineage = ANY (excl)
                      AND upper_inf(f.recorded)  -- (upper_inf(valid) OR upper(valid) > es: facts_lineage_current_end)
                      AND coalesce(upper(f.valid), 'infinity'::timestamptz) > es
                    ORDER BY f.version_id LOOP
            IF cur.lo IS NOT NULL AND es < cur.lo THEN
                cap := least(cap, cur.lo);
            ELSIF cur.lo IS NOT NULL AND es <= cur.lo THEN
                PERFORM pgmemory.withdraw_fact(c.group_id, cur.id);
                withdrawn := withdrawn || cur.id;
                -- its claims are in no interval now (their evidence must not move a later
                -- interval that reuses the id; a re-fold from after them leaves them there)
                UPDATE pgmemory.fact_claims SET fact_id = NULL
                 WHERE group_id = c.group_id AND lineage = ANY (excl) AND fact_id = cur.id;
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
-- lineage, and a late claim's own end on the lineage it contradicts); the seeds first.
CREATE OR REPLACE FUNCTION pgmemory_internal.claim_component(p_group text, p_seeds uuid[])
RETURNS uuid[] LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN ARRAY(SELECT s FROM (SELECT DISTINCT s FROM unnest(p_seeds) s WHERE s IS NOT NULL) d
                 UNION
                 SELECT m.lineage FROM pgmemory.lineage_components k
                   JOIN pgmemory.lineage_components m ON m.group_id = p_group AND m.component = k.component
                  WHERE k.group_id = p_group AND k.lineage = ANY (p_seeds));
END
$$;

-- Re-fold the lineages of p_seeds (and those they depend on) from their live
-- claims, writing only the differences as new versions: a fact believed
-- exactly as before keeps its version. Returns the fact ids of the component
-- whose belief changed (old and new ids). With p_only, the lineages of p_seeds alone are re-folded
-- (their exclusive lineages' assertions still end their intervals): the caller names every
-- lineage whose claims or exclusive lineages' assertions changed (see fold_claim).
-- p_from (a claim's place in the fold, when only that claim was added; for a new exclusive pair,
-- no later than where the pair first meets): only what a claim there can change is re-folded. The belief is the fold in valid-time order, and no claim at or after a point F
-- can touch an interval that ended before F: with F moved back to the earliest claim of any
-- interval that does not end before it (so no claim before F shaped one after it), the intervals
-- that ended before F are final and the claims from F on are re-folded onto them.
-- The fold runs in memory (arrays of intervals, apply_claim's rules) and then writes the
-- differences from what is believed, so a re-fold of many claims costs the writes of what
-- changed, not one version per claim re-applied. A new interval takes the id this claim's
-- interval had before (its last landing), else that of an interval of its lineage no longer
-- believed as of this transaction that the claim overlaps or touches, else the claim's own id;
-- never an id believed (then a new one). So a re-fold keeps fact ids where the belief keeps its
-- intervals ("works at Acme since 2019", arriving after "since 2020", extends that fact).
DROP FUNCTION IF EXISTS pgmemory_internal.refold_lineages(text, uuid[]);
DROP FUNCTION IF EXISTS pgmemory_internal.refold_lineages(text, uuid[], timestamptz);
CREATE OR REPLACE FUNCTION pgmemory_internal.refold_lineages(p_group text, p_seeds uuid[],
                                                            p_from timestamptz DEFAULT NULL,
                                                            p_only boolean DEFAULT false)
RETURNS uuid[] LANGUAGE plpgsql AS $$
DECLARE
    -- The lineages re-folded, comp[1 .. nf]: p_seeds' component, or with p_only p_seeds alone,
    -- then (p_only) the lineages exclusive with them, whose assertions only end their intervals.
    comp uuid[];
    nf int;
    n int;  -- lineages are numbered by their place in comp
    open_ids uuid[];  -- the intervals re-folded (all, without p_from)
    folded uuid[];    -- the lineages with claims to fold
    -- The component's claims in fold order (c_*), where each lands now (c_land; c_fact_id: as stored);
    -- each lineage's claims as a list (lc_head, c_next).
    c_seq bigint[]; c_kind text[]; c_id uuid[]; c_li int[]; c_fact_id uuid[]; c_land uuid[];
    c_fact text[]; c_from timestamptz[]; c_to timestamptz[]; c_ref timestamptz[]; c_ep uuid[];
    c_live boolean[]; c_key timestamptz[]; c_next int[]; lc_head int[];
    -- Exclusive lineages: those of lineage l are ex_to[ex_off[l] .. ex_off[l + 1] - 1] (ex_a: sorted
    -- pairs' first lineage).
    ex_a int[]; ex_to int[]; ex_off int[];
    -- The believed intervals while folding (s_id NULL: withdrawn), in version order (apply_claim's
    -- tie-break); s_src: the claim whose sentence it carries (NULL: as stored); each lineage's
    -- intervals as a list (ls_head, s_next).
    s_id uuid[] := '{}'; s_li int[]; s_lo timestamptz[]; s_hi timestamptz[]; s_fact text[]; s_src int[];
    s_next int[]; ls_head int[]; ns int := 0;
    -- Ids a new interval may take again: versions of the component no longer believed as of this
    -- transaction.
    x_id uuid[]; x_li int[]; x_lo timestamptz[]; x_hi timestamptz[];
    -- What is believed now (d_*), to write only the differences.
    d_id uuid[]; d_li int[]; d_lo timestamptz[]; d_hi timestamptz[]; d_fact text[];
    f_land uuid[]; f_key timestamptz[];  -- (with p_from: where the re-folded lineages' claims landed, their places)
    prov_fact uuid[] := '{}';
    prov_ep uuid[] := '{}';
    have_fact uuid[]; have_ep uuid[];  -- the provenance links already there
    i int; j int; k int; q int; e int; li int; m int[]; m_ids uuid[]; t timestamptz; es timestamptz;
    landed uuid; cap timestamptz; any_unknown_lo boolean; any_open boolean; lo timestamptz;
    hi timestamptz; new_lo timestamptz; new_hi timestamptz; nid uuid; cl record; one_seq bigint;
    changed uuid[];
BEGIN
    PERFORM pgmemory_internal.check_request_group(p_group);  -- (a group the session is not narrowed to: refused)
    IF p_only THEN
        comp := ARRAY(SELECT DISTINCT s FROM unnest(p_seeds) s WHERE s IS NOT NULL);
        nf := cardinality(comp);
        comp := comp || ARRAY(SELECT DISTINCT e.other FROM pgmemory.lineage_exclusions e
                               WHERE e.group_id = p_group AND e.lineage = ANY (comp) AND e.other <> ALL (comp));
    ELSE
        comp := pgmemory_internal.claim_component(p_group, p_seeds);
        nf := cardinality(comp);
    END IF;
    n := cardinality(comp);
    IF nf = 0 THEN
        RETURN '{}';
    END IF;
    SELECT array_agg(f.id ORDER BY f.version_id), array_agg(array_position(comp, f.lineage) ORDER BY f.version_id),
           array_agg(lower(f.valid) ORDER BY f.version_id), array_agg(upper(f.valid) ORDER BY f.version_id),
           array_agg(f.fact ORDER BY f.version_id),
           (array_agg(f.id) FILTER (WHERE lower(f.recorded) > now()))[1],
           min(lower(f.recorded)) FILTER (WHERE lower(f.recorded) > now())
      INTO d_id, d_li, d_lo, d_hi, d_fact, nid, t
      FROM pgmemory.facts f
     WHERE f.group_id = p_group AND f.lineage = ANY (comp[1:nf]) AND upper_inf(f.recorded);
    IF nid IS NOT NULL THEN  -- 40001, as check_lineages_since_start (sql/30_fact_versions.sql)
        PERFORM pgmemory_internal.fact_changed_since_start(p_group, nid, t);
    END IF;
    d_id := coalesce(d_id, '{}');
    -- With p_from: moved back to the earliest claim of any interval that does not end before it
    -- (intervals by their end, latest first: each one reached can only move the point back).
    -- (Read first, by the re-folded lineages' own claims: with p_only the other lineages'
    -- assertions are then read only from p_from on.)
    IF p_from IS NOT NULL THEN
        SELECT array_agg(fc.fact_id), array_agg(pgmemory_internal.fold_key(fc.kind, fc.valid_from, fc.valid_to, fc.ref_time))
          INTO f_land, f_key
          FROM pgmemory.fact_claims fc
         WHERE fc.group_id = p_group AND fc.lineage = ANY (comp[1:nf]) AND fc.kind <> 'retract'
           AND fc.retracted_by IS NULL;
        FOR hi, lo IN SELECT d.hi, min(u.k) FROM unnest(d_id, d_hi) AS d(id, hi)
                        LEFT JOIN unnest(f_land, f_key) AS u(f, k) ON u.f = d.id
                       GROUP BY d.id, d.hi ORDER BY d.hi DESC NULLS FIRST LOOP
            EXIT WHEN hi < p_from;
            p_from := least(p_from, lo);
        END LOOP;
    END IF;
    SELECT array_agg(seq ORDER BY fp, seq), array_agg(kind ORDER BY fp, seq), array_agg(id ORDER BY fp, seq),
           array_agg(array_position(comp, lineage) ORDER BY fp, seq), array_agg(fact_id ORDER BY fp, seq),
           array_agg(fact ORDER BY fp, seq), array_agg(valid_from ORDER BY fp, seq),
           array_agg(valid_to ORDER BY fp, seq), array_agg(ref_time ORDER BY fp, seq),
           array_agg(episode_id ORDER BY fp, seq), array_agg(retracted_by IS NULL ORDER BY fp, seq),
           array_agg(fk ORDER BY fp, seq)
      INTO c_seq, c_kind, c_id, c_li, c_fact_id, c_fact, c_from, c_to, c_ref, c_ep, c_live, c_key
      FROM (SELECT fc.*, pgmemory_internal.fold_key(fc.kind, fc.valid_from, fc.valid_to, fc.ref_time) AS fk,
                   pgmemory_internal.fold_order(fc.kind, fc.valid_from, fc.valid_to, fc.ref_time) AS fp
              FROM pgmemory.fact_claims fc WHERE fc.group_id = p_group AND fc.lineage = ANY (comp)
               AND (fc.lineage = ANY (comp[1:nf])
                    OR fc.kind = 'assert' AND (p_from IS NULL OR pgmemory_internal.fold_key(
                                                  fc.kind, fc.valid_from, fc.valid_to, fc.ref_time) >= p_from))) fc;
    c_seq := coalesce(c_seq, '{}');
    c_land := c_fact_id;
    lc_head := array_fill(NULL::int, ARRAY[n]);
    c_next := array_fill(NULL::int, ARRAY[cardinality(c_seq)]);
    FOR i IN REVERSE cardinality(c_seq) .. 1 LOOP
        c_next[i] := lc_head[c_li[i]];
        lc_head[c_li[i]] := i;
    END LOOP;
    open_ids := ARRAY(SELECT d.id FROM unnest(d_id, d_hi) AS d(id, hi)
                       WHERE p_from IS NULL OR d.hi IS NULL OR d.hi >= p_from);
    -- The intervals that stay as they are (ended before p_from) start the fold.
    ls_head := array_fill(NULL::int, ARRAY[n]);
    FOR j IN 1 .. cardinality(d_id) LOOP
        CONTINUE WHEN d_id[j] = ANY (open_ids);
        ns := ns + 1;
        s_id[ns] := d_id[j]; s_li[ns] := d_li[j]; s_lo[ns] := d_lo[j]; s_hi[ns] := d_hi[j];
        s_fact[ns] := d_fact[j]; s_src[ns] := NULL;
        s_next[ns] := ls_head[d_li[j]];
        ls_head[d_li[j]] := ns;
    END LOOP;
    -- Exclusive pairs (a, b), both ways, for the lineages a with claims to fold (only theirs are
    -- looked up: a re-fold from a late claim folds a few lineages of a component whose functional
    -- facts make ~n^2 pairs) and b re-folded; comp holds every such a (claim_component, or the
    -- re-folded lineages' exclusive ones).
    folded := ARRAY(SELECT DISTINCT comp[u.li] FROM unnest(c_li, c_key, c_live, c_kind) AS u(li, k, lv, kd)
                     WHERE u.lv AND u.kd <> 'retract' AND (p_from IS NULL OR u.k >= p_from));
    SELECT array_agg(la.n ORDER BY la.n), array_agg(lb.n ORDER BY la.n) INTO ex_a, ex_to
      FROM pgmemory.lineage_exclusions e
      JOIN unnest(comp) WITH ORDINALITY AS la(l, n) ON la.l = e.lineage  -- (numbered by a join, not
      JOIN unnest(comp) WITH ORDINALITY AS lb(l, n) ON lb.l = e.other    -- array_position per pair)
     WHERE e.group_id = p_group AND e.lineage = ANY (folded) AND e.other = ANY (comp[1:nf]);
    ex_a := coalesce(ex_a, '{}');
    k := 1;
    FOR li IN 1 .. n + 1 LOOP
        WHILE k <= cardinality(ex_a) AND ex_a[k] < li LOOP
            k := k + 1;
        END LOOP;
        ex_off[li] := k;
    END LOOP;
    -- The fold: plain PL/pgSQL over the arrays (a statement per claim cost ~0.3 ms a claim).
    FOR i IN 1 .. cardinality(c_seq) LOOP
        CONTINUE WHEN c_kind[i] = 'retract' OR NOT c_live[i] OR c_key[i] < p_from;
        li := c_li[i];
        es := least(coalesce(c_from[i], c_ref[i]), c_to[i]);
        IF li <= nf THEN  -- (a claim of a lineage not re-folded only ends intervals, below)
            landed := NULL;
            -- m: its lineage's intervals it touches (all of them for a negation), by start then version
            m := '{}';
            j := ls_head[li];
            WHILE j IS NOT NULL LOOP
                IF s_id[j] IS NOT NULL
                   AND (c_kind[i] = 'negate' OR (s_lo[j] IS NULL OR s_lo[j] <= coalesce(c_to[i], 'infinity'))
                                                AND (s_hi[j] IS NULL OR es <= s_hi[j])) THEN
                    m := j || m;  -- (the list runs from the latest interval back)
                END IF;
                j := s_next[j];
            END LOOP;
            IF cardinality(m) > 1 THEN
                m := ARRAY(SELECT x FROM unnest(m) x ORDER BY s_lo[x] NULLS FIRST, x);
            END IF;
            IF cardinality(m) = 0 THEN
                -- A new interval (none of its lineage for a negation, none it touches for an assertion),
                -- with the id chosen as above.
                t := coalesce(c_to[i], c_ref[i]);
                nid := CASE WHEN coalesce(c_fact_id[i] <> ALL (s_id), true) THEN c_fact_id[i] END;
                IF nid IS NULL AND x_id IS NULL THEN
                    -- Read when first needed: the versions no longer believed as of this transaction (the
                    -- re-folded intervals as stored before it, and versions it closed; one written in it
                    -- and re-folded is gone, not closed). By fact id, the ids the component's claims
                    -- landed on: a scan by lineage over every version grew with the conversation.
                    SELECT array_agg(f.id), array_agg(array_position(comp, f.lineage)), array_agg(lower(f.valid)),
                           array_agg(upper(f.valid))
                      INTO x_id, x_li, x_lo, x_hi
                      FROM pgmemory.facts f
                     WHERE f.group_id = p_group AND f.id = ANY (ARRAY(SELECT DISTINCT u FROM unnest(c_fact_id) u WHERE u IS NOT NULL))
                       AND f.lineage = ANY (comp[1:nf])
                       AND (upper(f.recorded) = now() OR f.id = ANY (open_ids) AND upper_inf(f.recorded) AND lower(f.recorded) < now());
                    x_id := coalesce(x_id, '{}');
                END IF;
                IF nid IS NULL THEN
                    nid := (SELECT x_id[x] FROM generate_subscripts(x_id, 1) x
                             WHERE x_li[x] = li AND coalesce(x_id[x] <> ALL (s_id), true)
                               AND x_id[x] IN (SELECT c_land[y] FROM generate_subscripts(c_land, 1) y WHERE c_li[y] = li)
                               AND (x_lo[x] IS NULL OR x_lo[x] <= coalesce(c_to[i], 'infinity'))
                               AND (x_hi[x] IS NULL OR es <= x_hi[x])
                             ORDER BY x_lo[x] NULLS FIRST, x LIMIT 1);
                END IF;
                IF nid IS NULL THEN
                    nid := CASE WHEN coalesce(c_id[i] <> ALL (s_id), true) THEN c_id[i] ELSE gen_random_uuid() END;
                END IF;
                ns := ns + 1;
                k := ns;
                s_id[k] := nid;
                s_li[k] := li;
                s_lo[k] := CASE WHEN c_kind[i] = 'negate' THEN CASE WHEN c_from[i] < t THEN c_from[i] END
                                WHEN c_to[i] IS NULL OR c_from[i] < c_to[i] THEN c_from[i] END;
                s_hi[k] := CASE WHEN c_kind[i] = 'negate' THEN t ELSE c_to[i] END;
                IF s_lo[k] IS NULL AND c_kind[i] = 'assert' THEN  -- (pgmemory_internal.unknown_start)
                    IF es < coalesce(c_to[i], 'infinity') THEN
                        q := lc_head[li];  -- an earlier claim of its lineage
                        WHILE q IS NOT NULL AND q < i LOOP
                            IF c_live[q] AND c_kind[q] <> 'retract' THEN
                                s_lo[k] := es;
                                EXIT;
                            END IF;
                            q := c_next[q];
                        END LOOP;
                    ELSE
                        j := ls_head[li];  -- (k is not in the list yet)
                        WHILE j IS NOT NULL LOOP
                            IF s_id[j] IS NOT NULL AND s_hi[j] <= es THEN
                                s_lo[k] := greatest(s_lo[k], s_hi[j]);
                            END IF;
                            j := s_next[j];
                        END LOOP;
                    END IF;
                END IF;
                s_fact[k] := c_fact[i];
                s_src[k] := i;
                s_next[k] := ls_head[li];
                ls_head[li] := k;
                landed := nid;
            ELSIF c_kind[i] = 'negate' THEN
                -- its lineage's open intervals that started before t end at t
                t := coalesce(c_to[i], c_ref[i]);
                FOREACH k IN ARRAY m LOOP
                    IF s_hi[k] IS NULL AND (s_lo[k] IS NULL OR s_lo[k] < t) THEN
                        s_hi[k] := t;
                        landed := coalesce(landed, s_id[k]);
                    END IF;
                END LOOP;
                landed := coalesce(landed, s_id[m[1]]);
            ELSE
                -- merge into the intervals it overlaps or touches (see apply_claim)
                k := m[1];
                landed := s_id[k];
                any_unknown_lo := false;
                any_open := false;
                lo := NULL;
                hi := NULL;
                m_ids := '{}';
                FOREACH j IN ARRAY m LOOP
                    IF s_lo[j] IS NULL THEN any_unknown_lo := true; ELSE lo := least(lo, s_lo[j]); END IF;
                    IF s_hi[j] IS NULL THEN any_open := true; ELSE hi := greatest(hi, s_hi[j]); END IF;
                    m_ids := m_ids || s_id[j];
                END LOOP;
                IF NOT any_unknown_lo THEN
                    new_lo := least(lo, es);
                ELSIF c_from[i] IS NOT NULL OR lo IS NOT NULL THEN
                    -- an unknown start takes the earliest evidence of the assertions it joins
                    t := NULL;
                    q := lc_head[li];
                    WHILE q IS NOT NULL LOOP
                        IF c_kind[q] = 'assert' AND c_live[q] AND c_land[q] = ANY (m_ids) THEN
                            t := least(t, c_key[q]);
                        END IF;
                        q := c_next[q];
                    END LOOP;
                    new_lo := least(lo, es, t);
                ELSE
                    new_lo := NULL;
                END IF;
                new_hi := CASE WHEN any_open THEN c_to[i]
                               WHEN c_to[i] IS NULL AND es >= hi THEN NULL
                               WHEN c_to[i] IS NULL THEN hi ELSE greatest(hi, c_to[i]) END;
                IF new_lo >= new_hi THEN  -- (pgmemory_internal.unknown_start)
                    new_lo := NULL;
                    j := ls_head[li];
                    WHILE j IS NOT NULL LOOP
                        IF s_id[j] IS NOT NULL AND j <> ALL (m) AND s_hi[j] <= es THEN
                            new_lo := greatest(new_lo, s_hi[j]);
                        END IF;
                        j := s_next[j];
                    END LOOP;
                END IF;
                FOR e IN 2 .. cardinality(m) LOOP  -- joined: their claims now land on the first
                    q := lc_head[li];
                    WHILE q IS NOT NULL LOOP
                        IF c_land[q] = m_ids[e] THEN
                            c_land[q] := landed;
                        END IF;
                        q := c_next[q];
                    END LOOP;
                    s_id[m[e]] := NULL;
                END LOOP;
                IF cardinality(m) > 1 THEN  -- joined: the first assertion before it among their claims
                    e := NULL;               -- (the lists run in fold order), else its own (as apply_claim)
                    q := lc_head[li];
                    WHILE q IS NOT NULL AND q < i LOOP
                        IF c_kind[q] = 'assert' AND c_live[q] AND c_land[q] = landed THEN
                            e := q;
                            EXIT;
                        END IF;
                        q := c_next[q];
                    END LOOP;
                    e := coalesce(e, i);
                    IF s_fact[k] <> c_fact[e] THEN
                        s_fact[k] := c_fact[e];
                        s_src[k] := e;
                    END IF;
                END IF;
                IF c_kind[s_src[k]] = 'negate' THEN  -- an interval opened by a negation takes the asserting
                    s_fact[k] := c_fact[i];           -- sentence (whatever id the re-fold gave it)
                    s_src[k] := i;
                END IF;
                s_lo[k] := new_lo;
                s_hi[k] := new_hi;
            END IF;
            c_land[i] := landed;
            IF c_ep[i] IS NOT NULL THEN
                prov_fact := prov_fact || landed;
                prov_ep := prov_ep || c_ep[i];
            END IF;
        END IF;
        CONTINUE WHEN c_kind[i] = 'negate' OR c_to[i] <= es;

        -- contradictions (both ways): end what held at es; never end what only began after es.
        -- (k: the interval it landed on.)
        cap := NULL;
        FOR e IN ex_off[li] .. ex_off[li + 1] - 1 LOOP
            j := ls_head[ex_to[e]];
            WHILE j IS NOT NULL LOOP
                IF s_id[j] IS NOT NULL AND (s_hi[j] IS NULL OR s_hi[j] > es) THEN
                    IF s_lo[j] IS NOT NULL AND es < s_lo[j] THEN
                        cap := least(cap, s_lo[j]);
                    ELSIF s_lo[j] IS NOT NULL AND es <= s_lo[j] THEN
                        q := lc_head[s_li[j]];  -- its claims are in no interval now
                        WHILE q IS NOT NULL LOOP
                            IF c_land[q] = s_id[j] THEN
                                c_land[q] := NULL;
                            END IF;
                            q := c_next[q];
                        END LOOP;
                        s_id[j] := NULL;
                    ELSE
                        s_hi[j] := es;
                        IF c_ep[i] IS NOT NULL THEN
                            prov_fact := prov_fact || s_id[j];
                            prov_ep := prov_ep || c_ep[i];
                        END IF;
                    END IF;
                END IF;
                j := s_next[j];
            END LOOP;
        END LOOP;
        IF cap IS NOT NULL AND li <= nf AND (s_hi[k] IS NULL OR s_hi[k] > cap) THEN
            s_lo[k] := CASE WHEN s_lo[k] < cap THEN s_lo[k] END;
            s_hi[k] := cap;
        END IF;
    END LOOP;

    -- Write the differences: believed intervals gone, changed, new. (Statements and calls take
    -- scalars, not elements of these arrays: Citus crashed on an array subscript as a parameter
    -- in a delegated call.)
    d_id := coalesce(d_id, '{}');
    FOR i IN 1 .. cardinality(d_id) LOOP
        k := array_position(s_id, d_id[i]);
        nid := d_id[i];
        IF k IS NULL THEN
            PERFORM pgmemory.withdraw_fact(p_group, nid);
        ELSIF s_lo[k] IS DISTINCT FROM d_lo[i] OR s_hi[k] IS DISTINCT FROM d_hi[i] OR s_fact[k] <> d_fact[i] THEN
            new_lo := s_lo[k];
            new_hi := s_hi[k];
            IF s_fact[k] = d_fact[i] THEN
                PERFORM pgmemory.correct_fact(p_group, nid, new_lo, new_hi);
            ELSE  -- the sentence of the claim it now carries
                one_seq := c_seq[s_src[k]];
                SELECT * INTO cl FROM pgmemory.fact_claims fc WHERE fc.group_id = p_group AND fc.seq = one_seq;
                PERFORM pgmemory.correct_fact(p_group, nid, new_lo, new_hi, NULL, cl.fact, cl.embedding);
            END IF;
        END IF;
    END LOOP;
    FOR k IN 1 .. cardinality(s_id) LOOP
        CONTINUE WHEN s_id[k] IS NULL OR s_id[k] = ANY (d_id);
        nid := s_id[k];
        new_lo := s_lo[k];
        new_hi := s_hi[k];
        one_seq := c_seq[s_src[k]];
        SELECT * INTO cl FROM pgmemory.fact_claims fc WHERE fc.group_id = p_group AND fc.seq = one_seq;
        PERFORM pgmemory.record_fact(nid, p_group, cl.source_id, cl.target_id, cl.relation, cl.fact,
                                     new_lo, new_hi, cl.embedding, cl.attributes, NULL, cl.lineage);
    END LOOP;
    FOR i IN 1 .. cardinality(c_seq) LOOP  -- where each claim landed, when that moved
        CONTINUE WHEN c_land[i] IS NOT DISTINCT FROM c_fact_id[i];
        landed := c_land[i];
        one_seq := c_seq[i];
        UPDATE pgmemory.fact_claims SET fact_id = landed WHERE group_id = p_group AND seq = one_seq;
    END LOOP;

    -- Changed: the intervals re-folded whose version was closed now, and those believed from now
    -- (read by key and by the current versions' lineage index, not over every version of the group).
    changed := ARRAY(SELECT f.id FROM pgmemory.facts f
                      WHERE f.group_id = p_group AND f.id = ANY (open_ids) AND upper(f.recorded) = now()
                     UNION
                     SELECT f.id FROM pgmemory.facts f
                      WHERE f.group_id = p_group AND f.lineage = ANY (comp[1:nf]) AND upper_inf(f.recorded)
                        AND lower(f.recorded) = now());
    -- (Most links are there already: a re-fold mostly lands claims where they were. Read into
    -- arrays first: a statement joining a distributed table with local rows is not routed on Citus.)
    SELECT array_agg(fe.fact_id), array_agg(fe.episode_id) INTO have_fact, have_ep FROM pgmemory.fact_episodes fe
     WHERE fe.group_id = p_group AND fe.fact_id = ANY (prov_fact);
    FOR landed, nid IN SELECT p.f, p.e FROM unnest(prov_fact, prov_ep) AS p(f, e)
                       EXCEPT SELECT h.f, h.e FROM unnest(have_fact, have_ep) AS h(f, e) LOOP
        INSERT INTO pgmemory.fact_episodes (fact_id, episode_id, group_id)  -- (row by row: routed on Citus)
        VALUES (landed, nid, p_group) ON CONFLICT DO NOTHING;
    END LOOP;
    IF cardinality(changed) > 0 THEN  -- (else it read every claim of the component to find none)
        INSERT INTO pgmemory.fact_episodes (fact_id, episode_id, group_id)
        SELECT fc.fact_id, fc.episode_id, fc.group_id FROM pgmemory.fact_claims fc  -- the group from the source: pushed down on Citus
         WHERE fc.group_id = p_group AND fc.lineage = ANY (comp[1:nf]) AND fc.episode_id IS NOT NULL
           AND fc.fact_id = ANY (changed) AND fc.kind <> 'retract' AND fc.retracted_by IS NULL
        ON CONFLICT DO NOTHING;
    END IF;
    RETURN changed;
END
$$;

-- Store decided claim c (not stored yet: c.seq is NULL) and fold it into its group's belief:
-- applied to the current belief when no live claim of its lineage or of an exclusive one that
-- its place could change comes after it in fold order (statements that arrive in the order of
-- their times, a repeat that moves a start back: the usual cases), else its lineages are
-- re-folded with it in its place (a late statement about the past, a return to an earlier state
-- told out of order). Returns what apply_claim returns; after a re-fold: the fact it landed on
-- ('created' when it opened its own; none, action 'withdrawn', when its interval is believed
-- nowhere: another value begins there), and the other facts whose belief changed as 'ended'
-- (still believed) or 'withdrawn'.
CREATE OR REPLACE FUNCTION pgmemory_internal.fold_claim(c pgmemory.fact_claims)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    before uuid[];  -- (set after a negation with a start is split: each part looks them up)
    near uuid[];
    newly uuid[];
    fresh boolean;
    -- (An end at infinity is no end: an open one, stored as NULL, as record_fact stores it.)
    key timestamptz := pgmemory_internal.fold_key(c.kind, c.valid_from, nullif(c.valid_to, 'infinity'), c.ref_time);
    did jsonb;
    changed uuid[];
    landed uuid;
    later_own boolean;     -- claims after it in fold order: of its own lineage,
    later_other boolean;   -- of an exclusive one,
    out_of_place boolean;  -- and one whose place it could change
    in_place boolean;      -- applied to the current belief (else re-folded in its place)
    since timestamptz := key;  -- where the re-fold starts
    held pgmemory.fact_claims;  -- (a negation with a start: that it held until its end)
    part jsonb;
BEGIN
    c.valid_to := nullif(c.valid_to, 'infinity');
    -- A negation that says since when the fact had held ("left Acme, where she had been since
    -- 2021") is two statements, each folded in its place: that it held from then until its end
    -- (an assertion: like any other it moves a start back and ends another value of a functional
    -- relation where it starts), under the claim's id, and that it ended there.
    IF c.kind = 'negate' AND c.valid_from < coalesce(c.valid_to, c.ref_time) THEN
        held := c;
        held.kind := 'assert';
        held.valid_to := coalesce(c.valid_to, c.ref_time);
        part := pgmemory_internal.fold_claim(held);
        c.id := gen_random_uuid();
        c.valid_from := NULL;
        did := pgmemory_internal.fold_claim(c);
        RETURN did || jsonb_build_object(
            'action', CASE WHEN did->>'action' = 'unchanged' THEN part->>'action' ELSE did->>'action' END,
            'ended', to_jsonb(ARRAY(SELECT DISTINCT x FROM jsonb_array_elements_text((part->'ended') || (did->'ended')) x
                                     WHERE x <> ALL (ARRAY(SELECT jsonb_array_elements_text(did->'withdrawn')))
                                       AND x IS DISTINCT FROM did->>'fact_id')),
            'withdrawn', to_jsonb(ARRAY(SELECT DISTINCT x FROM jsonb_array_elements_text((part->'withdrawn') || (did->'withdrawn')) x
                                         WHERE x IS DISTINCT FROM did->>'fact_id')));
    END IF;
    before := pgmemory_internal.exclusive_lineages(c.group_id, c.lineage, '{}');
    near := c.lineage || ARRAY(SELECT DISTINCT x FROM unnest(before || c.contradicts) x WHERE x <> c.lineage);
    -- The lineages it contradicts that were not exclusive with its own (usually none: a repeat
    -- names the same ones again; looked up only when there are some, else the claims of every
    -- lineage it names were read to find none).
    newly := ARRAY(SELECT x FROM unnest(c.contradicts) x WHERE x <> c.lineage AND x <> ALL (before));
    -- It makes its lineage exclusive with one it was not exclusive with, and the pair would have
    -- changed the fold of the claims already stored. In that fold (valid-time order) a pair (a, b)
    -- acts only at an assertion of b that finds an interval of a valid at its start, and such an
    -- interval is believed afterwards too (or one it was joined into), still valid at that point:
    -- an interval's start only moves back, and its end only to the point of a later claim. So when
    -- no believed interval of either holds an assertion of the other (bounds included) and no claim
    -- of one is at the same point as an assertion of the other, the pair changed nothing before
    -- this claim: an old job taken again after jobs it never met applies in place, not by a re-fold.
    fresh := cardinality(newly) > 0 AND EXISTS (
        SELECT FROM unnest(newly) x, LATERAL (VALUES (c.lineage, x), (x, c.lineage)) p(a, b)
         WHERE EXISTS (SELECT FROM pgmemory.facts f
                         JOIN pgmemory.fact_claims fc ON fc.group_id = c.group_id AND fc.lineage = p.b
                          AND fc.kind = 'assert' AND fc.retracted_by IS NULL
                          AND (lower_inf(f.valid)
                               OR pgmemory_internal.fold_key(fc.kind, fc.valid_from, fc.valid_to, fc.ref_time) >= lower(f.valid))
                          AND (upper_inf(f.valid)
                               OR pgmemory_internal.fold_key(fc.kind, fc.valid_from, fc.valid_to, fc.ref_time) <= upper(f.valid))
                        WHERE f.group_id = c.group_id AND f.lineage = p.a AND upper_inf(f.recorded))
            OR EXISTS (SELECT FROM pgmemory.fact_claims fa
                         JOIN pgmemory.fact_claims fb ON fb.group_id = c.group_id AND fb.lineage = p.b
                          AND fb.kind = 'assert' AND fb.retracted_by IS NULL
                          AND pgmemory_internal.fold_key(fb.kind, fb.valid_from, fb.valid_to, fb.ref_time)
                              = pgmemory_internal.fold_key(fa.kind, fa.valid_from, fa.valid_to, fa.ref_time)
                        WHERE fa.group_id = c.group_id AND fa.lineage = p.a AND fa.kind <> 'retract'
                          AND fa.retracted_by IS NULL));
    -- What an earlier claim's place can change (else applying it last gives the same belief):
    -- for a negation, a claim of its lineage after it, or any after it once an interval that held
    -- at its end has been ended later (by an exclusive one); for an assertion with a stated end,
    -- anything after it; for one without, in its own lineage a negation or a stated end after it
    -- (assertions without one merge the same in any order), in an exclusive lineage a claim after
    -- it inside an interval that held at its start (applied last, it would end that interval
    -- before that evidence; in its place, the evidence reopens it), or anything after it when its
    -- own lineage has claims after it too (an exclusive interval between them splits what it
    -- would merge), or one there said to have held until a time before it was said (where it
    -- starts depends on its lineage's earlier ends). tests/test_fact_rules.py checks applied ==
    -- re-folded on random statements.
    SELECT coalesce(bool_or(fc.lineage = c.lineage), false),
           coalesce(bool_or(fc.lineage <> c.lineage), false),
           coalesce(bool_or(CASE WHEN c.kind = 'negate' THEN fc.lineage = c.lineage OR EXISTS (
                                     SELECT FROM pgmemory.facts f
                                      WHERE f.group_id = c.group_id AND f.lineage = c.lineage AND upper_inf(f.recorded)
                                        AND (lower_inf(f.valid) OR lower(f.valid) < key)
                                        AND NOT upper_inf(f.valid) AND upper(f.valid) > key)
                                 WHEN c.valid_to IS NOT NULL THEN true
                                 WHEN fc.lineage = c.lineage THEN fc.kind = 'negate' OR fc.valid_to IS NOT NULL
                                 -- (one that held until a time before it was said starts where its
                                 -- lineage's intervals ended by then: unknown_start)
                                 WHEN fc.kind = 'assert' AND fc.valid_to <= coalesce(fc.valid_from, fc.ref_time) THEN true
                                 ELSE EXISTS (
                                   SELECT FROM pgmemory.facts f
                                    WHERE f.group_id = c.group_id AND f.id = fc.fact_id AND upper_inf(f.recorded)
                                      AND (lower_inf(f.valid) OR lower(f.valid) <= key)
                                      AND (upper_inf(f.valid) OR upper(f.valid) > key)) END), false)
      INTO later_own, later_other, out_of_place
      FROM pgmemory.fact_claims fc
     WHERE fc.group_id = c.group_id AND fc.lineage = ANY (near) AND fc.kind <> 'retract'
       AND fc.retracted_by IS NULL
       AND pgmemory_internal.fold_key(fc.kind, fc.valid_from, fc.valid_to, fc.ref_time) >= key
       AND pgmemory_internal.fold_order(fc.kind, fc.valid_from, fc.valid_to, fc.ref_time)
           > pgmemory_internal.fold_order(c.kind, c.valid_from, c.valid_to, c.ref_time);
    -- (Assertions without an end merge the same in any order only where no claim of the lineage
    -- bounds an interval: else one could join intervals that were apart when it came in its place;
    -- nor when the lineage has intervals apart (another lineage ended one): a later one may start
    -- where it was said only because it came after a gap, unknown_start.)
    IF later_own AND NOT out_of_place THEN
        out_of_place := EXISTS (SELECT FROM pgmemory.fact_claims fc
                                 WHERE fc.group_id = c.group_id AND fc.lineage = c.lineage
                                   AND (fc.kind = 'negate' OR fc.valid_to IS NOT NULL) AND fc.retracted_by IS NULL)
                        OR (SELECT count(*) FROM pgmemory.facts f WHERE f.group_id = c.group_id
                               AND f.lineage = c.lineage AND upper_inf(f.recorded)) > 1;
    END IF;
    in_place := NOT (fresh OR out_of_place OR c.kind = 'assert' AND later_own AND later_other);
    IF in_place THEN
        did := pgmemory_internal.apply_claim(c, near[2:]);
    END IF;
    -- Stored once, with the fact it landed on when applied in place (a re-fold sets it).
    INSERT INTO pgmemory.fact_claims (group_id, episode_id, kind, id, lineage, fact_id, source_id, target_id,
                                      relation, fact, embedding, attributes, valid_from, valid_to,
                                      ref_time, contradicts)
    VALUES (c.group_id, c.episode_id, c.kind, c.id, c.lineage, (did->>'fact_id')::uuid, c.source_id,
            c.target_id, c.relation, c.fact, c.embedding, c.attributes, c.valid_from, c.valid_to,
            c.ref_time, c.contradicts)
    RETURNING seq INTO c.seq;
    IF cardinality(c.contradicts) > 0 THEN
        PERFORM pgmemory_internal.add_exclusions(c.group_id, c.lineage, c.contradicts);
    END IF;
    IF in_place THEN
        RETURN did;
    END IF;
    -- Only what its place can change (a suffix). When it makes its lineage and others with claims
    -- exclusive anew, from where such a pair first meets too: the later of the two lineages'
    -- earliest claims (before it one of the two has no claim, so no interval to end or be ended
    -- by, and the fold up to there is as it was; an old job taken again after a job that began
    -- when it had ended re-folds from that later job, not from the first statement of either).
    IF fresh THEN
        since := least(key, (
            SELECT min(greatest(own.k, x.k))
              FROM (SELECT min(pgmemory_internal.fold_key(fc.kind, fc.valid_from, fc.valid_to, fc.ref_time)) AS k
                      FROM pgmemory.fact_claims fc
                     WHERE fc.group_id = c.group_id AND fc.lineage = c.lineage AND fc.kind <> 'retract'
                       AND fc.retracted_by IS NULL) own,
                   (SELECT min(pgmemory_internal.fold_key(fc.kind, fc.valid_from, fc.valid_to, fc.ref_time)) AS k
                      FROM pgmemory.fact_claims fc
                     WHERE fc.group_id = c.group_id AND fc.lineage = ANY (newly) AND fc.kind <> 'retract'
                       AND fc.retracted_by IS NULL
                     GROUP BY fc.lineage) x));
    END IF;
    -- Only the lineages whose input changed: in a fold a lineage's belief depends on its own claims
    -- and on where assertions of its exclusive lineages end its intervals (the ending claim's own
    -- lineage is not changed by it; a new interval starting after the claim, the one case
    -- apply_claim caps, does not arise in valid-time order). So its own lineage, those it is
    -- newly exclusive with (fresh: each now ends the other's intervals, from where they meet), and
    -- those it can end: an exclusive lineage with an interval valid at its place then is believed
    -- with one holding that point (see fresh). The other exclusive lineages keep their input (a
    -- new pair changes what its two lineages' claims end, not which claims there are), so they
    -- are not re-folded, even when the re-fold starts years back. A negation, or a claim that
    -- ended by its place, ends none.
    changed := pgmemory_internal.refold_lineages(
        c.group_id, c.lineage || CASE WHEN fresh THEN newly ELSE '{}' END
                    || CASE WHEN c.kind = 'assert' AND (c.valid_to IS NULL OR c.valid_to > key) THEN
                           ARRAY(SELECT DISTINCT f.lineage FROM pgmemory.facts f
                                  WHERE f.group_id = c.group_id AND f.lineage = ANY (near[2:])
                                    AND upper_inf(f.recorded)
                                    AND (lower_inf(f.valid) OR lower(f.valid) <= key)
                                    AND coalesce(upper(f.valid), 'infinity'::timestamptz) >= key)
                       ELSE '{}' END, since, true);
    landed := (SELECT fc.fact_id FROM pgmemory.fact_claims fc WHERE fc.group_id = c.group_id AND fc.seq = c.seq);
    RETURN jsonb_build_object(
        'fact_id', landed, 'action', CASE WHEN landed IS NULL THEN 'withdrawn'  -- (believed nowhere)
                                          WHEN EXISTS (SELECT FROM pgmemory.facts f
                                                        WHERE f.group_id = c.group_id AND f.id = landed
                                                          AND lower(f.recorded) < now())
                                          THEN 'extended' ELSE 'created' END,
        'ended', to_jsonb(ARRAY(SELECT x FROM unnest(changed) x
                                 WHERE x IS DISTINCT FROM landed AND EXISTS (
                                       SELECT FROM pgmemory.facts f
                                        WHERE f.group_id = c.group_id AND f.id = x AND upper_inf(f.recorded)))),
        'withdrawn', to_jsonb(ARRAY(SELECT x FROM unnest(changed) x
                                     WHERE x IS DISTINCT FROM landed AND NOT EXISTS (
                                           SELECT FROM pgmemory.facts f
                                            WHERE f.group_id = c.group_id AND f.id = x AND upper_inf(f.recorded)))));
END
$$;
