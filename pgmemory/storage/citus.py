"""Scale-out on Citus: distribute pgmemory's tables by group and route its stored functions.

One schema for a single node and a cluster. On a database where the citus extension is
created (the coordinator of a Citus cluster), init calls `distribute`: every pgmemory table
with a group_id column becomes a distributed table (distribution column group_id, all
co-located with episodes), every other table a reference table, and every stored function
whose first argument is `p_group text` is delegated to the worker holding that group
(create_distributed_function with distribution_arg_name), so a one-group call runs on one
worker. Idempotent: what is already distributed is left alone.
"""
from __future__ import annotations

from dataclasses import dataclass

import psycopg
from psycopg import sql as pgsql

from pgmemory.storage.migrate import FUNCTION_SCHEMAS

ANCHOR = "pgmemory.episodes"  # the co-location group every distributed table joins
# Tables with a group_id column that are not per-group data: read across groups (by role),
# so they are reference tables (a copy on every worker).
GLOBAL_TABLES = {"pgmemory.role_groups"}
GROUP_COLUMN = "group_id"
GROUP_ARG = "p_group"
# Delegated even inside a transaction block (Citus otherwise runs a call made there on the
# coordinator, routing each of its queries): what ingestion reads inside one, in its re-decide
# under the group lock (pgmemory/ingest/pipeline.py). The lock, so that a transaction holding
# it holds it on the group's worker, and both candidate reads made under it, each one task on
# that worker. Citus then checks that every query inside the call carries the call's group as
# its shard key, which a pushed-down INSERT ... SELECT does not: the writers (the apply, with
# its statistics and entity inserts) are therefore delegated outside transactions only, and
# under the lock the apply's queries are routed one by one to the same worker. Every function
# that writes nothing (not VOLATILE) is force-delegated too: a server's request runs each
# statement in a transaction of its own on Citus, to carry its groups to the workers
# (pgmemory/storage/request_groups.py), and some reads Citus cannot plan from the coordinator.
FORCE_DELEGATED = {
    "pgmemory_internal.lock_group(text)",
    "pgmemory_internal.read_entity_candidates(text,text[],vector[])",
    "pgmemory_internal.read_fact_candidates(text,uuid[],uuid[],text[],vector[],timestamp with time zone[])",
}


def citus_installed(conn: psycopg.Connection) -> bool:
    """True when the citus extension is created in this database (a Citus coordinator)."""
    return conn.execute("SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus')").fetchone()[0]


def enable_triggers(conn: psycopg.Connection) -> None:
    """Allow triggers on distributed tables for this transaction (the entity versions and the
    full-text statistics are kept by triggers; they only write rows of the row's own group,
    which Citus keeps on the same worker, so they run locally there)."""
    conn.execute("SELECT set_config('citus.enable_unsafe_triggers', 'on', true)")


def _tables(conn: psycopg.Connection) -> list[tuple[str, bool]]:
    """(table, has group_id) for every pgmemory table, referenced tables before referencing ones."""
    rows = conn.execute(
        "SELECT c.oid::regclass::text, EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid"
        "        AND a.attname = %s AND NOT a.attisdropped),"
        "       ARRAY(SELECT DISTINCT f.confrelid::regclass::text FROM pg_constraint f"
        "              WHERE f.conrelid = c.oid AND f.contype = 'f' AND f.confrelid <> c.oid)"
        "  FROM pg_class c WHERE c.relnamespace = to_regnamespace('pgmemory') AND c.relkind IN ('r', 'p')"
        " ORDER BY c.relname", (GROUP_COLUMN,)).fetchall()
    refs = {name: set(deps) for name, _, deps in rows}
    grouped = {name: has and name not in GLOBAL_TABLES for name, has, _ in rows}
    ordered: list[str] = [ANCHOR] if ANCHOR in refs else []
    pending = [n for n in sorted(refs) if n not in ordered]
    while pending:
        ready = [n for n in pending if all(d in ordered or d not in refs for d in refs[n])] or pending
        ordered.extend(ready)
        pending = [n for n in pending if n not in ready]
    return [(n, grouped[n]) for n in ordered]


def distribute(conn: psycopg.Connection) -> list[str]:
    """Distribute what is not yet distributed (in the caller's transaction); returns what it did."""
    done = []
    known = dict(conn.execute(
        "SELECT logicalrelid::regclass::text, partmethod FROM pg_dist_partition").fetchall())
    enable_triggers(conn)
    # A database that held data before Citus (one node moved to a cluster): create_distributed_table
    # copies each table's rows into its shards, and the shards' triggers would fire on the workers
    # for every copied row, writing derived rows again (the claim rows, the full-text statistics:
    # counted twice) into tables that may not be distributed yet ("relation pgmemory.group_locks
    # does not exist" on the worker). The rows are copied with the triggers off, as they were
    # already applied on the one node; they are enabled again once every table is distributed.
    paused = _enabled_user_triggers(conn, [t for t, _ in _tables(conn) if t not in known])
    for table, trigger in paused:
        conn.execute(pgsql.SQL("ALTER TABLE {} DISABLE TRIGGER {}").format(pgsql.SQL(table), pgsql.Identifier(trigger)))
    for table, grouped in _tables(conn):
        if table in known:
            continue
        if grouped:
            conn.execute("SELECT create_distributed_table(%s, %s, colocate_with => %s)",
                         (table, GROUP_COLUMN, "default" if table == ANCHOR else ANCHOR))
            done.append(f"distributed {table}")
        else:
            conn.execute("SELECT create_reference_table(%s)", (table,))
            done.append(f"reference {table}")
    # Rows copied from the local tables are now on the shards: drop the local leftovers.
    for table, _ in _tables(conn):
        if table not in known:
            conn.execute("SELECT truncate_local_data_after_distributing_table(%s)", (table,))
    for table, trigger in paused:  # propagated to the shards (citus.enable_unsafe_triggers)
        conn.execute(pgsql.SQL("ALTER TABLE {} ENABLE TRIGGER {}").format(pgsql.SQL(table), pgsql.Identifier(trigger)))
    routable = routable_functions(conn)
    forced = force_delegated(conn, routable)
    for signature in routable:
        conn.execute("SELECT create_distributed_function(%s, %s, colocate_with => %s, force_delegation => %s)",
                     (signature, GROUP_ARG, ANCHOR, True if signature in forced else None))
        done.append(f"function {signature}")
    # Every other function too (without a routing argument): created before its tables were
    # distributed, it exists on the coordinator only, and the workers run it (triggers, helpers).
    for (signature,) in conn.execute(
            "SELECT p.oid::regprocedure::text FROM pg_proc p"
            " WHERE p.pronamespace::regnamespace::text = ANY (%s) AND p.prokind = 'f'"
            "   AND NOT EXISTS (SELECT 1 FROM pg_dist_object o WHERE o.classid = 'pg_proc'::regclass"
            "                    AND o.objid = p.oid)"
            " ORDER BY 1", (list(FUNCTION_SCHEMAS),)).fetchall():
        if signature not in routable:
            conn.execute("SELECT create_distributed_function(%s)", (signature,))
    allow_nested_queries(conn)
    if let_reader_log_in(conn):
        done.append(f"role {READER_ROLE} may log in (to the workers)")
    return done


READER_ROLE = "pgmemory_reader"  # analyst SQL run by the owner reads as it (pgmemory/analyst/runner.py)


def let_reader_log_in(conn: psycopg.Connection) -> bool:
    """Let the reader role log in; True when it could not before.

    Citus opens its connections to the workers as the current role: `pgmemory sql` (and
    Memory.sql) run by the owner read as pgmemory_reader (SET LOCAL ROLE), and every query
    that reaches a shard then logs in to a worker as pgmemory_reader. A NOLOGIN role fails
    there ("role "pgmemory_reader" is not permitted to log in"). The role has no password, so
    it gets in only where the nodes' pg_hba.conf lets a role in without one (trust between the
    cluster's nodes, a certificate) or where pg_dist_authinfo gives it a password: the same
    rule as for every other role that queries the cluster (docs/scale-out.md)."""
    row = conn.execute("SELECT rolcanlogin FROM pg_roles WHERE rolname = %s", (READER_ROLE,)).fetchone()
    if row is None or row[0]:
        return False
    conn.execute(pgsql.SQL("ALTER ROLE {} LOGIN").format(pgsql.Identifier(READER_ROLE)))  # Citus propagates it
    return True


def _enabled_user_triggers(conn: psycopg.Connection, tables: list[str]) -> list[tuple[str, str]]:
    """(table, trigger) of the enabled user triggers of those of `tables` that hold rows."""
    found = []
    for table in tables:
        if conn.execute(pgsql.SQL("SELECT EXISTS (SELECT FROM {})").format(pgsql.SQL(table))).fetchone()[0]:
            found += [(table, name) for (name,) in conn.execute(
                "SELECT tgname FROM pg_trigger WHERE tgrelid = %s::regclass AND NOT tgisinternal AND tgenabled <> 'D'"
                " ORDER BY tgname", (table,)).fetchall()]
    return found


def allow_nested_queries(conn: psycopg.Connection) -> None:
    """Let every non-immutable pgmemory function query from inside a shard query.

    A delegated call runs on the worker of its group, where Citus refuses by default a query
    issued from a function that runs inside another query. Ours may: every statement of
    sql/ pins its group (tests/test_sql_routing.py), so a nested query reads the same
    group's shards, which are on that worker, in the same transaction. The SET clause
    also keeps the planner from inlining SQL functions, which Citus cannot plan.
    (CREATE OR REPLACE by init drops the clause; distribute() sets it again.)"""
    for (signature,) in conn.execute(
            "SELECT p.oid::regprocedure::text FROM pg_proc p"
            " WHERE p.pronamespace::regnamespace::text = ANY (%s) AND p.prokind = 'f' AND p.provolatile <> 'i'"
            "   AND NOT coalesce('citus.allow_nested_distributed_execution=on' = ANY (p.proconfig), false)"
            " ORDER BY 1", (list(FUNCTION_SCHEMAS),)).fetchall():
        conn.execute(pgsql.SQL("ALTER FUNCTION {} SET citus.allow_nested_distributed_execution = on").format(
            pgsql.SQL(signature)))


def routable_functions(conn: psycopg.Connection) -> list[str]:
    """Functions of pgmemory's schemas (public API and internal helpers) whose first argument is p_group text: delegated to the
    worker of that group (all of them each time: create_distributed_function is idempotent and
    a function re-created by init must be registered again)."""
    return [r[0] for r in conn.execute(
        "SELECT p.oid::regprocedure::text FROM pg_proc p"
        " WHERE p.pronamespace::regnamespace::text = ANY (%s) AND p.prokind = 'f'"
        "   AND p.proargnames[1] = %s AND p.proargtypes[0] = 'text'::regtype"
        " ORDER BY 1", (list(FUNCTION_SCHEMAS), GROUP_ARG)).fetchall()]


def force_delegated(conn: psycopg.Connection, routable: list[str]) -> set[str]:
    """Of the routable functions, those to force-delegate: FORCE_DELEGATED and every one declared
    STABLE or IMMUTABLE (it writes nothing)."""
    return FORCE_DELEGATED & set(routable) | {r[0] for r in conn.execute(
        "SELECT p.oid::regprocedure::text FROM pg_proc p"
        " WHERE p.oid = ANY (%s::regprocedure[]) AND p.provolatile <> 'v'", (routable,)).fetchall()}


def delegation_current(conn: psycopg.Connection) -> bool:
    """Is every routable function delegated, force-delegated exactly where distribute() would?
    (A cluster set up by an earlier version is not: init then distributes again.)"""
    routable = routable_functions(conn)
    forced = force_delegated(conn, routable)
    registered = dict(conn.execute(
        "SELECT objid::regprocedure::text, coalesce(force_delegation, false) FROM pg_dist_object"
        " WHERE classid = 'pg_proc'::regclass AND distribution_argument_index IS NOT NULL").fetchall())
    return all(registered.get(f) == (f in forced) for f in routable)


@dataclass(frozen=True)
class Distribution:
    """What doctor reports about a Citus database."""

    distributed: list[str]
    reference: list[str]
    local: list[str]
    colocation_groups: int
    delegated: list[str]
    not_delegated: list[str]
    workers: list[str]
    unreachable: list[str]  # active workers the coordinator cannot reach now, with the reason


def report(conn: psycopg.Connection) -> Distribution:
    """Tables by kind, co-location, delegated functions and the active workers."""
    tables = [name for name, _ in _tables(conn)]
    kinds = dict(conn.execute(
        "SELECT logicalrelid::regclass::text, partmethod::text || ':' || colocationid FROM pg_dist_partition"
        " WHERE logicalrelid::regclass::text = ANY (%s)", (tables,)).fetchall())
    distributed = [t for t in tables if kinds.get(t, "").startswith("h:")]
    reference = [t for t in tables if kinds.get(t, "").startswith("n:")]
    local = [t for t in tables if t not in kinds]
    colocation = {kinds[t].split(":")[1] for t in distributed}
    delegated = {r[0] for r in conn.execute(
        "SELECT objid::regprocedure::text FROM pg_dist_object"
        " WHERE classid = 'pg_proc'::regclass AND distribution_argument_index IS NOT NULL").fetchall()}
    routable = routable_functions(conn)
    workers = [f"{h}:{p}" for h, p in conn.execute(
        "SELECT nodename, nodeport FROM pg_dist_node WHERE isactive AND noderole = 'primary'"
        "   AND groupid <> 0 ORDER BY nodename, nodeport").fetchall()]
    return Distribution(distributed, reference, local, len(colocation),
                        [f for f in routable if f in delegated], [f for f in routable if f not in delegated],
                        workers, unreachable_workers(conn) if workers else [])


def unreachable_workers(conn: psycopg.Connection, timeout_ms: int = 5000) -> list[str]:
    """The active workers this coordinator cannot run a query on now ("host:port (reason)"):
    Citus keeps a stopped worker in its node list as active, and every call of a group whose
    shards it holds fails until it is back. Each is given timeout_ms to answer a connection."""
    with conn.transaction():
        conn.execute("SELECT set_config('citus.node_connection_timeout', %s, true)", (str(timeout_ms),))
        rows = conn.execute("SELECT nodename, nodeport, success, result FROM run_command_on_workers('SELECT 1')"
                            " ORDER BY nodename, nodeport").fetchall()
    return [f"{h}:{p} ({result})" for h, p, ok, result in rows if not ok]

