"""docs/sql.md: every worked question runs against the guide's story and prints exactly the
result shown under it."""
from __future__ import annotations

import re
from pathlib import Path

import psycopg
import pytest

from pgmemory.analyst.runner import SqlResult, run
from pgmemory.storage.setup import init_database
from pgmemory.surfaces.sql_cli import render
from tests.conftest import DIM

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "sql.md"
EXAMPLE = re.compile(r"^### (\d+)\. (.+?)\n\n```sql\n(.*?)```\n\n```text\n(.*?)```", re.S | re.M)
EXAMPLES = EXAMPLE.findall(GUIDE.read_text())
CYPHER = re.compile(r"^### C(\d+)\. (.+?)\n\n```cypher\n(.*?)```\n\n```text\n(.*?)```", re.S | re.M)
CYPHER_EXAMPLES = CYPHER.findall(GUIDE.read_text())


@pytest.fixture(scope="module")
def story_dsn(admin_dsn):
    """A fresh database holding the guide's story (tests/docs_story.py)."""
    from tests.docs_story import load
    from tests.servers import create_database, drop_database

    dsn = create_database(admin_dsn)
    with psycopg.connect(dsn) as conn:
        init_database(conn, DIM)
    load(dsn)
    yield dsn
    drop_database(admin_dsn, dsn)


def test_the_guide_has_its_examples():
    assert len(EXAMPLES) >= 15
    assert [int(n) for n, *_ in EXAMPLES] == list(range(1, len(EXAMPLES) + 1))
    assert sum("FOR SYSTEM_TIME" in q or "FOR VALID_TIME" in q for *_, q, _ in EXAMPLES) >= 6
    # Every SQL block of the guide is a worked question with its result.
    assert GUIDE.read_text().count("```sql") == len(EXAMPLES)
    assert GUIDE.read_text().count("```cypher") == len(CYPHER_EXAMPLES) >= 5


@pytest.mark.parametrize("number, title, query, expected", EXAMPLES, ids=[f"q{n}" for n, *_ in EXAMPLES])
def test_each_worked_question_prints_its_result(story_dsn, number, title, query, expected):
    with psycopg.connect(story_dsn) as conn:
        assert render(run(conn, query), "table") == expected.rstrip("\n")


@pytest.mark.parametrize("number, title, query, expected", CYPHER_EXAMPLES,
                         ids=[f"c{n}" for n, *_ in CYPHER_EXAMPLES])
def test_each_cypher_example_prints_its_result(story_dsn, number, title, query, expected):
    """The Cypher examples, run as the owner (the graph is the owner's only), with agtype shown
    as psql shows it."""
    with psycopg.connect(story_dsn) as conn:
        conn.execute("LOAD 'age'")
        conn.execute("SET search_path = ag_catalog, \"$user\", public")
        cur = conn.execute(query.encode())
        result = SqlResult([d.name for d in cur.description], cur.fetchall(), False, query)
    assert render(result, "table") == expected.rstrip("\n")


def test_the_answers_do_not_depend_on_the_session_time_zone(story_dsn):
    """A server or client whose TimeZone is not UTC (PGTZ, a managed server's default) gets the
    guide's answers too: times without a zone and ::date are read in UTC."""
    with psycopg.connect(story_dsn, options="-c TimeZone=America/Los_Angeles") as conn:
        for number, _, query, expected in EXAMPLES:
            assert render(run(conn, query), "table") == expected.rstrip("\n"), f"question {number}"
        assert conn.execute("SHOW TimeZone").fetchone()[0] == "America/Los_Angeles"  # the session's own, kept


async def test_memory_sql_reads_times_in_utc_on_a_session_in_another_zone(story_dsn):
    from datetime import date

    import asyncpg

    from pgmemory.analyst.runner import run_async

    conn = await asyncpg.connect(story_dsn, server_settings={"TimeZone": "America/Los_Angeles"})
    try:
        result = await run_async(conn, "SELECT target, recorded_from::date AS learned_on FROM fact_versions"
                                       " FOR SYSTEM_TIME AS OF '2024-03-01' WHERE group_id = 'team-chat'"
                                       " AND source = 'Alice' AND relation = 'WORKS_FOR'")
    finally:
        await conn.close()
    assert [tuple(r) for r in result.rows] == [("Acme", date(2024, 1, 10))]
