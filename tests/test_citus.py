"""Issue 14: pgmemory on a real Citus cluster (a coordinator and two workers on loopback ports).

The cluster is built from the vendored Citus source (tests/citus_cluster.py; cached in .cache/)
or given by PGMEMORY_CITUS_DSN. Without either the tests skip with the reason, except when
PGMEMORY_REQUIRE_CITUS=1 (CI, .ci/run), where that is a failure.

The core behaviours run here against the cluster: the module overrides `db_dsn`, so the
shared fixtures (`memory`, `mem`, `conn`) open the Citus database, and the scenarios of
test_belief_state, test_delete_episode and test_tenancy imported below run unchanged on it.
"""
from __future__ import annotations

import contextlib
import json
import os
import uuid
from datetime import datetime, timedelta, timezone

import psycopg
import pytest

from pgmemory.search.candidates import SEARCH_ONE
from pgmemory.search.config import RECIPES, SearchFilters
from pgmemory.storage import citus
from pgmemory.storage.doctor import healthy, run_checks
from pgmemory.storage.setup import init_database
from tests.citus_cluster import CitusUnavailable, start_cluster
from tests.communities_support import found_partition, nmi, plant_graph
from tests import support
from tests.support import utc

STEP = timedelta(minutes=10)  # between the turns of GROUP_STORIES (neighbours within 30 min)

# The scenarios, run here on the cluster (pytest collects what this module imports).
from tests.test_belief_state import (  # noqa: F401
    test_back_at_the_first_employer,
    test_boston_denver_boston,
    test_earlier_episode_moves_the_start_back,
)
from tests.test_ingest_offline import (  # noqa: F401
    test_a_group_changed_between_the_reads_and_the_apply_is_decided_again_under_the_lock,
)
from tests.test_delete_episode import (  # noqa: F401
    test_erase_leaves_no_trace,
    test_retract_undoes_the_only_episode_that_ended_a_fact,
)
from tests.test_search_long_query import (  # noqa: F401
    test_a_long_query_is_scored_on_its_32_rarest_lexemes,
    test_a_long_query_of_several_groups,
)
from tests.test_tenancy import (  # noqa: F401
    tenants,
    test_delete_episode_of_another_group_is_not_found,
    test_every_recipe_with_own_seeds_returns_no_row_of_another_group as no_row_of_another_group,
    test_fact_history_is_scoped_to_the_group,
    test_unknown_seed_gets_the_same_answer_as_a_foreign_one,
)
from tests.test_tenancy_rls import (  # noqa: F401
    test_a_login_narrowed_to_a_group_cannot_make_any_writer_act_on_another,
    test_a_server_request_reads_only_its_groups_even_without_a_group_filter,
)
# The REST routes and the MCP tools on the cluster, served as `pgmemory serve` / `pgmemory mcp`
# serve them: on a login under row-level security, each request's connections narrowed to its
# groups (the `server` and `mcp_memory` fixtures below).
from tests.test_mcp import test_every_tool_in_process  # noqa: F401
from tests.test_rest import (  # noqa: F401
    test_a_key_never_sees_another_group,
    test_erase_group_with_confirmation,
    test_graph_reads_fact_history_and_deletes,
    test_messages_batch_and_wait,
    test_queued_episode_is_processed_and_searchable,
    test_search_and_context_rank_by_distance_from_a_centre_entity,
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
def citus_cluster(tmp_path_factory):
    """The cluster this module starts (None when PGMEMORY_CITUS_DSN names one); stopped after."""
    if os.environ.get("PGMEMORY_CITUS_DSN"):
        yield None
        return
    try:
        cluster = start_cluster(tmp_path_factory.mktemp("citus"))
    except CitusUnavailable as exc:
        _unavailable(str(exc))
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def citus_dsn(citus_cluster):
    """A Citus coordinator with pgmemory initialised (distributed)."""
    dsn = os.environ["PGMEMORY_CITUS_DSN"] if citus_cluster is None else citus_cluster.coordinator_dsn
    with psycopg.connect(dsn) as conn:
        if not citus.citus_installed(conn):
            _unavailable(f"the citus extension is not created in {dsn}")
        report = init_database(conn, DIM)
    assert report.distributed and report.graph_mode == "sql" and report.text_search == "tsvector"
    return dsn


@pytest.fixture(scope="module")
def db_dsn(citus_dsn):
    """The shared fixtures of conftest open the cluster in this module."""
    return citus_dsn


@pytest.fixture(scope="module")
def server_login(citus_dsn):
    """A login under row-level security granted every group (how a server should connect)."""
    yield from support.server_login(citus_dsn)


@pytest.fixture(scope="module")
async def server(citus_dsn, server_login):
    """test_rest's app and keys (A writes group-a, B writes group-b and reads shared), its Memory
    opened by the app itself on server_login: narrowed per request (serving.py)."""
    import httpx

    from pgmemory import Memory
    from pgmemory.extract.rules import RuleExtractor
    from pgmemory.providers.embedder import HashEmbedder
    from pgmemory.surfaces.api_keys import create_key
    from pgmemory.surfaces.rest import create_app

    owner = await Memory.open(citus_dsn, embedder=HashEmbedder())
    try:  # (a server's login reads the keys; the owner creates them)
        _, key_a = await create_key(owner.pool, "a", read=[], write=["group-a"])
        _, key_b = await create_key(owner.pool, "b", read=["shared"], write=["group-b"])
    finally:
        await owner.close()
    app = create_app(worker_concurrency=1, max_body_bytes=200_000, open_options={
        "dsn": server_login, "embedder": HashEmbedder(), "extractor": RuleExtractor()})
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://pgmemory") as client:
            yield client, {"a": {"Authorization": f"Bearer {key_a}"}, "b": {"X-API-Key": key_b}}


@pytest.fixture(scope="module")
async def mcp_memory(server_login):
    """A Memory opened as the MCP server opens its own: on server_login, narrowed per call."""
    from pgmemory import Memory
    from pgmemory.extract.rules import RuleExtractor
    from pgmemory.providers.embedder import HashEmbedder
    from pgmemory.storage.request_groups import NarrowToRequestGroups

    memory = await Memory.open(server_login, embedder=HashEmbedder(), extractor=RuleExtractor(),
                               on_acquire=NarrowToRequestGroups())
    yield memory
    await memory.close()


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
            "pgmemory.text_stats", "pgmemory.term_stats", "pgmemory.group_versions",
            "pgmemory.group_locks"} <= set(dist.distributed)
    assert "pgmemory.settings" in dist.reference
    assert dist.colocation_groups == 1
    assert len(dist.workers) == 2 or os.environ.get("PGMEMORY_CITUS_DSN")
    assert {"pgmemory_internal.apply_if_unchanged(text,uuid,text,bigint,jsonb,vector[])",
            "pgmemory.search_group(text,text,vector,jsonb)",
            "pgmemory.delete_episode(text,uuid,boolean)",
            "pgmemory.add_fact(text,text,text,text,text,timestamp with time zone,timestamp with time zone,"
            "boolean,boolean,jsonb,timestamp with time zone,vector,vector,vector)"} <= set(dist.delegated)
    assert dist.not_delegated == []


def test_init_force_delegates_the_reads_of_a_cluster_set_up_before(citus_dsn):
    """Every function that writes nothing is force-delegated (a server's narrowed request calls
    it in a transaction: it must still run on its group's worker); init registers it so again
    on a cluster set up by an earlier version, which left the search delegated but not forced."""
    search = "pgmemory.search_group(text,text,vector,jsonb)"
    forced = ("SELECT force_delegation FROM pg_dist_object WHERE classid = 'pg_proc'::regclass"
              " AND objid = %s::regprocedure")
    with psycopg.connect(citus_dsn, autocommit=True) as conn:
        assert conn.execute(forced, (search,)).fetchone() == (True,)
        assert conn.execute(forced, ("pgmemory.retract_fact(text,uuid)",)).fetchone() == (None,)  # a writer
        conn.execute("SELECT create_distributed_function(%s, 'p_group', colocate_with => 'pgmemory.episodes',"
                     " force_delegation => NULL)", (search,))
        assert not citus.delegation_current(conn)
        init_database(conn, DIM)
        assert conn.execute(forced, (search,)).fetchone() == (True,)
        assert citus.delegation_current(conn)


def test_every_distributed_table_can_be_moved_online(conn):
    """citus_rebalance_start (docs/scale-out.md) moves shards by logical replication, which Citus
    allows only for tables with a primary key or a replica identity: one table without refuses
    the whole rebalance."""
    unmovable = conn.execute(
        "SELECT c.oid::regclass::text FROM pg_dist_partition p JOIN pg_class c ON c.oid = p.logicalrelid"
        " WHERE p.partmethod = 'h' AND NOT (c.relreplident = 'f' OR EXISTS (SELECT FROM pg_index i"
        "       WHERE i.indrelid = c.oid AND (i.indisreplident OR i.indisprimary AND c.relreplident = 'd')))"
        ).fetchall()
    assert unmovable == []


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
            # A metadata filter travels in the options: still a bare call, delegated.
            ("search with a metadata filter", "EXPLAIN " + SEARCH_ONE,
             (group, "where does Alice work", None, {"metadata": {"topic": "work"}})),
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
    twice = await memory.search("where does he work", group_ids=[a, b, a], limit=10)
    assert sorted((f.group_id, f.target, sorted(f.ranks.items())) for f in twice.facts) == \
        sorted((f.group_id, f.target, sorted(f.ranks.items())) for f in results.facts)
    only_a = await memory.search("where does he work", group_ids=[a], limit=10)
    assert {(f.group_id, f.target) for f in only_a.facts} == {(a, "Acme Corp")}
    # As believed at a time, with the graph walk (its default seeds read per group, delegated).
    believed = await memory.search("where does he work", group_ids=[a, b], limit=10, config="combined_hybrid_bfs_rrf",
                                   filters=SearchFilters(known_at=datetime.now(timezone.utc)))
    assert {(f.group_id, f.target) for f in believed.facts} == {(a, "Acme Corp"), (b, "Globex")}
    before = await memory.search("where does he work", group_ids=[a, b], limit=10, config="combined_hybrid_bfs_rrf",
                                 filters=SearchFilters(known_at=utc("2000-01-01")))
    assert before.facts == []



async def test_a_memory_that_took_the_database_for_one_node_fans_out_once_it_is_distributed(memory, group):
    """Memory reads whether the tables are distributed once, when it opens. One opened before
    init distributed the database (its layout still says one node) learns it from its first
    search of several groups (search_candidates refuses to run the groups in turn for it) and
    answers with the fan-out's ranks, one search over all the groups, as every later search."""
    from pgmemory.search.fanout import Layout

    a, b = f"{group}-a", f"{group}-b"
    await memory.add_episode(a, "I work at Acme Corp.", actor="Alice", reference_time=utc("2024-01-02"))
    await memory.add_episode(b, "I work at Globex.", actor="Bob", reference_time=utc("2024-01-02"))
    assert memory.layout.distributed is True  # read when it opened

    def ranked(results):
        return sorted((f.group_id, f.target, sorted(f.ranks.items())) for f in results.facts)
    fanned = ranked(await memory.search("where does he work", group_ids=[a, b], limit=10))
    # Merged ranks: one group's fact ranks second (run in turn, each group's would rank first).
    assert any(2 in dict(r[2]).values() for r in fanned), fanned
    only_a = ranked(await memory.search("where does he work", group_ids=[a], limit=10))
    memory.layout = Layout(distributed=False)  # as read before init distributed the database
    # One group: the call is delegated with the vector as pgvector's own type (the one-node
    # statement), which a worker runs all the same.
    assert ranked(await memory.search("where does he work", group_ids=[a], limit=10)) == only_a
    assert ranked(await memory.search("where does he work", group_ids=[a, b], limit=10)) == fanned
    assert memory.layout.distributed is True

# Three groups of different sizes and vocabularies (so the methods' scores rarely tie).
GROUP_STORIES = [
    ["I work at Acme Corp.", "I moved to Lisbon.", "My friend Bob lives in Paris.", "I love chess."],
    ["I work at Globex.", "I moved to Porto.", "My friend Carol lives in Rome.", "I love tennis.",
     "Carol works at Hooli.", "I left Globex and now work at Initech."],
    ["I work at Umbrella.", "My friend Dave lives in Oslo.", "I love opera.", "Dave works at Vandelay.",
     "I moved to Madrid.", "My friend Erin lives in Rome.", "I love chess and opera."],
]


@pytest.fixture(scope="module")
async def one_node_dsn(admin_dsn):
    """A plain one-node database (the reference a cluster's answers must match)."""
    from tests.servers import create_database

    dsn = create_database(admin_dsn)
    with psycopg.connect(dsn) as conn:
        init_database(conn, DIM)
    return dsn


def _ranked(rows) -> dict[tuple[str, str], list[tuple[int, object, tuple, bool]]]:
    """(kind, method) -> [(rank, sort key, item, matches the metadata filter)] by rank; an item is
    (group, kind, text)."""
    text = {"fact": "fact", "entity": "name", "community": "name", "episode": "content"}
    out: dict[tuple[str, str], list] = {}
    for r in rows:
        d = r["detail"]
        item = (d["group_id"], r["kind"], d[text[r["kind"]]])
        for method, rank in r["ranks"].items():
            key = d["keys"].get(method)
            if isinstance(key, list):  # BFS: the distance (a fact's second key, its recording time, differs)
                key = key[0]
            out.setdefault((r["kind"], method), []).append(
                (rank, None if key is None else round(key, 9), item, d.get("matches") is not False))
    return {m: sorted(v) for m, v in out.items()}


def _near(rows, hits: set[str]) -> set[tuple[str, str, int]]:
    """(turn, the hit it is next to, distance) for the given hits (by content)."""
    content = {str(r["id"]): r["detail"]["content"] for r in rows if r["kind"] == "episode"}
    return {(r["detail"]["content"], content[h], d) for r in rows if r["kind"] == "episode"
            and r["detail"].get("matches") is not False
            for h, d in (r["detail"].get("neighbour_of") or {}).items() if content[h] in hits}


async def test_a_search_of_several_groups_ranks_as_one_node_does(memory, one_node_dsn, group):
    """Issue 14: several groups on the cluster (each group's search on its worker, in parallel,
    merged) give each method's candidates the ranks one node gives over the same data: the same
    sort keys in rank order, each item with a key of its own at the same rank, the same
    neighbouring turns; with BFS, a metadata filter and a valid-time point too."""
    from dataclasses import replace

    from pgmemory import Memory
    from pgmemory.extract.rules import RuleExtractor
    from pgmemory.providers.embedder import HashEmbedder
    from pgmemory.search.candidates import SEARCH_MANY, fetch_rows, options, widened
    from pgmemory.search.config import METHODS, RECIPES, SearchConfig, SearchFilters
    from pgmemory.search.fanout import fanned_out_rows

    groups = [f"{group}-{i}" for i in range(len(GROUP_STORIES))]
    one = await Memory.open(one_node_dsn, embedder=HashEmbedder(), extractor=RuleExtractor())
    try:
        for m in (memory, one):
            hour = 0
            for g, story in zip(groups, GROUP_STORIES):
                for i, text in enumerate(story):
                    hour += 1
                    await m.add_episode(g, text, actor=f"Pat{g[-1]}", reference_time=utc("2024-01-01") + hour * STEP,
                                        metadata={"topic": "work" if "work" in text else "life"})
        cases = [
            (replace(RECIPES["combined_hybrid_rrf"], candidates=4), SearchFilters()),
            (SearchConfig(methods=METHODS, candidates=3), SearchFilters()),
            (SearchConfig(candidates=3), SearchFilters(metadata={"topic": "work"})),
            (SearchConfig(methods=METHODS, candidates=5), SearchFilters(as_of=utc("2024-01-01") + 9 * STEP)),
        ]
        seen: set[tuple[str, str]] = set()
        for config, filters in cases:
            # (the last a list question: its category's members, "members", from each group's words)
            for query in ("where does he work", "friend lives in Rome", "chess tennis opera",
                          "Which cities did Pat move to"):
                embedding = (await memory.embedder.embed([query]))[0]
                opts = options(config, filters, with_embeddings=False, query=query)
                on_cluster = await fanned_out_rows(memory.pool, groups, query, embedding, opts)
                async with one.pool.acquire() as conn:
                    on_one = await fetch_rows(conn, SEARCH_MANY, groups, query, embedding,
                                              {**widened(opts), "with_keys": True})
                cluster, single = _ranked(on_cluster), _ranked(on_one)
                kept = {m: [e for e in v if e[3]] for m, v in single.items()}
                assert cluster.keys() == {m for m, v in kept.items() if v}, (config, filters, query)
                seen |= set(single)
                for m in cluster:
                    if m == ("episode", "prf"):  # feedback words are chosen per group on the cluster (fanout.py)
                        continue
                    # Equal keys at a cut may leave different items: counts differ after a filter,
                    # and the episodes of the best facts differ if those facts tie.
                    fact_ties = any(len({e[1] for e in single.get(("fact", f), [])})
                                    < len(single.get(("fact", f), [])) for f in ("cosine", "fulltext"))
                    if filters.metadata is None and (m != ("episode", "facts") or not fact_ties):
                        assert [e[:2] for e in cluster[m]] == [e[:2] for e in kept[m]], (m, query)
                    # Items whose key ties with none (the last key may tie with one cut off).
                    keys = [e[1] for e in single[m]]
                    unique = {k for k in keys[:-1] if keys.count(k) == 1} if m[1] != "facts" else set()
                    assert ({(r, i) for r, k, i, _ in cluster[m] if k in unique}
                            == {(r, i) for r, k, i, _ in kept[m] if k in unique}), (m, query)
                # The turns next to each episode hit that both found (ties of equal keys may
                # pick different ones at the cut, ids differing between the two databases).
                hits = [{r["detail"]["content"] for r in rows if r["kind"] == "episode" and r["ranks"]}
                        for rows in (on_cluster, on_one)]
                assert _near(on_cluster, hits[0] & hits[1]) == _near(on_one, hits[0] & hits[1])
                assert _near(on_one, hits[0] & hits[1]) or not config.neighbours
        assert {("fact", "bfs"), ("entity", "bfs"), ("episode", "facts"), ("episode", "members")} <= seen
    finally:
        await one.close()


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
    group reads only that group's rows, through tables, a view and a delegated function."""
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
            assert conn.execute("SELECT count(*) FROM pgmemory.current_facts WHERE group_id = %s",
                                (b,)).fetchone()[0] == 0
            # A search of a group the login does not see (delegated to that group's worker) finds nothing.
            search = "SELECT count(*) FROM pgmemory.search_group(%s, 'Ann works for Acme', %s::real[]::vector, '{}')"
            assert conn.execute(search, (b, [0.1] * DIM)).fetchone()[0] == 0
            assert conn.execute(search, (a, [0.1] * DIM)).fetchone()[0] > 0
    finally:
        with psycopg.connect(db_dsn, autocommit=True) as conn:
            grants.revoke(conn, role, None)
            conn.execute(psycopg.sql.SQL("DROP ROLE {}").format(psycopg.sql.Identifier(role)))


def test_community_detection_on_the_cluster_finds_the_single_node_partition(conn, empty_dsn, group):
    """detect_communities, delegated to the worker of its group, finds on the cluster the same
    communities as on a single node for the same planted graph (and keeps them when run again)."""
    def members(c, g):
        by_community: dict = {}
        for entity, community in found_partition(c, g).items():
            by_community.setdefault(community, set()).add(entity)
        return {frozenset(m) for m in by_community.values()}

    citus.enable_triggers(conn)
    truth = plant_graph(conn, group, seed=11)
    conn.commit()
    out = conn.execute("SELECT pgmemory.detect_communities(%s)", (group,)).fetchone()[0]
    conn.commit()
    again = conn.execute("SELECT pgmemory.detect_communities(%s)", (group,)).fetchone()[0]
    conn.commit()
    assert out["created"] == again["kept"] == 6 and again["created"] == again["ended"] == 0
    clustered = members(conn, group)
    assert nmi(truth, found_partition(conn, group)) >= 0.9
    with psycopg.connect(empty_dsn) as single:
        init_database(single, DIM)
        plant_graph(single, group, seed=11)
        single.commit()
        single.execute("SELECT pgmemory.detect_communities(%s)", (group,))
        single.commit()
        assert members(single, group) == clustered


def test_the_group_lock_taken_in_a_transaction_is_held_on_the_groups_worker(citus_dsn, group):
    """Inside BEGIN ... COMMIT (the ingest path's re-decide under the lock) the group lock is
    taken with pgmemory_internal.lock_group, delegated even there: one task on the group's
    worker, which holds the group's row of pgmemory.group_locks locked (none on the
    coordinator), so a delegated writer of the group (add_fact) waits for it; one of another
    group does not. (statement_timeout cancels the wait: Citus cancels the worker's part too.)"""
    held = ("SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation"
            " WHERE l.granted AND l.mode = 'RowShareLock' AND c.relname LIKE 'group_locks%'")
    add_fact = "SELECT pgmemory.add_fact(%s, 'Ann', 'KNOWS', 'Bea', 'Ann knows Bea.')"
    with psycopg.connect(citus_dsn) as tx, psycopg.connect(citus_dsn, autocommit=True) as look:
        look.execute(add_fact, (group,))  # the group's lock row exists
        tx.execute("SELECT pgmemory_internal.lock_group(%s)", (group,))  # psycopg: inside BEGIN
        plan = "\n".join(r[0] for r in tx.execute("EXPLAIN SELECT pgmemory_internal.lock_group(%s)", (group,)))
        on_workers = look.execute("SELECT sum(result::bigint) FROM run_command_on_workers(%s)", (held,)).fetchone()[0]
        on_coordinator = look.execute(held).fetchone()[0]
        look.execute("SET statement_timeout = '1s'")
        with pytest.raises(psycopg.errors.QueryCanceled):
            look.execute(add_fact, (group,))
        look.execute("SET statement_timeout = '20s'")
        look.execute(add_fact, (f"{group}-other",))
        tx.rollback()
    assert "Task Count: 1" in plan and plan.count("Node: host=") == 1, plan
    assert on_workers >= 1 and on_coordinator == 0, (on_workers, on_coordinator)


def test_a_login_of_one_group_cannot_stall_another_groups_writer_or_claimer(db_dsn, group):
    """tests/test_group_locks.py on the cluster: a login granted A holding every lock it can take
    (B's old advisory keys, all the lock rows it sees, A's write lock) leaves the owner's add_fact
    of B and a claim of B's episode (by a worker login granted B) going through at once."""
    from pgmemory.storage import grants

    a, b = f"{group}-a", f"{group}-b"
    tag = uuid.uuid4().hex[:8]
    tenant_role, worker_role = f"app_a_{tag}", f"worker_b_{tag}"
    add_fact = "SELECT pgmemory.add_fact(%s, 'Ann', 'KNOWS', %s, 'Ann knows someone.')"
    with psycopg.connect(db_dsn) as conn:
        conn.execute(add_fact, (b, "Bea"))
        episode_b = conn.execute("SELECT pgmemory.enqueue_episode(%s, 'I live in Lima.', 'message', 'Zoe',"
                                 " '2024-01-02T00:00:00Z')", (b,)).fetchone()[0]
        conn.commit()
        grants.grant(conn, tenant_role, [a], kind="app", create_password="pw")
        grants.grant(conn, worker_role, [b], kind="app", create_password="pw")
    info = psycopg.conninfo.conninfo_to_dict(db_dsn)

    def login(role: str) -> str:
        return f"postgresql://{role}:pw@{info['host']}:{info['port']}/{info['dbname']}"

    try:
        with psycopg.connect(login(tenant_role)) as tenant:
            tenant.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 7))", (b,))
            tenant.execute("SELECT pg_advisory_xact_lock(hashtextextended('pgmemory.queue:' || %s, 0))", (b,))
            tenant.execute("SELECT pgmemory_internal.lock_group(%s)", (a,))
            assert tenant.execute("SELECT * FROM pgmemory.group_locks WHERE group_id = %s FOR UPDATE",
                                  (b,)).fetchall() == []
            with psycopg.connect(db_dsn, autocommit=True) as owner, \
                    psycopg.connect(login(worker_role), autocommit=True) as worker:
                owner.execute("SET statement_timeout = '20s'")
                worker.execute("SET statement_timeout = '20s'")
                owner.execute(add_fact, (b, "Cid"))
                assert worker.execute("SELECT group_id, episode_id FROM pgmemory_internal.claim_episode('w')"
                                      ).fetchone() == (b, episode_b)
                owner.execute("SET statement_timeout = '1s'")
                with pytest.raises(psycopg.errors.QueryCanceled):  # A's lock is held: its writer waits
                    owner.execute(add_fact, (a, "Dan"))
            tenant.rollback()
    finally:
        with psycopg.connect(db_dsn, autocommit=True) as conn:
            for role in (tenant_role, worker_role):
                grants.revoke(conn, role, None)
                conn.execute(psycopg.sql.SQL("DROP ROLE {}").format(psycopg.sql.Identifier(role)))


def test_the_calls_ingestion_makes_inside_a_transaction_run_on_the_groups_worker(citus_dsn, group):
    """Inside BEGIN ... COMMIT Citus runs a function call on the coordinator, one routed query at
    a time, unless the function is force-delegated: in the re-decide under the group lock, the
    lock and both candidate reads are one task each on the group's worker, the one that holds
    the lock; the apply (not force-delegated: its pushed-down INSERT ... SELECTs carry no shard
    key, which Citus requires there) sends its queries to that worker one by one. (End to end:
    the imported test_ingest_offline scenario.)"""
    reads = [
        "SELECT pgmemory_internal.lock_group(%s)",
        "SELECT * FROM pgmemory_internal.read_entity_candidates(%s, '{Ann}', '{NULL}')",
        "SELECT * FROM pgmemory_internal.read_fact_candidates(%s, '{}', '{}', '{}', '{}', '{}')",
    ]
    with psycopg.connect(citus_dsn) as tx:
        tx.execute("SELECT pgmemory_internal.lock_group(%s)", (group,))  # psycopg: inside BEGIN
        plans = ["\n".join(r[0] for r in tx.execute("EXPLAIN " + sql, (group,))) for sql in reads]
        apply = "\n".join(r[0] for r in tx.execute(
            "EXPLAIN SELECT pgmemory_internal.apply_if_unchanged(%s, %s, 'w', 0, '{}')", (group, uuid.uuid4())))
        tx.rollback()
    nodes = set()
    for sql, plan in zip(reads, plans):
        assert "Task Count: 1" in plan and plan.count("Node: host=") == 1, (sql, plan)
        nodes |= {line.strip() for line in plan.splitlines() if "Node: host=" in line}
    assert len(nodes) == 1, nodes
    assert "Custom Scan (Citus" not in apply, apply  # run here, its queries routed one by one


def test_a_cluster_initialised_by_an_older_version_upgrades(citus_dsn, tmp_path):
    """`pgmemory init` of this version on a cluster an older pgmemory initialised and wrote to
    (tests/citus_upgrade.py): the pending migrations applied on distributed tables, everything
    distributed and delegated again, doctor healthy, the old group's memory updated and searched.
    In a second database of this module's cluster (Citus keeps its node list per database)."""
    from tests.citus_cluster import create_database, node_ports
    from tests.citus_upgrade import OLD_COMMIT, old_tree, upgrade

    if os.environ.get("PGMEMORY_CITUS_DSN"):
        pytest.skip("the upgrade check creates a database on every node: only on the cluster the suite starts")
    try:
        old = old_tree(OLD_COMMIT, tmp_path / "old")
    except CitusUnavailable as exc:
        _unavailable(str(exc))
    upgrade(create_database(node_ports(citus_dsn), "pgmemory_upgrade"), old)


async def test_a_one_group_search_reads_only_its_own_shards_on_its_worker(memory, citus_dsn, group):
    """Run where Citus delegates it (on the group's worker), a search of one group, with every
    method and on both time axes, sends no query to another node and reads one shard of each
    table: every statement inside is routed to the group's shards. (A statistics lookup pinned
    by `group_id = ANY (...)` in a join once read all 32 shards, the other worker's over the
    network, on every search.)"""
    import re

    from psycopg.conninfo import make_conninfo
    from psycopg.types.json import Jsonb

    for i, text in enumerate(["I work at Acme Corp.", "My friend Bob works at Acme Corp.", "I moved to Lisbon."]):
        await memory.add_episode(group, text, actor="Alice", reference_time=utc("2024-01-02") + i * STEP)
    with psycopg.connect(citus_dsn) as conn:
        host, port = conn.execute(
            "SELECT n.nodename, n.nodeport FROM pg_dist_placement p JOIN pg_dist_node n ON n.groupid = p.groupid"
            " WHERE p.shardid = get_shard_id_for_distribution_column('pgmemory.episodes', %s::text)", (group,)).fetchone()
    notices: list[str] = []
    with psycopg.connect(make_conninfo(citus_dsn, host=host, port=port), autocommit=True) as worker:
        worker.add_notice_handler(lambda diag: notices.append(diag.message_primary or ""))
        worker.execute("SET citus.log_remote_commands = on")
        worker.execute("SET citus.log_local_commands = on")
        worker.execute("SET client_min_messages = log")
        for opts in ({"methods": ["cosine", "fulltext", "bfs"], "neighbours": 2},
                     {"methods": ["fulltext", "bfs"], "as_of": "2024-01-03T00:00:00Z",
                      "known_at": "2030-01-01T00:00:00Z", "include_superseded": True},
                     {"metadata": {"topic": "work"}, "labels": ["Person"]}):
            rows = worker.execute("SELECT kind FROM pgmemory.search_group(%s, 'where does Alice work at Acme',"
                                  " NULL, %s)", (group, Jsonb(opts))).fetchall()
            assert rows or opts.get("metadata"), opts
    assert not [n for n in notices if n.startswith("issuing")], [n[:200] for n in notices if n.startswith("issuing")]
    shards: dict[str, set[str]] = {}
    for table, shard in re.findall(r"pgmemory\.([a-z_]+?)_(\d{6,})", " ".join(notices)):
        shards.setdefault(table, set()).add(shard)
    assert {"facts", "entities", "episodes", "text_stats", "term_stats"} <= set(shards), shards
    assert {t: s for t, s in shards.items() if len(s) > 1} == {}


def test_fact_versions_name_a_renamed_entity_as_recorded_on_the_cluster(conn, group):
    """fact_versions' renamed branches (entities.renamed, entity_name_at) on distributed tables:
    a version recorded before a rename keeps the old name, in a one-group read (one worker) and
    in a read of two groups (fanned out)."""
    other = group + "-b"
    for g in (group, other):
        conn.execute("SELECT pgmemory.add_fact(%s, 'Bob', 'KNOWS', 'Carol', 'Bob knows Carol.')", (g,))
        conn.commit()
    before = conn.execute("SELECT now()").fetchone()[0]
    conn.commit()
    conn.execute("UPDATE pgmemory.entities SET name = 'Robert' WHERE group_id = %s AND name = 'Bob'", (group,))
    conn.commit()
    conn.execute("SELECT pgmemory.add_fact(%s, 'Robert', 'VISITED', 'Paris', 'Robert visited Paris.')", (group,))
    conn.commit()
    assert conn.execute("SELECT source, target FROM pgmemory.fact_versions WHERE group_id = %s ORDER BY recorded_from",
                        (group,)).fetchall() == [("Bob", "Carol"), ("Robert", "Paris")]
    rows = conn.execute("SELECT group_id, source FROM pgmemory.fact_versions WHERE group_id IN (%s, %s)"
                        " AND recorded @> %s::timestamptz ORDER BY 1", (group, other, before)).fetchall()
    assert rows == [(group, "Bob"), (other, "Bob")]
    assert conn.execute("SELECT source FROM pgmemory.believed_facts WHERE group_id = %s AND target = 'Carol'",
                        (group,)).fetchall() == [("Robert",)]


def test_the_sql_guides_worked_questions_answer_on_the_cluster_as_written(citus_dsn):
    """docs/sql.md's worked questions, run by the owner through `pgmemory sql`'s runner on a
    cluster holding the guide's story, print the results the guide shows. The owner reads as
    pgmemory_reader, as which Citus logs in to the workers (it was NOLOGIN: every question
    failed with "role "pgmemory_reader" is not permitted to log in"), and question 16's
    entities_at with a known_at was refused by Citus ("cannot push down this subquery")."""
    from pgmemory.analyst.runner import run
    from pgmemory.surfaces.sql_cli import render
    from tests.citus_cluster import create_database, node_ports
    from tests.docs_story import load
    from tests.test_sql_guide import EXAMPLES

    if os.environ.get("PGMEMORY_CITUS_DSN"):
        pytest.skip("the guide's story needs a database of its own: only on the cluster the suite starts")
    dsn = create_database(node_ports(citus_dsn), "pgmemory_guide")
    with psycopg.connect(dsn) as conn:
        assert init_database(conn, DIM).distributed
    load(dsn)
    failed = {}
    with psycopg.connect(dsn) as conn:
        for number, _, query, expected in EXAMPLES:
            try:
                got = render(run(conn, query), "table")
            except Exception as exc:  # noqa: BLE001 - every question is checked, the failures listed
                got = f"{type(exc).__name__}: {exc}"
            if got != expected.rstrip("\n"):
                failed[number] = got
    assert failed == {}



async def test_analyst_sql_asked_for_some_groups_reads_only_those_on_the_workers(db_dsn, group):
    """`pgmemory sql --group` / Memory.sql(group_ids=...) narrow what row-level security shows
    (pgmemory.groups); on Citus the rows are read on the workers, which must be narrowed too:
    the owner (reading as pgmemory_reader, granted every group) and a login granted two groups
    who ask for one see that one, in a query that reads every shard and in one routed to the
    other group's worker. (The narrowing was set with set_config() on the coordinator only: the
    login read both groups.)"""
    import asyncpg

    from pgmemory.analyst.runner import run, run_async
    from pgmemory.storage import grants

    a, b = f"{group}-a", f"{group}-b"
    role = f"analyst_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(db_dsn) as conn:
        for g in (a, b):
            conn.execute("SELECT pgmemory.add_fact(%s, 'Ann', 'works for', 'Acme', 'Ann works for Acme.')", (g,))
        conn.commit()
        grants.grant(conn, role, [a, b], create_password="pw")
    info = psycopg.conninfo.conninfo_to_dict(db_dsn)
    login = f"postgresql://{role}:pw@{info['host']}:{info['port']}/{info['dbname']}"
    every_shard = "SELECT DISTINCT group_id FROM fact_versions ORDER BY 1"
    try:
        with psycopg.connect(login) as conn:
            assert run(conn, every_shard).rows == [(a,), (b,)]  # its grants, unnarrowed
        for dsn in (db_dsn, login):
            with psycopg.connect(dsn) as conn:
                assert run(conn, every_shard, groups=[a]).rows == [(a,)], dsn
                routed = run(conn, "SELECT count(*) FROM fact_versions WHERE group_id = '" + b + "'", groups=[a])
                assert routed.rows == [(0,)], dsn
            aconn = await asyncpg.connect(dsn)
            try:
                assert [tuple(r) for r in (await run_async(aconn, every_shard, groups=[b])).rows] == [(b,)], dsn
            finally:
                await aconn.close()
    finally:
        with psycopg.connect(db_dsn, autocommit=True) as conn:
            grants.revoke(conn, role, None)
            conn.execute(psycopg.sql.SQL("DROP ROLE {}").format(psycopg.sql.Identifier(role)))


def test_doctor_fails_naming_a_worker_it_cannot_reach(citus_dsn):
    """A stopped worker stays active in Citus's node list, and every call of the groups whose
    shards it holds fails: doctor says so, naming the worker, instead of "healthy". In a second
    database of the cluster (Citus keeps its node list per database), where one worker's entry
    is moved to a port nothing listens on."""
    from tests.citus_cluster import _free_port, create_database, node_ports

    if os.environ.get("PGMEMORY_CITUS_DSN"):
        pytest.skip("the check creates a database on every node: only on the cluster the suite starts")
    dsn = create_database(node_ports(citus_dsn), "pgmemory_doctor")
    with psycopg.connect(dsn) as conn:
        init_database(conn, DIM)
        conn.commit()
        assert {c.name: c for c in run_checks(conn)}["distribution"].status == "ok"
        gone = f"127.0.0.1:{_free_port()}"
        conn.execute("SELECT citus_update_node(nodeid, '127.0.0.1', %s) FROM pg_dist_node WHERE nodeport = %s",
                     (int(gone.split(":")[1]), node_ports(dsn)[-1]))
        conn.commit()
        checks = {c.name: c for c in run_checks(conn)}
    assert not healthy(checks.values())
    assert checks["distribution"].status == "fail"
    assert f"workers unreachable: {gone} (" in checks["distribution"].detail
    assert "start the worker" in checks["distribution"].fix


async def test_a_single_node_database_moved_to_citus_keeps_its_memory(citus_dsn):
    """A database pgmemory used on one node, then given Citus (`CREATE EXTENSION citus`, the
    workers added) and `pgmemory init` again: its rows are moved into the shards once, with what
    was derived from them unchanged (the copy ran the shards' triggers on the workers: the claim
    rows' table did not exist there yet, "relation pgmemory.group_locks does not exist", and the
    full-text statistics would have been counted twice), the guide's questions answer as on one
    node, and new episodes are ingested with the triggers on again. In a third database of the
    cluster, created without Citus on the coordinator."""
    from pgmemory import Memory
    from pgmemory.analyst.runner import run
    from pgmemory.extract.rules import RuleExtractor
    from pgmemory.providers.embedder import HashEmbedder
    from pgmemory.surfaces.sql_cli import render
    from tests.citus_cluster import node_ports
    from tests.docs_story import load
    from tests.test_sql_guide import EXAMPLES

    if os.environ.get("PGMEMORY_CITUS_DSN"):
        pytest.skip("the check creates a database on every node: only on the cluster the suite starts")
    ports, name = node_ports(citus_dsn), "pgmemory_moved"
    for port in ports:
        with psycopg.connect(f"postgresql://postgres@127.0.0.1:{port}/postgres", autocommit=True) as conn:
            conn.execute(psycopg.sql.SQL("CREATE DATABASE {}").format(psycopg.sql.Identifier(name)))
        if port != ports[0]:  # the workers are set up as the docs say; the coordinator is one node
            with psycopg.connect(f"postgresql://postgres@127.0.0.1:{port}/{name}", autocommit=True) as conn:
                conn.execute("CREATE EXTENSION citus")
    dsn = f"postgresql://postgres@127.0.0.1:{ports[0]}/{name}"
    with psycopg.connect(dsn) as conn:
        assert not init_database(conn, DIM).distributed
    load(dsn)
    stats = "SELECT * FROM pgmemory.text_stats ORDER BY 1, 2"
    counts = ("SELECT (SELECT count(*) FROM pgmemory.episodes), (SELECT count(*) FROM pgmemory.facts),"
              " (SELECT count(*) FROM pgmemory.group_locks), (SELECT count(*) FROM pgmemory.term_stats)")
    with psycopg.connect(dsn, autocommit=True) as conn:
        before = conn.execute(stats).fetchall(), conn.execute(counts).fetchone()
        conn.execute("CREATE EXTENSION citus")
        conn.execute("SELECT citus_set_coordinator_host('127.0.0.1', %s)", (ports[0],))
        for port in ports[1:]:
            conn.execute("SELECT citus_add_node('127.0.0.1', %s)", (port,))
    with psycopg.connect(dsn) as conn:
        assert init_database(conn, DIM).distributed
        conn.commit()
        assert citus.report(conn).local == []
        assert (conn.execute(stats).fetchall(), conn.execute(counts).fetchone()) == before
        assert healthy(run_checks(conn))
        failed = {number: render(run(conn, query), "table") for number, _, query, expected in EXAMPLES
                  if render(run(conn, query), "table") != expected.rstrip("\n")}
        assert failed == {}
    async with Memory.open(dsn, embedder=HashEmbedder(), extractor=RuleExtractor()) as memory:
        await memory.add_episode("moved-new", "I work at Initech.", actor="Dana",
                                 reference_time=datetime(2024, 7, 1, tzinfo=timezone.utc))
        assert [f.fact for f in (await memory.search("Dana", group_ids=["moved-new"])).facts] == [
            "Dana works for Initech."]
    with psycopg.connect(dsn) as conn:  # the triggers ran: the new group's claim row and statistics
        assert conn.execute("SELECT count(*) FROM pgmemory.group_locks WHERE group_id = 'moved-new'").fetchone()[0] > 0
        assert conn.execute("SELECT count(*) FROM pgmemory.text_stats WHERE group_id = 'moved-new'").fetchone()[0] > 0


async def test_an_app_login_of_a_group_ingests_new_entities_on_the_cluster(db_dsn, group):
    """The app login doctor recommends (`pgmemory grant ROLE GROUP --app`, under row-level
    security) ingests on the cluster: an episode that creates entities is applied on the
    group's worker. (The apply's pushed-down INSERT ... SELECT of the entity name vectors, with
    plan_vector's simple CASE inlined and the tenant policy added, failed there with "operator
    does not exist: text = boolean": every such episode of a restricted login failed.)"""
    from pgmemory import Memory
    from pgmemory.extract.rules import RuleExtractor
    from pgmemory.providers.embedder import HashEmbedder
    from pgmemory.storage import grants

    role = f"app_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(db_dsn) as conn:
        grants.grant(conn, role, [group], kind="app", create_password="pw")
    info = psycopg.conninfo.conninfo_to_dict(db_dsn)
    login = f"postgresql://{role}:pw@{info['host']}:{info['port']}/{info['dbname']}"
    async with Memory.open(db_dsn, embedder=HashEmbedder(), extractor=RuleExtractor()):
        pass  # the owner records the embedder first, as `pgmemory init` would
    try:
        async with Memory.open(login, embedder=HashEmbedder(), extractor=RuleExtractor()) as memory:
            for day, text in ((1, "I work at Acme."), (2, "I left Acme and now work at Globex.")):
                result = await memory.add_episode(group, text, actor="Alice",
                                                  reference_time=datetime(2024, 1, day, tzinfo=timezone.utc))
                assert result.status == "done"
            found = await memory.search("where does Alice work", group_ids=[group])
            assert [f.fact for f in found.facts][:1] == ["Alice works for Globex."]
            assert {"Alice", "Acme", "Globex"} <= {e.name for e in found.entities}
    finally:
        with psycopg.connect(db_dsn, autocommit=True) as conn:
            grants.revoke(conn, role, None)
            conn.execute(psycopg.sql.SQL("DROP OWNED BY {}").format(psycopg.sql.Identifier(role)))
            conn.execute(psycopg.sql.SQL("DROP ROLE {}").format(psycopg.sql.Identifier(role)))


# A worker node down (the last tests of the module: they stop a worker of the module's cluster and
# start it again, on the same port, before they end).

def _group_on_each_worker(dsn: str, prefix: str) -> dict[int, str]:
    """A new group name for each worker, by the port of the node that holds its shards."""
    found: dict[int, str] = {}
    with psycopg.connect(dsn) as conn:
        workers = conn.execute("SELECT count(*) FROM pg_dist_node WHERE groupid <> 0").fetchone()[0]
        while len(found) < workers:
            name = f"{prefix}-{uuid.uuid4().hex[:8]}"
            port = conn.execute(
                "SELECT n.nodeport FROM pg_dist_placement p JOIN pg_dist_node n ON n.groupid = p.groupid"
                " WHERE p.shardid = get_shard_id_for_distribution_column('pgmemory.episodes', %s::text)",
                (name,)).fetchone()[0]
            found.setdefault(port, name)
    return found


@contextlib.contextmanager
def _worker_stopped(cluster, port: int):
    """Stop the worker on `port` as an outage does; the yielded call starts it again (so does the
    end of the block, whatever happened)."""
    if cluster is None:
        pytest.skip("stops a worker: only on the cluster the suite starts")
    i = cluster.ports.index(port)
    cluster.stop_node(i)
    stopped = [True]

    def back() -> None:
        cluster.start_node(i)
        stopped[0] = False

    try:
        yield back
    finally:
        if stopped[0]:
            cluster.start_node(i)


def _statuses(dsn: str, group: str) -> list[str]:
    with psycopg.connect(dsn) as conn:
        return [r[0] for r in conn.execute("SELECT status FROM pgmemory.episodes WHERE group_id = %s ORDER BY valid_at",
                                           (group,)).fetchall()]


async def test_with_a_worker_down_ingest_of_a_file_stores_the_other_groups_and_names_the_node(
        memory, citus_cluster, db_dsn, tmp_path):
    """`pgmemory ingest` of a file while one worker is stopped: the episodes of groups on the
    other worker are stored; those of the stopped worker's group fail, each with one line
    naming the node, nothing of them is kept, and the run exits 1. Once the worker is back, the
    same command stores them (the done ones are skipped). (It aborted the whole file, the other
    groups' episodes not stored either, with "lost the connection to Postgres".)"""
    from tests.test_cli import run_cli

    (down_port, down), (up_port, up) = sorted(_group_on_each_worker(db_dsn, "down").items(), reverse=True)
    data = tmp_path / "episodes.jsonl"
    data.write_text("\n".join(json.dumps(line) for line in [
        {"group_id": down, "content": "I work at Acme.", "actor": "Ann", "reference_time": "2024-01-01T00:00:00Z"},
        {"group_id": up, "content": "I work at Globex.", "actor": "Bob", "reference_time": "2024-01-01T00:00:00Z"},
        {"group_id": down, "content": "I moved to Boston.", "actor": "Ann", "reference_time": "2024-01-02T00:00:00Z"},
        {"group_id": up, "content": "I moved to Denver.", "actor": "Bob", "reference_time": "2024-01-02T00:00:00Z"},
    ]) + "\n")
    with _worker_stopped(citus_cluster, down_port) as back:
        result = run_cli("ingest", str(data), dsn=db_dsn)
        assert result.returncode == 1, result.stderr
        assert "2 ingested, 0 already present, 2 failed" in result.stdout, result.stdout + result.stderr
        failures = [line for line in result.stderr.splitlines() if line.startswith("  line ")]
        assert [line.split(":")[0] for line in failures] == ["  line 1", "  line 3"]
        for line in failures:
            assert f"Citus worker 127.0.0.1:{down_port}, which holds group '{down}', is unreachable" in line
            assert "run the same command again once the worker is back" in line
        assert _statuses(db_dsn, up) == ["done", "done"]
        every_group = run_cli("retry", dsn=db_dsn)  # (reads every group's shards: fails, naming the node)
        assert every_group.returncode == 2 and every_group.stderr.count("\n") == 1, every_group.stderr
        assert f"Citus worker 127.0.0.1:{down_port} is unreachable" in every_group.stderr
        assert "once the worker is back, run the same command again" in every_group.stderr
        back()
    assert _statuses(db_dsn, down) == []  # nothing of the failed episodes was kept
    again = run_cli("ingest", str(data), dsn=db_dsn)
    assert again.returncode == 0, again.stderr
    assert "2 ingested, 2 already present, 0 failed" in again.stdout
    assert _statuses(db_dsn, down) == ["done", "done"]


async def test_with_a_worker_down_the_queue_worker_goes_on_with_the_other_groups_then_the_rest(
        memory, citus_cluster, db_dsn):
    """A running `pgmemory worker` when one worker node stops, in the middle of an episode of its
    group: it processes the groups of the other node (an episode enqueued meanwhile too), reports
    the node, fails nothing, and once the node is back, without a restart, gives the interrupted
    episode back and processes it. (Its claim read every shard, so it claimed nothing at all,
    silently, until the node was back.)"""
    import asyncio

    (down_port, down), (up_port, up) = sorted(_group_on_each_worker(db_dsn, "qdown").items(), reverse=True)

    async def enqueue(group: str, content: str, day: int) -> None:
        await memory.enqueue_episode(group, content, actor="Ann",
                                     reference_time=datetime(2024, 1, day, tzinfo=timezone.utc))

    async def until(check, what: str) -> None:
        for _ in range(600):  # (at most ~60 s: a failure, not a hang)
            if check():
                return
            await asyncio.sleep(0.1)
        pytest.fail(f"the worker did not {what}")

    await enqueue(down, "I work at Acme.", 1)
    await enqueue(up, "I work at Globex.", 1)
    # The down group's write lock held by another session: its apply waits on its worker when it stops.
    holder = psycopg.connect(db_dsn)
    holder.execute("SELECT pgmemory_internal.lock_group(%s)", (down,))
    worker = memory.worker(concurrency=2, poll_seconds=0.2, communities=False)
    running = asyncio.create_task(worker.run())
    try:
        await until(lambda: _statuses(db_dsn, up) == ["done"] and _statuses(db_dsn, down) == ["processing"],
                    "process one group and start the other's episode")
        with _worker_stopped(citus_cluster, down_port) as back:
            holder.close()
            await until(lambda: worker.stats.in_progress == 0, "end the episode its node's stop interrupted")
            await enqueue(up, "I moved to Denver.", 2)
            await until(lambda: _statuses(db_dsn, up) == ["done", "done"], "process an episode enqueued meanwhile")
            assert worker.stats.unreachable == {f"127.0.0.1:{down_port}"}
            assert worker.stats.failed == 0
            back()
            await until(lambda: _statuses(db_dsn, down) == ["done"], "process the group of the node once back")
            await until(lambda: not worker.stats.unreachable, "stop naming the node once it is back")
    finally:
        holder.close()
        worker.stop(now=True)
        await asyncio.wait_for(running, 60)
    # The interrupted episode is done once, by this worker after the node is back, or by the commit
    # it had sent when the node stopped (the coordinator commits; Citus completes the node's
    # prepared part once it is back), which the worker saw fail and gave back uncounted.
    assert worker.stats.done in (2, 3) and worker.stats.failed == 0
    with psycopg.connect(db_dsn) as conn:  # ... and once only: one fact, one mention of Acme
        assert conn.execute("SELECT count(*) FROM pgmemory.current_facts WHERE group_id = %s",
                            (down,)).fetchone() == (1,)


async def test_with_a_worker_down_rest_and_mcp_answer_for_the_other_groups_and_name_the_node(
        memory, server, mcp_memory, citus_cluster, db_dsn):
    """`pgmemory serve` and `pgmemory mcp` while one worker is stopped: a search, an episode
    posted or a read of a group whose shards it holds is a 503 `database_unavailable` (REST)
    or a tool error (MCP) in one line naming the node; the same requests for a group on the
    other worker are answered as usual, and so are they all once the node is back."""
    from mcp import Client

    from pgmemory.surfaces.api_keys import create_key
    from pgmemory.surfaces.mcp_server import build_server

    client, _ = server
    (down_port, down), (up_port, up) = sorted(_group_on_each_worker(db_dsn, "sdown").items(), reverse=True)
    node = f"127.0.0.1:{down_port}"
    _, secret = await create_key(memory.pool, "worker-down", read=[], write=[down, up])
    key = {"X-API-Key": secret}
    for g in (down, up):
        await memory.add_episode(g, "I work at Acme.", actor="Ann",
                                 reference_time=datetime(2024, 1, 1, tzinfo=timezone.utc))

    async def rest(g: str) -> list:
        return [await client.post("/v1/search", headers=key, json={"query": "where does Ann work", "group_ids": [g]}),
                await client.post("/v1/context", headers=key, json={"query": "Ann", "group_ids": [g]}),
                await client.post(f"/v1/groups/{g}/episodes", headers=key,
                                  json={"content": "I moved to Boston.", "actor": "Ann",
                                        "reference_time": "2024-01-02T00:00:00Z"}),
                await client.post(f"/v1/groups/{g}/episodes?wait=true", headers=key,
                                  json={"content": "I moved to Austin.", "actor": "Ann",
                                        "reference_time": "2024-01-04T00:00:00Z"}),
                await client.get(f"/v1/groups/{g}/episodes", headers=key)]

    async def mcp(mcp_client, g: str) -> list:
        return [await mcp_client.call_tool("search_memory_facts", {"query": "Ann", "group_ids": [g]}),
                await mcp_client.call_tool("add_memory", {"name": "move", "episode_body": "Ann: I moved to Denver.",
                                                          "group_id": g, "reference_time": "2024-01-03T00:00:00Z"}),
                await mcp_client.call_tool("add_memory", {"name": "move", "episode_body": "Ann: I moved to Miami.",
                                                          "group_id": g, "reference_time": "2024-01-05T00:00:00Z",
                                                          "wait": True}),
                await mcp_client.call_tool("get_episodes", {"group_id": g})]

    async with Client(build_server(mcp_memory, worker_concurrency=0, auth=False)) as mcp_client:
        with _worker_stopped(citus_cluster, down_port) as back:
            for r in await rest(down):
                assert r.status_code == 503, (r.request.url, r.text)
                error = r.json()["error"]
                assert error["code"] == "database_unavailable" and "\n" not in error["message"], r.text
                assert f"Citus worker {node}" in error["message"] and "unreachable" in error["message"], r.text
            assert [r.status_code for r in await rest(up)] == [200, 200, 202, 200, 200]
            for result in await mcp(mcp_client, down):
                assert result.is_error, result.structured_content
                [text] = [c.text for c in result.content]
                assert "\n" not in text and f"Citus worker {node}" in text and "unreachable" in text, text
            assert [result.is_error for result in await mcp(mcp_client, up)] == [False, False, False, False]
            back()
        assert [r.status_code for r in await rest(down)] == [200, 200, 202, 200, 200]
        assert [result.is_error for result in await mcp(mcp_client, down)] == [False, False, False, False]


@contextlib.contextmanager
def _worker_frozen(cluster, port: int):
    """Every process of the worker on `port` stopped (SIGSTOP, tests/test_faults.py `freeze`: a hung
    host, a partition that drops packets; it refuses nothing) and thawed at the end of the block,
    whatever happened."""
    from tests.test_faults import freeze, thaw

    if cluster is None:
        pytest.skip("freezes a worker: only on the cluster the suite starts")
    i = cluster.ports.index(port)
    frozen = freeze(int((cluster.root / f"n{i}" / "postmaster.pid").read_text().split()[0]))
    try:
        yield
    finally:
        thaw(frozen)


async def test_with_a_worker_frozen_its_groups_fail_in_bounded_time_naming_it_and_the_others_are_served(
        citus_cluster, db_dsn, server_login, monkeypatch):
    """A worker that stops answering without refusing connections (every process SIGSTOPped): a
    search and an ingest of a group it holds fail with one line naming the node, the other worker's
    group is searched and ingested meanwhile, and once it answers its group is served again. The
    pool's sessions hold open connections to it, as a serving process's do: the coordinator waits on
    those for ever, so a call fails once pgmemory's search or statement timeout has passed and the
    coordinator got no new connection to the node (WorkerUnreachable); a new session's call fails
    within Citus's connection timeout, which pgmemory sets to 5 s. (The search failed after its
    timeout and as long again as the statement timeout, blamed on locks; an ingest after twice
    the statement timeout, as "Postgres did not answer".) A REST server's request is a 503 naming
    the node (its connections narrowed to the request's groups, each statement in a transaction)."""
    import asyncio

    import httpx

    from pgmemory import Memory
    from pgmemory.errors import WorkerUnreachable
    from pgmemory.extract.rules import RuleExtractor
    from pgmemory.ingest.pipeline import IngestError
    from pgmemory.providers.embedder import HashEmbedder
    from pgmemory.storage import connect as connect_module
    from pgmemory.storage.connect import unreachable_node
    from pgmemory.storage.request_groups import NarrowToRequestGroups
    from pgmemory.surfaces.rest import create_app

    monkeypatch.setenv("PGMEMORY_STATEMENT_TIMEOUT", "6")  # (more than the 5 s of a new connection, as by default)
    monkeypatch.setenv("PGMEMORY_SEARCH_TIMEOUT", "2")
    monkeypatch.setattr(connect_module, "ANSWER_MARGIN_S", 1.0)
    (down_port, down), (up_port, up) = sorted(_group_on_each_worker(db_dsn, "frozen").items(), reverse=True)
    node = f"127.0.0.1:{down_port}"
    bound = 120  # the hang guard of each call: a bound, not a timing assert

    def episode(group: str, text: str, day: int) -> dict:
        return {"group_id": group, "content": text, "actor": "Ann",
                "reference_time": datetime(2024, 1, day, tzinfo=timezone.utc)}

    async with Memory.open(db_dsn, embedder=HashEmbedder(), extractor=RuleExtractor()):
        pass  # the owner records the embedder first, as `pgmemory init` would
    memory = await Memory.open(server_login, embedder=HashEmbedder(), extractor=RuleExtractor(), pool_size=3,
                               lease_seconds=3, on_acquire=NarrowToRequestGroups())
    app = create_app(memory, auth=False, worker_concurrency=0)
    try:
        for g in (down, up):
            await memory.add_episodes([episode(g, "I work at Acme.", 1)])
        await asyncio.gather(*(memory.search("Ann", group_ids=[down]) for _ in range(3)))
        async with app.router.lifespan_context(app), httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app), base_url="http://pgmemory") as client:
            with _worker_frozen(citus_cluster, down_port):
                async def rest_search(group: str) -> httpx.Response:
                    return await asyncio.wait_for(client.post("/v1/search", json={"query": "where does Ann work",
                                                                                   "group_ids": [group]}), bound)
                r = await rest_search(down)  # on a session holding a connection to it
                assert r.status_code == 503 and r.json()["error"]["code"] == "database_unavailable", r.text
                assert f"Citus worker {node} did not answer" in r.json()["error"]["message"], r.text
                with pytest.raises(Exception) as raised:  # on a new session (the held ones were dropped)
                    await asyncio.wait_for(memory.search("where does Ann work", group_ids=[down]), bound)
                assert unreachable_node(raised.value) == node and "\n" not in str(raised.value), repr(raised.value)
                assert node in str(raised.value), str(raised.value)
                [failed] = await asyncio.wait_for(memory.add_episodes([episode(down, "I moved to Boston.", 2)]), bound)
                assert isinstance(failed, IngestError) and isinstance(failed.cause, WorkerUnreachable), repr(failed)
                assert failed.cause.node == node and "\n" not in str(failed.cause), str(failed.cause)
                assert f"Citus worker {node}, which holds group '{down}', is unreachable" in str(failed.cause)
                found = await asyncio.wait_for(memory.search("where does Ann work", group_ids=[up]), bound)
                assert [f.fact for f in found.facts] == ["Ann works for Acme."]
                r = await rest_search(up)
                assert r.status_code == 200 and [f["fact"] for f in r.json()["facts"]] == ["Ann works for Acme."], r.text
                [stored] = await asyncio.wait_for(memory.add_episodes([episode(up, "I moved to Boston.", 2)]), bound)
                assert stored.status == "done", repr(stored)
        # The same again once it answers. (A store the frozen worker had received runs when it thaws,
        # leased to this process: "busy" until the lease ends; a new `pgmemory ingest` takes it over.)
        for _ in range(60):
            [stored] = await asyncio.wait_for(memory.add_episodes([episode(down, "I moved to Boston.", 2)]), bound)
            if stored.status != "busy":
                break
            await asyncio.sleep(0.5)
        assert stored.status == "done", repr(stored)
        found = await asyncio.wait_for(memory.search("where did Ann move", group_ids=[down]), bound)
        assert "Ann moved to Boston." in [f.fact for f in found.facts]
    finally:
        await memory.close()
