-- One-off events (attributes kind = event, set by the extractors) as a column,
-- so valid-time filters (pgmemory.holds_at) can keep past events in view.
ALTER TABLE pgmemory.facts
    ADD COLUMN is_event boolean GENERATED ALWAYS AS (coalesce(attributes->>'kind' = 'event', false)) STORED;
COMMENT ON COLUMN pgmemory.facts.is_event IS
    'A one-off event (visited, bought, won): after it happened it stays in every later as-of view';
