"""Schema pgmemory holds the public SQL API only (`\\df pgmemory.*` is what docs/sql.md lists);
the helpers live in pgmemory_internal, and migration 0210 moves them there in older databases."""
from __future__ import annotations

import re
from pathlib import Path

import psycopg

from pgmemory.storage.setup import init_database

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "sql.md"
FUNCTIONS_IN = """
    SELECT DISTINCT p.proname FROM pg_proc p WHERE p.pronamespace = to_regnamespace(%s) ORDER BY 1
"""


def documented_api() -> set[str]:
    """The functions listed in the table of docs/sql.md's section "The SQL API"."""
    section = GUIDE.read_text().split("\n## The SQL API\n", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `pgmemory\.([a-z_0-9]+)\(", section, flags=re.M))


def functions_in(conn: psycopg.Connection, schema: str) -> set[str]:
    return {name for (name,) in conn.execute(FUNCTIONS_IN, (schema,))}


def test_schema_pgmemory_holds_exactly_the_documented_api(conn):
    api = documented_api()
    assert len(api) >= 20
    assert functions_in(conn, "pgmemory") == api
    internal = functions_in(conn, "pgmemory_internal")
    assert {"apply_episode", "visible_groups", "setting", "fact_candidates"} <= internal
    assert not internal & api


def test_older_database_gets_its_helpers_moved_and_keeps_working(empty_dsn):
    with psycopg.connect(empty_dsn) as conn:
        init_database(conn, 384)
        conn.commit()
        helpers = functions_in(conn, "pgmemory_internal")
        # The database as a release before migration 0210 left it: every helper in pgmemory.
        for (signature,) in conn.execute(
                "SELECT p.oid::regprocedure::text FROM pg_proc p"
                " WHERE p.pronamespace = 'pgmemory_internal'::regnamespace").fetchall():
            conn.execute(psycopg.sql.SQL("ALTER FUNCTION {} SET SCHEMA pgmemory").format(psycopg.sql.SQL(signature)))
        conn.execute("DROP TYPE pgmemory_internal.search_options")  # of a later release
        conn.execute("DROP SCHEMA pgmemory_internal")
        conn.execute("DELETE FROM pgmemory.schema_migrations WHERE version = 210")
        conn.execute("DELETE FROM pgmemory.settings WHERE key = 'sql_fingerprint'")
        conn.commit()
        assert functions_in(conn, "pgmemory") == documented_api() | helpers

        report = init_database(conn, 384)
        conn.commit()
        assert "0210_internal_schema.sql" in report.migrations_applied
        assert functions_in(conn, "pgmemory") == documented_api()
        assert functions_in(conn, "pgmemory_internal") == helpers
        # Triggers now run the helpers of pgmemory_internal, and a write through the API works.
        trigger_schemas = {s for (s,) in conn.execute(
            "SELECT DISTINCT p.pronamespace::regnamespace::text FROM pg_trigger t JOIN pg_proc p ON p.oid = t.tgfoid"
            " WHERE t.tgrelid::regclass::text LIKE 'pgmemory.%' AND NOT t.tgisinternal")}
        assert trigger_schemas == {"pgmemory_internal"}
        done = conn.execute("SELECT pgmemory.add_fact('g1', 'Alice', 'WORKS_FOR', 'Acme', 'Alice works for Acme.',"
                            " '2024-01-01')").fetchone()[0]
        assert done["action"] == "created"
        assert conn.execute("SELECT count(*) FROM pgmemory.current_facts WHERE group_id = 'g1'").fetchone() == (1,)


GENERIC_PLANNED = ("derive_summaries", "read_fact_candidates", "entity_candidates_generic", "apply_episode")


def test_entity_summaries_run_generic_plans_after_every_init(empty_dsn):
    """Issue 9: derive_summaries' statements and the fact candidate read are planned once per
    session, not on every episode (sql/90_write_plans.sql); a re-init, which re-creates every
    function, keeps it so. The entity candidate read with its limits as parameters keeps custom
    plans (its HNSW search needs the LIMIT's value); its constant-limit twin is generic."""
    def modes(conn) -> dict[str, list[str]]:
        return {name: [c for c in (config or []) if c.startswith("plan_cache_mode=")]
                for name, config in conn.execute(
                    "SELECT p.proname, p.proconfig FROM pg_proc p WHERE p.proname = ANY (%s)"
                    " AND p.pronamespace IN ('pgmemory'::regnamespace, 'pgmemory_internal'::regnamespace)",
                    (list(GENERIC_PLANNED),))}

    with psycopg.connect(empty_dsn) as conn:
        init_database(conn, 384)
        conn.commit()
        assert modes(conn) == {name: ["plan_cache_mode=force_generic_plan"] for name in GENERIC_PLANNED}
        assert conn.execute("SELECT proconfig FROM pg_proc WHERE oid = 'pgmemory_internal.read_entity_candidates"
                            "(text, text[], vector[])'::regprocedure").fetchone()[0] is None
        assert conn.execute("SELECT proconfig FROM pg_proc WHERE oid = 'pgmemory_internal.entity_candidates"
                            "(text, text[], vector[], integer, double precision)'::regprocedure"
                            ).fetchone()[0] == ["hnsw.iterative_scan=relaxed_order"]
        conn.execute("DELETE FROM pgmemory.settings WHERE key = 'sql_fingerprint'")
        conn.commit()
        init_database(conn, 384)
        conn.commit()
        assert modes(conn) == {name: ["plan_cache_mode=force_generic_plan"] for name in GENERIC_PLANNED}
        # And a write through the SQL API still does what it did.
        done = conn.execute("SELECT pgmemory.add_fact('g', 'Ada', 'works for', 'Acme', 'Ada works for Acme.')"
                            ).fetchone()[0]
        assert done["action"] == "created"
