-- Claims at the same point of a fold (one fold_key: "since 2020" and "from 2020 to March", or an
-- end and a start stated at one instant) were folded in arrival order, so the belief depended on
-- which statement came first. The fold now orders them by pgmemory_internal.fold_order (the
-- earlier stated end first, then the earlier said). A database with claims is flagged for one
-- re-fold of the lineages concerned once the new rules are in place (init, after sql/:
-- beliefs_stale, pgmemory_internal.stale_lineages, pgmemory.storage.setup).
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pgmemory.fact_claims) THEN  -- (SELECT 1: Citus plans no empty target list)
        INSERT INTO pgmemory.settings (key, value) VALUES ('beliefs_stale', 'true')
        ON CONFLICT (key) DO UPDATE SET value = excluded.value;
    END IF;
END
$$;
