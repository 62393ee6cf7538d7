"""`init`: extensions, schema, graph, dimension; idempotent and safe when concurrent."""
from __future__ import annotations

import os
import subprocess
import sys
import threading

import psycopg
import pytest

from pgmemory.config import GRAPH_NAME
from pgmemory.errors import SetupError
from pgmemory.storage.doctor import run_checks
from pgmemory.storage.migrate import load_migrations, sql_fingerprint
from pgmemory.storage.setup import ensure_current, init_database

CATALOG_ROW_VERSIONS = """
    SELECT 'f', p.oid::regprocedure::text, p.xmin::text FROM pg_proc p WHERE p.pronamespace IN ('pgmemory'::regnamespace, 'pgmemory_internal'::regnamespace)
    UNION ALL
    SELECT 't', t.tgname, t.xmin::text FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
     WHERE c.relnamespace = 'pgmemory'::regnamespace AND NOT t.tgisinternal
    ORDER BY 1, 2
"""
PGMEMORY_OBJECTS = """
    SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
     WHERE n.nspname IN ('pgmemory', 'pgmemory_internal', %s)
"""


def test_init_is_idempotent(empty_dsn):
    with psycopg.connect(empty_dsn) as conn:
        first = init_database(conn, 384)
        objects = conn.execute(PGMEMORY_OBJECTS, (GRAPH_NAME,)).fetchone()[0]
        conn.commit()
        before = conn.execute(CATALOG_ROW_VERSIONS).fetchall()
        second = init_database(conn, 384)
        assert conn.execute(PGMEMORY_OBJECTS, (GRAPH_NAME,)).fetchone()[0] == objects
        # Nothing already current is touched: no function or trigger re-created (init during
        # live ingestion used to drop and recreate triggers and deadlock a writer).
        assert conn.execute(CATALOG_ROW_VERSIONS).fetchall() == before
        settings = dict(conn.execute("SELECT key, value FROM pgmemory.settings").fetchall())
    assert first.migrations_applied == [m.name for m in load_migrations()]
    assert second.migrations_applied == []
    assert (first.graph_mode, first.text_search) == ("age", "tsvector")
    assert settings == {"embedding_dim": 384, "graph_mode": "age", "text_search": "tsvector",
                        "sql_fingerprint": sql_fingerprint(), "distributed": False, "graph_mirror": True,
                        "graph_props": "3"}


def test_pg_textsearch_1_0_0_is_refused_with_the_reason(empty_dsn):
    with psycopg.connect(empty_dsn) as conn:
        with pytest.raises(SetupError, match=r"pg_textsearch refused: pg_textsearch 1\.0\.0 is known to hang"):
            init_database(conn, 384, text_search="pg_textsearch")
        assert conn.execute("SELECT to_regnamespace('pgmemory')").fetchone()[0] is None
    result = subprocess.run([sys.executable, "-m", "pgmemory.surfaces.cli", "init", "--text-search",
                             "pg_textsearch"], capture_output=True, text=True, timeout=60,
                            env={**os.environ, "PGMEMORY_DSN": empty_dsn, "PGMEMORY_EMBEDDER": "hash"})
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.count("\n") == 1 and "install pg_textsearch >= 1.1" in result.stderr


def test_database_on_pg_textsearch_moves_to_tsvector(empty_dsn):
    with psycopg.connect(empty_dsn) as conn:
        init_database(conn, 384)
        # What an older pgmemory left: pg_textsearch 1.0.0 indexes chosen implicitly. A btree of
        # the same name stands in for the bm25 index: pg_textsearch 1.0.0 must not run on the
        # shared test server (a database dropped with a bm25 index in it can crash it later).
        conn.execute("CREATE INDEX episodes_bm25 ON pgmemory.episodes (search_text)")
        conn.execute("UPDATE pgmemory.settings SET value = '\"bm25\"' WHERE key = 'text_search'")
        conn.execute("INSERT INTO pgmemory.episodes (id, group_id, kind, content, actor, valid_at)"
                     " VALUES (gen_random_uuid(), 'g', 'message', 'we went sailing', 'Ann', now())")
        conn.commit()
        found = {c.name: c for c in run_checks(conn)}["full text"]
        assert (found.status, found.fix) == ("fail", "run `pgmemory init`: it moves the database to tsvector full text")
        conn.execute("UPDATE pgmemory.settings SET value = '\"pg_textsearch\"' WHERE key = 'text_search'")
        found = {c.name: c for c in run_checks(conn)}["full text"]
        assert found.status == "fail" and "pg_textsearch 1.0.0 is known to hang concurrent writers" in found.detail
        with pytest.raises(SetupError, match="pg_textsearch refused"):  # an explicit choice is not overridden
            ensure_current(conn, 384)
        conn.execute("UPDATE pgmemory.settings SET value = '\"bm25\"' WHERE key = 'text_search'")
        conn.commit()
        ensure_current(conn, 384)  # what Memory.open does
        assert conn.execute("SELECT to_regclass('pgmemory.episodes_bm25')").fetchone()[0] is None
        assert conn.execute("SELECT pgmemory_internal.setting('text_search') #>> '{}'").fetchone()[0] == "tsvector"
        hits = conn.execute("SELECT count(*) FROM pgmemory_internal.episode_text_hits(ARRAY['g'], 'sailing', 5,"
                            " NULL, NULL)").fetchone()[0]
    assert hits == 1


def test_embedder_is_remembered_and_another_refused(empty_dsn):
    with psycopg.connect(empty_dsn) as conn:
        init_database(conn, 384, embedder="local:all-MiniLM-L6-v2")
        ensure_current(conn, 384, "local:all-MiniLM-L6-v2")
        with pytest.raises(SetupError, match="built with local:all-MiniLM-L6-v2 .384-d vectors., the configured "
                                             "embedder is hash:384; set PGMEMORY_EMBEDDER=local"):
            ensure_current(conn, 384, "hash:384")
        with pytest.raises(SetupError, match="embedder mismatch"):
            init_database(conn, 384, embedder="hash:384")
        stored = conn.execute("SELECT pgmemory_internal.setting('embedder')").fetchone()[0]
    assert stored == {"name": "local:all-MiniLM-L6-v2", "dim": 384}


def test_every_embedding_has_an_hnsw_index(db_dsn):
    with psycopg.connect(db_dsn) as conn:
        rows = conn.execute(
            "SELECT tablename, indexdef FROM pg_indexes WHERE schemaname = 'pgmemory'"
            " AND indexdef LIKE '%USING hnsw%'").fetchall()
        types = dict(conn.execute(
            "SELECT attrelid::regclass::text || '.' || attname, format_type(atttypid, atttypmod)"
            " FROM pg_attribute WHERE attrelid::regclass::text LIKE 'pgmemory.%'"
            " AND atttypid = 'vector'::regtype").fetchall())
    assert sorted(t for t, _ in rows) == ["communities", "entity_name_vectors", "episodes", "facts"]
    assert all("vector_cosine_ops" in d for _, d in rows)
    assert set(types.values()) == {"vector(384)"}
    assert "pgmemory.fact_claims.embedding" in types  # typed, not searched: no index


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
        mode = conn.execute("SELECT pgmemory_internal.setting('graph_mode') #>> '{}'").fetchone()[0]
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
        assert conn.execute("SELECT pgmemory_internal.setting('sql_fingerprint') #>> '{}'").fetchone()[0] == sql_fingerprint()
        overloads = conn.execute("SELECT count(*) FROM pg_proc WHERE proname = 'bfs_entities'").fetchone()[0]
        assert overloads == 1
        # The stale overload would answer one row; the current function none (no seeds).
        assert conn.execute("SELECT count(*) FROM pgmemory.bfs_entities(ARRAY['g'], ARRAY[]::uuid[], 1,"
                            " NULL, NULL)").fetchone()[0] == 0
        with pytest.raises(SetupError, match="stores 384-d embeddings, the embedder produces 768-d"):
            ensure_current(conn, 768)
