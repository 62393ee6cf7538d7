"""Migration runner: idempotent, checksum-guarded, atomic."""
from __future__ import annotations

import dataclasses
import json
import uuid

import psycopg
import pytest

from pgmemory.errors import MigrationError
from pgmemory.storage import migrate



def old_database(conn: psycopg.Connection, before: int, entities: dict[str, uuid.UUID]) -> None:
    """A database as an older pgmemory left it: the migrations numbered below `before`, and the
    entities of group 'g' (name -> id) its claims are about (an upgrade re-folds them)."""
    conn.execute("CREATE EXTENSION vector")
    migrate.apply_migrations(conn, [m for m in migrate.load_migrations() if m.version < before])
    for name, eid in entities.items():
        conn.execute("INSERT INTO pgmemory.entities (id, group_id, name, created_at, updated_at)"
                     " VALUES (%s, 'g', %s, '2024-01-01Z', '2024-01-01Z')", (eid, name))

def test_second_run_applies_nothing(empty_dsn):
    with psycopg.connect(empty_dsn) as conn:
        conn.execute("CREATE EXTENSION vector")
        first = migrate.apply_migrations(conn)
        conn.commit()
        second = migrate.apply_migrations(conn)
        conn.commit()
        versions = conn.execute("SELECT version, checksum FROM pgmemory.schema_migrations").fetchall()
    assert first == [m.name for m in migrate.load_migrations()]
    assert second == []
    assert [v for v, _ in versions] == [m.version for m in migrate.load_migrations()]
    assert versions[0][1] == migrate.load_migrations()[0].checksum


def test_edited_migration_is_refused(empty_dsn):
    migrations = migrate.load_migrations()
    with psycopg.connect(empty_dsn) as conn:
        conn.execute("CREATE EXTENSION vector")
        migrate.apply_migrations(conn, migrations)
        conn.commit()
        edited = [dataclasses.replace(migrations[0], sql=migrations[0].sql + "\n-- edited\n"),
                  *migrations[1:]]
        with pytest.raises(MigrationError, match=r"0001_schema\.sql was edited after it was applied"):
            migrate.apply_migrations(conn, edited)


def test_failing_migration_leaves_nothing(empty_dsn):
    broken = [migrate.Migration(1, "0001_broken.sql", "CREATE TABLE pgmemory.a (x int); SELECT 1/0;")]
    with psycopg.connect(empty_dsn) as conn:
        with pytest.raises(MigrationError, match="0001_broken.sql failed: division by zero"):
            with conn.transaction():
                migrate.apply_migrations(conn, broken)
        assert conn.execute("SELECT to_regclass('pgmemory.a')").fetchone()[0] is None
        assert conn.execute("SELECT to_regnamespace('pgmemory')").fetchone()[0] is None


def test_badly_named_file_is_refused(tmp_path):
    (tmp_path / "0001_ok.sql").write_text("SELECT 1;")
    (tmp_path / "2_bad.sql").write_text("SELECT 1;")
    with pytest.raises(MigrationError, match=r"2_bad\.sql is not named NNNN_name\.sql"):
        migrate.load_migrations(tmp_path)


def test_upgrade_moves_entity_name_vectors_out_of_the_entity_rows(empty_dsn):
    """0350: a database whose entities carry their name vectors (typed and HNSW-indexed by an older
    init) keeps every vector, now in entity_name_vectors, and resolves names by cosine as before."""
    from pgmemory.storage.setup import init_database

    dim = 384
    near = "[" + ",".join(["1"] + ["0"] * (dim - 1)) + "]"
    far = "[" + ",".join(["0", "1"] + ["0"] * (dim - 2)) + "]"
    with psycopg.connect(empty_dsn) as conn:
        conn.execute("CREATE EXTENSION vector")
        migrate.apply_migrations(conn, [m for m in migrate.load_migrations() if m.version < 350])
        # What set_embedding_dim did before 0350: the column typed, its HNSW index built.
        conn.execute(f"ALTER TABLE pgmemory.entities ALTER COLUMN name_embedding TYPE vector({dim})")
        conn.execute("CREATE INDEX entities_name_embedding_hnsw ON pgmemory.entities"
                     " USING hnsw (name_embedding vector_cosine_ops)")
        conn.execute("INSERT INTO pgmemory.settings (key, value) VALUES ('embedding_dim', %s)", (str(dim),))
        conn.execute("INSERT INTO pgmemory.entities (id, group_id, name, name_embedding) VALUES"
                     " ('00000000-0000-0000-0000-00000000000a', 'g', 'Alice', %s),"
                     " ('00000000-0000-0000-0000-00000000000b', 'g', 'Bob', %s),"
                     " ('00000000-0000-0000-0000-00000000000c', 'g', 'Carol', NULL)", (near, far))
        conn.commit()

        report = init_database(conn, dim)
        conn.commit()
        assert "0350_entity_name_vectors.sql" in report.migrations_applied
        moved = conn.execute("SELECT e.name, v.name_embedding::text FROM pgmemory.entity_name_vectors v"
                             " JOIN pgmemory.entities e ON e.group_id = v.group_id AND e.id = v.entity_id"
                             " ORDER BY 1").fetchall()
        assert moved == [("Alice", near), ("Bob", far)]
        assert conn.execute("SELECT count(*) FROM pg_attribute WHERE attrelid = 'pgmemory.entities'::regclass"
                            " AND attname = 'name_embedding' AND NOT attisdropped").fetchone() == (0,)
        assert conn.execute("SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid ="
                            " 'pgmemory.entity_name_vectors'::regclass AND attname = 'name_embedding'"
                            ).fetchone() == (f"vector({dim})",)
        assert conn.execute("SELECT to_regclass('pgmemory.entity_name_vectors_name_embedding_hnsw') IS NOT NULL,"
                            " to_regclass('pgmemory.entities_name_embedding_hnsw')").fetchone() == (True, None)
        # A new name near Alice's vector resolves to Alice by cosine (no exact or full-text match).
        found = conn.execute("SELECT name, similarity FROM pgmemory_internal.entity_candidates("
                             "'g', ARRAY['Alicia'], ARRAY[%s::vector])", (near,)).fetchall()
        assert found == [("Alice", 1.0)]
        # Deleting an entity deletes its vector.
        conn.execute("DELETE FROM pgmemory.entities WHERE name = 'Bob'")
        assert conn.execute("SELECT count(*) FROM pgmemory.entity_name_vectors").fetchone() == (1,)


def test_upgrade_keys_the_graph_mirror_by_group(empty_dsn):
    """0530: the AGE mirror's bookkeeping of an older database (keyed by node id alone) takes each
    row's group from the group_id property of its vertex or edge, and rows pointing at nothing go.
    The mirror then goes on with the vertices it has, and another group reusing one of their ids
    gets a vertex of its own instead of overwriting (and then deleting) that group's."""
    from pgmemory.storage import setup
    from tests.test_graph_mirror import cypher_rows

    alice, acme, gone = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    with psycopg.connect(empty_dsn) as conn:
        conn.execute("CREATE EXTENSION vector")
        conn.execute("CREATE EXTENSION age")
        migrate.apply_migrations(conn, [m for m in migrate.load_migrations() if m.version < 530])
        setup._ensure_graph(conn)
        # What the mirror of older releases wrote for group g: two entity vertices, an edge.
        conn.execute("INSERT INTO pgmemory.entities (id, group_id, name) VALUES (%s, 'g', 'Alice'), (%s, 'g', 'Acme')",
                     (alice, acme))
        vertex = {}
        for node, name in ((alice, "Alice"), (acme, "Acme")):
            props = {"uuid": str(node), "group_id": "g", "name": name, "labels": ["Entity"], "summary": ""}
            vertex[node] = conn.execute('INSERT INTO pgmemory_graph."Entity" (properties)'
                                        " VALUES (%s::text::ag_catalog.agtype) RETURNING id::text::bigint",
                                        (json.dumps(props),)).fetchone()[0]
            conn.execute("INSERT INTO pgmemory.graph_vertices (node_id, vertex_id) VALUES (%s, %s)", (node, vertex[node]))
        edge = conn.execute(
            'INSERT INTO pgmemory_graph."RELATES_TO" (start_id, end_id, properties)'
            " VALUES (%s::text::ag_catalog.graphid, %s::text::ag_catalog.graphid, %s::text::ag_catalog.agtype)"
            " RETURNING id::text::bigint",
            (vertex[alice], vertex[acme], json.dumps({"group_id": "g", "relation": "WORKS_FOR"}))).fetchone()[0]
        conn.execute("INSERT INTO pgmemory.graph_edges (edge_key, edge_id) VALUES ('fact:1', %s)", (edge,))
        conn.execute("INSERT INTO pgmemory.graph_vertices (node_id, vertex_id) VALUES (%s, 1)", (gone,))
        conn.execute("""INSERT INTO pgmemory.settings (key, value) VALUES ('graph_mode', '"age"'), ('graph_props', '"3"')""")
        conn.commit()

        report = setup.init_database(conn, 384)
        conn.commit()
        assert "0530_graph_mirror_by_group.sql" in report.migrations_applied
        keyed = conn.execute("SELECT group_id, node_id, vertex_id FROM pgmemory.graph_vertices").fetchall()
        assert sorted(keyed) == sorted([("g", alice, vertex[alice]), ("g", acme, vertex[acme])])
        assert conn.execute("SELECT group_id, edge_key, edge_id FROM pgmemory.graph_edges").fetchall() == [
            ("g", "fact:1", edge)]
        conn.execute("UPDATE pgmemory.entities SET name = 'Acme Corp' WHERE id = %s", (acme,))
        conn.execute("INSERT INTO pgmemory.entities (id, group_id, name) VALUES (%s, 'h', 'Mallory')", (alice,))
        assert sorted(cypher_rows(conn, "MATCH (n:Entity) RETURN n.group_id, n.name, id(n)", {})) == sorted([
            ("g", "Alice", vertex[alice]), ("g", "Acme Corp", vertex[acme]),
            ("h", "Mallory", conn.execute("SELECT vertex_id FROM pgmemory.graph_vertices WHERE group_id = 'h'").fetchone()[0])])
        conn.execute("DELETE FROM pgmemory.entities WHERE group_id = 'h'")
        assert sorted(cypher_rows(conn, "MATCH (n:Entity) RETURN n.group_id, n.name, id(n)", {})) == sorted([
            ("g", "Alice", vertex[alice]), ("g", "Acme Corp", vertex[acme])])


def test_upgrade_marks_the_entities_renamed_so_far(empty_dsn):
    """0540: an older database's entities with a kept version of another name are marked renamed
    (not those whose versions only changed the summary), so fact_versions names the versions
    recorded before the rename by the old name; a rename after the upgrade marks the entity too."""
    from pgmemory.storage.setup import init_database

    bob, carol, paris = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    with psycopg.connect(empty_dsn) as conn:
        conn.execute("CREATE EXTENSION vector")
        migrate.apply_migrations(conn, [m for m in migrate.load_migrations() if m.version < 540])
        # What older releases kept: Bob renamed Robert on 2024-02-01, Carol's summary changed then.
        conn.execute("INSERT INTO pgmemory.entities (id, group_id, name, created_at, updated_at) VALUES"
                     " (%s, 'g', 'Robert', '2024-01-01Z', '2024-02-01Z'), (%s, 'g', 'Carol', '2024-01-01Z', '2024-02-01Z'),"
                     " (%s, 'g', 'Paris', '2024-01-01Z', '2024-01-01Z')", (bob, carol, paris))
        conn.execute("INSERT INTO pgmemory.entity_versions (entity_id, group_id, name, labels, summary, attributes, recorded)"
                     " VALUES (%s, 'g', 'Bob', '{Entity}', '', '{}', '[2024-01-01Z, 2024-02-01Z)'),"
                     " (%s, 'g', 'Carol', '{Entity}', 'old', '{}', '[2024-01-01Z, 2024-02-01Z)')", (bob, carol))
        for source, target, at in ((bob, carol, "2024-01-15Z"), (carol, paris, "2024-01-15Z"), (bob, paris, "2024-03-01Z")):
            conn.execute("INSERT INTO pgmemory.facts (id, lineage, group_id, source_id, target_id, relation, fact, valid, recorded)"
                         " VALUES (gen_random_uuid(), gen_random_uuid(), 'g', %s, %s, 'KNOWS', 'x', tstzrange(NULL, NULL),"
                         " tstzrange(%s, NULL))",
                         (source, target, at))
        conn.commit()

        report = init_database(conn, 384)
        conn.commit()
        assert "0540_entities_renamed.sql" in report.migrations_applied
        assert conn.execute("SELECT name FROM pgmemory.entities WHERE renamed").fetchall() == [("Robert",)]
        assert conn.execute("SELECT source, target FROM pgmemory.fact_versions ORDER BY recorded_from, target"
                            ).fetchall() == [("Bob", "Carol"), ("Carol", "Paris"), ("Robert", "Paris")]
        conn.execute("UPDATE pgmemory.entities SET name = 'Paris, France' WHERE id = %s", (paris,))
        conn.execute("UPDATE pgmemory.entities SET summary = 'a friend' WHERE id = %s", (carol,))
        assert conn.execute("SELECT name FROM pgmemory.entities WHERE renamed ORDER BY 1").fetchall() == [
            ("Paris, France",), ("Robert",)]


def test_upgrade_stores_the_exclusive_lineages_of_the_claims_so_far(empty_dsn):
    """0580: an older database's claims give their exclusive pairs (both ways, none from a retracted
    claim) and components, so a re-fold after the upgrade sees the contradictions made before it."""
    from pgmemory.storage.setup import init_database
    from tests.belief import EXCLUSION_QUERIES, check_exclusions

    a, b, c, d, e, f, alice = (uuid.uuid4() for _ in range(7))
    with psycopg.connect(empty_dsn) as conn:
        old_database(conn, 580, {str(eid): eid for eid in (alice, a, b, c, d, e, f)})
        for lineage, contradicts, retracted in ((a, [], None), (b, [a], None), (c, [b, a], None),
                                                (d, [], None), (e, [d], 1), (f, [f], None)):
            conn.execute("INSERT INTO pgmemory.fact_claims (group_id, kind, id, lineage, source_id, target_id,"
                         " relation, fact, ref_time, contradicts, retracted_by)"
                         " VALUES ('g', 'assert', %s, %s, %s, %s, 'WORKS_FOR', 'x', '2024-01-01Z', %s, %s)",
                         (lineage, lineage, alice, lineage, contradicts, retracted))
        conn.commit()

        report = init_database(conn, 384)
        conn.commit()
        assert "0580_lineage_exclusions.sql" in report.migrations_applied
        check_exclusions(*(conn.execute(q, ("g",)).fetchall() for q in EXCLUSION_QUERIES))
        assert len(conn.execute("SELECT * FROM pgmemory.lineage_exclusions").fetchall()) == 6  # a-b, a-c, b-c
        assert sorted(conn.execute("SELECT pgmemory_internal.claim_component('g', %s)", ([a],)).fetchone()[0]) \
            == sorted([a, b, c])
        assert conn.execute("SELECT pgmemory_internal.claim_component('g', %s)", ([d],)).fetchone()[0] == [d]


def upgrade_beliefs(dsn: str, facts, claims, migration: str) -> list[tuple]:
    """A database at migration 0570 holding Alice, Acme and Globex, the given fact versions (id,
    target, valid, recorded) and assertions of Alice WORKS_FOR (id, target, valid_from, valid_to,
    ref_time, contradicts; each its own lineage unless named, landed on the fact of its lineage),
    upgraded by init (which applies `migration`): the believed (target, start, end), and no
    beliefs_stale flag left."""
    from pgmemory.storage.setup import init_database

    names = {"Alice": uuid.uuid4(), "Acme": uuid.uuid4(), "Globex": uuid.uuid4()}
    with psycopg.connect(dsn) as conn:
        old_database(conn, 580, names)
        for fid, target, valid, recorded in facts:
            conn.execute("INSERT INTO pgmemory.facts (id, lineage, group_id, source_id, target_id, relation, fact,"
                         " valid, recorded) VALUES (%s, %s, 'g', %s, %s, 'WORKS_FOR', 'Alice works for x', %s, %s)",
                         (fid, fid, names["Alice"], names[target], valid, recorded))
        for cid, lineage, target, frm, to, ref, contradicts in claims:
            conn.execute("INSERT INTO pgmemory.fact_claims (group_id, kind, id, lineage, fact_id, source_id, target_id,"
                         " relation, fact, valid_from, valid_to, ref_time, contradicts)"
                         " VALUES ('g', 'assert', %s, %s, %s, %s, %s, 'WORKS_FOR', 'Alice works for x', %s, %s, %s, %s)",
                         (cid, lineage, lineage, names["Alice"], names[target], frm, to, ref, contradicts))
        conn.commit()
        report = init_database(conn, 384)
        conn.commit()
        assert migration in report.migrations_applied
        assert conn.execute("SELECT count(*) FROM pgmemory.settings WHERE key = 'beliefs_stale'").fetchone()[0] == 0
        by_id = {eid: name for name, eid in names.items()}
        return [(by_id[t], lo, hi) for t, lo, hi in conn.execute(
            "SELECT target_id, lower(valid)::date::text, upper(valid)::date::text"
            " FROM pgmemory.facts WHERE group_id = 'g' AND upper_inf(recorded) ORDER BY 2").fetchall()]


def test_upgrade_refolds_the_claims_with_an_end_stated_after_the_fact(empty_dsn):
    """0600: "worked at Acme until 2019", said in 2021, took its place in 2021 and ended the job held
    then; after the upgrade its place is 2019: the lineages with such claims are re-folded (Globex
    holds again) and the flag that asked for it is cleared."""
    la, lg, a2 = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    now = "[2024-01-01Z,)"
    believed = upgrade_beliefs(
        empty_dsn,
        # What the older rules believed: Acme [2018, 2019), Globex ended in 2021 by the Acme claim.
        [(la, "Acme", "[2018-01-01Z, 2019-01-01Z)", now), (lg, "Globex", "[2019-01-01Z, 2021-01-01Z)", now)],
        [(la, la, "Acme", "2018-01-01Z", None, "2018-01-01Z", []),
         (lg, lg, "Globex", "2019-01-01Z", None, "2019-01-01Z", [la]),
         (a2, la, "Acme", None, "2019-01-01Z", "2021-01-01Z", [lg])],
        "0600_fold_key_stated_end.sql")
    assert believed == [("Acme", "2018-01-01", "2019-01-01"), ("Globex", "2019-01-01", None)]


def test_upgrade_refolds_claims_at_one_point_in_the_new_order(empty_dsn):
    """0640: two values of a functional relation stated from the same day were folded in arrival
    order (Globex from 2020, then Acme from 2020 until March: Globex withdrawn, nothing held after
    March). After the upgrade the ended statement comes first at that point, so the lineages are
    re-folded to the belief any arrival order now gives: Globex from 2020, still true."""
    la, lg = uuid.uuid4(), uuid.uuid4()
    believed = upgrade_beliefs(
        empty_dsn,
        [(lg, "Globex", "[2020-01-01Z,)", "[2024-01-01Z, 2024-01-02Z)"),
         (la, "Acme", "[2020-01-01Z, 2020-03-01Z)", "[2024-01-02Z,)")],
        [(lg, lg, "Globex", "2020-01-01Z", None, "2024-01-01Z", []),
         (la, la, "Acme", "2020-01-01Z", "2020-03-01Z", "2024-01-02Z", [lg])],
        "0640_fold_order_ties.sql")
    assert believed == [("Globex", "2020-01-01", None)]


def test_upgrade_refolds_beliefs_folded_in_arrival_order(empty_dsn):
    """0660: before 0520 a contradiction ended only the lineages the new claim named, so "Omar loves
    camping" said after "Omar hates camping" reopened loves and left hates believed: both were
    current. The claims stored before 0520 was applied are re-folded by today's rules on upgrade
    (hates ends when loves is said again, as for the same story ingested now)."""
    from pgmemory.storage.setup import init_database

    omar, camping, loves, hates, loves2 = (uuid.uuid4() for _ in range(5))
    old = "[2024-01-01Z,)"
    with psycopg.connect(empty_dsn) as conn:
        old_database(conn, 520, {"Omar": omar, "camping": camping})
        # What the older rules left: loves ended by hates, hates still open, loves reopened beside it.
        for fid, lineage, relation, valid in ((loves, loves, "LOVES", "[2015-07-03Z,2016-05-03Z)"),
                                              (hates, hates, "HATES", "[2016-05-03Z,)"),
                                              (loves2, loves, "LOVES", "[2016-05-13Z,)")):
            conn.execute("INSERT INTO pgmemory.facts (id, lineage, group_id, source_id, target_id, relation, fact,"
                         " valid, recorded) VALUES (%s, %s, 'g', %s, %s, %s, %s, %s, %s)",
                         (fid, lineage, omar, camping, relation, f"Omar {relation.lower()} camping.", valid, old))
        for lineage, fact_id, relation, said, contradicts in ((loves, loves, "LOVES", "2015-07-03Z", []),
                                                              (hates, hates, "HATES", "2016-05-03Z", [loves]),
                                                              (loves, loves2, "LOVES", "2016-05-13Z", [])):
            conn.execute("INSERT INTO pgmemory.fact_claims (group_id, kind, id, lineage, fact_id, source_id, target_id,"
                         " relation, fact, valid_from, ref_time, contradicts)"
                         " VALUES ('g', 'assert', %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                         (uuid.uuid4(), lineage, fact_id, omar, camping, relation, f"Omar {relation.lower()} camping.",
                          said, said, contradicts))
        conn.commit()

        report = init_database(conn, 384)
        conn.commit()
        believed = conn.execute(
            "SELECT relation, lower(valid)::date::text, upper(valid)::date::text FROM pgmemory.facts"
            " WHERE group_id = 'g' AND upper_inf(recorded) ORDER BY lower(valid)").fetchall()
        assert believed == [("LOVES", "2015-07-03", "2016-05-03"), ("HATES", "2016-05-03", "2016-05-13"),
                            ("LOVES", "2016-05-13", None)]
        assert "0660_refold_older_beliefs.sql" in report.migrations_applied
        assert conn.execute("SELECT count(*) FROM pgmemory.settings"
                            " WHERE key IN ('beliefs_stale', 'refold_claims_before')").fetchone()[0] == 0
        # A database whose claims all came after 0520 is not re-folded again by a later init.
        assert init_database(conn, 384).migrations_applied == []


def test_upgrade_refolds_the_wording_of_a_statement_told_late_about_an_earlier_time(empty_dsn):
    """0660: a database of early December kept the later sentence when a statement told late moved
    a fact's start back ("has a dog named Pepper" since 2016-06-01); today's rules, and the same
    story ingested now, give the first statement in fold order its wording."""
    from pgmemory.storage.setup import init_database

    omar, pepper, fact = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    dog, cat = "Omar has a dog named Pepper.", "Omar adopted a cat named Pepper."
    with psycopg.connect(empty_dsn) as conn:
        old_database(conn, 580, {"Omar": omar, "Pepper": pepper})
        conn.execute("INSERT INTO pgmemory.facts (id, lineage, group_id, source_id, target_id, relation, fact, valid,"
                     " recorded) VALUES (%s, %s, 'g', %s, %s, 'HAS_PET', %s, '[2016-06-01Z,)', '[2024-01-01Z,)')",
                     (fact, fact, omar, pepper, dog))
        for sentence, start, said in ((dog, "2016-07-23Z", "2016-07-23Z"), (dog, "2017-05-04Z", "2017-05-04Z"),
                                      (cat, "2016-06-01Z", "2017-05-27Z")):
            conn.execute("INSERT INTO pgmemory.fact_claims (group_id, kind, id, lineage, fact_id, source_id, target_id,"
                         " relation, fact, valid_from, ref_time)"
                         " VALUES ('g', 'assert', %s, %s, %s, %s, %s, 'HAS_PET', %s, %s, %s)",
                         (uuid.uuid4(), fact, fact, omar, pepper, sentence, start, said))
        conn.commit()

        init_database(conn, 384)
        conn.commit()
        assert conn.execute("SELECT fact, lower(valid)::date::text, upper(valid) FROM pgmemory.facts"
                            " WHERE group_id = 'g' AND upper_inf(recorded)").fetchall() == [(cat, "2016-06-01", None)]


def test_upgrade_drops_the_vectors_of_erased_community_names(empty_dsn):
    """0675: an erase blanked a community's name and summary (summary kind 'none') but kept its
    name's vector, by which cosine still found it; the upgrade drops those vectors and keeps the
    vectors of named communities."""
    with psycopg.connect(empty_dsn) as conn:
        old_database(conn, 675, {})
        vector = "[" + ",".join(["0.1"] * 384) + "]"
        for name, kind in (("blanked", "none"), ("named", "llm")):
            conn.execute("INSERT INTO pgmemory.communities (id, group_id, name, name_embedding, summary_kind)"
                         " VALUES (gen_random_uuid(), 'g', %s, %s::vector, %s)", (name, vector, kind))
        conn.commit()
        migrate.apply_migrations(conn)
        conn.commit()
        rows = dict(conn.execute("SELECT name, name_embedding IS NOT NULL FROM pgmemory.communities").fetchall())
    assert rows == {"blanked": False, "named": True}
