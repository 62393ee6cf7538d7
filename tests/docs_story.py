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

# Every transaction-time column the story writes, and how to move it.
_SHIFTED = [
    ("facts", "recorded = tstzrange({f}(lower(recorded)), {f}(upper(recorded)))"),
    ("entity_versions", "recorded = tstzrange({f}(lower(recorded)), {f}(upper(recorded)))"),
    ("entities", "created_at = {f}(created_at), updated_at = {f}(updated_at)"),
    ("episodes", "recorded_at = {f}(recorded_at)"),
    ("fact_claims", "recorded_at = {f}(recorded_at)"),
    ("fact_episodes", "created_at = {f}(created_at)"),
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
    with psycopg.connect(dsn) as conn:
        conn.execute("CREATE FUNCTION pg_temp.pinned(t timestamptz) RETURNS timestamptz LANGUAGE sql AS $$"
                     " SELECT CASE " + " ".join(
                         f"WHEN t >= '{s.isoformat()}' AND t <= '{e.isoformat()}' THEN '{d.isoformat()}'::timestamptz"
                         f" + (t - '{s.isoformat()}'::timestamptz)" for s, e, d in windows)
                     + " ELSE t END $$")
        conn.execute("ALTER TABLE pgmemory.entities DISABLE TRIGGER entities_keep_version")
        for table, assignment in _SHIFTED:
            conn.execute(f"UPDATE pgmemory.{table} SET {assignment.format(f='pg_temp.pinned')}")
        conn.execute("ALTER TABLE pgmemory.entities ENABLE TRIGGER entities_keep_version")
        conn.commit()
