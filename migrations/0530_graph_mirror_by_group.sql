-- The AGE mirror's bookkeeping is keyed by group (session 14, tenant isolation): entity,
-- community and fact-version ids are unique only within their group, so a vertex or edge looked
-- up by id alone could be another group's (a tenant reusing another's entity id overwrote and
-- then deleted that group's vertex). graph_vertices and graph_edges get group_id, filled from
-- the group_id property every mirrored vertex and edge carries, and keys that lead with it.
ALTER TABLE pgmemory.graph_vertices ADD COLUMN group_id text;
ALTER TABLE pgmemory.graph_edges ADD COLUMN group_id text;

DO $$
BEGIN
    -- No graph (AGE absent or the mirror off): there is nothing the rows could point at.
    IF to_regclass('pgmemory_graph._ag_label_vertex') IS NOT NULL THEN
        UPDATE pgmemory.graph_vertices v
           SET group_id = ag_catalog.agtype_access_operator(VARIADIC ARRAY[x.properties, '"group_id"'::ag_catalog.agtype])::text
          FROM pgmemory_graph._ag_label_vertex x
         WHERE x.id::text::bigint = v.vertex_id;
    END IF;
    IF to_regclass('pgmemory_graph._ag_label_edge') IS NOT NULL THEN
        UPDATE pgmemory.graph_edges g
           SET group_id = ag_catalog.agtype_access_operator(VARIADIC ARRAY[x.properties, '"group_id"'::ag_catalog.agtype])::text
          FROM pgmemory_graph._ag_label_edge x
         WHERE x.id::text::bigint = g.edge_id;
    END IF;
END
$$;

-- Rows whose vertex or edge is gone point at nothing: dropped, so the next write of that node
-- or relationship mirrors it afresh (pgmemory_internal.rebuild_graph_mirror() does all at once).
DELETE FROM pgmemory.graph_vertices WHERE group_id IS NULL;
DELETE FROM pgmemory.graph_edges WHERE group_id IS NULL;

ALTER TABLE pgmemory.graph_vertices ALTER COLUMN group_id SET NOT NULL;
ALTER TABLE pgmemory.graph_edges ALTER COLUMN group_id SET NOT NULL;
-- Every key leads with group_id, as on the other per-group tables (a Citus cluster distributes
-- them by group; its unique keys must hold the distribution column).
ALTER TABLE pgmemory.graph_vertices DROP CONSTRAINT graph_vertices_pkey;
ALTER TABLE pgmemory.graph_vertices DROP CONSTRAINT graph_vertices_vertex_id_key;
ALTER TABLE pgmemory.graph_vertices ADD CONSTRAINT graph_vertices_pkey PRIMARY KEY (group_id, node_id);
ALTER TABLE pgmemory.graph_vertices ADD CONSTRAINT graph_vertices_vertex_id_key UNIQUE (group_id, vertex_id);
ALTER TABLE pgmemory.graph_edges DROP CONSTRAINT graph_edges_pkey;
ALTER TABLE pgmemory.graph_edges DROP CONSTRAINT graph_edges_edge_id_key;
ALTER TABLE pgmemory.graph_edges ADD CONSTRAINT graph_edges_pkey PRIMARY KEY (group_id, edge_key);
ALTER TABLE pgmemory.graph_edges ADD CONSTRAINT graph_edges_edge_id_key UNIQUE (group_id, edge_id);
