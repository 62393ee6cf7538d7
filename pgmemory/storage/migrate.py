"""Forward-only migrations (migrations/NNNN_name.sql) and idempotent stored SQL (sql/).

Everything runs in the caller's transaction under an advisory lock, so two
concurrent runs serialise: the second finds the work done and applies nothing.
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

import psycopg

from pgmemory.errors import MigrationError

PACKAGE = Path(__file__).resolve().parents[1]
ROOT = PACKAGE.parent


def _shipped(folder: str) -> Path:
    """A top-level folder of the repository (source checkout), or its copy inside the installed
    package (a wheel: see setup.py)."""
    inside = PACKAGE / f"_{folder}"
    return inside if inside.is_dir() else ROOT / folder


MIGRATIONS_DIR = _shipped("migrations")
SQL_DIR = _shipped("sql")
# Schemas of stored functions: pgmemory holds the public SQL API (what docs/sql.md lists),
# pgmemory_internal the helpers it and the engine call.
FUNCTION_SCHEMAS = ("pgmemory", "pgmemory_internal")
LOCK_KEY = 0x70676D656D  # "pgmem": one advisory lock for all schema work
_NAME = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")
_DOLLAR = re.compile(r"\$(?:[A-Za-z_][A-Za-z0-9_]*)?\$")


class NewerDatabase(MigrationError):
    """The database carries migrations of a newer pgmemory than this one."""


@dataclass(frozen=True)
class Migration:
    """One migration file: its version, name, text and checksum."""

    version: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()


def load_migrations(directory: Path = MIGRATIONS_DIR) -> list[Migration]:
    """Read migrations in version order; a badly named file or duplicate version is an error."""
    if not directory.is_dir():
        raise MigrationError(f"migrations directory not found: {directory}")
    found: dict[int, Migration] = {}
    for path in sorted(directory.glob("*.sql")):
        match = _NAME.match(path.name)
        if not match:
            raise MigrationError(f"migration file {path.name} is not named NNNN_name.sql")
        version = int(match.group(1))
        if version in found:
            raise MigrationError(f"two migrations share version {version}: {found[version].name}, {path.name}")
        found[version] = Migration(version, path.name, path.read_text())
    return [found[v] for v in sorted(found)]


def lock(conn: psycopg.Connection) -> None:
    """Take the schema advisory lock for the rest of the current transaction."""
    conn.execute("SELECT pg_advisory_xact_lock(%s)", (LOCK_KEY,))


def applied_migrations(conn: psycopg.Connection) -> dict[int, tuple[str, str]]:
    """Applied versions -> (name, checksum); empty when the schema does not exist yet."""
    exists = conn.execute("SELECT to_regclass('pgmemory.schema_migrations')").fetchone()[0]
    if exists is None:
        return {}
    rows = conn.execute("SELECT version, name, checksum FROM pgmemory.schema_migrations").fetchall()
    return {v: (n, c) for v, n, c in rows}


def pending_migrations(conn: psycopg.Connection, migrations: list[Migration]) -> list[Migration]:
    """Migrations not yet applied; an applied one whose file changed is refused, and so is a database
    a newer pgmemory upgraded (a migration applied that this version does not ship): this version's
    init would put its older stored SQL back over the newer schema, under the newer code's feet."""
    applied = applied_migrations(conn)
    shipped = {m.version for m in migrations}
    newer = sorted(v for v in applied if v not in shipped and v > max(shipped, default=0))
    if newer:
        raise NewerDatabase(
            f"this database was upgraded by a newer pgmemory (migration {applied[newer[-1]][0]} is applied, "
            f"which this version does not ship): run that version or a later one, not this one")
    pending = []
    for m in migrations:
        if m.version not in applied:
            pending.append(m)
            continue
        name, checksum = applied[m.version]
        if checksum != m.checksum:
            raise MigrationError(
                f"migration {m.name} was edited after it was applied "
                f"(recorded checksum {checksum[:12]}, file now {m.checksum[:12]}); "
                "migrations are forward-only: restore the file and add a new migration instead")
    return pending


def apply_migrations(conn: psycopg.Connection, migrations: list[Migration] | None = None) -> list[str]:
    """Apply pending migrations inside the current transaction; returns the names applied."""
    migrations = load_migrations() if migrations is None else migrations
    lock(conn)
    conn.execute("CREATE SCHEMA IF NOT EXISTS pgmemory")
    conn.execute(
        "CREATE TABLE IF NOT EXISTS pgmemory.schema_migrations ("
        " version integer PRIMARY KEY, name text NOT NULL, checksum text NOT NULL,"
        " applied_at timestamptz NOT NULL DEFAULT now())")
    done = []
    for m in pending_migrations(conn, migrations):
        try:
            execute_script(conn, m.sql)
        except psycopg.Error as exc:
            raise MigrationError(f"migration {m.name} failed: {exc}") from exc
        conn.execute(
            "INSERT INTO pgmemory.schema_migrations (version, name, checksum) VALUES (%s, %s, %s)",
            (m.version, m.name, m.checksum))
        done.append(m.name)
    return done


def function_versions(conn: psycopg.Connection) -> dict[int, str]:
    """oid -> row version of every function in pgmemory's schemas (FUNCTION_SCHEMAS): its xmin and
    ctid, since a row changed twice in one transaction (a migration moves it, sql/ replaces it)
    keeps its xmin but not its ctid."""
    return dict(conn.execute(
        "SELECT p.oid::bigint, p.xmin::text || '/' || p.ctid::text FROM pg_proc p"
        " WHERE p.pronamespace::regnamespace::text = ANY (%s)", (list(FUNCTION_SCHEMAS),)).fetchall())


def drop_stale_functions(conn: psycopg.Connection, before: dict[int, str]) -> list[str]:
    """Drop functions of pgmemory's schemas that the sql/ run since `before` did not (re)create:
    overloads left behind when a function's arguments changed. Without CASCADE, so a user
    object still depending on one makes init fail loudly instead of vanishing."""
    stale = [oid for oid, version in function_versions(conn).items() if before.get(oid) == version]
    dropped = []
    for oid in stale:
        signature = conn.execute("SELECT %s::oid::regprocedure::text", (oid,)).fetchone()[0]
        conn.execute(psycopg.sql.SQL("DROP FUNCTION {}").format(psycopg.sql.SQL(signature)))
        dropped.append(signature)
    return dropped


def sql_fingerprint(directory: Path = SQL_DIR) -> str:
    """A hash of every stored-SQL file: a database whose recorded fingerprint differs needs init."""
    digest = hashlib.sha256()
    for path in sorted(directory.rglob("*.sql")):
        digest.update(str(path.relative_to(directory)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def split_statements(text: str) -> list[str]:
    """The statements of a SQL script, split at top-level semicolons (quotes, dollar quotes,
    quoted identifiers and comments respected). Each is sent on its own: Citus forwards some DDL
    to its workers as the text it received, and a worker refuses several commands in one."""
    statements, start, i, n = [], 0, 0, len(text)
    while i < n:
        ch = text[i]
        if ch == "-" and text.startswith("--", i):
            i = text.find("\n", i)
            i = n if i < 0 else i
        elif ch == "/" and text.startswith("/*", i):
            end = text.find("*/", i + 2)
            i = n if end < 0 else end + 2
            continue
        elif ch in ("'", '"'):
            i += 1
            while i < n:
                if text[i] == ch:
                    if i + 1 < n and text[i + 1] == ch:
                        i += 2
                        continue
                    break
                i += 1
        elif ch == "$":
            match = _DOLLAR.match(text, i)
            if match:
                end = text.find(match.group(0), match.end())
                i = n if end < 0 else end + len(match.group(0))
                continue
        elif ch == ";":
            statements.append(text[start:i + 1])
            start = i + 1
        i += 1
    statements.append(text[start:])
    return [s.strip() for s in statements if _has_code(s)]


def _has_code(statement: str) -> bool:
    """False for a piece that is only whitespace and comments."""
    stripped = re.sub(r"--[^\n]*|/\*.*?\*/", "", statement, flags=re.S)
    return bool(stripped.strip().strip(";").strip())


def execute_script(conn: psycopg.Connection, text: str) -> None:
    """Run a SQL script statement by statement (see split_statements)."""
    for statement in split_statements(text):
        conn.execute(statement)


def apply_sql_file(conn: psycopg.Connection, path: Path) -> None:
    """Re-apply one file of stored functions and views (CREATE OR REPLACE)."""
    try:
        execute_script(conn, path.read_text())
    except psycopg.Error as exc:
        raise MigrationError(f"{path.relative_to(SQL_DIR.parent)} failed: {exc}") from exc


def apply_sql_dir(conn: psycopg.Connection, directory: Path) -> list[str]:
    """Re-apply every file of one sql/ directory, in name order."""
    paths = sorted(directory.glob("*.sql"))
    for path in paths:
        apply_sql_file(conn, path)
    return [p.name for p in paths]
