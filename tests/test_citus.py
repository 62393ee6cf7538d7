"""Issue 14: pgmemory on a real Citus cluster (a coordinator and two workers on loopback ports).

The cluster is built from the vendored Citus source (tests/citus_cluster.py; cached in .cache/)
or given by PGMEMORY_CITUS_DSN. Without either the tests skip with the reason, except when
PGMEMORY_REQUIRE_CITUS=1 (CI, .ci/run), where that is a failure.

The core behaviours run here against the cluster: the module overrides `db_dsn`, so the
shared fixtures (`memory`, `mem`, `conn`) open the Citus database, and the scenarios of
test_belief_state, test_delete_episode and test_tenancy imported below run unchanged on it.
"""
from __future__ import annotations

import os
import uuid

import psycopg
import pytest

from pgmemory.search.candidates import SEARCH_ONE
from pgmemory.search.config import RECIPES
from pgmemory.storage import citus
from pgmemory.storage.doctor import healthy, run_checks
from pgmemory.storage.setup import init_database
from tests.citus_cluster import CitusUnavailable, start_cluster
from tests.support import utc

# The scenarios, run here on the cluster (pytest collects what this module imports).
from tests.test_belief_state import (  # noqa: F401
    test_back_at_the_first_employer,
    test_boston_denver_boston,
    test_earlier_episode_moves_the_start_back,
)
from tests.test_delete_episode import (  # noqa: F401
    test_erase_leaves_no_trace,
    test_retract_undoes_the_only_episode_that_ended_a_fact,
)
from tests.test_tenancy import (  # noqa: F401
    tenants,
    test_delete_episode_of_another_group_is_not_found,
    test_every_recipe_with_own_seeds_returns_no_row_of_another_group as no_row_of_another_group,
    test_fact_history_is_scoped_to_the_group,
    test_unknown_seed_gets_the_same_answer_as_a_foreign_one,
)

DIM = 384

# The first test builds Citus (about 2 CPU-minutes, longer on a busy machine) in its setup:
# more than the suite-wide 300 s per test must be allowed for that one-time cost.
pytestmark = pytest.mark.timeout(1800)


def _unavailable(reason: str):
    if os.environ.get("PGMEMORY_REQUIRE_CITUS") == "1":
        pytest.fail(f"PGMEMORY_REQUIRE_CITUS=1 but no Citus cluster: {reason}", pytrace=False)
    pytest.skip(f"no Citus cluster: {reason}")


@pytest.fixture(scope="module")
def citus_dsn(tmp_path_factory):
    """A Citus coordinator with pgmemory initialised (distributed); the cluster stops after."""
    explicit = os.environ.get("PGMEMORY_CITUS_DSN")
    cluster = None
    if explicit:
        dsn = explicit
    else:
        try:
            cluster = start_cluster(tmp_path_factory.mktemp("citus"))
        except CitusUnavailable as exc:
            _unavailable(str(exc))
        dsn = cluster.coordinator_dsn
    try:
        with psycopg.connect(dsn) as conn:
            if not citus.citus_installed(conn):
                _unavailable(f"the citus extension is not created in {dsn}")
            report = init_database(conn, DIM)
        assert report.distributed and report.graph_mode == "sql" and report.text_search == "tsvector"
        yield dsn
    finally:
        if cluster is not None:
            cluster.stop()


@pytest.fixture(scope="module")
def db_dsn(citus_dsn):
    """The shared fixtures of conftest open the cluster in this module."""
    return citus_dsn


@pytest.fixture(params=["offline"])
async def mem(request, db_dsn):
    """The imported scenarios in the offline extractor mode (the LLM mode runs on one node)."""
    from tests.belief import open_memory

    m = await open_memory(request.param, db_dsn, None)
    yield m
    await m.close()


def test_every_table_is_distributed_by_group_or_a_reference_table(conn):
    dist = citus.report(conn)
    assert dist.local == []
    assert {"pgmemory.episodes", "pgmemory.entities", "pgmemory.facts", "pgmemory.fact_claims",
            "pgmemory.text_stats", "pgmemory.term_stats", "pgmemory.group_versions"} <= set(dist.distributed)
    assert "pgmemory.settings" in dist.reference
    assert dist.colocation_groups == 1
    assert len(dist.workers) == 2 or os.environ.get("PGMEMORY_CITUS_DSN")
    assert {"pgmemory_internal.apply_if_unchanged(text,uuid,text,bigint,jsonb)",
            "pgmemory.search_group(text,text,vector,jsonb)",
            "pgmemory.delete_episode(text,uuid,boolean)",
            "pgmemory.add_fact(text,text,text,text,text,timestamp with time zone,timestamp with time zone,"
            "boolean,boolean,jsonb,timestamp with time zone,vector,vector,vector)"} <= set(dist.delegated)
    assert dist.not_delegated == []


def test_init_again_changes_nothing_and_doctor_reports_the_distribution(conn):
    before = citus.report(conn)
    assert init_database(conn, DIM).migrations_applied == []
    assert citus.report(conn) == before
    checks = {c.name: c for c in run_checks(conn)}
    assert healthy(checks.values())
    assert checks["distribution"].status == "ok"
    assert f"{len(before.distributed)} distributed" in checks["distribution"].detail
    assert "2 workers" in checks["distribution"].detail or os.environ.get("PGMEMORY_CITUS_DSN")


async def test_one_group_calls_run_as_one_task_on_one_worker(memory, group):
    await memory.add_episode(group, "I work at Acme Corp.", actor="Alice", reference_time=utc("2024-01-02"))
    async with memory.pool.acquire() as conn:
        plans = {}
        for name, statement, args in [
            ("search", "EXPLAIN " + SEARCH_ONE, (group, "where does Alice work", None, {})),
            ("apply", "EXPLAIN SELECT pgmemory_internal.apply_if_unchanged($1, $2, 'w', 0, '{}')", (group, uuid.uuid4())),
            ("delete", "EXPLAIN SELECT pgmemory.delete_episode($1, $2)", (group, uuid.uuid4())),
        ]:
            plans[name] = "\n".join(r[0] for r in await conn.fetch(statement, *args))
    for name, plan in plans.items():
        assert "Task Count: 1" in plan, (name, plan)
        assert plan.count("Node: host=") == 1, (name, plan)


async def test_search_of_several_groups_fans_out_to_each(memory, group):
    a, b = f"{group}-a", f"{group}-b"
    await memory.add_episode(a, "I work at Acme Corp.", actor="Alice", reference_time=utc("2024-01-02"))
    await memory.add_episode(b, "I work at Globex.", actor="Bob", reference_time=utc("2024-01-02"))
    results = await memory.search("where does he work", group_ids=[a, b], limit=10)
    assert {(f.group_id, f.target) for f in results.facts} == {(a, "Acme Corp"), (b, "Globex")}
    only_a = await memory.search("where does he work", group_ids=[a], limit=10)
    assert {(f.group_id, f.target) for f in only_a.facts} == {(a, "Acme Corp")}


async def test_full_text_statistics_are_kept_on_the_cluster(memory, group):
    """BM25 statistics (text_stats / term_stats) are written on the group's worker with its rows
    and leave nothing behind when the group is erased."""
    await memory.add_episode(group, "I live in Lisbon and work at Acme Corp.", actor="Alice",
                             reference_time=utc("2024-01-02"))
    async with memory.pool.acquire() as conn:
        kinds = {r["kind"]: r["docs"] for r in await conn.fetch(
            "SELECT kind, docs FROM pgmemory.text_stats WHERE group_id = $1", group)}
        assert kinds["episodes"] == 1 and kinds["facts"] >= 1 and kinds["entities"] >= 2
        await conn.fetchval("SELECT pgmemory.erase_group($1)", group)
        left = await conn.fetchval(
            "SELECT (SELECT count(*) FROM pgmemory.text_stats WHERE group_id = $1)"
            "     + (SELECT count(*) FROM pgmemory.term_stats WHERE group_id = $1)", group)
    assert left == 0


async def test_queued_episodes_are_processed_by_a_worker(memory, group):
    async with memory.pool.acquire() as conn:
        await conn.fetchval("SELECT pgmemory.enqueue_episode($1, 'I work at Initech.', 'message', 'Ann',"
                            " '2024-03-01T00:00:00Z', 'chat', 'q-1')", group)
    await memory.worker(concurrency=1, drain=True).run()
    results = await memory.search("where does Ann work", group_ids=group, limit=5)
    assert [f.target for f in results.facts] == ["Initech"]


async def test_no_search_recipe_returns_a_row_of_another_group(memory, tenants):
    """test_tenancy's check of every recipe, on one pair of tenants (ingested once)."""
    for name in sorted(RECIPES):
        await no_row_of_another_group(memory, tenants, name)


def test_without_the_vendored_source_the_reason_names_what_is_missing(tmp_path, monkeypatch):
    """A clone without the shared folder: the cluster tests skip (or, in CI, fail) saying why."""
    from tests.citus_cluster import shared_folder

    monkeypatch.setenv("PGMEMORY_CITUS_SOURCE", str(tmp_path))
    with pytest.raises(CitusUnavailable, match=r"no vendored Citus source at .*PGMEMORY_CITUS_SOURCE.*"
                                               r"citus/build-citus\.sh.*PGMEMORY_CITUS_DSN"):
        shared_folder()


def test_row_level_security_limits_a_login_to_its_groups(db_dsn, group):
    """The tenant policies (sql/catalog/tenancy.sql) hold on the cluster: a login granted one
    group reads only that group's rows, through tables and through a delegated function."""
    from pgmemory.storage import grants

    a, b = f"{group}-a", f"{group}-b"
    role = f"login_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(db_dsn) as conn:
        for g in (a, b):
            conn.execute("SELECT pgmemory.add_fact(%s, 'Ann', 'works for', 'Acme', 'Ann works for Acme.')", (g,))
        conn.commit()
        grants.grant(conn, role, [a], create_password="pw")
    info = psycopg.conninfo.conninfo_to_dict(db_dsn)
    login = f"postgresql://{role}:pw@{info['host']}:{info['port']}/{info['dbname']}"
    try:
        with psycopg.connect(login, autocommit=True) as conn:
            seen = {r[0] for r in conn.execute(
                "SELECT group_id FROM pgmemory.facts WHERE group_id IN (%s, %s)", (a, b)).fetchall()}
            assert seen == {a}
            assert conn.execute("SELECT count(*) FROM pgmemory.facts_current(%s)", (b,)).fetchone()[0] == 0
            assert conn.execute("SELECT count(*) FROM pgmemory.facts_current(%s)", (a,)).fetchone()[0] == 1
    finally:
        with psycopg.connect(db_dsn, autocommit=True) as conn:
            grants.revoke(conn, role, None)
            conn.execute(psycopg.sql.SQL("DROP ROLE {}").format(psycopg.sql.Identifier(role)))


def test_row_level_security_holds_on_the_cluster(conn, citus_dsn, group):
    """A login granted one group sees none of another's rows on the cluster either."""
    from pgmemory.storage import grants

    other, role = f"{group}-other", f"rls_{uuid.uuid4().hex[:8]}"
    for g in (group, other):
        conn.execute("SELECT pgmemory.add_fact(%s, 'Alice', 'WORKS_FOR', 'Acme', 'Alice works for Acme.')", (g,))
    conn.commit()
    grants.grant(conn, role, [group], create_password="pw")
    info = psycopg.conninfo.conninfo_to_dict(citus_dsn)
    try:
        with psycopg.connect(**{**info, "user": role, "password": "pw"}) as login:
            seen = login.execute("SELECT group_id, count(*) FROM pgmemory.facts WHERE group_id = ANY (%s)"
                                 " GROUP BY 1", ([group, other],)).fetchall()
            view = login.execute("SELECT count(*) FROM pgmemory.current_facts WHERE group_id = %s",
                                 (other,)).fetchone()
        assert seen == [(group, 1)] and view == (0,)
    finally:
        grants.revoke(conn, role, None)
        conn.execute(psycopg.sql.SQL("DROP ROLE {}").format(psycopg.sql.Identifier(role)))
        conn.commit()
