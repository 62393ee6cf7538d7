"""Bi-temporal primitives and the four query shapes, on a scripted correction scenario."""
from __future__ import annotations

import time
import uuid
from datetime import datetime

import psycopg
import pytest

from tests.support import utc


def make_entities(conn, group, *names):
    ids = []
    for name in names:
        ids.append(uuid.uuid4())
        conn.execute("INSERT INTO pgmemory.entities (id, group_id, name) VALUES (%s, %s, %s)",
                     (ids[-1], group, name))
    return ids


def commit_and_tick(conn) -> datetime:
    """Commit, then return a transaction time strictly between this commit and the next."""
    conn.commit()
    time.sleep(0.002)
    t = conn.execute("SELECT clock_timestamp()").fetchone()[0]
    conn.commit()
    time.sleep(0.002)
    return t


def fact_ids(rows) -> set:
    return {r[0] for r in rows}


@pytest.fixture
def scenario(conn, group):
    """Alice works for Acme since 2020-03-01 (believed open-ended at T'1); at T'2 we
    learn she left on 2023-06-30 and joined Globex on 2023-07-01."""
    alice, acme, globex = make_entities(conn, group, "Alice", "Acme", "Globex")
    acme_job, globex_job = uuid.uuid4(), uuid.uuid4()
    conn.execute("SELECT pgmemory.record_fact(%s, %s, %s, %s, 'WORKS_FOR', 'Alice works for Acme',"
                 " %s, NULL)", (acme_job, group, alice, acme, utc("2020-03-01")))
    t1 = commit_and_tick(conn)
    conn.execute("SELECT pgmemory.invalidate_fact(%s, %s, %s)", (group, acme_job, utc("2023-06-30")))
    conn.execute("SELECT pgmemory.record_fact(%s, %s, %s, %s, 'WORKS_FOR', 'Alice works for Globex',"
                 " %s, NULL)", (globex_job, group, alice, globex, utc("2023-07-01")))
    t2 = commit_and_tick(conn)
    return dict(group=group, acme=acme_job, globex=globex_job, t1=t1, t2=t2)


def test_current_facts(conn, scenario):
    rows = conn.execute("SELECT id FROM pgmemory.facts_current(%s)", (scenario["group"],)).fetchall()
    assert fact_ids(rows) == {scenario["globex"]}


@pytest.mark.parametrize("when, expected", [
    ("2019-01-01", set()), ("2022-01-01", {"acme"}), ("2023-06-30", set()), ("2024-01-01", {"globex"}),
])
def test_valid_at_as_known_now(conn, scenario, when, expected):
    rows = conn.execute("SELECT id FROM pgmemory.facts_valid_at(%s, %s)",
                        (scenario["group"], utc(when))).fetchall()
    assert fact_ids(rows) == {scenario[k] for k in expected}


@pytest.mark.parametrize("when, known, expected", [
    ("2022-01-01", "t1", {"acme"}), ("2024-01-01", "t1", {"acme"}),
    ("2022-01-01", "t2", {"acme"}), ("2024-01-01", "t2", {"globex"}),
    ("2019-01-01", "t1", set()),
])
def test_valid_at_as_believed_at(conn, scenario, when, known, expected):
    rows = conn.execute("SELECT id FROM pgmemory.facts_as_of(%s, %s, %s)",
                        (scenario["group"], utc(when), scenario[known])).fetchall()
    assert fact_ids(rows) == {scenario[k] for k in expected}


def test_nothing_was_believed_before_it_was_recorded(conn, scenario):
    before = utc("2000-01-01")
    rows = conn.execute("SELECT id FROM pgmemory.facts_as_of(%s, %s, %s)",
                        (scenario["group"], utc("2022-01-01"), before)).fetchall()
    assert rows == []


def test_history_keeps_every_version(conn, scenario):
    rows = conn.execute(
        "SELECT lower(valid), upper(valid), upper_inf(recorded), upper(recorded)"
        " FROM pgmemory.fact_history(%s, %s)", (scenario["group"], scenario["acme"])).fetchall()
    assert [(r[0], r[1], r[2]) for r in rows] == [
        (utc("2020-03-01"), None, False), (utc("2020-03-01"), utc("2023-06-30"), True)]
    assert scenario["t1"] < rows[0][3] < scenario["t2"]


def test_unknown_start_is_not_since_forever(conn, group):
    a, b, c = make_entities(conn, group, "A", "B", "C")
    unknown, forever = uuid.uuid4(), uuid.uuid4()
    conn.execute("SELECT pgmemory.record_fact(%s, %s, %s, %s, 'KNOWS', 'A knows B', NULL, NULL)",
                 (unknown, group, a, b))
    conn.execute("SELECT pgmemory.record_fact(%s, %s, %s, %s, 'KNOWS', 'A knows C', '-infinity', NULL)",
                 (forever, group, a, c))
    rows = dict(conn.execute(
        "SELECT id, lower_inf(valid) FROM pgmemory.facts WHERE group_id = %s", (group,)).fetchall())
    assert rows == {unknown: True, forever: False}
    view = dict(conn.execute("SELECT id, valid_from_unknown FROM pgmemory.believed_facts"
                             " WHERE group_id = %s", (group,)).fetchall())
    assert view == {unknown: True, forever: False}


def test_correction_in_the_same_transaction_rewrites_in_place(conn, group):
    a, b = make_entities(conn, group, "A", "B")
    fid = uuid.uuid4()
    conn.execute("SELECT pgmemory.record_fact(%s, %s, %s, %s, 'LIKES', 'A likes B', %s, NULL)",
                 (fid, group, a, b, utc("2021-01-01")))
    conn.execute("SELECT pgmemory.invalidate_fact(%s, %s, %s)", (group, fid, utc("2022-01-01")))
    rows = conn.execute("SELECT valid FROM pgmemory.fact_history(%s, %s)", (group, fid)).fetchall()
    assert len(rows) == 1 and rows[0][0].upper == utc("2022-01-01")


def test_retraction_keeps_history(conn, group):
    a, b = make_entities(conn, group, "A", "B")
    fid = uuid.uuid4()
    conn.execute("SELECT pgmemory.record_fact(%s, %s, %s, %s, 'LIKES', 'A likes B', NULL, NULL)",
                 (fid, group, a, b))
    conn.commit()
    assert conn.execute("SELECT pgmemory.withdraw_fact(%s, %s)", (group, fid)).fetchone()[0] is True
    conn.commit()
    assert conn.execute("SELECT count(*) FROM pgmemory.facts_current(%s)", (group,)).fetchone()[0] == 0
    assert conn.execute("SELECT count(*) FROM pgmemory.fact_history(%s, %s)", (group, fid)).fetchone()[0] == 1


def test_bad_ranges_and_double_record_are_refused(conn, group):
    a, b = make_entities(conn, group, "A", "B")
    fid = uuid.uuid4()
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="valid range is empty"):
        conn.execute("SELECT pgmemory.record_fact(%s, %s, %s, %s, 'LIKES', 'x', %s, %s)",
                     (fid, group, a, b, utc("2022-01-01"), utc("2021-01-01")))
    conn.rollback()
    a, b = make_entities(conn, group, "A", "B")
    conn.execute("SELECT pgmemory.record_fact(%s, %s, %s, %s, 'LIKES', 'x', NULL, NULL)",
                 (fid, group, a, b))
    with pytest.raises(psycopg.errors.UniqueViolation, match="already has a current version"):
        conn.execute("SELECT pgmemory.record_fact(%s, %s, %s, %s, 'LIKES', 'x', NULL, NULL)",
                     (fid, group, a, b))
    conn.rollback()
    with pytest.raises(psycopg.errors.NoDataFound, match="no current version"):
        conn.execute("SELECT pgmemory.invalidate_fact(%s, %s, now())", (group, uuid.uuid4()))
