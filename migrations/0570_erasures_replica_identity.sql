-- pgmemory.erasures is the one table without a primary key (an episode id may be erased again
-- after it is re-ingested), and Citus moves a shard online (citus_rebalance_start, logical
-- replication) only when its table has a replica identity: `citus_rebalance_start()` refused the
-- whole rebalance. A small, insert-mostly table: every column identifies a row.
ALTER TABLE pgmemory.erasures REPLICA IDENTITY FULL;
