"""`init`: extensions, schema, graph, dimension; idempotent and safe when concurrent."""
from __future__ import annotations

import threading

import psycopg
import pytest

from pgmemory.config import GRAPH_NAME
from pgmemory.errors import SetupError
from pgmemory.storage.migrate import load_migrations, sql_fingerprint
from pgmemory.storage.setup import ensure_current, init_database

PGMEMORY_OBJECTS = """
    SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
     WHERE n.nspname IN ('pgmemory', %s)
"""


def test_init_is_idempotent(empty_dsn):
    with psycopg.connect(empty_dsn) as conn:
        first = init_database(conn, 384)
        objects = conn.execute(PGMEMORY_OBJECTS, (GRAPH_NAME,)).fetchone()[0]
        second = init_database(conn, 384)
        assert conn.execute(PGMEMORY_OBJECTS, (GRAPH_NAME,)).fetchone()[0] == objects
        settings = dict(conn.execute("SELECT key, value FROM pgmemory.settings").fetchall())
    assert first.migrations_applied == [m.name for m in load_migrations()]
    assert second.migrations_applied == []
    assert (first.graph_mode, first.text_search) == ("age", "bm25")
    assert settings == {"embedding_dim": 384, "graph_mode": "age", "text_search": "bm25",
                        "sql_fingerprint": sql_fingerprint()}


def test_every_embedding_has_an_hnsw_index(db_dsn):
    with psycopg.connect(db_dsn) as conn:
        rows = conn.execute(
            "SELECT tablename, indexdef FROM pg_indexes WHERE schemaname = 'pgmemory'"
            " AND indexdef LIKE '%USING hnsw%'").fetchall()
        types = dict(conn.execute(
            "SELECT attrelid::regclass::text || '.' || attname, format_type(atttypid, atttypmod)"
            " FROM pg_attribute WHERE attrelid::regclass::text LIKE 'pgmemory.%'"
            " AND atttypid = 'vector'::regtype").fetchall())
    assert sorted(t for t, _ in rows) == ["communities", "entities", "episodes", "facts"]
    assert all("vector_cosine_ops" in d for _, d in rows)
    assert set(types.values()) == {"vector(384)"}


def test_dimension_mismatch_names_both(db_dsn):
    with psycopg.connect(db_dsn) as conn:
        with pytest.raises(SetupError, match=r"stores 384-d embeddings, the embedder produces 768-d"):
            init_database(conn, 768)


def test_concurrent_init_one_waits_neither_fails(empty_dsn):
    results, errors = [], []
    barrier = threading.Barrier(3)

    def run():
        try:
            with psycopg.connect(empty_dsn) as conn:
                barrier.wait()
                results.append(init_database(conn, 384))
        except Exception as exc:  # collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert sorted(len(r.migrations_applied) for r in results) == [0, 0, len(load_migrations())]
    with psycopg.connect(empty_dsn) as conn:
        assert conn.execute("SELECT count(*) FROM ag_catalog.ag_graph WHERE name = %s",
                            (GRAPH_NAME,)).fetchone()[0] == 1
        assert conn.execute("SELECT count(*) FROM pgmemory.schema_migrations").fetchone()[0] == len(load_migrations())


def test_init_without_age_uses_sql_traversal(server_without_age):
    with psycopg.connect(server_without_age.dsn) as conn:
        report = init_database(conn, 384)
        mode = conn.execute("SELECT pgmemory.setting('graph_mode') #>> '{}'").fetchone()[0]
        has_age = conn.execute("SELECT count(*) FROM pg_extension WHERE extname = 'age'").fetchone()[0]
    assert (report.graph_mode, report.text_search) == ("sql", "tsvector")
    assert mode == "sql" and has_age == 0


def test_init_without_pgvector_is_a_clear_error(server_without_vector):
    with psycopg.connect(server_without_vector.dsn) as conn:
        with pytest.raises(SetupError, match="pgvector extension is not installed"):
            init_database(conn, 384)
        assert conn.execute("SELECT to_regnamespace('pgmemory')").fetchone()[0] is None


def test_open_brings_an_older_database_up_to_date(empty_dsn):
    with psycopg.connect(empty_dsn) as conn:
        init_database(conn, 384)
        conn.execute("UPDATE pgmemory.settings SET value = '\"stale\"' WHERE key = 'sql_fingerprint'")
        conn.execute("DROP FUNCTION pgmemory.search_candidates(text[], text, vector, jsonb)")
        # An overload an older release left behind when bfs_entities gained an argument.
        conn.execute("CREATE FUNCTION pgmemory.bfs_entities(text[], uuid[], integer, timestamptz, timestamptz)"
                     " RETURNS TABLE (entity_id uuid, distance integer) LANGUAGE sql AS 'SELECT NULL::uuid, 0'")
        conn.commit()
        ensure_current(conn, 384)
        assert conn.execute("SELECT to_regprocedure('pgmemory.search_candidates(text[], text, vector, jsonb)')"
                            ).fetchone()[0] is not None
        assert conn.execute("SELECT pgmemory.setting('sql_fingerprint') #>> '{}'").fetchone()[0] == sql_fingerprint()
        overloads = conn.execute("SELECT count(*) FROM pg_proc WHERE proname = 'bfs_entities'").fetchone()[0]
        assert overloads == 1
        # The stale overload would answer one row; the current function none (no seeds).
        assert conn.execute("SELECT count(*) FROM pgmemory.bfs_entities(ARRAY['g'], ARRAY[]::uuid[], 1,"
                            " NULL, NULL)").fetchone()[0] == 0
        with pytest.raises(SetupError, match="stores 384-d embeddings, the embedder produces 768-d"):
            ensure_current(conn, 768)
