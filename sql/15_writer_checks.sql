-- Checks of what SQL writers pass, as the Python surfaces check it (pgmemory/validate.py,
-- pgmemory/ingest/episode.py): each refuses with one line (22023) naming the argument.

-- Is p_text printable as Python's str.isprintable() says (pgmemory.ingest.episode.validate_group_id
-- refuses a group id that is not)? Python refuses the code points of Unicode categories Cc, Cf, Cs,
-- Co, Cn, Zl, Zp and Zs but the ASCII space. Postgres's [[:print:]] depends on the locale (every
-- non-ASCII character is unprintable in the C locale), so the class is spelt out here: every
-- assigned code point Python refuses (Cc, Cf, Co, Zl, Zp, Zs; Unicode 14 and the Cf that 15 added), from
--     [c for c in range(0x110000) if not chr(c).isprintable() and unicodedata.category(chr(c)) != 'Cn']
-- plus the noncharacters U+FDD0-U+FDEF and U+nFFFE-U+nFFFF (Cn forever; the last lines).
-- Surrogates cannot occur in text. Other unassigned code points (Cn) are not refused: which are
-- unassigned changes with each Unicode version, so Python versions disagree on them too.
-- tests/test_input_validation.py checks this list against the running Python.
CREATE OR REPLACE FUNCTION pgmemory_internal.is_printable(p_text text)
RETURNS boolean LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT p_text !~ ('[\u0001-\u001F\u007F-\u00A0\u00AD\u0600-\u0605\u061C\u06DD\u070F\u0890-\u0891'
                      '\u08E2\u1680\u180E\u2000-\u200F\u2028-\u202F\u205F-\u2064\u2066-\u206F\u3000'
                      '\uE000-\uF8FF\uFDD0-\uFDEF\uFEFF\uFFF9-\uFFFB\uFFFE-\uFFFF\U000110BD\U000110CD'
                      '\U00013430-\U0001343F\U0001BCA0-\U0001BCA3\U0001D173-\U0001D17A\U000E0001'
                      '\U000E0020-\U000E007F\U000F0000-\U0010FFFF'
                      '\U0001FFFE-\U0001FFFF\U0002FFFE-\U0002FFFF\U0003FFFE-\U0003FFFF\U0004FFFE-\U0004FFFF'
                      '\U0005FFFE-\U0005FFFF\U0006FFFE-\U0006FFFF\U0007FFFE-\U0007FFFF\U0008FFFE-\U0008FFFF'
                      '\U0009FFFE-\U0009FFFF\U000AFFFE-\U000AFFFF\U000BFFFE-\U000BFFFF\U000CFFFE-\U000CFFFF'
                      '\U000DFFFE-\U000DFFFF\U000EFFFE-\U000EFFFF'
                      ']')
$$;

-- A group id as every surface takes it (pgmemory.ingest.episode.validate_group_id): a non-empty
-- string of at most 200 printable characters (is_printable), not '*' (every group, in grants and
-- API keys). Checked by every SQL writer (lock_group, bump_group_version): a NULL group failed on
-- a not-null constraint.
CREATE OR REPLACE FUNCTION pgmemory_internal.check_group(p_group text)
RETURNS void LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF p_group IS NULL OR btrim(p_group) = '' THEN
        RAISE EXCEPTION 'group_id must be a non-empty string' USING ERRCODE = '22023';
    END IF;
    IF length(p_group) > 200 OR NOT pgmemory_internal.is_printable(p_group) THEN
        RAISE EXCEPTION 'group_id must be at most 200 printable characters' USING ERRCODE = '22023';
    END IF;
    IF p_group = '*' THEN
        RAISE EXCEPTION 'group_id ''*'' is reserved: it means every group in grants and API keys' USING ERRCODE = '22023';
    END IF;
END
$$;

-- Refuse, in one line (42501) naming the login and the group, a write to group p_group_id by a
-- session narrowed to other groups (pgmemory.groups: a server's request) and subject to row-level
-- security; nothing when no narrowing is asked (the login's grants then hold, by row-level
-- security) or for the owner. Every writer with a group calls it first, so the group it was given
-- is checked where it runs: on one node a writer that locks nothing refused no other group (it
-- wrote nothing there, silently); on Citus a writer runs on its group's worker or, inside a
-- transaction, on the coordinator, and either way reads the narrowing of its transaction
-- (SET LOCAL, which Citus carries to the workers; a session's own setting reaches no worker).
CREATE OR REPLACE FUNCTION pgmemory_internal.check_request_group(p_group_id text)
RETURNS void LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    requested text[] := pgmemory_internal.requested_groups();
BEGIN
    -- (A group asked for passes without reading the catalogs: a writer may call this many times
    -- over, nested; row-level security still holds the login to its grants.)
    IF requested IS NULL OR p_group_id = ANY (requested) THEN
        RETURN;
    END IF;
    PERFORM pgmemory_internal.check_group(p_group_id);
    IF NOT p_group_id = ANY (pgmemory_internal.session_groups(ARRAY[p_group_id])) THEN
        RAISE EXCEPTION 'login % may not write group % (not among the groups this session is narrowed to: pgmemory.groups %)',
              pgmemory_internal.session_role(), p_group_id, current_setting('pgmemory.groups', true)
              USING ERRCODE = '42501';
    END IF;
END
$$;

-- Refuse a login that may only read (an analyst's) before it writes, in one line (42501) naming
-- what it tried (p_what): checked on p_table, the table that writer changes first (lock_group:
-- group_locks, claim_episode: episodes), so the line comes before any permission error of its own.
CREATE OR REPLACE FUNCTION pgmemory_internal.check_writer(p_table text, p_what text)
RETURNS void LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF NOT has_table_privilege(p_table, 'UPDATE') THEN
        RAISE EXCEPTION 'login % may only read: % needs a read-write login, a member of pgmemory_app',
              pgmemory_internal.session_role(), p_what USING ERRCODE = '42501';
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

-- How deep the arrays and objects of JSON text nest: the most brackets open at once outside
-- strings, as pgmemory.ingest.episode.json_depth counts them (enqueue_episode refuses a json
-- episode deeper than MAX_JSON_DEPTH, 500, as Python does: Postgres' own parser went on to its
-- stack limit, so SQL stored episodes the worker's Python then failed).
CREATE OR REPLACE FUNCTION pgmemory_internal.json_depth(p_text text)
RETURNS integer LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT coalesce(max(d.depth), 0)::integer
      FROM (SELECT sum(CASE WHEN b.c IN ('[', '{') THEN 1 WHEN b.c IN (']', '}') THEN -1 ELSE 0 END)
                       OVER (ORDER BY b.n) AS depth  -- (an empty text splits into one empty string)
              FROM regexp_split_to_table(regexp_replace(regexp_replace(p_text, '"(?:\\.|[^"\\])*"', '', 'g'),
                                                        '[^][{}]', '', 'g'), '') WITH ORDINALITY AS b (c, n)) d
$$;

-- A writer's JSON argument p_value named p_name (an episode's metadata, a fact's attributes), as
-- pgmemory.validate.check_metadata takes it: NULL or a JSON object of at most 10,000 characters
-- as JSON (MAX_METADATA_CHARS; jsonb's text has the separators of Python's json.dumps).
CREATE OR REPLACE FUNCTION pgmemory_internal.check_json_object(p_value jsonb, p_name text)
RETURNS void LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF p_value IS NOT NULL AND jsonb_typeof(p_value) <> 'object' THEN
        RAISE EXCEPTION '% must be a JSON object, got %', p_name, jsonb_typeof(p_value) USING ERRCODE = '22023';
    END IF;
    IF length(p_value::text) > 10000 THEN
        RAISE EXCEPTION '% has % characters as JSON; the limit is 10000', p_name, length(p_value::text)
              USING ERRCODE = '22023';
    END IF;
END
$$;
