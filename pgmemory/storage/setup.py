"""`pgmemory init`: extensions, schema, stored SQL, the AGE graph and the embedding dimension.

One transaction under the schema advisory lock: concurrent inits serialise,
the later one finds everything in place, and a failure leaves nothing behind.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass

import psycopg
from psycopg import sql as pgsql
from psycopg.types.json import Jsonb

from pgmemory.config import GRAPH_NAME
from pgmemory.errors import SetupError
from pgmemory.storage import citus, migrate

MIN_SERVER_VERSION = 160000
VERTEX_LABELS = ("Entity", "Episode", "Community")
EDGE_LABELS = ("RELATES_TO", "PAST_BELIEF", "MENTIONS", "HAS_MEMBER")
# Full-text modes and the file defining their *_text_hits functions.
TEXT_SEARCH_FILES = {"tsvector": "tsvector.sql", "pg_textsearch": "bm25.sql"}
# pg_textsearch versions refused, with the reason `doctor` and init give.
BROKEN_TEXTSEARCH = {
    "1.0.0": "is known to hang concurrent writers forever on its index lock and to lose its "
             "statistics on restart (fixed upstream in 1.1-1.4)",
}
INIT_LOCK_TIMEOUT = "500ms"  # per attempt: shorter than deadlock_timeout, so init yields, not writers
INIT_LOCK_WAIT_S = 120
GRAPH_PROPS_VERSION = "3"  # both time axes as UTC text; past beliefs as PAST_BELIEF edges (sql/age/50_graph_mirror.sql)
# Texts indexed by pg_textsearch's bm25 when that mode is chosen.
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
    text_search: str  # "tsvector" or "pg_textsearch"
    embedding_dim: int
    migrations_applied: list[str]
    distributed: bool = False  # on a Citus coordinator: tables distributed by group


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


def preloaded_libraries(conn: psycopg.Connection) -> list[str] | None:
    """Entries of shared_preload_libraries; None when this login may not read it (a superuser-only
    setting: current_setting failed with a traceback for an app login; pg_settings hides it)."""
    row = conn.execute("SELECT setting FROM pg_settings WHERE name = 'shared_preload_libraries'").fetchone()
    if row is None:
        return None
    return [lib.strip() for lib in row[0].split(",") if lib.strip()]


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


def init_database(conn: psycopg.Connection, embedding_dim: int, *, embedder: str | None = None,
                  text_search: str | None = None, graph_mirror: bool | None = None) -> InitReport:
    """Create or upgrade everything pgmemory needs; idempotent and safe to run concurrently.

    A database that is already current is left untouched (no DDL, no table lock), so init
    during live ingestion blocks nobody. Otherwise every pgmemory table is locked first, in
    one order and with a short lock timeout retried, so writers wait for init instead of
    deadlocking with it. `embedder` is the embedder's name (stored, then enforced);
    `text_search` is "tsvector" (default) or "pg_textsearch" (opt-in, known-good versions only);
    `graph_mirror` keeps the AGE graph mirror on or off (default: PGMEMORY_GRAPH_MIRROR, else the
    database's earlier choice, else on when AGE is available).
    """
    version = check_server(conn)
    conn.commit()  # init's transaction must be its own (a savepoint would keep its locks)
    deadline = time.monotonic() + INIT_LOCK_WAIT_S
    while True:
        try:
            with conn.transaction():
                return _init_locked(conn, version, embedding_dim, embedder, text_search, graph_mirror)
        except psycopg.errors.InsufficientPrivilege as exc:  # an app or analyst login, not the owner
            raise SetupError(f"this login may not initialise or upgrade the database ({exc.diag.message_primary}): "
                             "run `pgmemory init` as the database owner first") from None
        except (psycopg.errors.LockNotAvailable, psycopg.errors.DeadlockDetected):
            if time.monotonic() > deadline:
                raise SetupError(f"init could not lock pgmemory's tables within {INIT_LOCK_WAIT_S} s: "
                                 "long transactions hold them (`pgmemory doctor` lists them; backends stuck "
                                 "in pg_textsearch 1.0.0 need a server restart); try again") from None
            time.sleep(0.2)


def _init_locked(conn: psycopg.Connection, version: str, embedding_dim: int, embedder: str | None,
                 text_search: str | None, graph_mirror: bool | None = None) -> InitReport:
    migrate.lock(conn)
    conn.execute("SELECT set_config('statement_timeout', '0', true)")  # index builds on big tables
    extensions = available_extensions(conn)
    stored = _stored_settings(conn)
    mode = choose_text_search(text_search, stored)
    distributed = citus.citus_installed(conn)
    if mode == "pg_textsearch":
        if distributed:
            raise SetupError("full-text mode pg_textsearch is not supported on Citus (untested on distributed "
                             "tables): use the default tsvector mode (unset PGMEMORY_TEXT_SEARCH)")
        check_pg_textsearch(extensions, preloaded_libraries(conn))
    mirror = choose_graph_mirror(graph_mirror, stored)
    # AGE does not work on Citus-distributed tables: a cluster uses the SQL graph path.
    use_age = "age" in extensions and mirror and not distributed
    graph_mode = "age" if use_age else "sql"
    migrations = migrate.load_migrations()
    current = (stored.get("sql_fingerprint") == migrate.sql_fingerprint()
               and stored.get("text_search") == mode and stored.get("graph_mode") == graph_mode
               and stored.get("graph_mirror", True) == mirror
               and stored.get("embedding_dim") is not None and stored.get("distributed") == distributed
               and not migrate.pending_migrations(conn, migrations)
               and _search_rights_current(conn)
               and (not distributed or citus.delegation_current(conn)))
    applied: list[str] = []
    if not current:
        _lock_tables(conn)
        if distributed:
            citus.enable_triggers(conn)
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        if use_age:
            conn.execute("CREATE EXTENSION IF NOT EXISTS age")
        if mode == "pg_textsearch":
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_textsearch")
        applied = migrate.apply_migrations(conn, migrations)
        functions_before = migrate.function_versions(conn)
        migrate.apply_sql_dir(conn, migrate.SQL_DIR)
        if use_age:
            _ensure_graph(conn)
            migrate.apply_sql_dir(conn, migrate.SQL_DIR / "age")
            if stored.get("graph_mode") == "sql" or stored.get("graph_props") != GRAPH_PROPS_VERSION:
                conn.execute("SELECT pgmemory_internal.rebuild_graph_mirror()")  # data written without (this) mirror
            _put_setting(conn, "graph_props", GRAPH_PROPS_VERSION)
        elif "age" in extensions and stored.get("graph_mode") == "age":
            _drop_graph(conn)
        if mode == "pg_textsearch":
            _ensure_bm25_indexes(conn)
        else:
            _drop_bm25_indexes(conn)
        migrate.apply_sql_file(conn, migrate.SQL_DIR / "fulltext" / "text_stats.sql")
        migrate.apply_sql_file(conn, migrate.SQL_DIR / "fulltext" / TEXT_SEARCH_FILES[mode])
        conn.execute("SELECT pgmemory.rebuild_text_stats() WHERE pgmemory_internal.setting('text_stats_stale') = 'true'")
        migrate.apply_sql_file(conn, migrate.SQL_DIR / "catalog" / "tenancy.sql")  # after every table and view
        migrate.apply_sql_file(conn, migrate.SQL_DIR / "catalog" / "comments.sql")  # last: sees every object
        migrate.drop_stale_functions(conn, functions_before)
        migrate.apply_sql_file(conn, migrate.SQL_DIR / "catalog" / "search_paths.sql")  # after the drop: see there
        if distributed:
            citus.distribute(conn)
        _refold_stale_beliefs(conn)
        _put_setting(conn, "graph_mode", graph_mode)
        conn.execute("INSERT INTO pgmemory.settings (key, value) VALUES ('graph_mirror', %s)"
                     " ON CONFLICT (key) DO UPDATE SET value = excluded.value", (Jsonb(mirror),))
        conn.execute("INSERT INTO pgmemory.settings (key, value) VALUES ('distributed', %s)"
                     " ON CONFLICT (key) DO UPDATE SET value = excluded.value", (Jsonb(distributed),))
        _put_setting(conn, "text_search", mode)
        _put_setting(conn, "sql_fingerprint", migrate.sql_fingerprint())
    try:
        conn.execute("SELECT pgmemory_internal.set_embedding_dim(%s)", (embedding_dim,))
    except psycopg.errors.InvalidParameterValue as exc:
        raise SetupError(exc.diag.message_primary or str(exc)) from None
    _check_embedder(conn, stored.get("embedder"), embedder, embedding_dim)
    return InitReport(version, graph_mode, mode, embedding_dim, applied, distributed)


def _search_rights_current(conn: psycopg.Connection) -> bool:
    """Does the search run with its owner's rights exactly where no untrusted role may create objects
    in the schemas on its search_path (sql/catalog/tenancy.sql)? Not after CREATE was granted or
    revoked on one of them since init: init then runs again and decides anew."""
    if conn.execute("SELECT to_regprocedure('pgmemory_internal.search_rights_current()')").fetchone()[0] is None:
        return False
    return bool(conn.execute("SELECT pgmemory_internal.search_rights_current()").fetchone()[0])


def choose_graph_mirror(requested: bool | None, stored: dict) -> bool:
    """Is the AGE graph mirror wanted: the explicit request, else PGMEMORY_GRAPH_MIRROR (on/off),
    else the database's earlier choice, else on."""
    if requested is not None:
        return requested
    env = (os.environ.get("PGMEMORY_GRAPH_MIRROR") or "").strip().lower()
    if env:
        if env not in ("on", "off"):
            raise SetupError(f"PGMEMORY_GRAPH_MIRROR must be on or off, got {env!r}")
        return env == "on"
    return bool(stored.get("graph_mirror", True))


def choose_text_search(requested: str | None, stored: dict) -> str:
    """The full-text path: the explicit request, else PGMEMORY_TEXT_SEARCH, else the database's
    earlier explicit choice, else tsvector. The implicit pg_textsearch of older releases
    (stored as "bm25") is not kept: databases move off it."""
    choice = requested or os.environ.get("PGMEMORY_TEXT_SEARCH") or None
    if choice is None:
        previous = stored.get("text_search")
        choice = previous if previous in TEXT_SEARCH_FILES else "tsvector"
    if choice not in TEXT_SEARCH_FILES:
        raise SetupError(f"unknown full-text mode {choice!r}: use tsvector (default) or pg_textsearch")
    return choice


def pg_textsearch_problem(extensions: dict, preload: list[str] | None) -> str | None:
    """Why pg_textsearch cannot be used on this server (None when it can; `preload` None: this
    login cannot read shared_preload_libraries, not held against it)."""
    if "pg_textsearch" not in extensions:
        return "pg_textsearch is not available on this server"
    if preload is not None and "pg_textsearch" not in preload:
        return "pg_textsearch is not in shared_preload_libraries"
    default, installed = extensions["pg_textsearch"]
    found = installed or default
    if found in BROKEN_TEXTSEARCH:
        return f"pg_textsearch {found} {BROKEN_TEXTSEARCH[found]}"
    return None


def check_pg_textsearch(extensions: dict, preload: list[str] | None) -> None:
    """Refuse the pg_textsearch opt-in where it is missing or a version known to be broken."""
    problem = pg_textsearch_problem(extensions, preload)
    if problem:
        raise SetupError(f"full-text mode pg_textsearch refused: {problem}; "
                         "use the default tsvector mode (unset PGMEMORY_TEXT_SEARCH) or install pg_textsearch >= 1.1")


def _stored_settings(conn: psycopg.Connection) -> dict:
    if conn.execute("SELECT to_regclass('pgmemory.settings')").fetchone()[0] is None:
        return {}
    return dict(conn.execute("SELECT key, value FROM pgmemory.settings").fetchall())


def _lock_tables(conn: psycopg.Connection) -> None:
    """Lock every pgmemory table (name order, short timeout: the caller retries) before DDL.
    group_locks first: writers lock it before any other table (pgmemory_internal.lock_group) and
    hold it while they wait for a group's row, so taken after a table the row's holder needs it
    would close a cycle that the deadlock detector of a long-waiting writer breaks by failing it."""
    tables = [r[0] for r in conn.execute(
        "SELECT c.oid::regclass::text FROM pg_class c WHERE c.relnamespace = to_regnamespace('pgmemory')"
        " AND c.relkind IN ('r', 'p') ORDER BY c.relname <> 'group_locks', c.relname").fetchall()]
    if not tables:
        return
    previous = conn.execute("SELECT current_setting('lock_timeout')").fetchone()[0]
    conn.execute("SELECT set_config('lock_timeout', %s, true)", (INIT_LOCK_TIMEOUT,))
    conn.execute(pgsql.SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE").format(
        pgsql.SQL(", ").join(pgsql.SQL(t) for t in tables)))
    conn.execute("SELECT set_config('lock_timeout', %s, true)", (previous,))


def embedder_hint(name: str) -> str:
    """How to configure the embedder called `name` (e.g. "hash:384", "openai:text-embedding-3-small")."""
    kind, _, model = name.partition(":")
    if kind == "hash":
        return f"PGMEMORY_EMBEDDER=hash PGMEMORY_EMBED_DIM={model}"
    if kind == "openai":
        return f"PGMEMORY_EMBEDDER=openai PGMEMORY_EMBED_MODEL={model}"
    if kind == "local":
        return "PGMEMORY_EMBEDDER=local"
    return f"the embedder {name}"


def _check_embedder(conn: psycopg.Connection, stored: object, name: str | None, dim: int) -> None:
    """Record the embedder on first use; refuse another one (same dimension or not)."""
    if name is None:
        return
    if stored is None:
        conn.execute("INSERT INTO pgmemory.settings (key, value) VALUES ('embedder', %s)"
                     " ON CONFLICT (key) DO NOTHING", (Jsonb({"name": name, "dim": dim}),))
        return
    if stored.get("name") != name:
        raise SetupError(
            f"embedder mismatch: this database was built with {stored.get('name')} "
            f"({stored.get('dim')}-d vectors), the configured embedder is {name}; "
            f"set {embedder_hint(str(stored.get('name')))} to use it, or ingest into a new database "
            "(another PGMEMORY_DSN or PGMEMORY_DATA_DIR) to switch embedders")


def pgmemory_setting(conn: psycopg.Connection, key: str) -> object:
    """One value of pgmemory.settings (None when absent)."""
    row = conn.execute("SELECT value FROM pgmemory.settings WHERE key = %s", (key,)).fetchone()
    return row[0] if row else None


def _refold_stale_beliefs(conn: psycopg.Connection) -> None:
    """Re-fold, group by group, the lineages with claims whose place in the fold changed (an end
    stated before the claim was said, migration 0600; claims at one point now in another order,
    0640; every claim an older version's rules folded, 0660: all set beliefs_stale), then derive
    their entities' summaries and communities again, as a retraction does."""
    if pgmemory_setting(conn, "beliefs_stale") is not True:
        return
    before = pgmemory_setting(conn, "refold_claims_before")
    stale = conn.execute("SELECT group_id, lineages FROM pgmemory_internal.stale_lineages(%s::timestamptz)",
                         (before,)).fetchall()
    for group, lineages in stale:
        changed = conn.execute("SELECT pgmemory_internal.refold_lineages(%s, %s)", (group, lineages)).fetchone()[0]
        touched = [r[0] for r in conn.execute(
            "SELECT DISTINCT unnest(ARRAY[source_id, target_id]) FROM pgmemory.facts"
            " WHERE group_id = %s AND id = ANY (%s)", (group, changed)).fetchall()]
        if touched:
            conn.execute("SELECT pgmemory_internal.derive_summaries(%s, %s::uuid[])", (group, touched))
            conn.execute("SELECT pgmemory_internal.update_communities(%s, '{}', '{}', %s::uuid[])", (group, touched))
    conn.execute("DELETE FROM pgmemory.settings WHERE key IN ('beliefs_stale', 'refold_claims_before')")


def ensure_current(conn: psycopg.Connection, embedding_dim: int, embedder: str | None = None) -> None:
    """Run init when the schema is missing, a migration is pending, the stored SQL changed (an
    upgraded pgmemory on an older database) or the full-text mode must change; refuse another
    embedding dimension or embedder than the database was built with."""
    stored = _stored_settings(conn)
    if choose_text_search(None, stored) == "pg_textsearch":  # an opt-in of a version now known broken
        check_pg_textsearch(available_extensions(conn), preloaded_libraries(conn))
    conn.commit()
    dim = stored.get("embedding_dim")
    if dim is not None and dim != embedding_dim:
        raise SetupError(f"embedding dimension mismatch: this database stores {dim}-d embeddings, "
                         f"the embedder produces {embedding_dim}-d")
    if (dim is None or stored.get("sql_fingerprint") != migrate.sql_fingerprint()
            or stored.get("text_search") != choose_text_search(None, stored)
            or stored.get("graph_mirror", True) != choose_graph_mirror(None, stored)
            or (embedder is not None and stored.get("embedder") is None)
            or migrate.pending_migrations(conn, migrate.load_migrations())):
        init_database(conn, embedding_dim, embedder=embedder)
    else:
        _check_embedder(conn, stored.get("embedder"), embedder, embedding_dim)
    conn.commit()


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


def _drop_graph(conn: psycopg.Connection) -> None:
    """Turn the mirror off: its triggers and functions go, the AGE graph and its bookkeeping too."""
    for table, trigger in (("episodes", "mirror_episode"), ("entities", "mirror_entity"),
                           ("communities", "mirror_community"), ("facts", "mirror_fact"),
                           ("episode_mentions", "mirror_mention"), ("episode_mentions", "mirror_mentions_added"),
                           ("community_members", "mirror_members_added"),
                           ("community_members", "mirror_members_ended"), ("community_members", "mirror_members_deleted")):
        conn.execute(pgsql.SQL("DROP TRIGGER IF EXISTS {} ON pgmemory.{}").format(
            pgsql.Identifier(trigger), pgsql.Identifier(table)))
    conn.execute("LOAD 'age'")
    if conn.execute("SELECT 1 FROM ag_catalog.ag_graph WHERE name = %s", (GRAPH_NAME,)).fetchone():
        conn.execute("SELECT ag_catalog.drop_graph(%s, true)", (GRAPH_NAME,))
    conn.execute("DELETE FROM pgmemory.graph_edges")
    conn.execute("DELETE FROM pgmemory.graph_vertices")


def _index(conn: psycopg.Connection, name: str, label: str, column: str) -> None:
    """A btree index on one column of a label table, unless AGE made one already (create_elabel
    indexes start_id and end_id in recent AGE): a second copy would only slow every insert."""
    table = pgsql.SQL("{}.{}").format(pgsql.Identifier(GRAPH_NAME), pgsql.Identifier(label)).as_string(conn)
    other = conn.execute(
        "SELECT 1 FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
        " JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]"
        " WHERE i.indrelid = %s::regclass AND i.indnatts = 1 AND a.attname = %s AND c.relname <> %s",
        (table, column, name)).fetchone()
    if other:
        conn.execute(pgsql.SQL("DROP INDEX IF EXISTS {}.{}").format(pgsql.Identifier(GRAPH_NAME),
                                                                    pgsql.Identifier(name)))
        return
    conn.execute(pgsql.SQL("CREATE INDEX IF NOT EXISTS {} ON {}.{} ({})").format(
        pgsql.Identifier(name), pgsql.Identifier(GRAPH_NAME), pgsql.Identifier(label),
        pgsql.Identifier(column)))


def _drop_bm25_indexes(conn: psycopg.Connection) -> None:
    """Remove pg_textsearch indexes (databases leaving the pg_textsearch mode)."""
    for name in BM25_INDEXES:
        if conn.execute("SELECT to_regclass(%s)", (f"pgmemory.{name}",)).fetchone()[0] is not None:
            conn.execute(pgsql.SQL("DROP INDEX pgmemory.{}").format(pgsql.Identifier(name)))


def _ensure_bm25_indexes(conn: psycopg.Connection) -> None:
    for name, (table, column) in BM25_INDEXES.items():
        conn.execute(pgsql.SQL(
            "CREATE INDEX IF NOT EXISTS {} ON pgmemory.{} USING bm25 ({}) WITH (text_config = 'english')"
        ).format(pgsql.Identifier(name), pgsql.Identifier(table), pgsql.Identifier(column)))
