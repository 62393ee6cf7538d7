"""Run analyst SQL: validate and rewrite it (policy, period), then execute the generated SQL in a
READ ONLY transaction with a statement timeout and a row cap, as the restricted reader role
when this login may take it (else as the login itself, under its own grants)."""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql as pgsql

from pgmemory.analyst import period, policy
from pgmemory.errors import InvalidInput
from pgmemory.ingest.episode import validate_group_ids
from pgmemory.validate import check_int

DEFAULT_MAX_ROWS = 1000
MAX_ROWS = 100_000
DEFAULT_TIMEOUT_S = 30
READER_ROLE = "pgmemory_reader"
SEARCH_PATH = "pg_catalog, pgmemory"
# May this login read as the reader role (the owner may; analysts' own logins read as themselves)?
# And the groups the connection is narrowed to already (a server's request), if any.
# On Citus, whether the query's shards are read elsewhere (the citus extension is created).
TAKE_READER = ("SELECT to_regrole(%s) IS NOT NULL AND pg_has_role(current_user, %s, 'USAGE'),"
               " current_setting('pgmemory.groups', true),"
               " EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'citus')")
# Citus runs the query's shard queries on the workers, in sessions of their own where a
# set_config() made here is unknown: row-level security there would not narrow to the groups
# asked for (an analyst granted two groups who asked for one read both; the owner's reader,
# granted every group, read every group). A SET LOCAL is sent to them with
# citus.propagate_set_commands = 'local', so on Citus the narrowing is also set that way.
PROPAGATE_SETS = "SET LOCAL citus.propagate_set_commands = 'local'"


def _narrowing_statement(groups: str) -> bytes:
    """SET LOCAL pgmemory.groups to `groups` (a JSON array or ''), the value quoted as a literal."""
    return pgsql.SQL("SET LOCAL pgmemory.groups = {}").format(pgsql.Literal(groups)).as_bytes()


@dataclass(frozen=True)
class SqlResult:
    """Rows of an analyst query: column names, rows (at most the cap), whether more rows were
    cut off, and the SQL that ran (after rewriting)."""

    columns: list[str]
    rows: list[tuple]
    truncated: bool
    sql: str


def prepare(query: str) -> str:
    """Validate analyst SQL and return the SQL to run (periods rewritten, views qualified)."""
    if not isinstance(query, str) or not query.strip():
        raise InvalidInput("the query must be a non-empty string")
    if "\x00" in query:
        raise InvalidInput("the query contains a NUL character")
    try:
        query.encode("utf-8")
    except UnicodeEncodeError as exc:
        # A lone surrogate (bytes that were not UTF-8, read with surrogateescape from argv or a
        # pipe): psycopg raised UnicodeEncodeError (a traceback out of `pgmemory sql`), and asyncpg
        # broke the pooled connection (Memory.sql raised InterfaceError "connection is closed").
        raise InvalidInput(f"the query is not valid UTF-8 text (character {exc.start + 1})") from None
    try:
        tree = policy.single_query(period.parse(query))
        policy.check(tree)
        period.rewrite_periods(tree)
        policy.qualify_views(tree)
        return tree.sql(dialect="postgres", comments=False)
    except RecursionError:
        # sqlglot parses, walks and generates recursively: some 50 nested parentheses or
        # subqueries exhaust Python's stack (was a RecursionError traceback out of `pgmemory sql`).
        raise InvalidInput("the query is nested too deeply to be read (fewer nested parentheses or "
                           "subqueries; a WITH can name a step instead)") from None


def _checked(query: str, groups: object, max_rows: object, timeout_s: object) -> tuple[str, list[str] | None]:
    """Validate the arguments; the SQL to run and the groups (None: no narrowing)."""
    check_int(max_rows, "max_rows", 1, MAX_ROWS)
    if not isinstance(timeout_s, (int, float)) or isinstance(timeout_s, bool) or not 0 < timeout_s <= 3600:
        raise InvalidInput(f"timeout_s must be between 0 and 3600 seconds, got {timeout_s!r}")
    return prepare(query), (None if groups is None else validate_group_ids(groups))


def _narrowed(groups: list[str] | None, current: str | None) -> str:
    """pgmemory.groups for the query: `groups` within the narrowing the connection already has
    (a server narrows each request's connections), never wider; '' when neither narrows."""
    try:
        outer = json.loads(current) if current else None
    except ValueError:
        outer = False
    if outer is not None and not isinstance(outer, list):
        raise InvalidInput(f"pgmemory.groups on this connection is not a JSON array: {current!r:.80}")
    if outer is not None and groups is not None:
        groups = [g for g in groups if g in outer]
    chosen = outer if groups is None else groups
    return "" if chosen is None else json.dumps(chosen)


def _failure(exc: Exception, timeout_s: float) -> Exception:
    """The one-line error for a query the database refused (a lost connection is re-raised as is)."""
    state = getattr(exc, "sqlstate", None)
    message = getattr(getattr(exc, "diag", None), "message_primary", None) or str(exc).splitlines()[0]
    if state == "57014":
        return InvalidInput(f"the query ran longer than {timeout_s:g} s and was cancelled")
    if state and state[:2] in ("08", "57"):
        return exc
    if state == "42501":
        return InvalidInput(f"not allowed: {message}")
    return InvalidInput(f"the query failed: {message}")


def _infinity_as_text(base: type) -> type:
    """A text loader of a time type that reads infinity / -infinity (which Python's datetime and
    date cannot hold: a start may be -infinity) as those words instead of failing the query."""
    class Loader(base):
        def load(self, data):
            raw = bytes(data)
            return raw.decode() if raw in (b"infinity", b"-infinity") else super().load(data)
    return Loader


def _infinity_words(value: Any) -> Any:
    """A value asyncpg decoded, with infinity / -infinity as those words, as `pgmemory sql` (psycopg,
    _infinity_as_text) reads them: asyncpg gives the naive year-1 / year-9999 edges instead (for a
    timestamptz a datetime without a zone, next to the aware finite ones), so Memory.sql answered
    another value than the CLI for the same query. Ranges and arrays of times too."""
    from datetime import date, datetime

    if isinstance(value, datetime):
        if value.tzinfo is None and value in (datetime.min, datetime.max):
            return "-infinity" if value == datetime.min else "infinity"
        return value
    if isinstance(value, date):
        return ("-infinity" if value == date.min else "infinity") if value in (date.min, date.max) else value
    if isinstance(value, list):
        return [_infinity_words(v) for v in value]
    if type(value).__name__ == "Range" and not value.isempty:
        import asyncpg

        return asyncpg.Range(_infinity_words(value.lower), _infinity_words(value.upper),
                             lower_inc=value.lower_inc, upper_inc=value.upper_inc)
    return value


_TIME_TYPES = ("timestamptz", "timestamp", "date", "tstzrange", "tsrange", "daterange",
               "tstzmultirange", "tsmultirange", "datemultirange")


def _time_loaders(cur: psycopg.Cursor) -> None:
    """Register the infinity-aware time loaders on one cursor (ranges of them use them too)."""
    from psycopg.types.datetime import DateLoader, TimestampLoader, TimestamptzLoader

    for name, base in (("timestamptz", TimestamptzLoader), ("timestamp", TimestampLoader), ("date", DateLoader)):
        cur.adapters.register_loader(name, _infinity_as_text(base))


def run(conn: psycopg.Connection, query: str, *, groups: list[str] | None = None,
        max_rows: int = DEFAULT_MAX_ROWS, timeout_s: float = DEFAULT_TIMEOUT_S) -> SqlResult:
    """Run one analyst query on `conn` (rolled back afterwards), in UTC whatever the session's time
    zone, so a time without a zone and ::date mean the same everywhere. `groups` narrows what the
    session sees to those groups (never widens: within the connection's narrowing, and row-level
    security intersects them with the grants)."""
    final, groups = _checked(query, groups, max_rows, timeout_s)
    conn.rollback()
    with conn.transaction(force_rollback=True):
        conn.execute("SET TRANSACTION READ ONLY")
        take_reader, current, cluster = conn.execute(TAKE_READER, (READER_ROLE, READER_ROLE)).fetchone()
        narrowed = _narrowed(groups, current)
        conn.execute("SELECT set_config('statement_timeout', %s, true), set_config('search_path', %s, true),"
                     " set_config('pgmemory.groups', %s, true), set_config('TimeZone', 'UTC', true)",
                     (f"{int(timeout_s * 1000)}ms", SEARCH_PATH, narrowed))
        if cluster:
            conn.execute(PROPAGATE_SETS)
            conn.execute(_narrowing_statement(narrowed))
        if take_reader:
            conn.execute(pgsql.SQL("SET LOCAL ROLE {}").format(pgsql.Identifier(READER_ROLE)))
        try:
            with conn.cursor() as cur:
                _time_loaders(cur)
                cur.execute(final.encode())  # the generated SQL, no client-side parameters
                columns = [d.name for d in cur.description or []]
                rows = cur.fetchmany(max_rows + 1) if cur.description else []
        except psycopg.Error as exc:
            raise _failure(exc, timeout_s) from None
    return SqlResult(columns, rows[:max_rows], len(rows) > max_rows, final)


async def run_async(conn: Any, query: str, *, groups: list[str] | None = None,
                    max_rows: int = DEFAULT_MAX_ROWS, timeout_s: float = DEFAULT_TIMEOUT_S) -> SqlResult:
    """run() on an asyncpg connection (the Python API's pool)."""
    import asyncpg

    from pgmemory.storage.connect import ANSWER_MARGIN_S

    final, groups = _checked(query, groups, max_rows, timeout_s)
    async with conn.transaction(readonly=True):
        take_reader, current, cluster = await conn.fetchrow(TAKE_READER.replace("%s", "$1"), READER_ROLE)
        narrowed = _narrowed(groups, current)
        await conn.execute("SELECT set_config('statement_timeout', $1, true), set_config('search_path', $2, true),"
                           " set_config('pgmemory.groups', $3, true), set_config('TimeZone', 'UTC', true)",
                           f"{int(timeout_s * 1000)}ms", SEARCH_PATH, narrowed)
        if cluster:
            await conn.execute(PROPAGATE_SETS)
            await conn.execute(_narrowing_statement(narrowed).decode())
        if take_reader:
            await conn.execute(f'SET LOCAL ROLE "{READER_ROLE}"')
        # The pool gives up a query after the session's statement timeout (+ a margin); this one
        # may run for its own timeout_s (up to an hour), so it waits that long (+ the margin).
        wait = timeout_s + ANSWER_MARGIN_S
        try:
            statement = await conn.prepare(final, timeout=wait)
            attributes = statement.get_attributes()
            columns = [a.name for a in attributes]
            rows = [tuple(r) for r in await (await statement.cursor(timeout=wait)).fetch(max_rows + 1, timeout=wait)
                    ] if columns else []
            timed = [i for i, a in enumerate(attributes) if a.type.name.rstrip("[]") in _TIME_TYPES]
            if timed and rows:
                rows = [tuple(_infinity_words(v) if i in timed else v for i, v in enumerate(r)) for r in rows]
        except asyncpg.PostgresError as exc:
            raise _failure(exc, timeout_s) from None
        except (OverflowError, ValueError) as exc:
            # asyncpg decodes a time Python cannot hold (after 9999, before year 1) with a bare
            # OverflowError / ValueError; psycopg's DataError is "the query failed" already.
            raise InvalidInput(f"the query failed: a value of the result cannot be read in Python ({exc}):"
                               " a time after year 9999 or before year 1? cast it to text") from None
    return SqlResult(columns, rows[:max_rows], len(rows) > max_rows, final)


def plain(value: Any) -> Any:
    """A value as JSON-friendly plain data (times in ISO 8601, ranges as [lower, upper)); a type
    JSON has no form for (bytea, multiranges, inet, money, ...) as its Postgres text, a NaN or
    infinite number as the word, so `pgmemory sql --format json` prints valid JSON whatever the
    query selects (bytes, a time of day, a multirange or an inet address raised a TypeError
    traceback, and NaN printed as JSON's invalid NaN)."""
    import math
    from datetime import date, datetime, time, timedelta
    from decimal import Decimal
    from uuid import UUID

    from psycopg.types.multirange import Multirange
    from psycopg.types.range import Range

    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else ("NaN" if math.isnan(value) else
                                                   ("Infinity" if value > 0 else "-Infinity"))
    if isinstance(value, (datetime, date, time)):
        return value.isoformat()
    if isinstance(value, Range) or type(value).__name__ == "Range":  # psycopg's or asyncpg's
        if value.isempty:
            return "empty"
        lower = "" if value.lower is None else plain(value.lower)
        upper = "" if value.upper is None else plain(value.upper)
        if hasattr(value, "bounds"):
            bounds = value.bounds
        else:
            bounds = ("[" if value.lower_inc else "(") + ("]" if value.upper_inc else ")")
        return f"{bounds[0]}{lower},{upper}{bounds[1]}"
    if isinstance(value, Multirange):  # asyncpg gives a list of ranges (below)
        return [plain(r) for r in value]
    if isinstance(value, (UUID, timedelta)):
        return str(value)
    if isinstance(value, Decimal):
        return float(value) if value.is_finite() else plain(float(value))
    if isinstance(value, (bytes, bytearray, memoryview)):
        return "\\x" + bytes(value).hex()
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    return str(value)
