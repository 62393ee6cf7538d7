"""`pgmemory doctor`: is this database ready for pgmemory? Each problem comes with its fix."""
from __future__ import annotations

from dataclasses import dataclass

import psycopg

from pgmemory.config import GRAPH_NAME
from pgmemory.errors import MigrationError
from pgmemory.storage import migrate
from pgmemory.storage.setup import (
    MIN_SERVER_VERSION,
    available_extensions,
    broken_bm25_indexes,
    preloaded_libraries,
    server_version,
)


@dataclass(frozen=True)
class Check:
    """One line of the report: ok / warn / fail, what was found, and the fix when not ok."""

    name: str
    status: str  # "ok" | "warn" | "fail"
    detail: str
    fix: str = ""


def run_checks(conn: psycopg.Connection) -> list[Check]:
    """Inspect server, extensions, preload, migrations, graph and embedding dimension."""
    checks: list[Check] = []
    num, text = server_version(conn)
    checks.append(Check("server", "ok" if num >= MIN_SERVER_VERSION else "fail", f"PostgreSQL {text}",
                        "" if num >= MIN_SERVER_VERSION else "upgrade to PostgreSQL 16 or newer"))
    ext = available_extensions(conn)
    preload = preloaded_libraries(conn)
    checks.append(_extension_check("vector", ext, required=True,
                                   install="apt install postgresql-NN-pgvector (or docker/Dockerfile)"))
    checks.append(_age_check(ext))
    checks.append(_textsearch_check(ext, preload))
    checks.append(Check("shared_preload_libraries", "ok", ", ".join(preload) or "(empty)"))
    checks.extend(_schema_checks(conn, ext))
    return checks


def _extension_check(name: str, ext: dict, *, required: bool, install: str) -> Check:
    if name not in ext:
        return Check(name, "fail" if required else "warn", "not available on this server", install)
    default, installed = ext[name]
    if installed is None:
        return Check(name, "fail", f"available ({default}) but not created in this database",
                     "run `pgmemory init`")
    return Check(name, "ok", f"{installed}")


def _age_check(ext: dict) -> Check:
    if "age" not in ext:
        return Check("age", "warn", "not available: graph traversal uses recursive SQL",
                     "optional: install Apache AGE 1.5-1.7 for Cypher access to the graph")
    check = _extension_check("age", ext, required=False, install="")
    if check.status == "ok" and check.detail.startswith("1.8"):
        return Check("age", "warn", f"{check.detail}: AGE 1.8 changed id() and crashes on some queries",
                     "install AGE 1.7.x")
    return check


def _textsearch_check(ext: dict, preload: list[str]) -> Check:
    if "pg_textsearch" not in ext:
        return Check("pg_textsearch", "warn", "not available: full text uses tsvector ranking",
                     "optional: install pg_textsearch for BM25")
    if "pg_textsearch" not in preload:
        return Check("pg_textsearch", "warn", "available but not in shared_preload_libraries",
                     "add pg_textsearch to shared_preload_libraries, restart, run `pgmemory init`")
    return _extension_check("pg_textsearch", ext, required=False, install="")


def _schema_checks(conn: psycopg.Connection, ext: dict) -> list[Check]:
    applied = migrate.applied_migrations(conn)
    if not applied:
        return [Check("schema", "fail", "pgmemory schema not initialised", "run `pgmemory init`")]
    checks = []
    try:
        pending = migrate.pending_migrations(conn, migrate.load_migrations())
    except MigrationError as exc:
        checks.append(Check("migrations", "fail", str(exc), "restore the edited migration file"))
    else:
        status = "ok" if not pending else "fail"
        detail = f"{len(applied)} applied" + (f", {len(pending)} pending" if pending else "")
        checks.append(Check("migrations", status, detail, "" if not pending else "run `pgmemory init`"))
    settings = dict(conn.execute("SELECT key, value FROM pgmemory.settings").fetchall())
    graph_mode = settings.get("graph_mode")
    if graph_mode == "age":
        present = "age" in ext and ext["age"][1] and conn.execute(
            "SELECT 1 FROM ag_catalog.ag_graph WHERE name = %s", (GRAPH_NAME,)).fetchone()
        checks.append(Check("graph", "ok" if present else "fail",
                            f"AGE graph {GRAPH_NAME}" + ("" if present else " missing"),
                            "" if present else "run `pgmemory init`"))
    else:
        checks.append(Check("graph", "ok", "recursive SQL traversal (no AGE)"))
    broken = broken_bm25_indexes(conn)
    if broken:
        checks.append(Check("bm25 indexes", "fail", f"{', '.join(broken)} cannot find their own rows "
                            "(pg_textsearch 1.0.0 loses corpus statistics across restarts)",
                            "run `pgmemory init` (it rebuilds them); opening Memory also repairs them"))
    dim = settings.get("embedding_dim")
    checks.append(Check("embedding_dim", "ok" if dim else "fail", f"{dim}" if dim else "not set",
                        "" if dim else "run `pgmemory init`"))
    return checks


def healthy(checks: list[Check]) -> bool:
    """True when no check failed (warnings allowed)."""
    return all(c.status != "fail" for c in checks)
