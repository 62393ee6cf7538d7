-- The AGE graph `pgmemory_graph` mirrors entities, episodes, communities and
-- their edges. Triggers write AGE's label tables directly, so the mirror is
-- part of the same transaction as the rows it mirrors (and rolls back with it).
-- Facts are mirrored as RELATES_TO edges for the versions believed now.

CREATE OR REPLACE FUNCTION pgmemory.graph_put_vertex(p_label text, p_node uuid, p_props jsonb)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    vid bigint := (SELECT vertex_id FROM pgmemory.graph_vertices WHERE node_id = p_node);
BEGIN
    IF vid IS NULL THEN
        EXECUTE format('INSERT INTO pgmemory_graph.%I (properties) VALUES ($1::text::ag_catalog.agtype)
                        RETURNING id::text::bigint', p_label)
           INTO vid USING p_props;
        INSERT INTO pgmemory.graph_vertices (node_id, vertex_id) VALUES (p_node, vid);
    ELSE
        EXECUTE format('UPDATE pgmemory_graph.%I SET properties = $1::text::ag_catalog.agtype
                        WHERE id OPERATOR(ag_catalog.=) $2::text::ag_catalog.graphid', p_label)
           USING p_props, vid;
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION pgmemory.graph_drop_vertex(p_label text, p_node uuid)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    vid bigint;
BEGIN
    DELETE FROM pgmemory.graph_vertices WHERE node_id = p_node RETURNING vertex_id INTO vid;
    IF vid IS NOT NULL THEN
        EXECUTE format('DELETE FROM pgmemory_graph.%I WHERE id OPERATOR(ag_catalog.=) $1::text::ag_catalog.graphid', p_label)
          USING vid;
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION pgmemory.graph_put_edge(
    p_label text, p_key text, p_from uuid, p_to uuid, p_props jsonb)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    eid bigint := (SELECT edge_id FROM pgmemory.graph_edges WHERE edge_key = p_key);
    v_from bigint := (SELECT vertex_id FROM pgmemory.graph_vertices WHERE node_id = p_from);
    v_to bigint := (SELECT vertex_id FROM pgmemory.graph_vertices WHERE node_id = p_to);
BEGIN
    IF v_from IS NULL OR v_to IS NULL THEN
        RAISE EXCEPTION 'graph mirror: % edge % has no vertex for % or %', p_label, p_key, p_from, p_to;
    END IF;
    IF eid IS NULL THEN
        EXECUTE format('INSERT INTO pgmemory_graph.%I (start_id, end_id, properties)
                        VALUES ($1::text::ag_catalog.graphid, $2::text::ag_catalog.graphid,
                                $3::text::ag_catalog.agtype)
                        RETURNING id::text::bigint', p_label)
           INTO eid USING v_from, v_to, p_props;
        INSERT INTO pgmemory.graph_edges (edge_key, edge_id) VALUES (p_key, eid);
    ELSE
        EXECUTE format('UPDATE pgmemory_graph.%I SET properties = $1::text::ag_catalog.agtype
                        WHERE id OPERATOR(ag_catalog.=) $2::text::ag_catalog.graphid', p_label)
           USING p_props, eid;
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION pgmemory.graph_drop_edge(p_label text, p_key text)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    eid bigint;
BEGIN
    DELETE FROM pgmemory.graph_edges WHERE edge_key = p_key RETURNING edge_id INTO eid;
    IF eid IS NOT NULL THEN
        EXECUTE format('DELETE FROM pgmemory_graph.%I WHERE id OPERATOR(ag_catalog.=) $1::text::ag_catalog.graphid', p_label)
          USING eid;
    END IF;
END
$$;

-- The mirror key of an episode's vertex: episode ids are unique only within a
-- group, so the vertex is keyed by (group, id) (migration 0020 re-keyed old ones).
CREATE OR REPLACE FUNCTION pgmemory.episode_node(p_group text, p_id uuid)
RETURNS uuid LANGUAGE sql IMMUTABLE AS $$
    SELECT md5('episode' || chr(31) || p_group || chr(31) || p_id::text)::uuid
$$;

CREATE OR REPLACE FUNCTION pgmemory.mirror_episode() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        PERFORM pgmemory.graph_drop_vertex('Episode', pgmemory.episode_node(OLD.group_id, OLD.id));
        RETURN OLD;
    END IF;
    PERFORM pgmemory.graph_put_vertex('Episode', pgmemory.episode_node(NEW.group_id, NEW.id), jsonb_build_object(
        'uuid', NEW.id, 'group_id', NEW.group_id, 'kind', NEW.kind,
        'actor', NEW.actor, 'valid_at', NEW.valid_at));
    RETURN NEW;
END
$$;

CREATE OR REPLACE FUNCTION pgmemory.mirror_entity() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' OR NEW.retired_at IS NOT NULL THEN  -- the mirror shows believed entities
        PERFORM pgmemory.graph_drop_vertex('Entity', OLD.id);
        RETURN CASE WHEN TG_OP = 'DELETE' THEN OLD ELSE NEW END;
    END IF;
    PERFORM pgmemory.graph_put_vertex('Entity', NEW.id, jsonb_build_object(
        'uuid', NEW.id, 'group_id', NEW.group_id, 'name', NEW.name,
        'labels', to_jsonb(NEW.labels), 'summary', NEW.summary));
    RETURN NEW;
END
$$;

CREATE OR REPLACE FUNCTION pgmemory.mirror_community() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        PERFORM pgmemory.graph_drop_vertex('Community', OLD.id);
        RETURN OLD;
    END IF;
    PERFORM pgmemory.graph_put_vertex('Community', NEW.id, jsonb_build_object(
        'uuid', NEW.id, 'group_id', NEW.group_id, 'name', NEW.name, 'summary', NEW.summary));
    RETURN NEW;
END
$$;

CREATE OR REPLACE FUNCTION pgmemory.mirror_fact() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE') THEN
        IF TG_OP = 'DELETE' OR NOT upper_inf(NEW.recorded) THEN
            PERFORM pgmemory.graph_drop_edge('RELATES_TO', 'fact:' || OLD.version_id);
        END IF;
        IF TG_OP = 'DELETE' THEN
            RETURN OLD;
        END IF;
    END IF;
    IF upper_inf(NEW.recorded) THEN
        PERFORM pgmemory.graph_put_edge('RELATES_TO', 'fact:' || NEW.version_id,
            NEW.source_id, NEW.target_id, jsonb_build_object(
                'fact_id', NEW.id, 'version_id', NEW.version_id, 'group_id', NEW.group_id,
                'relation', NEW.relation, 'fact', NEW.fact,
                'valid_from', lower(NEW.valid), 'valid_to', upper(NEW.valid)));
    END IF;
    RETURN NEW;
END
$$;

CREATE OR REPLACE FUNCTION pgmemory.mirror_mention() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        PERFORM pgmemory.graph_drop_edge('MENTIONS', 'mention:' || OLD.episode_id || ':' || OLD.entity_id);
        RETURN OLD;
    END IF;
    -- Entity ids are unique across groups, so the edge key needs no group.
    PERFORM pgmemory.graph_put_edge('MENTIONS', 'mention:' || NEW.episode_id || ':' || NEW.entity_id,
        pgmemory.episode_node(NEW.group_id, NEW.episode_id), NEW.entity_id,
        jsonb_build_object('group_id', NEW.group_id));
    RETURN NEW;
END
$$;

CREATE OR REPLACE FUNCTION pgmemory.mirror_member() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        PERFORM pgmemory.graph_drop_edge('HAS_MEMBER', 'member:' || OLD.community_id || ':' || OLD.entity_id);
        RETURN OLD;
    END IF;
    PERFORM pgmemory.graph_put_edge('HAS_MEMBER', 'member:' || NEW.community_id || ':' || NEW.entity_id,
        NEW.community_id, NEW.entity_id, jsonb_build_object('group_id', NEW.group_id));
    RETURN NEW;
END
$$;

-- Edges are dropped by their own key, so the order in which cascaded deletes
-- reach vertices and edges does not matter.
DROP TRIGGER IF EXISTS mirror_episode ON pgmemory.episodes;
CREATE TRIGGER mirror_episode AFTER INSERT OR DELETE ON pgmemory.episodes
    FOR EACH ROW EXECUTE FUNCTION pgmemory.mirror_episode();
DROP TRIGGER IF EXISTS mirror_entity ON pgmemory.entities;
CREATE TRIGGER mirror_entity AFTER INSERT OR UPDATE OF name, labels, summary, retired_at OR DELETE
    ON pgmemory.entities FOR EACH ROW EXECUTE FUNCTION pgmemory.mirror_entity();
DROP TRIGGER IF EXISTS mirror_community ON pgmemory.communities;
CREATE TRIGGER mirror_community AFTER INSERT OR UPDATE OF name, summary OR DELETE
    ON pgmemory.communities FOR EACH ROW EXECUTE FUNCTION pgmemory.mirror_community();
DROP TRIGGER IF EXISTS mirror_fact ON pgmemory.facts;
CREATE TRIGGER mirror_fact AFTER INSERT OR UPDATE OR DELETE ON pgmemory.facts
    FOR EACH ROW EXECUTE FUNCTION pgmemory.mirror_fact();
DROP TRIGGER IF EXISTS mirror_mention ON pgmemory.episode_mentions;
CREATE TRIGGER mirror_mention AFTER INSERT OR DELETE ON pgmemory.episode_mentions
    FOR EACH ROW EXECUTE FUNCTION pgmemory.mirror_mention();
DROP TRIGGER IF EXISTS mirror_member ON pgmemory.community_members;
CREATE TRIGGER mirror_member AFTER INSERT OR DELETE ON pgmemory.community_members
    FOR EACH ROW EXECUTE FUNCTION pgmemory.mirror_member();
