"""Analyst views: names and readable time bounds, facts true now, entities at (T, T'),
and a COMMENT on every table, view, column and function of the schema."""
from __future__ import annotations

from pgmemory.analyst.runner import run
from tests.analyst_support import add, career  # noqa: F401 (fixture)
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


def rename(conn, group, old, new):
    """Rename an entity in its own transaction; returns that transaction time."""
    at = conn.execute("UPDATE pgmemory.entities SET name = %s WHERE group_id = %s AND name = %s RETURNING now()",
                      (new, group, old)).fetchone()[0]
    conn.commit()
    return at


def names_as_of(conn, group, at):
    """(source, relation, target) of the versions believed at transaction time `at`, through
    `pgmemory sql`'s FOR SYSTEM_TIME AS OF (the reader role, under row-level security)."""
    return sorted(run(conn, f"SELECT source, relation, target FROM fact_versions FOR SYSTEM_TIME AS OF '{at.isoformat()}'"
                            f" WHERE group_id = '{group}'").rows)


def test_fact_versions_name_endpoints_as_recorded_with_the_version(conn, group):
    """An entity renamed after a version was recorded: the version keeps the names it was recorded
    with (as entity_history names them then); a version recorded after the rename has the new
    name; a never-renamed entity is named as before; renamed or not, every version is one row."""
    add(conn, group, "Zed", "LOCATED_IN", "Berlin", "Zed is in Berlin.")  # source renamed later
    add(conn, group, "Alice", "WORKS_FOR", "Zed", "Alice works for Zed.")  # both renamed later
    add(conn, group, "Bob", "VISITED", "Zed", "Bob visited Zed.")  # target renamed later
    before = add(conn, group, "Bob", "KNOWS", "Carol", "Bob knows Carol.")  # never renamed
    rename(conn, group, "Zed", "Zed Labs")
    rename(conn, group, "Alice", "Alice Smith")
    after = add(conn, group, "Alice Smith", "LIVES_IN", "Paris", "Alice Smith lives in Paris.")
    rows = conn.execute("SELECT source, relation, target FROM pgmemory.fact_versions WHERE group_id = %s"
                        " ORDER BY recorded_from", (group,)).fetchall()
    assert rows == [("Zed", "LOCATED_IN", "Berlin"), ("Alice", "WORKS_FOR", "Zed"), ("Bob", "VISITED", "Zed"),
                    ("Bob", "KNOWS", "Carol"), ("Alice Smith", "LIVES_IN", "Paris")]
    assert conn.execute("SELECT count(*) FROM pgmemory.fact_versions WHERE group_id = %s",
                        (group,)).fetchone()[0] == 5
    assert conn.execute("SELECT name FROM pgmemory.entities WHERE group_id = %s AND renamed ORDER BY 1",
                        (group,)).fetchall() == [("Alice Smith",), ("Zed Labs",)]
    # As believed before the renames: the names entity_history gives for that time.
    then = conn.execute(
        "SELECT f.source, sh.name, f.target, th.name FROM pgmemory.fact_versions f"
        "  JOIN pgmemory.entity_history sh ON sh.group_id = f.group_id AND sh.id = f.source_id AND sh.recorded @> %s"
        "  JOIN pgmemory.entity_history th ON th.group_id = f.group_id AND th.id = f.target_id AND th.recorded @> %s"
        " WHERE f.group_id = %s AND f.recorded @> %s", (before, before, group, before)).fetchall()
    assert len(then) == 4 and all(s == sh and t == th for s, sh, t, th in then)
    assert names_as_of(conn, group, before) == [("Alice", "WORKS_FOR", "Zed"), ("Bob", "KNOWS", "Carol"),
                                                ("Bob", "VISITED", "Zed"), ("Zed", "LOCATED_IN", "Berlin")]
    # A filter on a name finds the versions recorded under it, whichever branch they are in.
    assert conn.execute("SELECT relation FROM pgmemory.fact_versions WHERE group_id = %s AND target = 'Zed'"
                        " ORDER BY 1", (group,)).fetchall() == [("VISITED",), ("WORKS_FOR",)]
    assert conn.execute("SELECT relation FROM pgmemory.fact_versions WHERE group_id = %s AND source = 'Bob'"
                        " ORDER BY 1", (group,)).fetchall() == [("KNOWS",), ("VISITED",)]
    # Today's names stay where "today" is asked: believed_facts.
    assert conn.execute("SELECT count(*) FROM pgmemory.believed_facts WHERE group_id = %s AND target = 'Zed Labs'",
                        (group,)).fetchone()[0] == 2
    assert ("Alice Smith", "LIVES_IN", "Paris") in names_as_of(conn, group, after)


def test_a_version_recorded_again_after_the_rename_takes_the_new_name(conn, group):
    """A correction after the rename: the old version keeps the old name, the new one the new name."""
    add(conn, group, "Bob", "LIVES_IN", "Paris", "Bob lives in Paris.", valid_from="2020-01-01Z")
    rename(conn, group, "Bob", "Robert")
    add(conn, group, "Robert", "LIVES_IN", "Rome", "Robert lives in Rome.", valid_from="2023-01-01Z",
        functional=True)
    rows = conn.execute("SELECT source, target, believed FROM pgmemory.fact_versions WHERE group_id = %s"
                        " ORDER BY recorded_from, target", (group,)).fetchall()
    assert rows == [("Bob", "Paris", False), ("Robert", "Paris", True), ("Robert", "Rome", True)]


def test_a_rename_in_the_transaction_that_created_the_entity_has_no_past_name(conn, group):
    """Created and renamed in one transaction: no one ever believed the first name, so every
    version and every system time has the second (as entity_history has)."""
    conn.execute("SELECT pgmemory.add_fact(%s, 'Bob', 'KNOWS', 'Carol', 'Bob knows Carol.')", (group,))
    conn.execute("UPDATE pgmemory.entities SET name = 'Robert' WHERE group_id = %s AND name = 'Bob'", (group,))
    at = conn.execute("SELECT now()").fetchone()[0]
    conn.commit()
    assert conn.execute("SELECT source, target FROM pgmemory.fact_versions WHERE group_id = %s",
                        (group,)).fetchall() == [("Robert", "Carol")]
    assert names_as_of(conn, group, at) == [("Robert", "KNOWS", "Carol")]
    assert conn.execute("SELECT name FROM pgmemory.entity_history WHERE group_id = %s AND recorded @> %s::timestamptz"
                        " ORDER BY 1", (group, at)).fetchall() == [("Carol",), ("Robert",)]


def test_two_renames_name_each_version_as_of_its_time(conn, group):
    """Bob -> Robert -> Rob, a fact recorded under each name (and a summary change that keeps the
    name between): each system time names the versions as entity_history does then."""
    t1 = add(conn, group, "Bob", "KNOWS", "Carol", "Bob knows Carol.")
    rename(conn, group, "Bob", "Robert")
    conn.execute("UPDATE pgmemory.entities SET summary = 'A friend of Carol.' WHERE group_id = %s AND name = 'Robert'",
                 (group,))
    conn.commit()
    t2 = add(conn, group, "Robert", "VISITED", "Paris", "Robert visited Paris.")
    rename(conn, group, "Robert", "Rob")
    t3 = add(conn, group, "Carol", "MET", "Rob", "Carol met Rob.")
    assert names_as_of(conn, group, t1) == [("Bob", "KNOWS", "Carol")]
    assert names_as_of(conn, group, t2) == [("Bob", "KNOWS", "Carol"), ("Robert", "VISITED", "Paris")]
    assert names_as_of(conn, group, t3) == [("Bob", "KNOWS", "Carol"), ("Carol", "MET", "Rob"),
                                            ("Robert", "VISITED", "Paris")]
    for at in (t1, t2, t3):
        history = {n for (n,) in conn.execute(
            "SELECT name FROM pgmemory.entity_history WHERE group_id = %s AND recorded @> %s::timestamptz",
            (group, at)).fetchall()}
        recorded_at = {n for _, source, target in conn.execute(
            "SELECT recorded_from, source, target FROM pgmemory.fact_versions WHERE group_id = %s"
            " AND recorded_from = %s", (group, at)).fetchall() for n in (source, target)}
        assert recorded_at <= history


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
