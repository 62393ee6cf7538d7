-- Which lineages cannot hold at the same time, kept as rows instead of re-read from the claims.
-- A lineage's exclusive lineages (those its live claims contradict and those whose live claims
-- contradict it) were the union of every such claim's `contradicts` array: a person's employers
-- are each exclusive with every other, and each new "works at X" lists all of them again, so the
-- read grew with the conversation (issue 9). And the component a re-fold works on (the lineages
-- joined through contradictions) was found by re-reading all their claims, round after round.
--
-- lineage_exclusions: one row per exclusive pair, both ways (a claim of `lineage` contradicts
-- `other`, or one of `other` contradicts `lineage`). Rows are added when a claim is stored
-- (pgmemory_internal.add_exclusions) and rebuilt from the live claims when claims are retracted
-- or deleted (pgmemory_internal.rebuild_exclusions).
-- lineage_components: the connected components of those pairs, one row per lineage that has a
-- pair (a lineage without one is a component of its own); `component` is one lineage of it.
CREATE TABLE pgmemory.lineage_exclusions (
    group_id text NOT NULL,
    lineage  uuid NOT NULL,
    other    uuid NOT NULL,
    PRIMARY KEY (group_id, lineage, other)
);

CREATE TABLE pgmemory.lineage_components (
    group_id  text NOT NULL,
    lineage   uuid NOT NULL,
    component uuid NOT NULL,
    PRIMARY KEY (group_id, lineage)
);
CREATE INDEX lineage_components_component ON pgmemory.lineage_components (group_id, component);

-- The pairs of the claims already stored.
INSERT INTO pgmemory.lineage_exclusions (group_id, lineage, other)
SELECT DISTINCT group_id, a, b FROM (
    SELECT fc.group_id, fc.lineage AS a, x AS b FROM pgmemory.fact_claims fc, unnest(fc.contradicts) x
     WHERE fc.retracted_by IS NULL
    UNION ALL
    SELECT fc.group_id, x, fc.lineage FROM pgmemory.fact_claims fc, unnest(fc.contradicts) x
     WHERE fc.retracted_by IS NULL) p
 WHERE a <> b;

-- Their components: grown from each lineage not yet placed until nothing joins.
DO $$
DECLARE
    g text;
    root uuid;
    comp uuid[];
    grown uuid[];
BEGIN
    FOR g IN SELECT DISTINCT group_id FROM pgmemory.lineage_exclusions LOOP
        LOOP
            SELECT e.lineage INTO root FROM pgmemory.lineage_exclusions e
             WHERE e.group_id = g AND NOT EXISTS (SELECT 1 FROM pgmemory.lineage_components k
                                                   WHERE k.group_id = g AND k.lineage = e.lineage)
             LIMIT 1;
            EXIT WHEN root IS NULL;
            comp := ARRAY[root];
            LOOP
                grown := ARRAY(SELECT DISTINCT x FROM (
                                   SELECT unnest(comp) AS x
                                   UNION ALL
                                   SELECT e.other FROM pgmemory.lineage_exclusions e
                                    WHERE e.group_id = g AND e.lineage = ANY (comp)) u);
                EXIT WHEN cardinality(grown) = cardinality(comp);
                comp := grown;
            END LOOP;
            INSERT INTO pgmemory.lineage_components (group_id, lineage, component)
            SELECT g, l, root FROM unnest(comp) l;
        END LOOP;
    END LOOP;
END $$;
