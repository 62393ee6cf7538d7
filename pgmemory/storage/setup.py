"""`pgmemory init`: extensions, schema, stored SQL, the AGE graph and the embedding dimension.

One transaction under the schema advisory lock: concurrent inits serialise,
the later one finds everything in place, and a failure leaves nothing behind.
"""
from __future__ import annotations

from dataclasses import dataclass

import psycopg
from psycopg import sql as pgsql

from pgmemory.config import GRAPH_NAME
from pgmemory.errors import SetupError
from pgmemory.storage import migrate

MIN_SERVER_VERSION = 160000
VERTEX_LABELS = ("Entity", "Episode", "Community")
EDGE_LABELS = ("RELATES_TO", "MENTIONS", "HAS_MEMBER")
# Texts searched by BM25 when pg_textsearch is present (tsvector GIN otherwise).
BM25_INDEXES = {
    "facts_bm25": ("facts", "search_text"),
    "episodes_bm25": ("episodes", "search_text"),
    "entities_bm25": ("entities", "name"),
}


@dataclass(frozen=True)
class InitReport:
    """What init found and did."""

    server_version: str
    graph_mode: str  # "age" or "sql"
    text_search: str  # "bm25" or "tsvector"
    embedding_dim: int
    migrations_applied: list[str]


def server_version(conn: psycopg.Connection) -> tuple[int, str]:
    """(server_version_num, human version) of the connected server."""
    num, text = conn.execute(
        "SELECT current_setting('server_version_num')::int, current_setting('server_version')").fetchone()
    return num, text


def available_extensions(conn: psycopg.Connection) -> dict[str, tuple[str, str | None]]:
    """Extension name -> (default version available, installed version or None)."""
    rows = conn.execute(
        "SELECT name, default_version, installed_version FROM pg_available_extensions"
        " WHERE name IN ('vector', 'age', 'pg_textsearch')").fetchall()
    return {name: (default, installed) for name, default, installed in rows}


def preloaded_libraries(conn: psycopg.Connection) -> list[str]:
    """Entries of shared_preload_libraries."""
    value = conn.execute("SELECT current_setting('shared_preload_libraries')").fetchone()[0]
    return [lib.strip() for lib in value.split(",") if lib.strip()]


def check_server(conn: psycopg.Connection) -> str:
    """Refuse servers older than PG 16 or without pgvector; return the version string."""
    num, text = server_version(conn)
    if num < MIN_SERVER_VERSION:
        raise SetupError(f"PostgreSQL {text} is too old: pgmemory needs PostgreSQL 16 or newer")
    if "vector" not in available_extensions(conn):
        raise SetupError(
            f"the pgvector extension is not installed on this PostgreSQL {text} server: "
            "install it (Debian/Ubuntu: apt install postgresql-NN-pgvector; "
            "or use docker/Dockerfile), then run `pgmemory init` again")
    return text


def init_database(conn: psycopg.Connection, embedding_dim: int) -> InitReport:
    """Create or upgrade everything pgmemory needs; idempotent and safe to run concurrently."""
    version = check_server(conn)
    with conn.transaction():
        migrate.lock(conn)
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        extensions = available_extensions(conn)
        use_age = "age" in extensions
        use_bm25 = "pg_textsearch" in extensions and "pg_textsearch" in preloaded_libraries(conn)
        if use_age:
            conn.execute("CREATE EXTENSION IF NOT EXISTS age")
        if use_bm25:
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_textsearch")
        applied = migrate.apply_migrations(conn)
        functions_before = migrate.function_versions(conn)
        migrate.apply_sql_dir(conn, migrate.SQL_DIR)
        if use_age:
            _ensure_graph(conn)
            migrate.apply_sql_dir(conn, migrate.SQL_DIR / "age")
        if use_bm25:
            _ensure_bm25_indexes(conn)
        migrate.apply_sql_file(conn, migrate.SQL_DIR / "fulltext" / ("bm25.sql" if use_bm25 else "tsvector.sql"))
        migrate.drop_stale_functions(conn, functions_before)
        graph_mode = "age" if use_age else "sql"
        text_search = "bm25" if use_bm25 else "tsvector"
        _put_setting(conn, "graph_mode", graph_mode)
        _put_setting(conn, "text_search", text_search)
        _put_setting(conn, "sql_fingerprint", migrate.sql_fingerprint())
        try:
            conn.execute("SELECT pgmemory.set_embedding_dim(%s)", (embedding_dim,))
        except psycopg.errors.InvalidParameterValue as exc:
            raise SetupError(exc.diag.message_primary or str(exc)) from None
    repair_bm25_indexes(conn)
    return InitReport(version, graph_mode, text_search, embedding_dim, applied)


def broken_bm25_indexes(conn: psycopg.Connection) -> list[str]:
    """BM25 indexes that cannot find a row of their own table by its own text. pg_textsearch
    1.0.0 can lose its corpus statistics across a server restart and then silently return
    nothing (fixed upstream; REINDEX recovers it)."""
    if pgmemory_setting(conn, "text_search") != "bm25":
        return []
    broken = []
    for name, (table, column) in BM25_INDEXES.items():
        row = conn.execute(pgsql.SQL("SELECT left({}, 200) FROM pgmemory.{} LIMIT 1").format(
            pgsql.Identifier(column), pgsql.Identifier(table))).fetchone()
        if row is None or not row[0].strip():
            continue
        found = conn.execute(pgsql.SQL(
            "SELECT count(*) FROM (SELECT 1 FROM pgmemory.{t} ORDER BY {c} <@> to_bm25query(%s, %s) LIMIT 1) x"
        ).format(t=pgsql.Identifier(table), c=pgsql.Identifier(column)), (row[0], f"pgmemory.{name}")).fetchone()[0]
        if found == 0:
            broken.append(name)
    return broken


def repair_bm25_indexes(conn: psycopg.Connection) -> list[str]:
    """REINDEX every BM25 index that fails the self-check; returns their names."""
    broken = broken_bm25_indexes(conn)
    for name in broken:
        conn.execute(pgsql.SQL("REINDEX INDEX pgmemory.{}").format(pgsql.Identifier(name)))
    conn.commit()
    return broken


def pgmemory_setting(conn: psycopg.Connection, key: str) -> object:
    """One value of pgmemory.settings (None when absent)."""
    row = conn.execute("SELECT value FROM pgmemory.settings WHERE key = %s", (key,)).fetchone()
    return row[0] if row else None


def ensure_current(conn: psycopg.Connection, embedding_dim: int) -> None:
    """Run init when the schema is missing, a migration is pending or the stored SQL changed
    (an upgraded pgmemory on an older database); refuse a different embedding dimension."""
    if conn.execute("SELECT to_regclass('pgmemory.settings')").fetchone()[0] is None:
        init_database(conn, embedding_dim)
        return
    settings = dict(conn.execute("SELECT key, value FROM pgmemory.settings").fetchall())
    conn.commit()
    stored = settings.get("embedding_dim")
    if stored is not None and stored != embedding_dim:
        raise SetupError(f"embedding dimension mismatch: this database stores {stored}-d embeddings, "
                         f"the embedder produces {embedding_dim}-d")
    if (stored is None or settings.get("sql_fingerprint") != migrate.sql_fingerprint()
            or migrate.pending_migrations(conn, migrate.load_migrations())):
        init_database(conn, embedding_dim)
    repair_bm25_indexes(conn)


def _put_setting(conn: psycopg.Connection, key: str, value: object) -> None:
    conn.execute(
        "INSERT INTO pgmemory.settings (key, value) VALUES (%s, to_jsonb(%s::text))"
        " ON CONFLICT (key) DO UPDATE SET value = excluded.value", (key, value))


def _ensure_graph(conn: psycopg.Connection) -> None:
    """Create the AGE graph and its labels if missing (create_graph is not idempotent)."""
    conn.execute("LOAD 'age'")
    previous = conn.execute("SELECT current_setting('search_path')").fetchone()[0]
    conn.execute("SELECT set_config('search_path', 'ag_catalog, public', true)")
    exists = conn.execute("SELECT 1 FROM ag_catalog.ag_graph WHERE name = %s", (GRAPH_NAME,)).fetchone()
    if not exists:
        conn.execute("SELECT ag_catalog.create_graph(%s)", (GRAPH_NAME,))
    labels = {row[0] for row in conn.execute(
        "SELECT l.name FROM ag_catalog.ag_label l JOIN ag_catalog.ag_graph g ON g.graphid = l.graph"
        " WHERE g.name = %s", (GRAPH_NAME,))}
    for label in VERTEX_LABELS:
        if label not in labels:
            conn.execute("SELECT ag_catalog.create_vlabel(%s, %s)", (GRAPH_NAME, label))
        _index(conn, f"{label.lower()}_id", label, "id")
    for label in EDGE_LABELS:
        if label not in labels:
            conn.execute("SELECT ag_catalog.create_elabel(%s, %s)", (GRAPH_NAME, label))
        _index(conn, f"{label.lower()}_id", label, "id")
        _index(conn, f"{label.lower()}_start", label, "start_id")
        _index(conn, f"{label.lower()}_end", label, "end_id")
    conn.execute("SELECT set_config('search_path', %s, true)", (previous,))


def _index(conn: psycopg.Connection, name: str, label: str, column: str) -> None:
    conn.execute(pgsql.SQL("CREATE INDEX IF NOT EXISTS {} ON {}.{} ({})").format(
        pgsql.Identifier(name), pgsql.Identifier(GRAPH_NAME), pgsql.Identifier(label),
        pgsql.Identifier(column)))


def _ensure_bm25_indexes(conn: psycopg.Connection) -> None:
    for name, (table, column) in BM25_INDEXES.items():
        conn.execute(pgsql.SQL(
            "CREATE INDEX IF NOT EXISTS {} ON pgmemory.{} USING bm25 ({}) WITH (text_config = 'english')"
        ).format(pgsql.Identifier(name), pgsql.Identifier(table), pgsql.Identifier(column)))
