"""Tenancy enforced by the database: row-level security on every table, keyed on the groups a
role was granted (`pgmemory grant`), narrowed per transaction but never widened; checked through
a real psql session, the stored functions, Memory on a restricted login, and a property battery."""
from __future__ import annotations

import importlib.util
import subprocess
import uuid
from datetime import datetime, timezone
from pathlib import Path

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pgmemory.errors import InvalidInput
from pgmemory.storage import grants
from pgmemory.storage.setup import init_database

PSQL = Path(importlib.util.find_spec("pgserver").origin).parent / "pginstall" / "bin" / "psql"
STORY = {
    "A": ["Alice: I work at Acme in Boston.", "Alice: My sister Carol lives in Denver.",
          "Alice: I moved to Lisbon last week."],
    "B": ["Bob: I work at Globex in Berlin.", "Bob: My brother Dave likes chess.",
          "Bob: I visited Acme in Boston last year."],
}
WORDS = ["Acme", "Boston", "Globex", "Berlin", "Alice", "Bob", "sister", "chess", "work", "lives", "Lisbon"]


def login_dsn(owner_dsn: str, role: str, password: str) -> str:
    """The DSN of a login role on the owner's database."""
    info = psycopg.conninfo.conninfo_to_dict(owner_dsn)
    return f"postgresql://{role}:{password}@/{info['dbname']}?host={info['host']}&port={info.get('port', 5432)}"


@pytest.fixture(scope="module")
def tenants(db_dsn):
    """Two groups with episodes, entities, facts, mentions and text statistics (written by the
    owner), and a login role granted the first group only."""
    from pgmemory import SyncMemory
    from pgmemory.extract.rules import RuleExtractor
    from pgmemory.providers.embedder import HashEmbedder

    tag = uuid.uuid4().hex[:8]
    groups = {k: f"rls-{k}-{tag}" for k in STORY}
    with SyncMemory(db_dsn, embedder=HashEmbedder(), extractor=RuleExtractor()) as memory:
        for key, lines in STORY.items():
            for i, line in enumerate(lines):
                memory.add_episode(groups[key], line.split(": ", 1)[1], actor=line.split(":")[0],
                                   reference_time=datetime(2024, 1, 1 + i, tzinfo=timezone.utc))
    role, password = f"analyst_{tag}", f"pw-{tag}"
    with psycopg.connect(db_dsn) as conn:
        assert grants.grant(conn, role, [groups["A"]], create_password=password) == [groups["A"]]
    dsn = login_dsn(db_dsn, role, password)
    yield dict(groups=groups, role=role, dsn=dsn, owner_dsn=db_dsn)
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        grants.revoke(conn, role, None)
        conn.execute(psycopg.sql.SQL("DROP ROLE {}").format(psycopg.sql.Identifier(role)))


def test_every_table_has_row_level_security(conn):
    rows = conn.execute(
        "SELECT c.relname, c.relrowsecurity,"
        "       EXISTS (SELECT FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attname = 'group_id'),"
        "       array(SELECT p.polname::text FROM pg_policy p WHERE p.polrelid = c.oid ORDER BY 1)"
        "  FROM pg_class c WHERE c.relnamespace = 'pgmemory'::regnamespace AND c.relkind IN ('r', 'p')"
        " ORDER BY 1").fetchall()
    assert len(rows) >= 17
    assert [name for name, rls, _, _ in rows if not rls] == []
    # The AGE mirror's bookkeeping is per group like the rest (it had an open policy before 0530).
    expected = {"settings": ["readable"], "schema_migrations": ["readable"], "role_groups": ["own_grants"],
                "api_keys": ["servers"]}
    for name, _, tenant, policies in rows:
        assert policies == expected.get(name, ["tenant"] if tenant else []), name


def test_a_psql_session_of_group_a_sees_no_row_of_b_anywhere(tenants):
    """Every table and view with a group_id, read through the bundled psql as the analyst login:
    rows of A, none of B, even after trying to widen the session's groups."""
    a, b = tenants["groups"]["A"], tenants["groups"]["B"]
    with psycopg.connect(tenants["owner_dsn"]) as conn:
        relations = [r for (r,) in conn.execute(
            "SELECT c.relname FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = 'group_id'"
            " WHERE c.relnamespace = 'pgmemory'::regnamespace AND c.relkind IN ('r', 'p', 'v')"
            "   AND c.relname <> 'role_groups' ORDER BY 1")]  # grants: a role reads its own, tested below
        owner_b = conn.execute("SELECT count(*) FROM pgmemory.facts WHERE group_id = %s", (b,)).fetchone()[0]
    assert owner_b > 0 and {"facts", "entities", "episodes", "fact_versions", "current_facts"} <= set(relations)
    counts = [f"SELECT '{r}', count(*) FILTER (WHERE group_id = :'b'), count(*) FILTER (WHERE group_id = :'a')"
              f" FROM pgmemory.{r};" for r in relations]
    script = "\n".join(counts + [
        "SELECT set_config('pgmemory.groups', json_build_array(:'b')::text, false);",
        *[c.replace("SELECT '", "SELECT 'widened ") for c in counts],
        "INSERT INTO pgmemory.role_groups VALUES (current_user, :'b');",
        "SET ROLE pgmemory_reader;",
        "UPDATE pgmemory.facts SET fact = 'x';",
    ])
    info = psycopg.conninfo.conninfo_to_dict(tenants["dsn"])
    proc = subprocess.run(
        [str(PSQL), "-X", "-At", "-F", "|", "-v", f"a={a}", "-v", f"b={b}", "-h", info["host"],
         "-p", str(info.get("port", 5432)), "-U", info["user"], "-d", info["dbname"]],
        input=script, capture_output=True, text=True, env={"PGPASSWORD": info["password"]}, timeout=120)
    seen = {}
    for line in proc.stdout.splitlines():
        if line.count("|") != 2:  # the set_config line
            continue
        name, of_b, of_a = line.split("|")
        seen[name] = (int(of_b), int(of_a))
    denied = [line for line in proc.stderr.splitlines() if line.startswith("ERROR:")]
    readable = {n for n in seen if not n.startswith("widened ")}
    assert all(of_b == 0 for of_b, _ in seen.values()), seen
    assert all(seen[n][1] > 0 for n in ("facts", "entities", "episodes", "fact_versions", "episode_log"))
    assert {n: seen[f"widened {n}"] for n in readable} == {n: (0, 0) for n in readable}  # narrowing to B: nothing
    # What the analyst role is not granted at all is refused, as are the escapes tried at the end.
    assert set(relations) - readable == {"group_versions", "group_locks", "fact_claims", "erasures", "retractions",
                                         "reembed_progress", "graph_vertices", "graph_edges",
                                         "lineage_exclusions", "lineage_components"}
    assert sum("permission denied" in line for line in denied) == 2 * (len(relations) - len(readable)) + 3
    assert any('permission denied to set role "pgmemory_reader"' in line for line in denied)


def test_no_security_definer_function_but_the_search_and_group_parameters_do_not_escape(tenants):
    b = tenants["groups"]["B"]
    with psycopg.connect(tenants["owner_dsn"]) as conn:
        definers = conn.execute("SELECT p.oid::regprocedure::text FROM pg_proc p"
                                " WHERE p.pronamespace IN ('pgmemory'::regnamespace, 'pgmemory_internal'::regnamespace) AND p.prosecdef"
                                "   AND p.prorettype <> 'trigger'::regtype").fetchall()
        fact_b, entity_b = conn.execute("SELECT id, source_id FROM pgmemory.facts WHERE group_id = %s LIMIT 1",
                                        (b,)).fetchone()
    # Every callable function runs with the caller's rights, so RLS applies inside, but the search,
    # which searches the groups the session may see with the owner's rights (its escapes are tried
    # below). The AGE mirror's trigger functions run as the owner; they cannot be called directly.
    assert definers == [("pgmemory.search_candidates(text[],text,vector,jsonb)",)]
    with psycopg.connect(tenants["dsn"]) as conn:
        for query, args in [
                ("SELECT count(*) FROM pgmemory.facts_current(%s)", (b,)),
                ("SELECT count(*) FROM pgmemory.facts_valid_at(%s, now())", (b,)),
                ("SELECT count(*) FROM pgmemory.facts_as_of(%s, now(), now())", (b,)),
                ("SELECT count(*) FROM pgmemory.fact_history(%s, %s)", (b, fact_b)),
                ("SELECT count(*) FROM pgmemory.entities_at(%s)", (b,)),
                ("SELECT count(*) FROM pgmemory.entity_versions_of(%s, 'Bob')", (b,)),
                ("SELECT count(*) FROM pgmemory.episode_queue WHERE group_id = %s", (b,))]:
            assert conn.execute(query, args).fetchone() == (0,), query
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="is not an entity of the searched groups"):
            conn.execute("SELECT * FROM pgmemory.bfs_entities(%s, %s, 2)", ([b], [entity_b]))
        conn.rollback()
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match=f"login {tenants['role']} may only read: writing group {b} needs a read-write login"):
            conn.execute("SELECT pgmemory.add_fact(%s, 'Eve', 'KNOWS', 'Bob', 'Eve knows Bob.')", (b,))


SEARCH = "SELECT DISTINCT detail->>'group_id' FROM pgmemory.search_candidates(%s, %s, NULL, %s) ORDER BY 1"
SEARCH_GROUP = "SELECT DISTINCT detail->>'group_id' FROM pgmemory.search_group(%s, %s, NULL, %s)"


def test_the_search_running_as_its_owner_reads_only_the_sessions_groups(tenants):
    a, b = tenants["groups"]["A"], tenants["groups"]["B"]
    opts = psycopg.types.json.Jsonb({"methods": ["fulltext", "bfs"]})
    query = "Acme Boston Globex Berlin Alice Bob"
    with psycopg.connect(tenants["owner_dsn"]) as conn:
        assert conn.execute(SEARCH, ([a, b], query, opts)).fetchall() == sorted([(a,), (b,)])
    with psycopg.connect(tenants["dsn"]) as conn:
        assert conn.execute(SEARCH, ([a, b], query, opts)).fetchall() == [(a,)]
        assert conn.execute(SEARCH, ([b], query, opts)).fetchall() == []
        assert conn.execute(SEARCH_GROUP, (b, query, opts)).fetchall() == []
        # Asking for B in the transaction's groups narrows; it never widens.
        conn.execute("SELECT set_config('pgmemory.groups', %s, false)", (f'["{b}"]',))
        assert conn.execute(SEARCH, ([a, b], query, opts)).fetchall() == []
        conn.execute("SELECT set_config('pgmemory.groups', %s, false)", (f'["{a}", "{b}"]',))
        assert conn.execute(SEARCH, ([a, b], query, opts)).fetchall() == [(a,)]
        conn.execute("SELECT set_config('pgmemory.groups', '', false)")
        # A role the login may become is searched with that role's grants (none here), as under RLS.
        conn.execute("SET ROLE pgmemory_analyst")
        assert conn.execute(SEARCH, ([a, b], query, opts)).fetchall() == []
        conn.execute("RESET ROLE")
        # Seeds of B are refused even though the search reads with the owner's rights.
        entity_b = None
        with psycopg.connect(tenants["owner_dsn"]) as owner:
            entity_b = owner.execute("SELECT id FROM pgmemory.entities WHERE group_id = %s LIMIT 1", (b,)).fetchone()[0]
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="is not an entity of the searched groups"):
            conn.execute(SEARCH, ([a, b], query, psycopg.types.json.Jsonb({"bfs_seeds": [str(entity_b)],
                                                                           "methods": ["bfs"]})))


@pytest.fixture(scope="module")
def restricted_memory(tenants):
    """A SyncMemory on the analyst login's DSN (read-only role, group A granted)."""
    from pgmemory import SyncMemory
    from pgmemory.providers.embedder import HashEmbedder

    with SyncMemory(tenants["dsn"], embedder=HashEmbedder()) as memory:
        yield memory


def test_memory_on_a_restricted_login_sees_only_its_groups(tenants, restricted_memory):
    a, b = tenants["groups"]["A"], tenants["groups"]["B"]
    assert restricted_memory.search("Acme Boston", group_ids=[b]).to_dict() == {
        "facts": [], "entities": [], "communities": [], "episodes": []}
    found = restricted_memory.search("Acme Boston", group_ids=[a, b])
    assert found.facts and {h.group_id for h in found.facts + found.entities + found.episodes} == {a}
    assert "Globex" not in restricted_memory.context("Globex Berlin", group_ids=[a, b], episodes=True)
    assert restricted_memory.sql("SELECT DISTINCT group_id FROM episode_log").rows == [(a,)]


def test_a_login_asking_for_the_age_bfs_is_told_the_graph_is_the_owners(tenants, restricted_memory):
    """The AGE graph is the owner's only: a login's `bfs(engine="age")` is one InvalidInput line
    saying so (it was asyncpg's "access to library age is not allowed"); engine "sql" answers."""
    a = tenants["groups"]["A"]
    alice = [r.id for r in restricted_memory.list_entities(a, name="Alice")]
    assert alice and restricted_memory.bfs(alice, group_ids=[a], depth=1)
    with pytest.raises(InvalidInput, match="owner.*engine 'sql'") as refused:
        restricted_memory.bfs(alice, group_ids=[a], depth=1, engine="age")
    assert "\n" not in str(refused.value)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                   HealthCheck.too_slow])
@given(words=st.lists(st.sampled_from(WORDS), min_size=1, max_size=3),
       which=st.sets(st.sampled_from(["A", "B", "other"]), min_size=1),
       recipe=st.sampled_from(["combined_hybrid_rrf", "edge_hybrid_rrf", "edge_node_distance"]),
       view=st.sampled_from(["fact_versions", "believed_facts", "current_facts", "entity_history", "episode_log",
                             "entity_mentions"]))
def test_no_surface_returns_a_row_of_another_group(tenants, restricted_memory, words, which, recipe, view):
    a = tenants["groups"]["A"]
    groups = [tenants["groups"].get(k, "rls-other") for k in sorted(which)]
    query = " ".join(words)
    try:
        results = restricted_memory.search(query, group_ids=groups, config=recipe)
    except InvalidInput:  # e.g. a recipe needing seeds
        results = None
    if results is not None:
        assert {h.group_id for k in ("facts", "entities", "communities", "episodes")
                for h in getattr(results, k)} <= {a}
    context = restricted_memory.context(query, group_ids=groups, episodes=True)
    assert not any(w in context for w in ("Globex", "Berlin", "Dave", "chess", "Bob"))
    rows = restricted_memory.sql(f"SELECT DISTINCT group_id FROM {view}", group_ids=groups).rows
    assert set(r[0] for r in rows) <= ({a} & set(groups))


def test_revoking_from_a_role_that_never_existed_is_an_error(db_dsn, group):
    """A typo in `pgmemory grant ROLE G --revoke` must not report "ROLE sees: no group" while the
    intended role keeps its grants; a dropped role's leftover grants can still be revoked."""
    tag = uuid.uuid4().hex[:8]
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        with pytest.raises(InvalidInput, match=f"role 'nobody_{tag}' does not exist and was granted no group"):
            grants.revoke(conn, f"nobody_{tag}", [group])
        with pytest.raises(InvalidInput, match="does not exist"):
            grants.revoke(conn, f"nobody_{tag}", None)
        role = f"gone_{tag}"
        assert grants.grant(conn, role, [group], create_password="pw") == [group]
        conn.execute(psycopg.sql.SQL("DROP ROLE {}").format(psycopg.sql.Identifier(role)))
        assert grants.revoke(conn, role, [group]) == []


def test_a_login_created_anew_does_not_inherit_a_dropped_logins_groups(db_dsn, group):
    """Grants are keyed by role name and DROP ROLE leaves them: a new login created with that
    name (`pgmemory grant NAME G --create`) sees G, not also what the dropped one was granted."""
    tag = uuid.uuid4().hex[:8]
    role, other = f"reused_{tag}", f"{group}-other"
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        assert grants.grant(conn, role, [other], create_password="pw") == [other]
        conn.execute(psycopg.sql.SQL("DROP ROLE {}").format(psycopg.sql.Identifier(role)))
        try:
            assert grants.grant(conn, role, [group], create_password="pw2") == [group]
            assert grants.grant(conn, role, [other]) == sorted([group, other])  # (an existing role: added)
        finally:
            grants.revoke(conn, role, None)
            conn.execute(psycopg.sql.SQL("DROP ROLE {}").format(psycopg.sql.Identifier(role)))


def test_an_app_login_writes_without_reading_the_shared_id_counters(db_dsn, group):
    """Ids come from counters shared by every group: a tenant's app login that could read one
    (`SELECT last_value FROM pgmemory.<sequence>`) would see how much every other tenant writes.
    It writes through them (identity columns need no right on their sequence) and reads none."""
    from pgmemory import SyncMemory
    from pgmemory.extract.rules import RuleExtractor
    from pgmemory.providers.embedder import HashEmbedder

    tag = uuid.uuid4().hex[:8]
    role, password = f"app_{tag}", f"pw-{tag}"
    with SyncMemory(db_dsn, embedder=HashEmbedder(), extractor=RuleExtractor()):
        pass  # (initialised by the owner for this embedder)
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        assert grants.grant(conn, role, [group], kind="app", create_password=password) == [group]
        sequences = [r for (r,) in conn.execute(
            "SELECT c.oid::regclass::text FROM pg_class c WHERE c.relkind = 'S'"
            "   AND c.relnamespace IN ('pgmemory'::regnamespace, 'pgmemory_internal'::regnamespace) ORDER BY 1")]
    assert len(sequences) >= 3  # (fact versions, claims, episodes, ...)
    dsn = login_dsn(db_dsn, role, password)
    try:
        with SyncMemory(dsn, embedder=HashEmbedder(), extractor=RuleExtractor()) as memory:
            result = memory.add_episode(group, "I work at Acme in Boston.", actor="Alice",
                                        reference_time=datetime(2024, 1, 1, tzinfo=timezone.utc))
            assert result.facts_created
            memory.add_fact(group, "Alice", "LIVES_IN", "Lisbon", "Alice lives in Lisbon.")
        with psycopg.connect(dsn, autocommit=True) as conn:
            other = f"{group}-other"
            with pytest.raises(psycopg.errors.InsufficientPrivilege,
                               match=f"^login {role} may not write group {other} \\(not among its groups"):
                conn.execute("SELECT pgmemory.add_fact(%s, 'Eve', 'KNOWS', 'Bob', 'Eve knows Bob.')", (other,))
            for sequence in sequences:
                with pytest.raises(psycopg.errors.InsufficientPrivilege):
                    conn.execute(psycopg.sql.SQL("SELECT last_value FROM {}").format(
                        psycopg.sql.SQL(sequence)))
                with pytest.raises(psycopg.errors.InsufficientPrivilege):
                    conn.execute("SELECT nextval(%s::regclass)", (sequence,))
                # (NULL without a right, as pg_sequences shows it)
                assert conn.execute("SELECT pg_sequence_last_value(%s::regclass)", (sequence,)).fetchone() == (None,)
    finally:
        with psycopg.connect(db_dsn, autocommit=True) as conn:
            grants.revoke(conn, role, None)
            conn.execute(psycopg.sql.SQL("DROP OWNED BY {}").format(psycopg.sql.Identifier(role)))
            conn.execute(psycopg.sql.SQL("DROP ROLE {}").format(psycopg.sql.Identifier(role)))


def test_a_login_that_may_create_functions_cannot_widen_its_groups(tenants):
    """Row-level security reads the session's groups through stored functions; were they resolved
    on the caller's search_path, a login that may create functions in a schema it searches (its
    own schema, "$user", as Postgres' secure schema pattern gives every user) could shadow a
    built-in they call (unnest(text[]) here) and see every group it asks for."""
    a, b = tenants["groups"]["A"], tenants["groups"]["B"]
    tag = uuid.uuid4().hex[:8]
    role, password = f"schemer_{tag}", f"pw-{tag}"
    ident = psycopg.sql.Identifier(role)
    with psycopg.connect(tenants["owner_dsn"], autocommit=True) as conn:
        assert grants.grant(conn, role, [a], create_password=password) == [a]
        conn.execute(psycopg.sql.SQL("CREATE SCHEMA {} AUTHORIZATION {}").format(ident, ident))
    dsn = login_dsn(tenants["owner_dsn"], role, password)
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(psycopg.sql.SQL(
                "CREATE FUNCTION {}.unnest(text[]) RETURNS SETOF text LANGUAGE sql IMMUTABLE"
                " AS $$ SELECT x FROM pg_catalog.unnest($1) x UNION SELECT {} $$").format(
                    ident, psycopg.sql.Literal(b)))
        with psycopg.connect(dsn, autocommit=True) as conn:  # (a new session: nothing cached)
            assert conn.execute("SELECT (current_schemas(false))[1]").fetchone() == (role,)
            conn.execute("SELECT set_config('pgmemory.groups', %s, false)", (f'["{a}", "{b}"]',))
            assert conn.execute("SELECT pgmemory_internal.visible_groups()").fetchone() == ([a],)
            seen = conn.execute("SELECT DISTINCT group_id FROM pgmemory.facts ORDER BY 1").fetchall()
            assert seen == [(a,)]
            assert conn.execute("SELECT count(*) FROM pgmemory.episodes WHERE group_id = %s", (b,)).fetchone() == (0,)
    finally:
        with psycopg.connect(tenants["owner_dsn"], autocommit=True) as conn:
            grants.revoke(conn, role, None)
            conn.execute(psycopg.sql.SQL("DROP SCHEMA {} CASCADE").format(ident))
            conn.execute(psycopg.sql.SQL("DROP ROLE {}").format(ident))


def test_a_temporary_type_does_not_run_code_as_the_owner_in_the_mirror_triggers(tenants):
    """The AGE mirror's trigger functions run with their owner's rights for any writer. A pinned
    search_path that does not name pg_temp searches it first for types: a read-write login's
    temporary table named `text` (its row type) and a cast from uuid to it made every `::text`
    in those functions call the login's own function as the owner (who could then grant the
    login every group). With pg_temp last, `text` is pg_catalog's for them."""
    a, b = tenants["groups"]["A"], tenants["groups"]["B"]
    tag = uuid.uuid4().hex[:8]
    role, password = f"caster_{tag}", f"pw-{tag}"
    with psycopg.connect(tenants["owner_dsn"], autocommit=True) as conn:
        assert grants.grant(conn, role, [a], kind="app", create_password=password) == [a]
        episode = conn.execute("SELECT id FROM pgmemory.episodes WHERE group_id = %s AND retracted_at IS NULL"
                               " LIMIT 1", (a,)).fetchone()[0]
        definers = conn.execute(
            "SELECT p.oid::regprocedure::text, p.proconfig FROM pg_proc p"
            " WHERE p.pronamespace IN ('pgmemory'::regnamespace, 'pgmemory_internal'::regnamespace)"
            "   AND p.prosecdef").fetchall()
    assert definers and all(any(c.startswith("search_path=") and c.endswith(", pg_temp") for c in config or [])
                            for _, config in definers), definers
    try:
        with psycopg.connect(login_dsn(tenants["owner_dsn"], role, password)) as conn:
            conn.execute("CREATE TEMP TABLE text (x integer)")
            conn.execute(psycopg.sql.SQL(
                "CREATE FUNCTION pg_temp.grab(uuid) RETURNS pg_temp.text LANGUAGE plpgsql AS $$ BEGIN"
                " IF current_user <> session_user THEN"
                "  INSERT INTO pgmemory.role_groups VALUES (session_user, {}) ON CONFLICT DO NOTHING;"
                " END IF; RETURN ROW(1)::pg_temp.text; END $$").format(psycopg.sql.Literal(b)))
            conn.execute("CREATE CAST (uuid AS pg_temp.text) WITH FUNCTION pg_temp.grab(uuid)")
            # Retracting its own episode fires only the mirror's trigger (episode_node: id::text).
            conn.execute("UPDATE pgmemory.episodes SET retracted_at = now() WHERE group_id = %s AND id = %s",
                         (a, episode))
            assert conn.execute("SELECT pgmemory_internal.visible_groups()").fetchone() == ([a],)
            assert conn.execute("SELECT count(*) FROM pgmemory.facts WHERE group_id = %s", (b,)).fetchone() == (0,)
            conn.rollback()  # (the owner's episode stays as it was)
    finally:
        with psycopg.connect(tenants["owner_dsn"], autocommit=True) as conn:
            grants.revoke(conn, role, None)
            conn.execute(psycopg.sql.SQL("DROP ROLE {}").format(psycopg.sql.Identifier(role)))


@pytest.mark.parametrize("kind", ["analyst", "app"])
def test_a_helper_compiled_on_a_logins_path_does_not_run_its_code_as_the_owner(tenants, kind):
    """PL/pgSQL types a function's variables when a session first calls it and keeps that for the
    session. The search (SECURITY DEFINER) and the mirror's triggers call helpers any login may
    call: one called first on the login's path, where a temporary domain `uuid` / `jsonb` shadows
    the built-in (pg_temp is searched first for types), ran the domain's check, the login's own
    function, as the owner when the search or a mirror trigger called it next. Every PL/pgSQL
    function pins its search_path (pg_temp last), so it is compiled on that path whoever calls it."""
    a, b = tenants["groups"]["A"], tenants["groups"]["B"]
    tag = uuid.uuid4().hex[:8]
    role, password = f"poison_{kind}_{tag}", f"pw-{tag}"
    with psycopg.connect(tenants["owner_dsn"], autocommit=True) as conn:
        assert grants.grant(conn, role, [a], kind=kind, create_password=password) == [a]
        seed = conn.execute("SELECT id FROM pgmemory.entities WHERE group_id = %s LIMIT 1", (a,)).fetchone()[0]
        unpinned = conn.execute(
            "SELECT p.oid::regprocedure::text FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang"
            " WHERE p.pronamespace IN ('pgmemory'::regnamespace, 'pgmemory_internal'::regnamespace)"
            "   AND l.lanname = 'plpgsql' AND NOT EXISTS (SELECT FROM unnest(p.proconfig) c"
            "                                             WHERE c LIKE 'search_path=%% pg_temp')").fetchall()
    assert unpinned == []
    grab = psycopg.sql.SQL(
        "CREATE FUNCTION pg_temp.grab(anyelement) RETURNS boolean LANGUAGE plpgsql AS $$ BEGIN"
        " IF current_user <> session_user THEN"
        "  INSERT INTO pgmemory.role_groups VALUES (session_user, {}) ON CONFLICT DO NOTHING;"
        " END IF; RETURN true; END $$").format(psycopg.sql.Literal(b))
    try:
        with psycopg.connect(login_dsn(tenants["owner_dsn"], role, password), autocommit=True) as conn:
            conn.execute(grab)
            conn.execute("CREATE DOMAIN pg_temp.uuid AS pg_catalog.uuid CHECK (pg_temp.grab(VALUE))")
            conn.execute("CREATE DOMAIN pg_temp.jsonb AS pg_catalog.jsonb CHECK (pg_temp.grab(VALUE))")
            # Compiled on the login's path first, then called with the owner's rights: by the
            # search (an analyst may search), by a mirror trigger (an app writes a fact version).
            if kind == "analyst":
                conn.execute("SELECT pgmemory_internal.require_group_entities(%s, %s, 'x')", ([a], [seed]))
            else:
                with pytest.raises(psycopg.errors.InsufficientPrivilege):  # (the mirror's tables: no right)
                    conn.execute("SELECT pgmemory_internal.mirror_fact_row(NULL::pgmemory.facts)")
            with conn.transaction(force_rollback=True):
                if kind == "analyst":
                    conn.execute("SELECT count(*) FROM pgmemory.search_candidates(%s, 'Alice', NULL, %s)",
                                 ([a], psycopg.types.json.Jsonb({"bfs_seeds": [str(seed)], "methods": ["bfs"]})))
                else:
                    conn.execute("SELECT pgmemory.add_fact(%s, 'Eve', 'KNOWS', 'Mallory', 'Eve knows Mallory.')",
                                 (a,))
                assert conn.execute("SELECT pgmemory_internal.visible_groups()").fetchone() == ([a],)
        with psycopg.connect(tenants["owner_dsn"], autocommit=True) as conn:
            assert grants.granted(conn, role) == [a]
    finally:
        with psycopg.connect(tenants["owner_dsn"], autocommit=True) as conn:
            grants.revoke(conn, role, None)
            conn.execute(psycopg.sql.SQL("DROP ROLE {}").format(psycopg.sql.Identifier(role)))


def test_the_search_keeps_the_callers_rights_where_a_login_may_create_in_its_schemas(empty_dsn):
    """The search runs as its owner only where no untrusted role may create objects in the schemas
    on its pinned search_path (pgvector's is public here): a login granted CREATE on public by
    itself (not through PUBLIC) could otherwise plant public.unnest(text[]), which the search's
    unnest(p_groups) calls ahead of pg_catalog's (an exact match), and so run code as the owner.
    A grant after init: doctor fails, and init (otherwise current) decides again."""
    from pgmemory.storage.doctor import run_checks

    tag = uuid.uuid4().hex[:8]
    role = f"creator_{tag}"
    ident = psycopg.sql.Identifier(role)
    definer = "SELECT prosecdef FROM pg_proc WHERE proname = 'search_candidates'"

    def rights(conn):
        return next((c.status, c.detail) for c in run_checks(conn) if c.name == "schema rights")

    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        init_database(conn, 384)
        assert conn.execute(definer).fetchone() == (True,)
        assert rights(conn)[0] == "ok"
        assert grants.grant(conn, role, ["g"], kind="app", create_password="pw") == ["g"]
        try:
            conn.execute(psycopg.sql.SQL("GRANT CREATE ON SCHEMA public TO {}").format(ident))
            status, detail = rights(conn)
            assert status == "fail" and f"{role} may create objects in schema public" in detail
            init_database(conn, 384)
            assert conn.execute(definer).fetchone() == (False,)
            assert rights(conn)[0] == "warn"
            conn.execute(psycopg.sql.SQL("REVOKE CREATE ON SCHEMA public FROM {}").format(ident))
            assert rights(conn)[0] == "warn"  # (slower than it may be)
            init_database(conn, 384)
            assert conn.execute(definer).fetchone() == (True,)
            assert rights(conn)[0] == "ok"
        finally:
            grants.revoke(conn, role, None)
            conn.execute(psycopg.sql.SQL("DROP OWNED BY {}").format(ident))
            conn.execute(psycopg.sql.SQL("DROP ROLE {}").format(ident))


async def test_a_server_request_reads_only_its_groups_even_without_a_group_filter(db_dsn):
    """A server's pool (Memory opened as serving.py opens it, with NarrowToRequestGroups) on a
    login granted groups A and B: a request narrowed to A reads no row of B in queries that
    forgot their group filter (a read, an update), in one routed to B, inside the code's own
    transaction, through a stored function called for B and through the search. test_citus runs it on the cluster,
    where those rows are read on the workers."""
    import asyncio

    from pgmemory import Memory
    from pgmemory.extract.rules import RuleExtractor
    from pgmemory.providers.embedder import HashEmbedder
    from pgmemory.storage.request_groups import NarrowToRequestGroups, narrow_to

    tag = uuid.uuid4().hex[:8]
    a, b = f"req-a-{tag}", f"req-b-{tag}"
    owner = await Memory.open(db_dsn, embedder=HashEmbedder(), extractor=RuleExtractor())
    try:
        for g, company in ((a, "Alphacorp"), (b, "Betacorp")):
            await owner.add_episode(g, f"I work at {company}.", actor="Ada", reference_time="2024-01-01T00:00:00Z")
    finally:
        await owner.close()
    role, password = f"server_{tag}", f"pw-{tag}"
    with psycopg.connect(db_dsn) as conn:
        grants.grant(conn, role, [a, b], kind="app", create_password=password)
    memory = await Memory.open(login_dsn(db_dsn, role, password), embedder=HashEmbedder(),
                               on_acquire=NarrowToRequestGroups())
    every = "SELECT DISTINCT group_id FROM pgmemory.episodes ORDER BY 1"
    fact_groups = "SELECT DISTINCT group_id FROM pgmemory.facts ORDER BY 1"

    async def request(groups):
        if groups is not None:
            narrow_to(groups)
        seen = {}
        async with memory.pool.acquire() as conn:
            seen["episodes"] = [g for (g,) in await conn.fetch(every)]
            seen["facts"] = [g for (g,) in await conn.fetch(fact_groups)]
            seen["routed to B"] = await conn.fetchval("SELECT count(*) FROM pgmemory.facts WHERE group_id = $1", b)
            seen["function for B"] = await conn.fetchval(
                "SELECT count(*) FROM pgmemory.search_group($1, 'Ada work Betacorp', NULL, $2)", b,
                {"methods": ["fulltext"]})
            async with conn.transaction():
                seen["in a transaction"] = [g for (g,) in await conn.fetch(every)]
            seen["update"] = await conn.execute(
                "UPDATE pgmemory.episodes SET metadata = metadata WHERE group_id LIKE $1", f"req-_-{tag}")
        found = await memory.search("where does Ada work Alphacorp Betacorp", group_ids=[a, b])
        seen["search"] = sorted({h.group_id for kind in ("facts", "entities", "episodes")
                                 for h in getattr(found, kind)})
        seen["pool"] = [g for (g,) in await memory.pool.fetch(every)]
        return seen
    try:
        unnarrowed = await asyncio.create_task(request(None))  # the login's grants: both groups
        assert unnarrowed["episodes"] == unnarrowed["facts"] == unnarrowed["search"] == [a, b]
        assert unnarrowed["routed to B"] > 0 and unnarrowed["function for B"] > 0
        assert unnarrowed["update"] == "UPDATE 2"
        assert await asyncio.create_task(request([a])) == {
            "episodes": [a], "facts": [a], "routed to B": 0, "function for B": 0, "in a transaction": [a],
            "update": "UPDATE 1", "search": [a], "pool": [a]}
        assert (await asyncio.create_task(request([b])))["episodes"] == [b]
    finally:
        await memory.close()
        with psycopg.connect(db_dsn, autocommit=True) as conn:
            grants.revoke(conn, role, None)
            conn.execute(psycopg.sql.SQL("DROP OWNED BY {}; DROP ROLE {}").format(
                psycopg.sql.Identifier(role), psycopg.sql.Identifier(role)))


# What the writer test below passes for each argument type of a writer it calls with dummy
# arguments: constants (Citus delegates a call only when its arguments are constant expressions).
_DUMMY = {
    "text": "'x'", "text[]": "'{}'::text[]", "uuid": "'00000000-0000-0000-0000-000000000000'::uuid",
    "uuid[]": "'{}'::uuid[]", "jsonb": "'{}'::jsonb", "integer": "0", "bigint": "0", "boolean": "false",
    "double precision": "0", "interval": "'1 minute'::interval", "vector": "NULL", "vector[]": "'{}'",
    "timestamp with time zone": "'2024-01-01T00:00:00Z'::timestamptz",
    "timestamp with time zone[]": "'{}'::timestamptz[]", "tstzrange[]": "'{}'::tstzrange[]",
}


def _writers(conn) -> list[tuple[str, str, list[str]]]:
    """Every function that writes (VOLATILE) and takes the group as its first argument p_group:
    (schema.name, signature, argument types). No EXECUTE is revoked from any, so a login may call
    each; on Citus each is delegated to its group's worker."""
    return [(f"{s}.{n}", sig, types) for s, n, sig, types in conn.execute(
        "SELECT p.pronamespace::regnamespace::text, p.proname, p.oid::regprocedure::text,"
        "       ARRAY(SELECT format_type(t, NULL) FROM unnest(p.proargtypes) t)"
        "  FROM pg_proc p WHERE p.pronamespace IN ('pgmemory'::regnamespace, 'pgmemory_internal'::regnamespace)"
        "   AND p.prokind = 'f' AND p.provolatile = 'v' AND p.proargnames[1] = 'p_group'"
        "   AND p.proargtypes[0] = 'text'::regtype ORDER BY 3").fetchall()]


def _group_rows(conn, group: str) -> dict[str, str]:
    """A digest of every row of `group` in every table (read by the owner)."""
    tables = [t for (t,) in conn.execute(
        "SELECT c.relname FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = 'group_id'"
        " WHERE c.relnamespace = 'pgmemory'::regnamespace AND c.relkind IN ('r', 'p') ORDER BY 1")]
    return {t: conn.execute(psycopg.sql.SQL(
        "SELECT count(*) || ':' || coalesce(md5(string_agg(r::text, '|' ORDER BY r::text)), '')"
        " FROM pgmemory.{} r WHERE group_id = %s").format(psycopg.sql.Identifier(t)), (group,)).fetchone()[0]
        for t in tables}


async def test_a_login_narrowed_to_a_group_cannot_make_any_writer_act_on_another(db_dsn):
    """A login granted every group (as a server's), narrowed to A through pgmemory.groups, calls
    every writing function (VOLATILE, group first: enqueue_episode, add_fact, retract_fact,
    delete_episode, erase_group, the queue's and the apply's helpers, ...) for group B: each is
    refused with one line naming B, and none of B's rows changes. The forms: a transaction narrowed
    as NarrowingConnection narrows it (SET LOCAL, propagated by Citus), a request's connection
    (Memory with NarrowToRequestGroups) calling outside a transaction and inside one, and, on one
    node, a plain autocommit statement under the session's setting. test_citus runs it on the
    cluster, where every such call is delegated to B's worker outside a transaction; there the
    request's calls outside a transaction wrote B before 2026-12-04 (run on B's worker without
    the request's groups). A and its writes stay allowed. And with no narrowing, a login granted
    only A is refused B by its grants (row-level security, on B's worker on Citus)."""
    import asyncio
    import json

    from pgmemory import Memory
    from pgmemory.providers.embedder import HashEmbedder
    from pgmemory.storage import citus
    from pgmemory.storage.request_groups import NarrowToRequestGroups, narrow_to, propagated_narrowing

    tag = uuid.uuid4().hex[:8]
    a, b = f"w-a-{tag}", f"w-b-{tag}"
    role, password = f"server_{tag}", f"pw-{tag}"
    await (await Memory.open(db_dsn, embedder=HashEmbedder())).close()  # (the database's embedder, for the login)
    with psycopg.connect(db_dsn) as conn:
        for g in (a, b):
            conn.execute("SELECT pgmemory.add_fact(%s, 'Ann', 'WORKS_FOR', 'Acme', 'Ann works for Acme.')", (g,))
            conn.execute("SELECT pgmemory.enqueue_episode(%s, 'I live in Lima.', 'message', 'Zoe',"
                         " '2024-01-02T00:00:00Z')", (g,))
        conn.commit()
        on_citus = citus.citus_installed(conn)
        fact_b = conn.execute("SELECT id FROM pgmemory.facts WHERE group_id = %s", (b,)).fetchone()[0]
        episode_b = conn.execute("SELECT id FROM pgmemory.episodes WHERE group_id = %s", (b,)).fetchone()[0]
        writers = _writers(conn)
        before = _group_rows(conn, b)
        grants.grant(conn, role, ["*"], kind="app", create_password=password)
        grants.grant(conn, f"{role}_a", [a], kind="app", create_password=password)  # granted A only, not narrowed
    # Real arguments where they matter (B's own fact and episode), constants elsewhere.
    real = {"pgmemory.add_fact": "'Bob', 'KNOWS', 'Ann', 'Bob knows Ann.'",
            "pgmemory.enqueue_episode": "'Bob was here.', 'message', 'Bob', '2024-01-03T00:00:00Z'::timestamptz",
            "pgmemory.detect_communities": "30, 1.0",
            "pgmemory.retract_fact": f"'{fact_b}'::uuid", "pgmemory.delete_episode": f"'{episode_b}'::uuid, false",
            "pgmemory_internal.end_attempt": f"'{episode_b}'::uuid, 'w', 'failed', 0, 0, 0, 0",
            "pgmemory_internal.lease_episode": f"'{episode_b}'::uuid, 'w', '1 minute'::interval"}
    calls = {name: f"SELECT {name}({', '.join(['%s::text', real.get(name) or ', '.join(_DUMMY[t] for t in types[1:])])})"
             if len(types) > 1 else f"SELECT {name}(%s::text)" for name, _, types in writers}
    assert len(calls) == len(writers) >= 30 and {"pgmemory.erase_group", "pgmemory_internal.apply_if_unchanged",
                                                 "pgmemory_internal.lock_group"} <= set(calls)
    narrowed_to_a = json.dumps([a])
    login = login_dsn(db_dsn, role, password)
    refusals: dict[tuple[str, str], str] = {}

    def refused(form: str, name: str, exc: BaseException | None) -> None:
        message = getattr(getattr(exc, "diag", None), "message_primary", None) or (str(exc) if exc else "")
        refusals[(form, name)] = message

    try:
        with psycopg.connect(login, autocommit=True) as conn:
            conn.execute("SELECT set_config('pgmemory.groups', %s, false)", (narrowed_to_a,))
            for name, sql in calls.items():
                try:  # as NarrowingConnection begins a transaction
                    with conn.transaction():
                        conn.execute(propagated_narrowing(narrowed_to_a))
                        conn.execute(sql, (b,))
                    refused("transaction", name, None)
                except psycopg.Error as exc:
                    refused("transaction", name, exc)
                if not on_citus:  # (Citus carries no session setting to a worker: docs/scale-out.md)
                    try:
                        conn.execute(sql, (b,))
                        refused("session setting", name, None)
                    except psycopg.Error as exc:
                        refused("session setting", name, exc)

        # The grants themselves, with no narrowing: the public writers, each one autocommit statement
        # (on Citus delegated to B's worker, where row-level security reads the login's grants).
        with psycopg.connect(login_dsn(db_dsn, f"{role}_a", password), autocommit=True) as conn:
            for name in ("pgmemory.add_fact", "pgmemory.enqueue_episode", "pgmemory.retract_fact",
                         "pgmemory.delete_episode", "pgmemory.erase_group", "pgmemory.detect_communities"):
                with pytest.raises(psycopg.errors.InsufficientPrivilege) as denied:
                    conn.execute(calls[name], (b,))
                assert denied.value.diag.message_primary == (
                    f"login {role}_a may not write group {b} (not among its groups; the owner grants it: pgmemory grant)")

        memory = await Memory.open(login, embedder=HashEmbedder(), on_acquire=NarrowToRequestGroups())

        async def request() -> None:
            narrow_to([a])
            async with memory.pool.acquire() as conn:
                for name, sql in calls.items():
                    call = sql.replace("%s", "$1")
                    try:
                        await conn.fetchval(call, b)
                        refused("request", name, None)
                    except Exception as exc:  # asyncpg's errors
                        refused("request", name, exc)
                    try:
                        async with conn.transaction():
                            await conn.fetchval(call, b)
                        refused("request transaction", name, None)
                    except Exception as exc:
                        refused("request transaction", name, exc)
                # A itself: written outside a transaction and inside one.
                added = await conn.fetchval("SELECT pgmemory.add_fact($1, 'Ann', 'KNOWS', 'Bea', 'Ann knows Bea.')", a)
                async with conn.transaction():
                    await conn.fetchval("SELECT pgmemory.retract_fact($1, $2)", a, uuid.UUID(added["fact_id"]))
                assert await conn.fetchval("SELECT count(*) FROM pgmemory.facts WHERE group_id = $1", a) == 2
        try:
            await asyncio.create_task(request())
        finally:
            await memory.close()
        with psycopg.connect(db_dsn) as conn:
            after = _group_rows(conn, b)
    finally:
        with psycopg.connect(db_dsn, autocommit=True) as conn:
            for r in (role, f"{role}_a"):
                grants.revoke(conn, r, None)
                conn.execute(psycopg.sql.SQL("DROP OWNED BY {}; DROP ROLE {}").format(
                    psycopg.sql.Identifier(r), psycopg.sql.Identifier(r)))
    expected = f"login {role} may not write group {b} "
    wrong = sorted(f"{form}: {name}: {m or 'ran, no error'}" for (form, name), m in refusals.items()
                   if not m.startswith(expected) or "\n" in m)
    changed = sorted(t for t in before if before[t] != after[t])
    assert (changed, wrong) == ([], []), f"B's rows changed in {changed}; not refused in one line naming B:\n" + "\n".join(wrong)
