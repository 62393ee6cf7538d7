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

-- The times a writer may store (pgmemory.validate.EARLIEST..LATEST, which every Python surface
-- checks): 1000-01-01 to 2999-12-31 UTC, or the one infinite value p_infinite allows (a start of
-- -infinity: since forever; an end of +infinity: still holds). A time outside them is refused with
-- a one-line error naming p_name: a fact starting at +infinity was stored as [infinity,), an end
-- of -infinity failed deep inside the entity summaries, and a year the drivers cannot read
-- (asyncpg, Python: 1-9999) would break every later read of the group through them.
CREATE OR REPLACE FUNCTION pgmemory_internal.check_time(p_value timestamptz, p_name text,
                                                        p_infinite timestamptz DEFAULT NULL)
RETURNS void LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF p_value IS NULL OR p_value = p_infinite
       OR p_value BETWEEN '1000-01-01 00:00:00+00' AND '2999-12-31 23:59:59.999999+00' THEN
        RETURN;
    END IF;
    RAISE EXCEPTION '% % is out of range: it must be between 1000-01-01 and 2999-12-31 (UTC)%', p_name,
          CASE WHEN isfinite(p_value) THEN to_char(p_value AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"+00:00"')
               ELSE p_value::text END,
          CASE WHEN p_infinite IS NOT NULL THEN format(' or %s', p_infinite) ELSE '' END
          USING ERRCODE = '22023';
END
$$;
