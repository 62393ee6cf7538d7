-- A retraction (pgmemory.retract_fact) withdraws the statements behind the fact it names: each
-- claim that supported that fact is marked with the retraction's seq, and folds
-- (sql/35_fact_rules.sql) leave marked claims out, so a later re-fold (a delete of one of the
-- episodes) never brings the retracted belief back under another fact id. Retractions made
-- before this column existed mark the claims that had landed on the retracted fact.
ALTER TABLE pgmemory.fact_claims ADD COLUMN retracted_by bigint;
UPDATE pgmemory.fact_claims c SET retracted_by = r.seq
  FROM pgmemory.fact_claims r
 WHERE r.kind = 'retract' AND c.group_id = r.group_id AND c.fact_id = r.id AND c.kind <> 'retract'
   AND c.seq < r.seq AND c.retracted_by IS NULL;
