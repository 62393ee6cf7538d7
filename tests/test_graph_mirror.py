"""The AGE graph mirrors the tables, in the same transaction."""
from __future__ import annotations

import json
import uuid

import psycopg

from pgmemory.config import GRAPH_NAME


def cypher_rows(conn, query: str, params: dict) -> list:
    conn.execute("LOAD 'age'")
    conn.execute("SET search_path = ag_catalog, public")
    rows = conn.execute(
        f"SELECT * FROM cypher('{GRAPH_NAME}', $$ {query} $$, %s::agtype) AS (a agtype, b agtype, c agtype)",
        (json.dumps(params),)).fetchall()
    conn.execute("RESET search_path")
    return [tuple(json.loads(v) for v in row) for row in rows]


def graph_edges(conn, group):
    return sorted(cypher_rows(
        conn, "MATCH (s:Entity)-[r:RELATES_TO]->(t:Entity) WHERE r.group_id = $g"
              " RETURN s.name, r.relation, t.name", {"g": group}))


def table_edges(conn, group):
    return sorted(conn.execute(
        "SELECT source, relation, target FROM pgmemory.believed_facts WHERE group_id = %s",
        (group,)).fetchall())


def build(conn, group):
    ids = {}
    for name in ("Alice", "Acme", "Globex"):
        ids[name] = uuid.uuid4()
        conn.execute("INSERT INTO pgmemory.entities (id, group_id, name) VALUES (%s, %s, %s)",
                     (ids[name], group, name))
    ep = uuid.uuid4()
    conn.execute("INSERT INTO pgmemory.episodes (id, group_id, kind, content, actor, valid_at)"
                 " VALUES (%s, %s, 'message', 'I work at Acme', 'Alice', now())", (ep, group))
    for name in ("Alice", "Acme"):
        conn.execute("INSERT INTO pgmemory.episode_mentions (episode_id, entity_id, group_id)"
                     " VALUES (%s, %s, %s)", (ep, ids[name], group))
    fid = uuid.uuid4()
    conn.execute("SELECT pgmemory.record_fact(%s, %s, %s, %s, 'WORKS_FOR', 'Alice works for Acme',"
                 " now(), NULL, NULL, '{}', %s)", (fid, group, ids["Alice"], ids["Acme"], ep))
    return ids, ep, fid


def test_mirror_agrees_after_writes_and_corrections(conn, group):
    ids, ep, fid = build(conn, group)
    conn.commit()
    assert graph_edges(conn, group) == table_edges(conn, group) == [("Alice", "WORKS_FOR", "Acme")]
    mentions = cypher_rows(conn, "MATCH (e:Episode)-[:MENTIONS]->(n:Entity) WHERE e.group_id = $g"
                                 " RETURN e.uuid, n.name, n.group_id", {"g": group})
    assert sorted(m[1] for m in mentions) == ["Acme", "Alice"]
    assert {m[0] for m in mentions} == {str(ep)}

    conn.execute("SELECT pgmemory.invalidate_fact(%s, %s, now())", (group, fid))
    conn.execute("UPDATE pgmemory.entities SET name = 'Acme Corp' WHERE id = %s", (ids["Acme"],))
    conn.commit()
    edges = graph_edges(conn, group)
    assert edges == table_edges(conn, group) == [("Alice", "WORKS_FOR", "Acme Corp")]
    assert conn.execute("SELECT count(*) FROM pgmemory.facts WHERE id = %s", (fid,)).fetchone()[0] == 2

    conn.execute("DELETE FROM pgmemory.episodes WHERE id = %s", (ep,))
    conn.commit()
    assert cypher_rows(conn, "MATCH (e:Episode) WHERE e.group_id = $g RETURN e.uuid, e.kind, e.actor",
                       {"g": group}) == []
    assert cypher_rows(conn, "MATCH ()-[m:MENTIONS]->() WHERE m.group_id = $g RETURN m, m, m",
                       {"g": group}) == []


def test_rolled_back_transaction_leaves_no_trace_in_either(conn, group):
    before = conn.execute("SELECT count(*) FROM pgmemory.graph_vertices").fetchone()[0]
    build(conn, group)
    assert graph_edges(conn, group) == [("Alice", "WORKS_FOR", "Acme")]
    conn.rollback()
    assert graph_edges(conn, group) == table_edges(conn, group) == []
    assert cypher_rows(conn, "MATCH (n:Entity) WHERE n.group_id = $g RETURN n.name, n.uuid, n.group_id",
                       {"g": group}) == []
    assert conn.execute("SELECT count(*) FROM pgmemory.graph_vertices").fetchone()[0] == before


def test_vertex_counts_match_tables(db_dsn, group):
    with psycopg.connect(db_dsn) as conn:
        build(conn, group)
        conn.commit()
        for label, table in (("Entity", "entities"), ("Episode", "episodes")):
            in_graph = cypher_rows(conn, f"MATCH (n:{label}) WHERE n.group_id = $g RETURN n.uuid, n.uuid, n.uuid",
                                   {"g": group})
            in_table = conn.execute(f"SELECT id::text FROM pgmemory.{table} WHERE group_id = %s",
                                    (group,)).fetchall()
            assert sorted(r[0] for r in in_graph) == sorted(r[0] for r in in_table)


def test_mentions_added_by_one_statement_are_mirrored_each(conn, group):
    """Issue 9: an episode's mentions are one INSERT, mirrored by a statement trigger: each row is
    one MENTIONS edge from the episode to its entity, with its key in graph_edges; a mention whose
    entity has no vertex still fails the statement, as the row trigger did."""
    ids, _, _ = build(conn, group)
    ep = uuid.uuid4()
    conn.execute("INSERT INTO pgmemory.episodes (id, group_id, kind, content, actor, valid_at)"
                 " VALUES (%s, %s, 'message', 'Alice left Acme for Globex', 'Alice', now())", (ep, group))
    conn.execute("INSERT INTO pgmemory.episode_mentions (episode_id, entity_id, group_id)"
                 " SELECT %s, x, %s FROM unnest(%s::uuid[]) AS x", (ep, group, list(ids.values())))
    mentions = cypher_rows(conn, "MATCH (e:Episode)-[m:MENTIONS]->(n:Entity) WHERE e.uuid = $ep"
                                 " RETURN n.name, m.group_id, e.group_id", {"ep": str(ep)})
    assert sorted(mentions) == [(name, group, group) for name in ("Acme", "Alice", "Globex")]
    keys = conn.execute("SELECT count(*) FROM pgmemory.graph_edges WHERE edge_key LIKE %s",
                        (f"mention:{ep}:%",)).fetchone()[0]
    assert keys == 3
    conn.execute("DELETE FROM pgmemory.episode_mentions WHERE episode_id = %s AND entity_id = %s",
                 (ep, ids["Acme"]))
    assert sorted(m[0] for m in cypher_rows(
        conn, "MATCH (e:Episode)-[m:MENTIONS]->(n:Entity) WHERE e.uuid = $ep RETURN n.name, m.group_id, e.uuid",
        {"ep": str(ep)})) == ["Alice", "Globex"]
    conn.commit()
    lost = uuid.uuid4()
    conn.execute("INSERT INTO pgmemory.entities (id, group_id, name) VALUES (%s, %s, 'Initech')", (lost, group))
    conn.execute("DELETE FROM pgmemory.graph_vertices WHERE node_id = %s", (lost,))
    try:
        conn.execute("INSERT INTO pgmemory.episode_mentions (episode_id, entity_id, group_id)"
                     " VALUES (%s, %s, %s), (%s, %s, %s)", (ep, ids["Acme"], group, ep, lost, group))
    except psycopg.errors.RaiseException as exc:
        assert "has no vertex" in str(exc)
    else:
        raise AssertionError("a mention without a vertex was accepted")
    conn.rollback()
