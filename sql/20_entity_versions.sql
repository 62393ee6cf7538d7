-- Entities are system-versioned: an update keeps the prior row in
-- pgmemory.entity_versions with the transaction-time range it was current.
-- A name change also marks the entity `renamed` (never unset): pgmemory.fact_versions
-- looks up past names only for such entities.

CREATE OR REPLACE FUNCTION pgmemory_internal.entities_keep_version()
RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF (OLD.name, OLD.labels, OLD.summary, OLD.attributes)
       IS NOT DISTINCT FROM (NEW.name, NEW.labels, NEW.summary, NEW.attributes) THEN
        RETURN NEW;
    END IF;
    IF OLD.updated_at > now() THEN  -- recorded by a concurrent writer after this transaction began
        RAISE EXCEPTION 'entity % of group % changed after this transaction began (a concurrent writer): retry the transaction',
            OLD.id, OLD.group_id USING ERRCODE = '40001';
    ELSIF OLD.updated_at < now() THEN
        INSERT INTO pgmemory.entity_versions
            (entity_id, group_id, name, labels, summary, attributes, recorded)
        VALUES (OLD.id, OLD.group_id, OLD.name, OLD.labels, OLD.summary, OLD.attributes,
                tstzrange(OLD.updated_at, now()));
    END IF;
    IF NEW.name <> OLD.name THEN
        NEW.renamed := true;
    END IF;
    NEW.updated_at := now();
    RETURN NEW;
END
$$;

DROP TRIGGER IF EXISTS entities_keep_version ON pgmemory.entities;
CREATE TRIGGER entities_keep_version BEFORE UPDATE ON pgmemory.entities
    FOR EACH ROW EXECUTE FUNCTION pgmemory_internal.entities_keep_version();

-- Re-derive the name, labels and attributes of p_entities from what their live
-- mentions said (pgmemory.episode_mentions, in ingestion order), as ingesting
-- only those episodes would have: the first names it (said_name), later ones
-- rename it to a name at least as long (an extractor's rename), add labels and
-- merge attributes. An entity created through the SQL API (pgmemory.add_fact:
-- a live claim without episode, and no mention from its creation) starts from
-- the name it was created with, and every mention merges into it. Entities
-- whose first live mention predates migration 0160 (no said_name), and
-- retired ones, are left as they are. A changed name drops the name vector
-- (pgmemory.entity_name_vectors: it embedded the old name; Memory.delete_episode
-- re-embeds). Returns the ids whose name changed.
CREATE OR REPLACE FUNCTION pgmemory_internal.refold_entities(p_group text, p_entities uuid[])
RETURNS uuid[] LANGUAGE plpgsql AS $$
DECLARE
    ent uuid;
    m record;
    nm text;
    lbl text[];
    attrs jsonb;
    first boolean;
    renamed uuid[] := '{}';
BEGIN
    PERFORM pgmemory_internal.check_request_group(p_group);  -- (a group the session is not narrowed to: refused)
    FOREACH ent IN ARRAY coalesce(p_entities, '{}') LOOP
        nm := NULL;
        first := true;
        IF EXISTS (SELECT 1 FROM pgmemory.fact_claims fc
                    WHERE fc.group_id = p_group AND fc.episode_id IS NULL AND ent IN (fc.source_id, fc.target_id))
           AND NOT EXISTS (SELECT 1 FROM pgmemory.episode_mentions x JOIN pgmemory.entities e ON e.group_id = p_group AND e.id = x.entity_id
                            WHERE x.group_id = p_group AND x.entity_id = ent AND x.recorded_at = e.created_at) THEN
            SELECT coalesce((SELECT v.name FROM pgmemory.entity_versions v
                              WHERE v.group_id = p_group AND v.entity_id = ent ORDER BY lower(v.recorded) LIMIT 1),
                            e.name), '{Entity}'::text[], '{}'::jsonb
              INTO nm, lbl, attrs
              FROM pgmemory.entities e WHERE e.id = ent AND e.group_id = p_group;
            first := false;
        END IF;
        FOR m IN SELECT x.said_name, x.renamed_to, x.labels, x.attributes FROM pgmemory.episode_mentions x
                  WHERE x.group_id = p_group AND x.entity_id = ent ORDER BY x.seq LOOP
            IF first THEN
                EXIT WHEN m.said_name IS NULL;
                nm := m.said_name;
                lbl := m.labels;
                attrs := m.attributes;
                first := false;
            ELSIF m.said_name IS NOT NULL THEN
                IF m.renamed_to IS NOT NULL AND m.renamed_to <> nm AND length(m.renamed_to) >= length(nm) THEN
                    nm := m.renamed_to;
                END IF;
                lbl := ARRAY(SELECT DISTINCT unnest(lbl || m.labels));
                attrs := attrs || m.attributes;
            END IF;
        END LOOP;
        CONTINUE WHEN nm IS NULL;
        IF EXISTS (SELECT 1 FROM pgmemory.entities e
                    WHERE e.id = ent AND e.group_id = p_group AND e.retired_at IS NULL AND e.name <> nm) THEN
            renamed := renamed || ent;
        END IF;
        UPDATE pgmemory.entities e
           SET name = nm,
               labels = CASE WHEN e.labels @> lbl AND e.labels <@ lbl THEN e.labels ELSE lbl END,
               attributes = attrs
         WHERE e.id = ent AND e.group_id = p_group AND e.retired_at IS NULL
           AND (e.name <> nm OR NOT (e.labels @> lbl AND e.labels <@ lbl) OR e.attributes <> attrs);
        IF ent = ANY (renamed) THEN
            DELETE FROM pgmemory.entity_name_vectors v WHERE v.group_id = p_group AND v.entity_id = ent;
        END IF;
    END LOOP;
    RETURN renamed;
END
$$;
