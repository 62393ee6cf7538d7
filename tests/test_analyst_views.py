"""Analyst views: names and readable time bounds, facts true now, entities at (T, T'),
and a COMMENT on every table, view, column and function of the schema."""
from __future__ import annotations

from tests.analyst_support import career  # noqa: F401 (fixture)
from tests.support import utc


def test_current_facts_leaves_out_facts_that_ended(conn, group, career):
    now = conn.execute("SELECT target FROM pgmemory.current_facts WHERE group_id = %s", (group,)).fetchall()
    believed = conn.execute("SELECT target, valid_to FROM pgmemory.believed_facts WHERE group_id = %s ORDER BY 1",
                            (group,)).fetchall()
    assert now == [("Globex",)]
    assert believed == [("Acme", utc("2022-01-01")), ("Globex", None)]


def test_fact_versions_keep_every_belief_with_names(conn, group, career):
    rows = conn.execute(
        "SELECT source, relation, target, fact, valid_from, valid_to, recorded_to IS NULL, cardinality(episodes)"
        "  FROM pgmemory.fact_versions WHERE group_id = %s AND target = 'Acme' ORDER BY recorded_from",
        (group,)).fetchall()
    assert rows == [("Alice", "WORKS_FOR", "Acme", "Alice works for Acme.", utc("2020-01-01"), None, False, 0),
                    ("Alice", "WORKS_FOR", "Acme", "Alice works for Acme.", utc("2020-01-01"), utc("2022-01-01"),
                     True, 0)]
    # What we believed between the two writes, by a range predicate on `recorded`.
    between = conn.execute("SELECT target, valid_to FROM pgmemory.fact_versions"
                           " WHERE group_id = %s AND recorded @> %s::timestamptz", (group, career["t1"])).fetchall()
    assert between == [("Acme", None)]


def test_entities_at_summarise_their_slice(conn, group, career):
    rows = conn.execute("SELECT name, summary, facts FROM pgmemory.entities_at(%s, %s) ORDER BY name",
                        (group, utc("2021-06-01"))).fetchall()
    assert rows == [("Acme", "Alice works for Acme.", 1), ("Alice", "Alice works for Acme.", 1), ("Globex", "", 0)]
    # Believed right after the first write: Globex was not recorded yet.
    early = conn.execute("SELECT name FROM pgmemory.entities_at(%s, NULL, %s) ORDER BY name",
                         (group, career["t1"])).fetchall()
    assert early == [("Acme",), ("Alice",)]


def test_entity_history_keeps_each_recorded_version(conn, group, career):
    conn.execute("UPDATE pgmemory.entities SET summary = 'An engineer.' WHERE group_id = %s AND name = 'Alice'",
                 (group,))
    conn.commit()
    rows = conn.execute("SELECT summary, current, recorded_to IS NULL FROM pgmemory.entity_versions_of(%s, 'alice')",
                        (group,)).fetchall()
    assert rows[-1] == ("An engineer.", True, True)
    assert all(not current and closed is False for _, current, closed in rows[:-1]) and len(rows) >= 2


def test_every_table_view_column_and_function_has_a_comment(conn):
    missing = conn.execute(
        "SELECT 'relation ' || c.relname FROM pg_class c"
        " WHERE c.relnamespace = 'pgmemory'::regnamespace AND c.relkind IN ('r', 'v', 'p', 'm')"
        "   AND obj_description(c.oid, 'pg_class') IS NULL"
        " UNION ALL SELECT 'column ' || c.relname || '.' || a.attname FROM pg_class c"
        "  JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped"
        " WHERE c.relnamespace = 'pgmemory'::regnamespace AND c.relkind IN ('r', 'v', 'p', 'm')"
        "   AND col_description(c.oid, a.attnum) IS NULL"
        " UNION ALL SELECT 'function ' || p.oid::regprocedure FROM pg_proc p"
        " WHERE p.pronamespace IN ('pgmemory'::regnamespace, 'pgmemory_internal'::regnamespace) AND obj_description(p.oid, 'pg_proc') IS NULL"
        " ORDER BY 1").fetchall()
    assert [m for (m,) in missing] == []


def test_entity_versions_of_finds_an_entity_by_a_former_name(conn, group, career):
    conn.execute("UPDATE pgmemory.entities SET name = 'Alice Smith' WHERE group_id = %s AND name = 'Alice'", (group,))
    conn.commit()
    # Renamed (by an extractor's resolution, or back by deleting the episode that renamed it): the
    # name an analyst knows it by still finds its versions, the current one last.
    rows = conn.execute("SELECT name, current FROM pgmemory.entity_versions_of(%s, 'alice')", (group,)).fetchall()
    assert rows[0] == ("Alice", False) and rows[-1] == ("Alice Smith", True)
    assert rows == conn.execute("SELECT name, current FROM pgmemory.entity_versions_of(%s, 'Alice Smith')",
                                (group,)).fetchall()
    assert conn.execute("SELECT count(*) FROM pgmemory.entity_versions_of(%s, 'Bob')", (group,)).fetchone() == (0,)
