-- A lineage's believed intervals read by their end too (as 0610 a source's facts of a relation):
-- an assertion ends what held at its place in its exclusive lineages
-- (pgmemory_internal.apply_claim), and fold_claim asks which of them hold at a point; both read
-- every believed interval of those lineages (up to ~70 lineages, ~190 intervals at 10k
-- episodes) to keep the few that end after it. It replaces (lineage), a prefix of it.
CREATE INDEX facts_lineage_current_end ON pgmemory.facts (lineage,
    (coalesce(upper(valid), 'infinity'::timestamptz))) WHERE upper_inf(recorded);
DROP INDEX pgmemory.facts_lineage_current;
