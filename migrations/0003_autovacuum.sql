-- Entities (summaries) and episodes (status) are updated on every episode:
-- vacuum them early so candidate lookups do not wade through dead rows.
ALTER TABLE pgmemory.entities SET (autovacuum_vacuum_scale_factor = 0.02, autovacuum_vacuum_threshold = 200,
                                   autovacuum_analyze_scale_factor = 0.05);
ALTER TABLE pgmemory.episodes SET (autovacuum_vacuum_scale_factor = 0.02, autovacuum_vacuum_threshold = 500);
ALTER TABLE pgmemory.facts SET (autovacuum_vacuum_scale_factor = 0.05, autovacuum_vacuum_threshold = 500);
