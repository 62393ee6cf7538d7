-- Valid time (T): what "holds at T" means for a fact version, in one place.
-- A state (works for, lives in) holds while T is inside its valid range. A
-- one-off event (visited, bought, won: facts.is_event) stays part of what is
-- known at every T after it happened: "she visited Lisbon in 2019" is true
-- history in 2024, so events are not dropped from answers once their day ends.
CREATE OR REPLACE FUNCTION pgmemory.holds_at(p_valid tstzrange, p_event boolean, p_point timestamptz)
RETURNS boolean LANGUAGE sql IMMUTABLE AS $$
    SELECT p_point IS NULL OR p_valid @> p_point
        OR (p_event AND NOT lower_inf(p_valid) AND lower(p_valid) <= p_point)
$$;
