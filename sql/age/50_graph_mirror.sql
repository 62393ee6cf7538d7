-- The AGE graph `pgmemory_graph` mirrors entities, episodes, communities and
-- their edges. Triggers write AGE's label tables directly, so the mirror is
-- part of the same transaction as the rows it mirrors (and rolls back with it).
-- Facts are mirrored as RELATES_TO edges for the versions believed now, and as PAST_BELIEF
-- edges for the versions no longer believed (closed recorded range), so Cypher can ask what was
-- believed at T' (docs/sql.md, C7).

-- Ids are unique only within a group (entities, communities and fact versions are keyed by
-- (group_id, id)), so graph_vertices and graph_edges are keyed by (group_id, node) and
-- (group_id, edge key): a group can never find, overwrite or drop another group's vertex or edge.
-- The label tables of the mirror are written with static statements (plans cached per session:
-- the mirror runs several times per ingested episode); a label outside the fixed set falls back
-- to dynamic SQL.
CREATE OR REPLACE FUNCTION pgmemory_internal.graph_put_vertex(p_label text, p_group text, p_node uuid, p_props jsonb)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    vid bigint := (SELECT vertex_id FROM pgmemory.graph_vertices WHERE group_id = p_group AND node_id = p_node);
    props ag_catalog.agtype := p_props::text::ag_catalog.agtype;
    gid ag_catalog.graphid := vid::text::ag_catalog.graphid;
BEGIN
    IF vid IS NULL THEN
        IF p_label = 'Entity' THEN
            INSERT INTO pgmemory_graph."Entity" (properties) VALUES (props) RETURNING id::text::bigint INTO vid;
        ELSIF p_label = 'Episode' THEN
            INSERT INTO pgmemory_graph."Episode" (properties) VALUES (props) RETURNING id::text::bigint INTO vid;
        ELSIF p_label = 'Community' THEN
            INSERT INTO pgmemory_graph."Community" (properties) VALUES (props) RETURNING id::text::bigint INTO vid;
        ELSE
            EXECUTE format('INSERT INTO pgmemory_graph.%I (properties) VALUES ($1) RETURNING id::text::bigint',
                           p_label) INTO vid USING props;
        END IF;
        INSERT INTO pgmemory.graph_vertices (group_id, node_id, vertex_id) VALUES (p_group, p_node, vid);
    ELSE
        IF p_label = 'Entity' THEN
            UPDATE pgmemory_graph."Entity" SET properties = props WHERE id OPERATOR(ag_catalog.=) gid;
        ELSIF p_label = 'Episode' THEN
            UPDATE pgmemory_graph."Episode" SET properties = props WHERE id OPERATOR(ag_catalog.=) gid;
        ELSIF p_label = 'Community' THEN
            UPDATE pgmemory_graph."Community" SET properties = props WHERE id OPERATOR(ag_catalog.=) gid;
        ELSE
            EXECUTE format('UPDATE pgmemory_graph.%I SET properties = $1 WHERE id OPERATOR(ag_catalog.=) $2',
                           p_label) USING props, gid;
        END IF;
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION pgmemory_internal.graph_drop_vertex(p_label text, p_group text, p_node uuid)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    vid bigint;
    gid ag_catalog.graphid;
BEGIN
    DELETE FROM pgmemory.graph_vertices WHERE group_id = p_group AND node_id = p_node RETURNING vertex_id INTO vid;
    IF vid IS NULL THEN
        RETURN;
    END IF;
    gid := vid::text::ag_catalog.graphid;
    IF p_label = 'Entity' THEN DELETE FROM pgmemory_graph."Entity" WHERE id OPERATOR(ag_catalog.=) gid;
    ELSIF p_label = 'Episode' THEN DELETE FROM pgmemory_graph."Episode" WHERE id OPERATOR(ag_catalog.=) gid;
    ELSIF p_label = 'Community' THEN DELETE FROM pgmemory_graph."Community" WHERE id OPERATOR(ag_catalog.=) gid;
    ELSE
        EXECUTE format('DELETE FROM pgmemory_graph.%I WHERE id OPERATOR(ag_catalog.=) $1', p_label) USING gid;
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION pgmemory_internal.graph_put_edge(
    p_label text, p_group text, p_key text, p_from uuid, p_to uuid, p_props jsonb)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    eid bigint := (SELECT edge_id FROM pgmemory.graph_edges WHERE group_id = p_group AND edge_key = p_key);
    v_from bigint := (SELECT vertex_id FROM pgmemory.graph_vertices WHERE group_id = p_group AND node_id = p_from);
    v_to bigint := (SELECT vertex_id FROM pgmemory.graph_vertices WHERE group_id = p_group AND node_id = p_to);
    props ag_catalog.agtype := p_props::text::ag_catalog.agtype;
    g_from ag_catalog.graphid := v_from::text::ag_catalog.graphid;
    g_to ag_catalog.graphid := v_to::text::ag_catalog.graphid;
    gid ag_catalog.graphid := eid::text::ag_catalog.graphid;
BEGIN
    IF v_from IS NULL OR v_to IS NULL THEN
        RAISE EXCEPTION 'graph mirror: % edge % has no vertex for % or %', p_label, p_key, p_from, p_to;
    END IF;
    IF eid IS NULL THEN
        IF p_label = 'RELATES_TO' THEN
            INSERT INTO pgmemory_graph."RELATES_TO" (start_id, end_id, properties) VALUES (g_from, g_to, props)
            RETURNING id::text::bigint INTO eid;
        ELSIF p_label = 'PAST_BELIEF' THEN
            INSERT INTO pgmemory_graph."PAST_BELIEF" (start_id, end_id, properties) VALUES (g_from, g_to, props)
            RETURNING id::text::bigint INTO eid;
        ELSIF p_label = 'MENTIONS' THEN
            INSERT INTO pgmemory_graph."MENTIONS" (start_id, end_id, properties) VALUES (g_from, g_to, props)
            RETURNING id::text::bigint INTO eid;
        ELSIF p_label = 'HAS_MEMBER' THEN
            INSERT INTO pgmemory_graph."HAS_MEMBER" (start_id, end_id, properties) VALUES (g_from, g_to, props)
            RETURNING id::text::bigint INTO eid;
        ELSE
            EXECUTE format('INSERT INTO pgmemory_graph.%I (start_id, end_id, properties) VALUES ($1, $2, $3)'
                           ' RETURNING id::text::bigint', p_label) INTO eid USING g_from, g_to, props;
        END IF;
        INSERT INTO pgmemory.graph_edges (group_id, edge_key, edge_id) VALUES (p_group, p_key, eid);
    ELSE
        IF p_label = 'RELATES_TO' THEN
            UPDATE pgmemory_graph."RELATES_TO" SET properties = props WHERE id OPERATOR(ag_catalog.=) gid;
        ELSIF p_label = 'PAST_BELIEF' THEN
            UPDATE pgmemory_graph."PAST_BELIEF" SET properties = props WHERE id OPERATOR(ag_catalog.=) gid;
        ELSIF p_label = 'MENTIONS' THEN
            UPDATE pgmemory_graph."MENTIONS" SET properties = props WHERE id OPERATOR(ag_catalog.=) gid;
        ELSIF p_label = 'HAS_MEMBER' THEN
            UPDATE pgmemory_graph."HAS_MEMBER" SET properties = props WHERE id OPERATOR(ag_catalog.=) gid;
        ELSE
            EXECUTE format('UPDATE pgmemory_graph.%I SET properties = $1 WHERE id OPERATOR(ag_catalog.=) $2',
                           p_label) USING props, gid;
        END IF;
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION pgmemory_internal.graph_drop_edge(p_label text, p_group text, p_key text)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    eid bigint;
    gid ag_catalog.graphid;
BEGIN
    DELETE FROM pgmemory.graph_edges WHERE group_id = p_group AND edge_key = p_key RETURNING edge_id INTO eid;
    IF eid IS NULL THEN
        RETURN;
    END IF;
    gid := eid::text::ag_catalog.graphid;
    IF p_label = 'RELATES_TO' THEN DELETE FROM pgmemory_graph."RELATES_TO" WHERE id OPERATOR(ag_catalog.=) gid;
    ELSIF p_label = 'PAST_BELIEF' THEN DELETE FROM pgmemory_graph."PAST_BELIEF" WHERE id OPERATOR(ag_catalog.=) gid;
    ELSIF p_label = 'MENTIONS' THEN DELETE FROM pgmemory_graph."MENTIONS" WHERE id OPERATOR(ag_catalog.=) gid;
    ELSIF p_label = 'HAS_MEMBER' THEN DELETE FROM pgmemory_graph."HAS_MEMBER" WHERE id OPERATOR(ag_catalog.=) gid;
    ELSE
        EXECUTE format('DELETE FROM pgmemory_graph.%I WHERE id OPERATOR(ag_catalog.=) $1', p_label) USING gid;
    END IF;
END
$$;

-- The mirror key of an episode's vertex: episode ids are unique only within a
-- group, so the vertex is keyed by (group, id) (migration 0020 re-keyed old ones).
CREATE OR REPLACE FUNCTION pgmemory_internal.episode_node(p_group text, p_id uuid)
RETURNS uuid LANGUAGE sql IMMUTABLE AS $$
    SELECT md5('episode' || chr(31) || p_group || chr(31) || p_id::text)::uuid
$$;

-- Time bounds as graph properties: UTC ISO 8601 text ("2024-01-05T09:00:00Z"; "-infinity" for
-- "since forever"), so Cypher compares them as strings whatever the writer's time zone.
CREATE OR REPLACE FUNCTION pgmemory_internal.graph_time(p_time timestamptz)
RETURNS text LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN p_time IS NULL THEN NULL
                WHEN NOT isfinite(p_time) THEN p_time::text
                ELSE to_char(p_time AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') END
$$;

-- One row's mirror (vertex or edge), shared by the triggers and pgmemory_internal.rebuild_graph_mirror().
CREATE OR REPLACE FUNCTION pgmemory_internal.mirror_episode_row(e pgmemory.episodes) RETURNS void LANGUAGE sql AS $$
    SELECT pgmemory_internal.graph_put_vertex('Episode', e.group_id, pgmemory_internal.episode_node(e.group_id, e.id), jsonb_build_object(
        'uuid', e.id, 'group_id', e.group_id, 'kind', e.kind, 'actor', e.actor,
        'valid_at', pgmemory_internal.graph_time(e.valid_at), 'recorded_at', pgmemory_internal.graph_time(e.recorded_at)))
$$;

CREATE OR REPLACE FUNCTION pgmemory_internal.mirror_entity_row(e pgmemory.entities) RETURNS void LANGUAGE sql AS $$
    SELECT pgmemory_internal.graph_put_vertex('Entity', e.group_id, e.id, jsonb_build_object(
        'uuid', e.id, 'group_id', e.group_id, 'name', e.name, 'labels', to_jsonb(e.labels), 'summary', e.summary))
$$;

CREATE OR REPLACE FUNCTION pgmemory_internal.mirror_community_row(c pgmemory.communities) RETURNS void LANGUAGE sql AS $$
    SELECT pgmemory_internal.graph_put_vertex('Community', c.group_id, c.id, jsonb_build_object(
        'uuid', c.id, 'group_id', c.group_id, 'name', c.name, 'summary', c.summary))
$$;

-- A fact version as an edge with both time axes as properties: valid_from / valid_to (T; null =
-- unknown start / still true) and recorded_from / recorded_to (T': believed since / until; null =
-- believed now). A believed version is a RELATES_TO edge (key fact:<version>); one no longer
-- believed a PAST_BELIEF edge (key past:<version>), kept while both its entities are (a version
-- touching an entity since merged away or deleted leaves the graph with it).
CREATE OR REPLACE FUNCTION pgmemory_internal.mirror_fact_row(f pgmemory.facts) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    believed boolean := upper_inf(f.recorded);
    props jsonb := jsonb_build_object(
        'fact_id', f.id, 'version_id', f.version_id, 'group_id', f.group_id, 'relation', f.relation,
        'fact', f.fact, 'is_event', f.is_event,
        'valid_from', pgmemory_internal.graph_time(lower(f.valid)), 'valid_to', pgmemory_internal.graph_time(upper(f.valid)),
        'recorded_from', pgmemory_internal.graph_time(lower(f.recorded)),
        'recorded_to', pgmemory_internal.graph_time(upper(f.recorded)));
BEGIN
    IF believed THEN
        PERFORM pgmemory_internal.graph_put_edge('RELATES_TO', f.group_id, 'fact:' || f.version_id, f.source_id, f.target_id, props);
    ELSIF EXISTS (SELECT 1 FROM pgmemory.graph_vertices v WHERE v.group_id = f.group_id AND v.node_id = f.source_id)
          AND EXISTS (SELECT 1 FROM pgmemory.graph_vertices v WHERE v.group_id = f.group_id AND v.node_id = f.target_id) THEN
        PERFORM pgmemory_internal.graph_put_edge('PAST_BELIEF', f.group_id, 'past:' || f.version_id, f.source_id, f.target_id, props);
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION pgmemory_internal.mirror_episode() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' OR NEW.retracted_at IS NOT NULL THEN  -- the mirror shows current episodes
        PERFORM pgmemory_internal.graph_drop_vertex('Episode', OLD.group_id, pgmemory_internal.episode_node(OLD.group_id, OLD.id));
        RETURN CASE WHEN TG_OP = 'DELETE' THEN OLD ELSE NEW END;
    END IF;
    PERFORM pgmemory_internal.mirror_episode_row(NEW);
    RETURN NEW;
END
$$;

CREATE OR REPLACE FUNCTION pgmemory_internal.mirror_entity() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' OR NEW.retired_at IS NOT NULL THEN  -- the mirror shows believed entities
        -- Past beliefs about it go with it (believed ones were moved or closed before).
        PERFORM pgmemory_internal.graph_drop_edge('PAST_BELIEF', OLD.group_id, 'past:' || f.version_id)
           FROM pgmemory.facts f
          WHERE f.group_id = OLD.group_id AND (f.source_id = OLD.id OR f.target_id = OLD.id)
            AND NOT upper_inf(f.recorded);
        -- and its membership edges (a retired entity's memberships are deleted after it)
        DELETE FROM pgmemory_graph."HAS_MEMBER" h
         WHERE h.end_id OPERATOR(ag_catalog.=) (SELECT v.vertex_id::text::ag_catalog.graphid
                                                  FROM pgmemory.graph_vertices v
                                                 WHERE v.group_id = OLD.group_id AND v.node_id = OLD.id);
        PERFORM pgmemory_internal.graph_drop_vertex('Entity', OLD.group_id, OLD.id);
        RETURN CASE WHEN TG_OP = 'DELETE' THEN OLD ELSE NEW END;
    END IF;
    PERFORM pgmemory_internal.mirror_entity_row(NEW);
    RETURN NEW;
END
$$;

-- Only current communities (and current memberships) are in the graph: an
-- ended version leaves it (its members' edges were ended first).
CREATE OR REPLACE FUNCTION pgmemory_internal.mirror_community() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' OR NEW.ended_at IS NOT NULL THEN
        DELETE FROM pgmemory_graph."HAS_MEMBER" h  -- its member edges, if any are left
         WHERE h.start_id OPERATOR(ag_catalog.=) (SELECT v.vertex_id::text::ag_catalog.graphid
                                                    FROM pgmemory.graph_vertices v
                                                   WHERE v.group_id = OLD.group_id AND v.node_id = OLD.id);
        PERFORM pgmemory_internal.graph_drop_vertex('Community', OLD.group_id, OLD.id);
        RETURN OLD;
    END IF;
    PERFORM pgmemory_internal.mirror_community_row(NEW);
    RETURN NEW;
END
$$;

CREATE OR REPLACE FUNCTION pgmemory_internal.mirror_fact() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    was_believed boolean;
BEGIN
    -- A deleted version, or one whose belief ended (or resumed), leaves its edge of the old kind.
    IF TG_OP <> 'INSERT' THEN
        was_believed := upper_inf(OLD.recorded);
    END IF;
    IF TG_OP = 'DELETE' OR (TG_OP = 'UPDATE' AND was_believed <> upper_inf(NEW.recorded)) THEN
        IF was_believed THEN
            PERFORM pgmemory_internal.graph_drop_edge('RELATES_TO', OLD.group_id, 'fact:' || OLD.version_id);
        ELSE
            PERFORM pgmemory_internal.graph_drop_edge('PAST_BELIEF', OLD.group_id, 'past:' || OLD.version_id);
        END IF;
    END IF;
    IF TG_OP = 'DELETE' THEN
        RETURN OLD;
    END IF;
    PERFORM pgmemory_internal.mirror_fact_row(NEW);
    RETURN NEW;
END
$$;

CREATE OR REPLACE FUNCTION pgmemory_internal.mirror_mention_row(m pgmemory.episode_mentions) RETURNS void LANGUAGE sql AS $$
    SELECT pgmemory_internal.graph_put_edge('MENTIONS', m.group_id, 'mention:' || m.episode_id || ':' || m.entity_id,
        pgmemory_internal.episode_node(m.group_id, m.episode_id), m.entity_id, jsonb_build_object('group_id', m.group_id))
$$;

-- A deleted mention drops its edge (added ones: pgmemory_internal.mirror_mentions_added).
CREATE OR REPLACE FUNCTION pgmemory_internal.mirror_mention() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pgmemory_internal.graph_drop_edge('MENTIONS', OLD.group_id, 'mention:' || OLD.episode_id || ':' || OLD.entity_id);
    RETURN OLD;
END
$$;

-- Mentions added by one statement (an episode's mention set is one INSERT) become MENTIONS edges
-- set-wise: their vertices read in one statement, the edges and their keys written in another,
-- instead of a graph_put_edge call (five statements) per row. A row whose edge is mirrored already
-- or that has no vertex goes through graph_put_edge as before (it updates the edge; it raises).
CREATE OR REPLACE FUNCTION pgmemory_internal.mirror_mentions_added() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    keys text[];
    starts bigint[];
    ends bigint[];
    groups text[];
    made integer := 0;
BEGIN
    SELECT array_agg(x.key), array_agg(vf.vertex_id), array_agg(vt.vertex_id), array_agg(n.group_id)
      INTO keys, starts, ends, groups
      FROM new_mentions n
     CROSS JOIN LATERAL (SELECT 'mention:' || n.episode_id || ':' || n.entity_id AS key) x
      JOIN pgmemory.graph_vertices vf
        ON vf.group_id = n.group_id AND vf.node_id = pgmemory_internal.episode_node(n.group_id, n.episode_id)
      JOIN pgmemory.graph_vertices vt ON vt.group_id = n.group_id AND vt.node_id = n.entity_id
     WHERE NOT EXISTS (SELECT 1 FROM pgmemory.graph_edges g WHERE g.group_id = n.group_id AND g.edge_key = x.key);
    IF keys IS NOT NULL THEN
        WITH edges AS (
            INSERT INTO pgmemory_graph."MENTIONS" (start_id, end_id, properties)
            SELECT u.s::text::ag_catalog.graphid, u.e::text::ag_catalog.graphid,
                   jsonb_build_object('group_id', u.g)::text::ag_catalog.agtype
              FROM unnest(starts, ends, groups) AS u (s, e, g)
            RETURNING id, start_id, end_id)
        INSERT INTO pgmemory.graph_edges (group_id, edge_key, edge_id)
        SELECT u.g, u.k, m.id::text::bigint
          FROM edges m JOIN unnest(keys, starts, ends, groups) AS u (k, s, e, g)
            ON m.start_id::text::bigint = u.s AND m.end_id::text::bigint = u.e;
        GET DIAGNOSTICS made = ROW_COUNT;
        IF made <> cardinality(keys) THEN
            RAISE EXCEPTION 'graph mirror: % MENTIONS edges written for % new mentions', made, cardinality(keys);
        END IF;
    END IF;
    IF made < (SELECT count(*) FROM new_mentions) THEN
        PERFORM pgmemory_internal.graph_put_edge('MENTIONS', n.group_id, x.key,
                    pgmemory_internal.episode_node(n.group_id, n.episode_id), n.entity_id,
                    jsonb_build_object('group_id', n.group_id))
           FROM new_mentions n
          CROSS JOIN LATERAL (SELECT 'mention:' || n.episode_id || ':' || n.entity_id AS key) x
          WHERE NOT EXISTS (SELECT 1 FROM unnest(keys, groups) AS u (k, g) WHERE u.k = x.key AND u.g = n.group_id);
    END IF;
    RETURN NULL;
END
$$;

-- A membership's HAS_MEMBER edge is known by its two vertices (a community has one edge per
-- member), not by a key in graph_edges: a detection writes 20,000 of them at 100k facts.
CREATE OR REPLACE FUNCTION pgmemory_internal.mirror_member_row(m pgmemory.community_members) RETURNS void LANGUAGE sql AS $$
    INSERT INTO pgmemory_graph."HAS_MEMBER" (start_id, end_id, properties)
    SELECT vc.vertex_id::text::ag_catalog.graphid, ve.vertex_id::text::ag_catalog.graphid,
           jsonb_build_object('group_id', m.group_id)::text::ag_catalog.agtype
      FROM pgmemory.graph_vertices vc, pgmemory.graph_vertices ve
     WHERE vc.group_id = m.group_id AND vc.node_id = m.community_id
       AND ve.group_id = m.group_id AND ve.node_id = m.entity_id
       AND NOT EXISTS (SELECT 1 FROM pgmemory_graph."HAS_MEMBER" h
                        WHERE h.end_id OPERATOR(ag_catalog.=) ve.vertex_id::text::ag_catalog.graphid
                          AND h.start_id OPERATOR(ag_catalog.=) vc.vertex_id::text::ag_catalog.graphid)
$$;

-- Memberships are mirrored per statement (a detection writes thousands at
-- once): current ones inserted become HAS_MEMBER edges, ended or deleted ones
-- drop theirs. No statement joins the transition tables with each other or
-- with what they insert: a trigger's plans are made on its first call in a
-- session (often one row, from an episode) and kept, so a join planned as a
-- nested loop there would turn quadratic on a detection's 20,000 rows.
CREATE OR REPLACE FUNCTION pgmemory_internal.mirror_members_added() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    wanted integer;
    made integer;
BEGIN
    SELECT count(*) INTO wanted FROM new_members n WHERE n.ended_at IS NULL;
    IF wanted = 0 THEN
        RETURN NULL;
    END IF;
    INSERT INTO pgmemory_graph."HAS_MEMBER" (start_id, end_id, properties)
    SELECT vc.vertex_id::text::ag_catalog.graphid, ve.vertex_id::text::ag_catalog.graphid,
           jsonb_build_object('group_id', n.group_id)::text::ag_catalog.agtype
      FROM new_members n
      JOIN pgmemory.graph_vertices vc ON vc.group_id = n.group_id AND vc.node_id = n.community_id
      JOIN pgmemory.graph_vertices ve ON ve.group_id = n.group_id AND ve.node_id = n.entity_id
     WHERE n.ended_at IS NULL;
    GET DIAGNOSTICS made = ROW_COUNT;
    IF made <> wanted THEN
        RAISE EXCEPTION 'graph mirror: % of % HAS_MEMBER edges have no vertex', wanted - made, wanted;
    END IF;
    RETURN NULL;
END
$$;

-- Deleted current memberships and ended ones drop their edges (an update sets
-- ended_at once and never clears it: a row ended earlier has no edge left to
-- drop). The edges are found by their vertices; the delete is planned for the
-- arrays at hand (EXECUTE), not for the first call's.
CREATE OR REPLACE FUNCTION pgmemory_internal.mirror_members_gone() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    starts bigint[];
    ends bigint[];
BEGIN
    IF TG_OP = 'DELETE' THEN
        SELECT array_agg(vc.vertex_id), array_agg(ve.vertex_id) INTO starts, ends
          FROM old_members o
          JOIN pgmemory.graph_vertices vc ON vc.group_id = o.group_id AND vc.node_id = o.community_id
          JOIN pgmemory.graph_vertices ve ON ve.group_id = o.group_id AND ve.node_id = o.entity_id
         WHERE o.ended_at IS NULL;
    ELSE
        SELECT array_agg(vc.vertex_id), array_agg(ve.vertex_id) INTO starts, ends
          FROM new_members n
          JOIN pgmemory.graph_vertices vc ON vc.group_id = n.group_id AND vc.node_id = n.community_id
          JOIN pgmemory.graph_vertices ve ON ve.group_id = n.group_id AND ve.node_id = n.entity_id
         WHERE n.ended_at IS NOT NULL;
    END IF;
    IF starts IS NOT NULL THEN
        EXECUTE 'DELETE FROM pgmemory_graph."HAS_MEMBER" h USING unnest($1, $2) AS x (vc, ve)'
                ' WHERE h.end_id OPERATOR(ag_catalog.=) x.ve::text::ag_catalog.graphid'
                '   AND h.start_id OPERATOR(ag_catalog.=) x.vc::text::ag_catalog.graphid'
          USING starts, ends;
    END IF;
    RETURN NULL;
END
$$;

-- Mirror every row again (turning the mirror on for a database that has data, or after the
-- edge properties changed): vertices first, then edges. Idempotent; returns rows mirrored.
CREATE OR REPLACE FUNCTION pgmemory_internal.rebuild_graph_mirror() RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    n bigint := 0;
    k bigint;
BEGIN
    PERFORM pgmemory_internal.mirror_entity_row(e) FROM pgmemory.entities e WHERE e.retired_at IS NULL;       GET DIAGNOSTICS k = ROW_COUNT; n := n + k;
    PERFORM pgmemory_internal.mirror_episode_row(e) FROM pgmemory.episodes e WHERE e.retracted_at IS NULL; GET DIAGNOSTICS k = ROW_COUNT; n := n + k;
    PERFORM pgmemory_internal.mirror_community_row(c) FROM pgmemory.communities c; GET DIAGNOSTICS k = ROW_COUNT; n := n + k;
    PERFORM pgmemory_internal.mirror_fact_row(f) FROM pgmemory.facts f;
    GET DIAGNOSTICS k = ROW_COUNT; n := n + k;
    PERFORM pgmemory_internal.mirror_mention_row(m) FROM pgmemory.episode_mentions m;
    GET DIAGNOSTICS k = ROW_COUNT; n := n + k;
    PERFORM pgmemory_internal.mirror_member_row(m) FROM pgmemory.community_members m WHERE m.ended_at IS NULL;
    GET DIAGNOSTICS k = ROW_COUNT; n := n + k;
    RETURN n;
END
$$;

-- The mirror's trigger functions run with their owner's rights, so a restricted writer
-- (pgmemory_app) keeps the graph in step without any right on the graph itself; a trigger
-- function cannot be called directly, so this opens nothing else. pg_temp is named last: a path
-- that leaves it out searches it first for types and tables, so a writer's temporary table named
-- `text` (its row type) and a cast to it would run the writer's function as the owner at `::text`.
DO $$
DECLARE
    fn text;
BEGIN
    FOREACH fn IN ARRAY ARRAY['mirror_episode', 'mirror_entity', 'mirror_community', 'mirror_fact',
                              'mirror_mention', 'mirror_mentions_added', 'mirror_members_added',
                              'mirror_members_gone'] LOOP
        EXECUTE format('ALTER FUNCTION pgmemory_internal.%I() SECURITY DEFINER SET search_path = pg_catalog, pgmemory, pgmemory_internal, pg_temp', fn);
    END LOOP;
END
$$;

-- Edges are dropped by their own key, so the order in which cascaded deletes
-- reach vertices and edges does not matter.
DROP TRIGGER IF EXISTS mirror_episode ON pgmemory.episodes;
CREATE TRIGGER mirror_episode AFTER INSERT OR UPDATE OF retracted_at OR DELETE ON pgmemory.episodes
    FOR EACH ROW EXECUTE FUNCTION pgmemory_internal.mirror_episode();
DROP TRIGGER IF EXISTS mirror_entity ON pgmemory.entities;
CREATE TRIGGER mirror_entity AFTER INSERT OR UPDATE OF name, labels, summary, retired_at OR DELETE
    ON pgmemory.entities FOR EACH ROW EXECUTE FUNCTION pgmemory_internal.mirror_entity();
DROP TRIGGER IF EXISTS mirror_community ON pgmemory.communities;
CREATE TRIGGER mirror_community AFTER INSERT OR UPDATE OF name, summary, ended_at OR DELETE
    ON pgmemory.communities FOR EACH ROW EXECUTE FUNCTION pgmemory_internal.mirror_community();
DROP TRIGGER IF EXISTS mirror_fact ON pgmemory.facts;
CREATE TRIGGER mirror_fact AFTER INSERT OR UPDATE OR DELETE ON pgmemory.facts
    FOR EACH ROW EXECUTE FUNCTION pgmemory_internal.mirror_fact();
DROP TRIGGER IF EXISTS mirror_mention ON pgmemory.episode_mentions;
CREATE TRIGGER mirror_mention AFTER DELETE ON pgmemory.episode_mentions
    FOR EACH ROW EXECUTE FUNCTION pgmemory_internal.mirror_mention();
DROP TRIGGER IF EXISTS mirror_mentions_added ON pgmemory.episode_mentions;
CREATE TRIGGER mirror_mentions_added AFTER INSERT ON pgmemory.episode_mentions
    REFERENCING NEW TABLE AS new_mentions FOR EACH STATEMENT EXECUTE FUNCTION pgmemory_internal.mirror_mentions_added();
DROP TRIGGER IF EXISTS mirror_member ON pgmemory.community_members;
DROP FUNCTION IF EXISTS pgmemory.mirror_member();
DROP TRIGGER IF EXISTS mirror_members_added ON pgmemory.community_members;
CREATE TRIGGER mirror_members_added AFTER INSERT ON pgmemory.community_members
    REFERENCING NEW TABLE AS new_members FOR EACH STATEMENT EXECUTE FUNCTION pgmemory_internal.mirror_members_added();
DROP TRIGGER IF EXISTS mirror_members_ended ON pgmemory.community_members;
CREATE TRIGGER mirror_members_ended AFTER UPDATE ON pgmemory.community_members
    REFERENCING OLD TABLE AS old_members NEW TABLE AS new_members
    FOR EACH STATEMENT EXECUTE FUNCTION pgmemory_internal.mirror_members_gone();
DROP TRIGGER IF EXISTS mirror_members_deleted ON pgmemory.community_members;
CREATE TRIGGER mirror_members_deleted AFTER DELETE ON pgmemory.community_members
    REFERENCING OLD TABLE AS old_members FOR EACH STATEMENT EXECUTE FUNCTION pgmemory_internal.mirror_members_gone();
