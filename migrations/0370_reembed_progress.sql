-- Where `pgmemory reembed` stands in each group and kind of vector: the key of the last row whose
-- vector was recomputed (written in the same transaction as that batch), so an interrupted run
-- resumes after it; `recipe` names the embedder and the code's text-to-vector recipe the run
-- computes, so a finished run is not redone until either changes (pgmemory/ingest/reembed.py).
CREATE TABLE pgmemory.reembed_progress (
    group_id   text NOT NULL,
    kind       text NOT NULL CHECK (kind IN ('episodes', 'entities', 'facts', 'fact_claims')),
    recipe     text NOT NULL,
    after_key  jsonb,
    rows_done  bigint NOT NULL DEFAULT 0,
    finished   boolean NOT NULL DEFAULT false,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (group_id, kind)
);
