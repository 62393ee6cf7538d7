-- A new fact's contradiction candidates include every believed fact with its source and relation
-- that has not ended by the new fact's place (pgmemory_internal.contradiction_candidates). The
-- (source_id, relation) index found all of that source's believed facts of the relation, ended
-- or not, and the end was tested on each: a person's ~200 past employers at 10k episodes, read
-- for every "works at X" (0.9 ms, growing with the conversation). With the end in the index
-- (an open end as +infinity) only the facts still valid after that place are read. It replaces
-- the (source_id, relation) index, a prefix of it.
CREATE INDEX facts_current_source_end ON pgmemory.facts (source_id, relation,
    (coalesce(upper(valid), 'infinity'::timestamptz))) WHERE upper_inf(recorded);
DROP INDEX pgmemory.facts_current_source;
