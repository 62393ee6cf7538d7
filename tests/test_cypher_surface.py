"""The AGE graph as a product surface: a setting turns the mirror off (and on again, rebuilt from
the tables); restricted logins write through it but cannot query it (owner only)."""
from __future__ import annotations

import uuid
from datetime import datetime, timezone

import psycopg
import pytest

from pgmemory.storage import grants
from pgmemory.storage.setup import init_database
from tests.conftest import DIM
from tests.test_graph_mirror import cypher_rows


def login_dsn(dsn: str, role: str, password: str) -> str:
    info = psycopg.conninfo.conninfo_to_dict(dsn)
    return f"postgresql://{role}:{password}@/{info['dbname']}?host={info['host']}&port={info.get('port', 5432)}"


def ingest(dsn: str, group: str, *lines: str) -> None:
    from pgmemory import SyncMemory
    from pgmemory.extract.rules import RuleExtractor
    from pgmemory.providers.embedder import HashEmbedder

    with SyncMemory(dsn, embedder=HashEmbedder(), extractor=RuleExtractor()) as memory:
        for i, line in enumerate(lines):
            memory.add_episode(group, line, actor="Alice", reference_time=datetime(2024, 1, 1 + i, tzinfo=timezone.utc))


def graph_exists(conn) -> bool:
    if conn.execute("SELECT to_regclass('ag_catalog.ag_graph')").fetchone()[0] is None:
        return False  # AGE not even created
    return conn.execute("SELECT count(*) FROM ag_catalog.ag_graph WHERE name = 'pgmemory_graph'").fetchone()[0] == 1


def test_the_mirror_turns_off_and_back_on_rebuilt(empty_dsn):
    with psycopg.connect(empty_dsn) as conn:
        assert init_database(conn, DIM, graph_mirror=False).graph_mode == "sql"
        assert not graph_exists(conn)
    ingest(empty_dsn, "g", "I work at Acme.", "My sister Carol lives in Denver.")
    with psycopg.connect(empty_dsn) as conn:
        assert conn.execute("SELECT count(*) FROM pgmemory.graph_vertices").fetchone() == (0,)
        assert init_database(conn, DIM, graph_mirror=True).graph_mode == "age"
        edges = sorted(cypher_rows(conn, "MATCH (s:Entity)-[r:RELATES_TO]->(t:Entity) WHERE r.group_id = $g"
                                         " RETURN s.name, r.relation, t.name", {"g": "g"}))
        believed = sorted(conn.execute("SELECT source, relation, target FROM pgmemory.believed_facts").fetchall())
        assert edges == believed and len(believed) == 3
        assert init_database(conn, DIM).graph_mode == "age"  # the choice is remembered
        assert init_database(conn, DIM, graph_mirror=False).graph_mode == "sql"
        assert not graph_exists(conn)
        assert conn.execute("SELECT count(*) FROM pgmemory.graph_edges").fetchone() == (0,)


def test_app_logins_write_through_the_mirror_but_only_the_owner_queries_it(db_dsn):
    tag = uuid.uuid4().hex[:8]
    mine, other, role = f"app-{tag}", f"not-mine-{tag}", f"svc_{tag}"
    from pgmemory.providers.embedder import HashEmbedder
    from pgmemory.storage.setup import ensure_current

    with psycopg.connect(db_dsn) as conn:
        ensure_current(conn, DIM, HashEmbedder().name)  # the owner initialises; logins only use
        grants.grant(conn, role, [mine], kind="app", create_password="pw")
    try:
        dsn = login_dsn(db_dsn, role, "pw")
        ingest(dsn, mine, "I work at Acme.")
        with psycopg.connect(db_dsn) as conn:
            assert cypher_rows(conn, "MATCH (s:Entity)-[r:RELATES_TO]->(t:Entity) WHERE r.group_id = $g"
                                     " RETURN s.name, r.relation, t.name", {"g": mine}) == [
                ("Alice", "WORKS_FOR", "Acme")]
        with psycopg.connect(dsn) as conn:
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                cypher_rows(conn, "MATCH (n:Entity) RETURN n.name, n.group_id, n.uuid", {})
            conn.rollback()
            # Writing into a group this login was not granted is refused by row-level security
            # (lock_group turns the policy's refusal into one line naming the login and group).
            with pytest.raises(psycopg.errors.InsufficientPrivilege, match=f"may not write group {other} "):
                conn.execute("SELECT pgmemory.add_fact(%s, 'Eve', 'KNOWS', 'Bob', 'Eve knows Bob.')", (other,))
        with psycopg.connect(db_dsn) as conn:
            assert conn.execute("SELECT count(*) FROM pgmemory.entities WHERE group_id = %s", (other,)).fetchone() == (0,)
    finally:
        with psycopg.connect(db_dsn, autocommit=True) as conn:
            grants.revoke(conn, role, None)
            conn.execute(psycopg.sql.SQL("DROP ROLE {}").format(psycopg.sql.Identifier(role)))


PAST_BELIEFS = ("MATCH (a:Entity {group_id: $g})-[r]->(c:Entity) WHERE r.relation = 'WORKS_FOR'"
                " AND r.recorded_from <= $known AND (r.recorded_to IS NULL OR r.recorded_to > $known)"
                " AND (r.valid_from IS NULL OR r.valid_from <= $t) AND (r.valid_to IS NULL OR r.valid_to > $t)"
                " RETURN r.version_id, a.name, c.name")


def _next_second(conn, offset: float = 0.0) -> str:
    """Sleep into the next whole second of the server clock (plus offset) and return it as the mirror
    writes times (UTC, whole seconds), so no write shares a second with a time asked about."""
    import time

    frac = float(conn.execute("SELECT extract(epoch FROM clock_timestamp()) % 1").fetchone()[0])
    time.sleep(1 - frac + offset)
    conn.commit()
    return conn.execute("SELECT to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"')"
                        ).fetchone()[0]


def test_cypher_asks_past_beliefs_as_fact_versions_answers(conn, group):
    """What we believed at T' about T: the documented pattern over RELATES_TO and PAST_BELIEF edges
    gives the versions fact_versions gives for the same T and T', through extensions and corrections
    (a new employer ends the old one) and a retraction."""
    def add(target: str, start: str, functional: bool = False) -> None:
        conn.execute("SELECT pgmemory.add_fact(%s, 'Alice', 'works for', %s, %s, p_valid_from => %s,"
                     " p_functional => %s)", (group, target, f"Alice works for {target}.", start, functional))
        conn.commit()

    known = [_next_second(conn, 0.3)]
    _next_second(conn)
    add("Acme", "2020-01-01")
    known.append(_next_second(conn, 0.3))
    _next_second(conn)
    add("Globex", "2021-01-01", functional=True)
    known.append(_next_second(conn, 0.3))
    _next_second(conn)
    globex = conn.execute("SELECT id FROM pgmemory.believed_facts WHERE group_id = %s AND target = 'Globex'",
                          (group,)).fetchone()[0]
    conn.execute("SELECT pgmemory.retract_fact(%s, %s)", (group, globex))
    conn.commit()
    known.append(_next_second(conn, 0.3))
    answers = set()
    for t in ("2019-06-01T00:00:00Z", "2020-06-01T00:00:00Z", "2021-06-01T00:00:00Z"):
        for k in known:
            in_graph = sorted(cypher_rows(conn, PAST_BELIEFS, {"g": group, "t": t, "known": k}))
            in_sql = sorted(conn.execute(
                "SELECT version_id, source, target FROM pgmemory.fact_versions"
                " WHERE group_id = %s AND relation = 'WORKS_FOR' AND valid @> %s::timestamptz"
                "   AND recorded @> %s::timestamptz", (group, t, k)).fetchall())
            assert [tuple(r) for r in in_graph] == [tuple(r) for r in in_sql], (t, k)
            answers.add((t, k, tuple(r[2] for r in in_sql)))
    # The grid saw what changed: Acme alone, then Globex from 2021, then Acme again after the retraction.
    assert {a[2] for a in answers} == {(), ("Acme",), ("Globex",)}
    assert conn.execute("SELECT count(*) FROM pgmemory.fact_versions WHERE group_id = %s AND NOT believed",
                        (group,)).fetchone()[0] >= 2



@pytest.fixture
def two_tenants(db_dsn):
    """Group B's fact about Bob (written by the owner) and an app login granted group A only;
    yields (A, B, the login's DSN, Bob's entity id, Bob's vertex as Cypher returns it)."""
    from pgmemory import SyncMemory
    from pgmemory.providers.embedder import HashEmbedder
    from pgmemory.storage.setup import ensure_current

    tag = uuid.uuid4().hex[:8]
    mine, theirs, role = f"mine-{tag}", f"theirs-{tag}", f"svc_{tag}"
    with psycopg.connect(db_dsn) as conn:
        ensure_current(conn, DIM, HashEmbedder().name)
        grants.grant(conn, role, [mine], kind="app", create_password="pw")
    try:
        with SyncMemory(db_dsn, embedder=HashEmbedder()) as memory:
            memory.add_fact(theirs, "Bob", "LIKES", "Pizza", "Bob likes pizza.")
        with psycopg.connect(db_dsn) as conn:
            bob = conn.execute("SELECT id FROM pgmemory.entities WHERE group_id = %s AND name = 'Bob'",
                               (theirs,)).fetchone()[0]
            vertex = cypher_rows(conn, "MATCH (n:Entity) WHERE n.uuid = $id RETURN n.group_id, n.name, id(n)",
                                 {"id": str(bob)})
        assert [row[:2] for row in vertex] == [(theirs, "Bob")]
        yield mine, theirs, login_dsn(db_dsn, role, "pw"), bob, vertex
    finally:
        with psycopg.connect(db_dsn, autocommit=True) as conn:
            grants.revoke(conn, role, None)
            conn.execute(psycopg.sql.SQL("DROP ROLE {}").format(psycopg.sql.Identifier(role)))


def b_still_writes_through_the_mirror(db_dsn, theirs):
    """Group B's next fact about Bob is mirrored (it failed with "has no vertex" once B's vertex
    was gone)."""
    from pgmemory import SyncMemory
    from pgmemory.providers.embedder import HashEmbedder

    with SyncMemory(db_dsn, embedder=HashEmbedder()) as memory:
        memory.add_fact(theirs, "Bob", "LIKES", "Pasta", "Bob likes pasta.")
    with psycopg.connect(db_dsn) as conn:
        assert sorted(cypher_rows(conn, "MATCH (s:Entity)-[r:RELATES_TO]->(t:Entity) WHERE r.group_id = $g"
                                        " RETURN s.name, r.relation, t.name", {"g": theirs})) == [
            ("Bob", "LIKES", "Pasta"), ("Bob", "LIKES", "Pizza")]


def test_an_app_login_has_no_right_on_the_mirrors_tables(db_dsn, two_tenants):
    """Session 14: the mirror's bookkeeping had an open policy and the app role every right on it,
    so a login of group A read B's node ids and deleted B's rows, after which B's writes failed.
    Neither it nor the AGE label tables are open to the app role now."""
    mine, theirs, dsn, bob, _ = two_tenants
    with psycopg.connect(dsn, autocommit=True) as conn:
        for attempt in ("SELECT count(*) FROM pgmemory.graph_vertices",
                        "SELECT count(*) FROM pgmemory.graph_edges",
                        f"DELETE FROM pgmemory.graph_vertices WHERE node_id = '{bob}'",
                        "DELETE FROM pgmemory.graph_edges",
                        f"INSERT INTO pgmemory.graph_vertices (node_id, vertex_id) VALUES ('{bob}', 1)",
                        'SELECT count(*) FROM pgmemory_graph."Entity"',
                        'DELETE FROM pgmemory_graph."Entity"'):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(attempt)
    b_still_writes_through_the_mirror(db_dsn, theirs)


def test_an_entity_reusing_another_groups_id_gets_a_vertex_of_its_own(db_dsn, two_tenants):
    """Session 14: entity ids are unique within a group only, and the mirror found vertices by id
    alone, so group A's entity with B's entity id overwrote B's vertex, and deleting it deleted
    B's vertex. Now each has its own vertex, and B's is left as it was."""
    mine, theirs, dsn, bob, vertex = two_tenants
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO pgmemory.entities (id, group_id, name) VALUES (%s, %s, 'Mallory')", (bob, mine))
        with psycopg.connect(db_dsn) as owner:
            both = cypher_rows(owner, "MATCH (n:Entity) WHERE n.uuid = $id RETURN n.group_id, n.name, id(n)",
                               {"id": str(bob)})
        assert sorted(row[:2] for row in both) == sorted([(mine, "Mallory"), (theirs, "Bob")])
        assert vertex[0] in both
        conn.execute("DELETE FROM pgmemory.entities WHERE group_id = %s", (mine,))
    with psycopg.connect(db_dsn) as conn:
        assert cypher_rows(conn, "MATCH (n:Entity) WHERE n.uuid = $id RETURN n.group_id, n.name, id(n)",
                           {"id": str(bob)}) == vertex
    b_still_writes_through_the_mirror(db_dsn, theirs)


def test_the_age_bfs_walks_only_the_seeds_groups_vertices(db_dsn, two_tenants):
    """Each group has its own vertex for an id it shares with another group, so the Cypher BFS
    starts from the vertices of the groups asked for: group A holding copies of B's ids for Bob
    and Pizza (and no fact) reaches nothing from Bob, though B's Bob likes Pizza."""
    mine, theirs, _, bob, _ = two_tenants
    with psycopg.connect(db_dsn) as conn:
        pizza = conn.execute("SELECT id FROM pgmemory.entities WHERE group_id = %s AND name = 'Pizza'",
                             (theirs,)).fetchone()[0]
        conn.execute("INSERT INTO pgmemory.entities (id, group_id, name) VALUES (%s, %s, 'Bob'), (%s, %s, 'Pizza')",
                     (bob, mine, pizza, mine))
        bfs = "SELECT entity_id, distance FROM pgmemory.bfs_entities_age(%s, %s, 2) ORDER BY 2"
        assert conn.execute(bfs, ([theirs], [bob])).fetchall() == [(bob, 0), (pizza, 1)]
        assert conn.execute(bfs, ([mine], [bob])).fetchall() == [(bob, 0)]
        conn.rollback()
