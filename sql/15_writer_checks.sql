-- Checks of what SQL writers pass, as the Python surfaces check it (pgmemory/validate.py,
-- pgmemory/ingest/episode.py): each refuses with one line (22023) naming the argument.

-- A group id as every surface takes it (pgmemory.ingest.episode.validate_group_id): a non-empty
-- string of at most 200 printable characters, not '*' (every group, in grants and API keys).
-- Checked by every SQL writer (lock_group, bump_group_version): a NULL group failed on a not-null
-- constraint.
CREATE OR REPLACE FUNCTION pgmemory_internal.check_group(p_group text)
RETURNS void LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF p_group IS NULL OR btrim(p_group) = '' THEN
        RAISE EXCEPTION 'group_id must be a non-empty string' USING ERRCODE = '22023';
    END IF;
    IF length(p_group) > 200 OR p_group ~ '[[:cntrl:]]' THEN
        RAISE EXCEPTION 'group_id must be at most 200 printable characters' USING ERRCODE = '22023';
    END IF;
    IF p_group = '*' THEN
        RAISE EXCEPTION 'group_id ''*'' is reserved: it means every group in grants and API keys' USING ERRCODE = '22023';
    END IF;
END
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
