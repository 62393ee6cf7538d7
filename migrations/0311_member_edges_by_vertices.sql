-- The AGE mirror finds a membership's HAS_MEMBER edge by its two vertices (community, entity)
-- since issue 12's detection work (sql/age/50_graph_mirror.sql): the 'member:<community>:<entity>'
-- keys of pgmemory.graph_edges are no longer written or read. The edges themselves stay.
DELETE FROM pgmemory.graph_edges WHERE edge_key LIKE 'member:%';
