"""The contradiction candidates of a new fact (sql/40_ingest_candidates.sql) around hub entities:
the set the extractor sees must be the one the definition names, however the read is bounded."""
from __future__ import annotations

import random
import uuid

import psycopg

from pgmemory.storage.setup import init_database

# The definition written plainly (every still-valid fact of both endpoints read and sorted): the
# p_k nearest among the 100 most recently recorded still-valid facts with the source or target
# as their source, and among those with either as their target; plus every believed fact with
# the same source and relation that has not ended by the new fact's evidence start (any, without
# one: a negation).
REFERENCE = """
SELECT f.id, s.name, t.name, f.relation, lower(f.valid), upper(f.valid),
       coalesce(1 - (f.embedding <=> %(emb)s::vector), 0)
  FROM pgmemory.facts f
  JOIN pgmemory.entities s ON s.group_id = f.group_id AND s.id = f.source_id
  JOIN pgmemory.entities t ON t.group_id = f.group_id AND t.id = f.target_id
 WHERE f.group_id = %(g)s AND f.version_id IN (
       SELECT near.version_id FROM (
              (SELECT r.version_id, r.embedding FROM pgmemory.facts r
                WHERE r.group_id = %(g)s AND r.source_id IN (%(a)s, %(b)s)
                  AND upper_inf(r.recorded) AND upper_inf(r.valid)
                ORDER BY lower(r.recorded) DESC LIMIT 100)
              UNION ALL
              (SELECT r.version_id, r.embedding FROM pgmemory.facts r
                WHERE r.group_id = %(g)s AND r.target_id IN (%(a)s, %(b)s)
                  AND upper_inf(r.recorded) AND upper_inf(r.valid)
                ORDER BY lower(r.recorded) DESC LIMIT 100)) near
        ORDER BY near.embedding <=> %(emb)s::vector LIMIT 10)
    OR (f.group_id = %(g)s AND f.source_id = %(a)s AND f.relation = %(rel)s AND upper_inf(f.recorded)
        AND (%(start)s::timestamptz IS NULL OR upper(f.valid) IS NULL OR upper(f.valid) > %(start)s::timestamptz))
 ORDER BY 7 DESC
"""


def vec(rng: random.Random) -> str:
    return "[" + ",".join(f"{rng.uniform(-1, 1):.6f}" for _ in range(384)) + "]"


def test_contradiction_candidates_of_hubs_are_the_defined_set(conn, group):
    """Two hubs with 130 still-valid facts each as source and 110 as target (each recorded at
    its own time, distinct vectors), 40 ended facts of one relation: the candidates of a new fact
    between the hubs are exactly the reference's rows in the reference's order, and of a fact
    from a hub to a new entity too; with an evidence start, the ended facts of its relation that
    ended before it are not candidates, those ending after it are."""
    rng = random.Random(9)
    ids = {name: uuid.uuid4() for name in ("A", "B", "C")}
    others = [uuid.uuid4() for _ in range(60)]
    with conn.transaction():
        conn.execute("INSERT INTO pgmemory.entities (id, group_id, name) SELECT x.id, %s, x.name"
                     " FROM unnest(%s::uuid[], %s::text[]) AS x (id, name)",
                     (group, list(ids.values()) + others, list(ids) + [f"E{i}" for i in range(60)]))
        rows = []
        n = 0
        for hub in ("A", "B"):
            for i in range(130):
                rows.append((ids[hub], rng.choice(others), rng.choice(["LIKES", "VISITED", "HAS_FRIEND"]), True))
            for i in range(110):
                rows.append((rng.choice(others), ids[hub], "KNOWS", True))
        for i in range(40):
            rows.append((ids["A"], rng.choice(others), "LIVES_IN", False))
        rng.shuffle(rows)
        for source, target, relation, open_ in rows:
            n += 1
            conn.execute(
                "INSERT INTO pgmemory.facts (id, lineage, group_id, source_id, target_id, relation, fact, embedding,"
                " valid, recorded)"
                " VALUES (%(id)s, %(id)s, %(g)s, %(s)s, %(t)s, %(rel)s, %(fact)s, %(emb)s::vector,"
                "  tstzrange('2020-01-01'::timestamptz + %(n)s * interval '1 day',"
                "            CASE WHEN NOT %(open)s THEN '2020-01-01'::timestamptz + (%(n)s + 1) * interval '1 day' END),"
                "  tstzrange('2025-01-01'::timestamptz + %(n)s * interval '1 minute', NULL))",
                {"id": uuid.uuid4(), "g": group, "s": source, "t": target, "rel": relation,
                 "fact": f"fact {n}", "emb": vec(rng), "n": n, "open": open_})
    ended = sorted(r[0] for r in conn.execute(
        "SELECT upper(valid) FROM pgmemory.facts WHERE group_id = %s AND relation = 'LIVES_IN'", (group,)))
    middle = ended[len(ended) // 2]
    for a, b in ((ids["A"], ids["B"]), (ids["A"], ids["C"]), (ids["B"], ids["A"])):
        for rel in ("LIVES_IN", "LIKES"):
            for start in (None, middle):
                emb = vec(rng)
                got = conn.execute(
                    "SELECT fact_id, source_name, target_name, relation, valid_from, valid_to, similarity"
                    " FROM pgmemory_internal.contradiction_candidates(%s, %s, %s, %s, ARRAY[%s::vector],"
                    " ARRAY[%s::timestamptz])", (group, [a], [b], [rel], emb, start)).fetchall()
                want = conn.execute(REFERENCE, {"g": group, "a": a, "b": b, "rel": rel, "emb": emb,
                                                "start": start}).fetchall()
                assert len(want) >= 10
                assert got == want
                if a == ids["A"] and rel == "LIVES_IN":  # the ended homes: all, or those ending after it
                    homes = [r for r in got if r[3] == "LIVES_IN"]
                    assert len(homes) == (40 if start is None else sum(t > middle for t in ended))


def test_entity_candidates_generic_plan_only_where_a_group_holds_most_entities(empty_dsn):
    """Issue 9: read_entity_candidates answers from the generic-planned twin
    (entity_candidates_generic, constant limits) only for a group that holds at least half of the
    entity name vectors, where a custom plan is the same plan; a small group of a larger table keeps
    plans made with its value (the HNSW read filtered to it could miss its names). Both give the
    same candidates as entity_candidates with its default limits: exact names, nearest names,
    full-text matches, no match."""
    rng = random.Random(5)
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        init_database(conn, 384)
        vectors = {}
        for group, count in (("big", 60), ("small", 4)):
            for i in range(count):
                name = f"{group.title()} Person{i} Lake{i % 7}"
                vectors[(group, name)] = vec(rng)
                conn.execute("WITH e AS (INSERT INTO pgmemory.entities (id, group_id, name) VALUES (%s, %s, %s)"
                             " RETURNING id, group_id)"
                             " INSERT INTO pgmemory.entity_name_vectors (group_id, entity_id, name_embedding)"
                             " SELECT group_id, id, %s::vector FROM e",
                             (uuid.uuid4(), group, name, vectors[(group, name)]))
        conn.execute("ANALYZE pgmemory.entity_name_vectors")
        most = {g: conn.execute("SELECT pgmemory_internal.holds_most_entities(%s)", (g,)).fetchone()[0]
                for g in ("big", "small", "nobody")}
        assert most == {"big": True, "small": False, "nobody": False}
        for group in ("big", "small"):
            first = f"{group.title()} Person1 Lake1"
            names = [first.upper(), "Someone Else", "Lake3", "Nothing Like It"]
            embeddings = [vec(rng), vectors[(group, f"{group.title()} Person2 Lake2")], None, vec(rng)]
            args = (group, names, embeddings)
            custom = conn.execute("SELECT * FROM pgmemory_internal.entity_candidates(%s, %s, %s::vector[])",
                                  args).fetchall()
            generic = conn.execute("SELECT * FROM pgmemory_internal.entity_candidates_generic(%s, %s, %s::vector[])",
                                   args).fetchall()
            read = conn.execute("SELECT idx, entity_id, name, labels, summary, exact, similarity"
                                " FROM pgmemory_internal.read_entity_candidates(%s, %s, %s::vector[])",
                                args).fetchall()
            assert generic == custom and read == custom
            found = {(r[0], r[2]) for r in custom}
            assert (1, first) in found and (2, f"{group.title()} Person2 Lake2") in found
            assert {r[0] for r in custom} >= {1, 2, 3} and 4 not in {r[0] for r in custom}


def test_entity_candidates_that_tie_come_in_name_order(conn, group):
    """Entities equally similar to a name said ("Iris": "Iris Smith", "Iris Reyes", ..., with the
    same name vector) come by name whatever order they were stored in, so every plan and every
    node of a cluster resolves the name to the same entity (the first candidate)."""
    rng = random.Random(3)
    v = vec(rng)
    names = ["Iris Young", "Iris Smith", "Iris Reyes", "Iris Adler"]  # (within the reads' limit of 5)
    with conn.transaction():
        for name in names:
            eid = uuid.uuid4()
            conn.execute("INSERT INTO pgmemory.entities (id, group_id, name) VALUES (%s, %s, %s)", (eid, group, name))
            conn.execute("INSERT INTO pgmemory.entity_name_vectors (group_id, entity_id, name_embedding)"
                         " VALUES (%s, %s, %s::vector)", (group, eid, v))
    rows = conn.execute("SELECT name FROM pgmemory_internal.entity_candidates_generic(%s, %s, ARRAY[%s::vector])",
                        (group, ["Iris"], v)).fetchall()
    assert [r[0] for r in rows] == sorted(names)


def test_full_text_entity_candidates_that_tie_at_the_limit_are_the_first_by_name(conn, group):
    """Eight entities match "Iris" by full text equally well (no name vector to order them): the
    five read are the first five by name, whichever order they were stored in."""
    names = [f"Iris {surname}" for surname in ("Young", "Smith", "Reyes", "Adler", "Moreau", "Ito", "Costa", "Brennan")]
    random.Random(5).shuffle(names)
    with conn.transaction():
        for name in names:
            conn.execute("INSERT INTO pgmemory.entities (id, group_id, name) VALUES (%s, %s, %s)",
                         (uuid.uuid4(), group, name))
    for fn in ("entity_candidates", "entity_candidates_generic"):
        rows = conn.execute(f"SELECT name FROM pgmemory_internal.{fn}(%s, %s, ARRAY[NULL::vector])",
                            (group, ["Iris"])).fetchall()
        assert [r[0] for r in rows] == sorted(names)[:5], fn
