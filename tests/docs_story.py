"""The story docs/sql.md queries: a small team chat ingested in three sessions (offline extractor,
hash embedder). Transaction times are then pinned to fixed dates (each session's times moved to
its date, order and gaps kept) so the guide's period-clause answers are the same on every run."""
from __future__ import annotations

from datetime import datetime, timezone

import psycopg

GROUP = "team-chat"
OTHER_GROUP = "other-team"
# (recorded on, [(said at, speaker, text)])
SESSIONS = [
    ("2024-01-10", [("2024-01-05T09:00:00Z", "Alice", "I work at Acme."),
                    ("2024-01-05T09:01:00Z", "Alice", "I live in Boston."),
                    ("2024-01-05T09:02:00Z", "Bob", "I work at Acme."),
                    ("2024-01-06T10:00:00Z", "Alice", "My sister Carol lives in Denver.")]),
    ("2024-03-01", [("2024-02-20T09:00:00Z", "Alice", "I left Acme and now work at Globex."),
                    ("2024-02-21T09:00:00Z", "Bob", "I visited Lisbon last week.")]),
    ("2024-06-01", [("2024-05-20T09:00:00Z", "Alice", "I moved to Denver."),
                    ("2024-05-21T09:00:00Z", "Bob", "I'm vegan now.")]),
]
OTHER = [("2024-01-05T09:00:00Z", "Zoe", "I work at Initech.")]

# Every transaction-time column the story writes, and how to move it: a column, or the lower or
# upper bound of a range column (lower bounds first, so that every range stays ordered).
_SHIFTED = [
    ("facts", "recorded", "lower"), ("entity_versions", "recorded", "lower"),
    ("facts", "recorded", "upper"), ("entity_versions", "recorded", "upper"),
    ("entities", "created_at", None), ("entities", "updated_at", None),
    ("episodes", "recorded_at", None), ("fact_claims", "recorded_at", None), ("fact_episodes", "created_at", None),
]


def _utc(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).replace(tzinfo=timezone.utc)


def load(dsn: str) -> None:
    """Ingest the story into `dsn` (an initialised database) and pin its transaction times."""
    from pgmemory import SyncMemory
    from pgmemory.extract.rules import RuleExtractor
    from pgmemory.providers.embedder import HashEmbedder

    windows = []
    with SyncMemory(dsn, embedder=HashEmbedder(), extractor=RuleExtractor()) as memory, psycopg.connect(
            dsn, autocommit=True) as conn:
        for said, speaker, text in OTHER:
            memory.add_episode(OTHER_GROUP, text, actor=speaker, reference_time=_utc(said))
        for day, episodes in SESSIONS:
            start = conn.execute("SELECT clock_timestamp()").fetchone()[0]
            for said, speaker, text in episodes:
                memory.add_episode(GROUP, text, actor=speaker, reference_time=_utc(said))
            windows.append((start, conn.execute("SELECT clock_timestamp()").fetchone()[0], _utc(day + "T00:00:00Z")))
    # One update per session window and column, with immutable arithmetic (in UTC): Citus
    # refuses a stable function of a column in an UPDATE (timestamptz + interval is one).
    sql = psycopg.sql
    with psycopg.connect(dsn) as conn:
        # Citus refuses ALTER TABLE ... TRIGGER on a distributed table unless told it is safe.
        conn.execute("SELECT set_config('citus.enable_unsafe_triggers', 'on', true)"
                     " FROM pg_extension WHERE extname = 'citus'")
        conn.execute("ALTER TABLE pgmemory.entities DISABLE TRIGGER entities_keep_version")
        for table, column, bound in _SHIFTED:
            col = sql.Identifier(column)
            if bound is None:
                time, value = col, sql.SQL("(({c} AT TIME ZONE 'UTC') + %(shift)s) AT TIME ZONE 'UTC'").format(c=col)
            else:
                time = sql.SQL("{b}({c})").format(b=sql.SQL(bound), c=col)
                moved = sql.SQL("(({t} AT TIME ZONE 'UTC') + %(shift)s) AT TIME ZONE 'UTC'").format(t=time)
                low, up = sql.SQL("lower({c})").format(c=col), sql.SQL("upper({c})").format(c=col)
                value = sql.SQL("tstzrange({}, {})").format(*((moved, up) if bound == "lower" else (low, moved)))
            statement = sql.SQL("UPDATE {t} SET {c} = {v} WHERE {time} >= %(start)s AND {time} <= %(end)s").format(
                t=sql.Identifier("pgmemory", table), c=col, v=value, time=time)
            for start, end, day in windows:
                conn.execute(statement, {"start": start, "end": end, "shift": day - start})
        conn.execute("ALTER TABLE pgmemory.entities ENABLE TRIGGER entities_keep_version")
        conn.commit()
