"""`pgmemory doctor`: is this database ready for pgmemory? Each problem comes with its fix."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

import psycopg

from pgmemory.config import GRAPH_NAME
from pgmemory.errors import MigrationError
from pgmemory.storage import citus, migrate
from pgmemory.storage.setup import (
    MIN_SERVER_VERSION,
    available_extensions,
    pg_textsearch_problem,
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


DOCTOR_STATEMENT_TIMEOUT = "15s"  # doctor must answer even when the database is stuck


def run_checks(conn: psycopg.Connection, *, lock_wait: timedelta = timedelta(minutes=1),
               embedded: bool = False) -> list[Check]:
    """Inspect server, extensions, preload, migrations, graph, embedding dimension, the login
    apps use (`embedded`: the embedded server's app login; else this connection's) and
    backends waiting on locks for longer than `lock_wait`."""
    conn.execute("SELECT set_config('statement_timeout', %s, false)", (DOCTOR_STATEMENT_TIMEOUT,))
    checks: list[Check] = []
    num, text = server_version(conn)
    checks.append(Check("server", "ok" if num >= MIN_SERVER_VERSION else "fail", f"PostgreSQL {text}",
                        "" if num >= MIN_SERVER_VERSION else "upgrade to PostgreSQL 16 or newer"))
    ext = available_extensions(conn)
    preload = preloaded_libraries(conn)
    checks.append(_extension_check("vector", ext, required=True,
                                   install="apt install postgresql-NN-pgvector (or docker/Dockerfile)"))
    distributed = citus.citus_installed(conn)
    checks.append(Check("age", "ok", "not used on Citus (AGE does not support distributed tables): "
                        "graph traversal uses recursive SQL") if distributed else _age_check(ext))
    checks.append(_textsearch_check(ext, preload))
    checks.append(Check("shared_preload_libraries", "ok", "not readable by this login (a superuser-only setting)"
                        if preload is None else ", ".join(preload) or "(empty)"))
    checks.extend(_readable(conn, "schema", lambda: _schema_checks(conn, ext)))
    if distributed:
        checks.extend(_readable(conn, "distribution", lambda: [_distribution_check(conn)]))
    checks.extend(_readable(conn, "app login", lambda: [_login_check(conn, embedded)]))
    checks.extend(_readable(conn, "lock waits", lambda: [_lock_waits_check(conn, lock_wait)]))
    return checks


def _readable(conn: psycopg.Connection, name: str, run: Callable[[], list[Check]]) -> list[Check]:
    """Checks that read what a login without the owner's rights may not (the AGE catalog, other
    sessions): such a login gets one warn line for them instead of a traceback."""
    try:
        return run()
    except psycopg.errors.InsufficientPrivilege as exc:
        conn.rollback()
        conn.execute("SELECT set_config('statement_timeout', %s, false)", (DOCTOR_STATEMENT_TIMEOUT,))
        return [Check(name, "warn", f"not readable by this login ({str(exc).splitlines()[0]})",
                      "run `pgmemory doctor` as the owner for these checks")]


def _login_check(conn: psycopg.Connection, embedded: bool) -> Check:
    """Do apps run subject to row-level security: on the embedded server Memory uses its app login;
    a PGMEMORY_DSN of a login that bypasses it (the owner, a superuser) gets the recipe for one."""
    from pgmemory.storage.app_login import APP_LOGIN

    if embedded:
        return Check("app login", "ok", f"Memory and the servers connect as {APP_LOGIN} (row-level security "
                     "applies); init and migrations as the owner")
    user, bypass = conn.execute(
        "SELECT current_user::text, r.rolsuper OR r.rolbypassrls OR coalesce(pg_has_role(current_user,"
        "       (SELECT c.relowner FROM pg_class c WHERE c.oid = to_regclass('pgmemory.facts')), 'USAGE'), false)"
        "  FROM pg_roles r WHERE r.rolname = current_user").fetchone()
    if not bypass:
        return Check("app login", "ok", f"{user} is subject to row-level security")
    return Check("app login", "warn",
                 f"PGMEMORY_DSN logs in as {user}, which row-level security does not restrict: Memory and the "
                 "servers work, with every right",
                 "as this login run `pgmemory grant app_user '*' --app --create` (or name its groups), then give "
                 "the app PGMEMORY_DSN=postgresql://app_user:PASSWORD@host/db; keep this DSN for `pgmemory init`")


def lock_waiters(conn: psycopg.Connection, longer_than: timedelta) -> list[tuple]:
    """Backends of this database waiting on a lock for longer than `longer_than`: (pid, what
    they wait on, for how long, the statement). Heavyweight locks have their wait start in
    pg_locks; a light-weight or extension lock wait is timed by its statement's start."""
    conn.execute("SELECT pg_stat_clear_snapshot()")  # activity is otherwise frozen per transaction
    return conn.execute(
        "SELECT a.pid, a.wait_event_type || ':' || a.wait_event,"
        "       clock_timestamp() - coalesce(w.since, a.query_start), left(regexp_replace(a.query, '\\s+', ' ', 'g'), 80)"
        "  FROM pg_stat_activity a"
        "  LEFT JOIN LATERAL (SELECT min(l.waitstart) AS since FROM pg_locks l"
        "                      WHERE l.pid = a.pid AND NOT l.granted) w ON true"
        " WHERE a.datname = current_database() AND a.pid <> pg_backend_pid() AND a.state = 'active'"
        "   AND (w.since IS NOT NULL OR a.wait_event_type IN ('LWLock', 'Extension'))"
        "   AND clock_timestamp() - coalesce(w.since, a.query_start) > %s"
        " ORDER BY 3 DESC", (longer_than,)).fetchall()


def _lock_waits_check(conn: psycopg.Connection, longer_than: timedelta) -> Check:
    waiting = lock_waiters(conn, longer_than)
    if not waiting:
        return Check("lock waits", "ok", f"no backend waiting on a lock for more than {longer_than}")
    pid, event, waited, query = waiting[0]
    return Check("lock waits", "warn",
                 f"{len(waiting)} backend(s) waiting on locks for more than {longer_than}; longest: pid {pid} "
                 f"on {event} for {str(waited).split('.')[0]}: {query}",
                 "find the holder in pg_locks / pg_stat_activity; pg_cancel_backend(pid) the stuck one; "
                 "backends that ignore pg_terminate_backend need a server restart (`pg_ctl restart -m immediate`)")


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


def _textsearch_check(ext: dict, preload: list[str] | None) -> Check:
    """pg_textsearch is an opt-in (PGMEMORY_TEXT_SEARCH=pg_textsearch): say whether it may be used."""
    problem = pg_textsearch_problem(ext, preload)
    if problem:
        return Check("pg_textsearch", "ok", f"not used: {problem}; full text is tsvector BM25")
    return Check("pg_textsearch", "ok", f"{ext['pg_textsearch'][1] or ext['pg_textsearch'][0]} usable as an "
                 "opt-in (PGMEMORY_TEXT_SEARCH=pg_textsearch)")


def _full_text_check(conn: psycopg.Connection, mode: object, ext: dict) -> Check:
    """The database's full-text mode; pg_textsearch of a version known to be broken fails."""
    if mode == "pg_textsearch":
        problem = pg_textsearch_problem(ext, preloaded_libraries(conn))
        if problem:
            return Check("full text", "fail", f"pg_textsearch: {problem}",
                         "run `pgmemory init` without PGMEMORY_TEXT_SEARCH (moves to tsvector)")
        return Check("full text", "ok", "pg_textsearch BM25 (opt-in)")
    if mode == "tsvector":
        return Check("full text", "ok", "tsvector BM25")
    return Check("full text", "fail", f"pg_textsearch indexes of an older pgmemory ({mode})",
                 "run `pgmemory init`: it moves the database to tsvector full text")


INIT_FIX = "run `pgmemory init` as the database owner"


def _stored_sql_check(settings: dict) -> Check:
    """Are the stored functions, triggers and views (sql/) this pgmemory's? After an upgrade of the
    package they are not until init runs: the owner's Memory.open runs it, an app login's refuses."""
    if settings.get("sql_fingerprint") == migrate.sql_fingerprint():
        return Check("stored SQL", "ok", "functions and views of this pgmemory version")
    return Check("stored SQL", "fail", "functions and views of another pgmemory version (an upgrade not yet initialised)",
                 INIT_FIX)


def _catalog_readable(conn: psycopg.Connection, ext: dict) -> bool:
    """May this login read AGE's catalog (an app or analyst login may not)?"""
    if "age" not in ext or not ext["age"][1]:
        return True
    return bool(conn.execute("SELECT has_schema_privilege('ag_catalog', 'USAGE')").fetchone()[0])


def _schema_checks(conn: psycopg.Connection, ext: dict) -> list[Check]:
    applied = migrate.applied_migrations(conn)
    if not applied:
        return [Check("schema", "fail", "pgmemory schema not initialised", "run `pgmemory init`")]
    checks = []
    try:
        pending = migrate.pending_migrations(conn, migrate.load_migrations())
    except migrate.NewerDatabase as exc:
        checks.append(Check("migrations", "fail", str(exc), "install the pgmemory version that upgraded it, or a later one"))
    except MigrationError as exc:
        checks.append(Check("migrations", "fail", str(exc), "restore the edited migration file"))
    else:
        status = "ok" if not pending else "fail"
        detail = f"{len(applied)} applied" + (f", {len(pending)} pending" if pending else "")
        checks.append(Check("migrations", status, detail, "" if not pending else INIT_FIX))
    settings = dict(conn.execute("SELECT key, value FROM pgmemory.settings").fetchall())
    checks.append(_stored_sql_check(settings))
    graph_mode = settings.get("graph_mode")
    if graph_mode == "age" and not _catalog_readable(conn, ext):
        checks.append(Check("graph", "warn", "the AGE catalog is not readable by this login",
                            "run `pgmemory doctor` as the owner for this check"))
    elif graph_mode == "age":
        present = "age" in ext and ext["age"][1] and conn.execute(
            "SELECT 1 FROM ag_catalog.ag_graph WHERE name = %s", (GRAPH_NAME,)).fetchone()
        checks.append(Check("graph", "ok" if present else "fail",
                            f"AGE graph {GRAPH_NAME}" + ("" if present else " missing"),
                            "" if present else "run `pgmemory init`"))
    else:
        off = settings.get("graph_mirror") is False and "age" in ext
        checks.append(Check("graph", "ok", "recursive SQL traversal " + (
            "(AGE graph mirror turned off)" if off else "(no AGE)")))
    checks.append(_full_text_check(conn, settings.get("text_search"), ext))
    dim = settings.get("embedding_dim")
    checks.append(Check("embedding_dim", "ok" if dim else "fail", f"{dim}" if dim else "not set",
                        "" if dim else "run `pgmemory init`"))
    checks.append(_creators_check(conn))
    return checks


def _creators_check(conn: psycopg.Connection) -> Check:
    """Roles not trusted as the owner that may create objects in pgmemory's schemas, pgvector's or
    public (pgmemory_internal.untrusted_creators): a function planted there runs in the sessions
    that search it. Failed while the search runs as its owner with one on its search_path."""
    if conn.execute("SELECT to_regprocedure('pgmemory_internal.untrusted_creators(name[])')").fetchone()[0] is None:
        return Check("schema rights", "fail", "pgmemory's tenancy functions are missing", "run `pgmemory init`")
    found = conn.execute(
        "SELECT c.schema_name::text, array_agg(c.role_name::text ORDER BY c.role_name)"
        "  FROM pgmemory_internal.untrusted_creators(ARRAY['pgmemory', 'pgmemory_internal', 'public',"
        "       (SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace"
        "         WHERE e.extname = 'vector')]) c"
        " GROUP BY c.schema_name ORDER BY 1").fetchall()
    current, definer = conn.execute(
        "SELECT pgmemory_internal.search_rights_current(), p.prosecdef FROM pg_proc p"
        " WHERE p.pronamespace = 'pgmemory'::regnamespace AND p.proname = 'search_candidates'").fetchone()
    detail = "; ".join(f"{', '.join(roles[:3])}{f' and {len(roles) - 3} more' if len(roles) > 3 else ''} "
                       f"may create objects in schema {schema}" for schema, roles in found)
    revoke = "; ".join(f"REVOKE CREATE ON SCHEMA {schema} FROM PUBLIC, <role>" for schema, _ in found)
    if definer and not current:
        return Check("schema rights", "fail", f"{detail}, on the search path of the search, which runs with "
                     "its owner's rights: such a role can run code as the owner",
                     f"run `pgmemory init` (the search then keeps the caller's rights), or {revoke}")
    if found:
        return Check("schema rights", "warn", f"{detail}: a function planted there runs in the sessions that "
                     "search that schema, with their rights (public: every session's default search_path)", revoke)
    if not current:
        return Check("schema rights", "warn", "the search keeps the caller's rights, though no untrusted role may "
                     "create objects on its search path any more", "run `pgmemory init` (it then runs as its owner: "
                     "faster under row-level security)")
    return Check("schema rights", "ok", "no role but the owner's may create objects in pgmemory's schemas, "
                 "pgvector's or public")


def _distribution_check(conn: psycopg.Connection) -> Check:
    """On a Citus coordinator: tables distributed by group (co-located) or reference, functions
    delegated to the group's worker, and the workers."""
    if not migrate.applied_migrations(conn):
        return Check("distribution", "fail", "Citus: pgmemory schema not initialised", "run `pgmemory init`")
    d = citus.report(conn)
    detail = (f"Citus: {len(d.distributed)} distributed tables by group_id in {d.colocation_groups} co-location "
              f"group(s), {len(d.reference)} reference tables, {len(d.delegated)} functions delegated to the "
              f"group's worker, {len(d.workers)} workers ({', '.join(d.workers) or 'none'})")
    problems = []
    if d.local:
        problems.append(f"tables not distributed: {', '.join(d.local)}")
    if d.not_delegated:
        problems.append(f"functions not delegated: {', '.join(d.not_delegated)}")
    if d.colocation_groups > 1:
        problems.append("distributed tables are not co-located")
    if problems:
        return Check("distribution", "fail", f"{detail}; {'; '.join(problems)}", "run `pgmemory init`")
    if d.unreachable:
        return Check("distribution", "fail", f"{detail}; workers unreachable: {', '.join(d.unreachable)}",
                     "start the worker (or fix the network to it): the groups whose shards it holds can be "
                     "neither read nor written until then")
    if not d.workers:
        return Check("distribution", "warn", detail, "add workers: SELECT citus_add_node('host', port); "
                     "then SELECT citus_rebalance_start() (docs/scale-out.md)")
    return Check("distribution", "ok", detail)


def healthy(checks: list[Check]) -> bool:
    """True when no check failed (warnings allowed)."""
    return all(c.status != "fail" for c in checks)
