"""Bad input of every shape gets one clear InvalidInput line and writes nothing (issue 8)."""
from __future__ import annotations

import json
import re
import uuid
from datetime import datetime, timedelta, timezone

import psycopg
import pytest

from pgmemory import InvalidInput, SearchConfig, SearchFilters
from pgmemory.search.types import SINCE_FOREVER
from pgmemory.surfaces import cli
from pgmemory.surfaces.search_cli import render
from tests.support import utc


@pytest.fixture
def cli_env(db_dsn, monkeypatch):
    monkeypatch.setenv("PGMEMORY_DSN", db_dsn)
    monkeypatch.setenv("PGMEMORY_EMBEDDER", "hash")
    for name in ("PGMEMORY_LLM_BASE_URL", "PGMEMORY_LLM_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)


def run(capsys, *args: str) -> tuple[int, str, str]:
    rc = cli.main(list(args))
    out = capsys.readouterr()
    return rc, out.out, out.err


def stored(dsn: str, group: str) -> int:
    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT count(*) FROM pgmemory.episodes WHERE group_id = %s", (group,)).fetchone()[0]


def line(group: str, **fields) -> bytes:
    item = {"group_id": group, "content": "I live in Oslo.", "actor": "Kim",
            "reference_time": "2024-01-01T00:00:00Z", **fields}
    return json.dumps(item).encode() + b"\n"


# --- reference times: a documented range, infinite bounds read back ---------------------------

@pytest.mark.parametrize("when", [
    "0001-01-01T00:00:00+00:00", "0001-01-01T00:00:00+05:00", "0001-01-01T00:00:00-05:00",
    "9999-12-31T23:59:59.999999+00:00", "9999-12-31T23:59:59-05:00", "9999-12-31T20:00:00+05:00",
    "0999-12-31T23:59:59+00:00", "3000-01-01T00:00:00+00:00", "1000-01-01T00:00:00+01:00"])
async def test_reference_time_outside_the_range_is_refused(memory, group, db_dsn, when):
    with pytest.raises(InvalidInput, match="reference_time .* between 1000-01-01 and 2999-12-31"):
        await memory.add_episode(group, "I live in Oslo.", actor="Kim", reference_time=when)
    assert stored(db_dsn, group) == 0


@pytest.mark.parametrize("when", ["1000-01-01T00:00:00+00:00", "2999-12-31T23:59:59.999999+00:00",
                                  "2999-12-31T23:00:00-00:30"])
async def test_reference_time_at_the_range_edges_is_accepted_and_searchable(memory, group, when):
    result = await memory.add_episode(group, "I live in Oslo.", actor="Kim", reference_time=when)
    assert result.status == "done"
    found = await memory.search("where does Kim live", group_ids=[group],
                                filters=SearchFilters(include_invalidated=True))
    assert found.episodes and found.episodes[0].valid_at == datetime.fromisoformat(when)


async def test_search_reads_infinite_bounds_as_forever_and_open(memory, group):
    async with memory.pool.acquire() as conn:
        ids = [uuid.uuid4(), uuid.uuid4()]
        for i, name in zip(ids, ("Earth", "Sun")):
            await conn.execute("INSERT INTO pgmemory.entities (id, group_id, name) VALUES ($1, $2, $3)",
                               i, group, name)
        await conn.execute(
            "SELECT pgmemory.record_fact($1, $2, $3, $4, 'ORBITS', 'Earth orbits the Sun.',"
            " '-infinity'::timestamptz, 'infinity'::timestamptz)", uuid.uuid4(), group, ids[0], ids[1])
    found = await memory.search("Earth orbits Sun", group_ids=[group], config="edge_hybrid_rrf")
    fact = found.facts[0]
    assert fact.valid_from == SINCE_FOREVER and not fact.valid_from_unknown and fact.valid_to is None
    past = await memory.search("Earth orbits Sun", group_ids=[group],
                               filters=SearchFilters(as_of=utc("1000-01-01")))
    assert [f.fact for f in past.facts] == ["Earth orbits the Sun."]
    assert "Earth orbits the Sun. (Date range: forever - present)" in await memory.context(
        "Earth orbits Sun", group_ids=[group])
    assert "forever" in render(found)


# --- NUL, lone surrogates, types ---------------------------------------------------------------

@pytest.mark.parametrize("bad", ["a\x00b", "a\ud800b"])
@pytest.mark.parametrize("field", ["content", "actor", "group_id", "source_description", "episode_id"])
async def test_nul_and_lone_surrogates_in_any_episode_field(memory, group, db_dsn, field, bad):
    args = {"group_id": group, "content": "I live in Oslo.", "actor": "Kim",
            "reference_time": utc("2024-01-01"), "source_description": "chat", "episode_id": "e1"}
    args[field] = bad
    with pytest.raises(InvalidInput, match=f"{field} .*(NUL|surrogate)"):
        await memory.add_episode(args.pop("group_id"), args.pop("content"), **args)
    assert stored(db_dsn, group) == 0


@pytest.mark.parametrize("content", [42, ["a"], {"text": "a"}, b"bytes"])
async def test_content_must_be_a_string(memory, group, content):
    with pytest.raises(InvalidInput, match="content must be a string"):
        await memory.add_episode(group, content, reference_time=utc("2024-01-01"))


@pytest.mark.parametrize("query", ["where\x00 is Kim", "Kim \udfff"])
async def test_nul_or_surrogate_in_a_search_query(memory, group, query):
    with pytest.raises(InvalidInput, match="query .*(NUL|surrogate)"):
        await memory.search(query, group_ids=[group])


@pytest.mark.parametrize("changes", [{"bfs_seeds": ("not-a-uuid",)}, {"center": "nope"},
                                     {"bfs_seeds": "6f1c5d3e-5b1a-4d0e-9f43-2b8f4c7a9e10"},
                                     {"bfs_seeds": (42,)}, {"center": 7}])
async def test_non_uuid_seeds_or_centre_are_refused(memory, group, changes):
    with pytest.raises(InvalidInput, match="bfs_seeds|center"):
        await memory.search("Kim", group_ids=[group], config=SearchConfig(methods=("bfs",), **changes))


@pytest.mark.parametrize("seeds", [["not-a-uuid"], "6f1c5d3e-5b1a-4d0e-9f43-2b8f4c7a9e10", [None], 5])
async def test_bfs_with_non_uuid_seeds_is_refused(memory, group, seeds):
    with pytest.raises(InvalidInput, match="seeds"):
        await memory.bfs(seeds, group_ids=[group])


async def test_uuid_seeds_given_as_strings_are_accepted(memory, group):
    await memory.add_episode(group, "I work at Acme Corp.", actor="Kim", reference_time=utc("2024-01-01"))
    async with memory.pool.acquire() as conn:
        kim = await conn.fetchval("SELECT id FROM pgmemory.entities WHERE group_id = $1 AND name = 'Kim'", group)
    reached = await memory.bfs([str(kim)], group_ids=[group], depth=1)
    assert reached[kim] == 0 and len(reached) == 2
    found = await memory.search("Acme", group_ids=[group],
                                config=SearchConfig(methods=("bfs",), bfs_seeds=(str(kim),), center=str(kim),
                                                    reranker="node_distance"))
    assert found.facts and found.facts[0].distance == 0


# --- API type looseness ------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, message", [
    ({"relation_types": "WORKS_FOR"}, "relation_types must be a list"),
    ({"labels": "Person"}, "labels must be a list"),
    ({"relation_types": ["WORKS_FOR", 3]}, "relation_types"),
    ({"include_invalidated": "no"}, "include_invalidated must be True or False"),
    ({"include_superseded": 1}, "include_superseded must be True or False"),
    ({"as_of": "2024-01-01T00:00:00Z"}, "as_of must be a datetime"),
    ({"known_at": datetime(2024, 1, 1)}, "known_at .* no time zone"),
    ({"as_of": datetime(2024, 1, 1)}, "as_of .* has no time zone"),
    ({"valid_at_from": datetime(1, 1, 1, tzinfo=timezone.utc)}, "valid_at_from .* between"),
])
def test_search_filters_reject_loose_types(kwargs, message):
    with pytest.raises(InvalidInput, match=message):
        SearchFilters(**kwargs)


def test_search_filters_accept_lists_and_tuples():
    assert SearchFilters(relation_types=["WORKS_FOR"], labels=("Person",)).to_options()["relation_types"] == \
        ["WORKS_FOR"]


@pytest.mark.parametrize("kwargs, message", [
    ({"kinds": "facts"}, "kinds must be a list"), ({"methods": "bfs"}, "methods must be a list"),
    ({"candidates": True}, "candidates must be an integer"), ({"bfs_depth": "2"}, "bfs_depth must be an integer"),
    ({"mmr_lambda": "0.5"}, "mmr_lambda must be a number"), ({"reranker": None}, "reranker"),
    ({"rrf_k": 2.5}, "rrf_k must be an integer"), ({"bfs_recent_episodes": 0}, "bfs_recent_episodes"),
])
async def test_search_config_rejects_loose_types(memory, group, kwargs, message):
    with pytest.raises(InvalidInput, match=message):
        await memory.search("Kim", group_ids=[group], config=SearchConfig(**kwargs))


async def test_memory_arguments_reject_loose_types(memory, group):
    with pytest.raises(InvalidInput, match="depth"):
        await memory.bfs([], group_ids=[group], depth=True)
    with pytest.raises(InvalidInput, match="episodes must be True or False"):
        await memory.context("Kim", group_ids=[group], episodes="yes")
    with pytest.raises(InvalidInput, match="concurrency"):
        await memory.add_episodes([], concurrency=0)
    with pytest.raises(InvalidInput, match="group_ids"):
        await memory.search("Kim", group_ids=[group, 3])
    with pytest.raises(InvalidInput, match="group_ids"):
        await memory.search("Kim", group_ids={group: 1})
    with pytest.raises(InvalidInput, match="group_id"):
        await memory.retry(42)
    with pytest.raises(InvalidInput, match="entity_types must be a dict"):
        await memory.add_episode(group, "Hi.", reference_time=utc("2024-01-01"), entity_types={"Person": "str"})
    with pytest.raises(InvalidInput, match="source contains a NUL"):
        await memory.add_fact(group, "Kim\x00", "WORKS_FOR", "Acme", "Kim works for Acme.")
    with pytest.raises(InvalidInput, match="valid_from .* between"):
        await memory.add_fact(group, "Kim", "WORKS_FOR", "Acme", "Kim works for Acme.", valid_from="0001-01-01T00:00Z")
    # Attributes Postgres cannot store as jsonb are refused in one line, nothing written (not a 500).
    with pytest.raises(InvalidInput, match="attributes contains a NUL"):
        await memory.add_fact(group, "Kim", "WORKS_FOR", "Acme", "Kim works for Acme.", attributes={"x": "a\x00"})
    with pytest.raises(InvalidInput, match="attributes is not JSON"):
        await memory.add_fact(group, "Kim", "WORKS_FOR", "Acme", "Kim works for Acme.", attributes={"x": float("nan")})
    with pytest.raises(InvalidInput, match="attributes must be an object"):
        await memory.add_fact(group, "Kim", "WORKS_FOR", "Acme", "Kim works for Acme.", attributes={1: "x"})
    assert await memory.list_entities(group) == []


@pytest.mark.parametrize("dim", ["0", "-3", "100000"])
def test_init_refuses_a_bad_dimension(cli_env, capsys, dim):
    rc, _, err = run(capsys, "init", "--dim", dim)
    assert rc == 2 and "dim must be" in err and len(err.strip().splitlines()) == 1


def test_ingest_refuses_a_bad_concurrency(cli_env, capsys, tmp_path, group):
    path = tmp_path / "e.jsonl"
    path.write_bytes(line(group))
    with pytest.raises(SystemExit) as info:
        cli.main(["ingest", str(path), "--concurrency", "0"])
    assert info.value.code == 2 and "between 1 and" in capsys.readouterr().err


# --- files: encoding, BOM, duplicates, re-runs -------------------------------------------------

@pytest.mark.parametrize("content, message", [
    (b"\xff\xfe not utf-8", "e\\.jsonl: line 2: not valid UTF-8"),
    (b'{"group_id": "G", "content": "a\\u0000b", "reference_time": "2024-01-01T00:00:00Z"}', "e\\.jsonl: line 2: .*NUL"),
    (b'{"group_id": "G", "content": "a\\ud800b", "reference_time": "2024-01-01T00:00:00Z"}', "e\\.jsonl: line 2: .*surrogate"),
    (b'{"group_id": "G", "content": 42, "reference_time": "2024-01-01T00:00:00Z"}', "e\\.jsonl: line 2: .*must be a string"),
])
def test_bad_bytes_in_a_file_are_one_line_rc2_and_nothing_written(cli_env, capsys, tmp_path, db_dsn, group,
                                                                   content, message):
    path = tmp_path / "e.jsonl"
    path.write_bytes(line(group) + content.replace(b'"G"', json.dumps(group).encode()) + b"\n")
    rc, _, err = run(capsys, "ingest", str(path))
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert __import__("re").search(message, err), err
    assert stored(db_dsn, group) == 0


def test_a_utf8_bom_is_accepted(cli_env, capsys, tmp_path, db_dsn, group):
    path = tmp_path / "bom.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + line(group) + line(group, content="I work at Acme."))
    rc, out, err = run(capsys, "ingest", str(path))
    assert rc == 0, err
    assert "2 ingested" in out and stored(db_dsn, group) == 2


def test_duplicate_episode_ids_with_different_content_name_both_lines(cli_env, capsys, tmp_path, db_dsn, group):
    path = tmp_path / "dup.jsonl"
    path.write_bytes(line(group, episode_id="x") + b"\n" + line(group, episode_id="y", content="Hi.")
                     + line(group, episode_id="x", content="I live in Bergen."))
    rc, _, err = run(capsys, "ingest", str(path))
    assert rc == 2 and "lines 1 and 4" in err and "episode_id 'x'" in err, err
    assert stored(db_dsn, group) == 0


def test_the_same_episode_twice_in_a_file_is_ingested_once(cli_env, capsys, tmp_path, db_dsn, group):
    path = tmp_path / "same.jsonl"
    path.write_bytes(line(group, episode_id="x") + line(group, episode_id="x"))
    rc, out, err = run(capsys, "ingest", str(path))
    assert rc == 0, err
    assert stored(db_dsn, group) == 1


def test_rerunning_a_file_without_episode_ids_is_idempotent(cli_env, capsys, tmp_path, db_dsn, group):
    path = tmp_path / "noid.jsonl"
    path.write_bytes(line(group) + line(group, content="I work at Acme.")
                     + line(group, reference_time="2024-01-01T01:00:00+01:00"))  # same instant: same episode
    rc, out, _ = run(capsys, "ingest", str(path))
    assert rc == 0 and stored(db_dsn, group) == 2
    rc, out, _ = run(capsys, "ingest", str(path))
    assert rc == 0 and "0 ingested, 3 already present" in out
    assert stored(db_dsn, group) == 2


async def test_default_episode_id_depends_on_group_actor_time_and_content(memory, group):
    t = utc("2024-01-01")
    first = await memory.add_episode(group, "I live in Oslo.", actor="Kim", reference_time=t)
    again = await memory.add_episode(group, "I live in Oslo.", actor="Kim", reference_time=t)
    assert again.status == "skipped" and again.episode_id == first.episode_id
    for other in ({"actor": "Lee", "reference_time": t}, {"actor": "Kim", "reference_time": t + timedelta(seconds=1)}):
        assert (await memory.add_episode(group, "I live in Oslo.", **other)).status == "done"
    elsewhere = await memory.add_episode(f"{group}-2", "I live in Oslo.", actor="Kim", reference_time=t)
    assert elsewhere.status == "done" and elsewhere.episode_id != first.episode_id


# --- add_fact: entity names and relations are index keys -----------------------------------

@pytest.mark.parametrize("source, relation, target, message", [
    ("Alice", "KNOWS", "x" * 401, "target has 401 characters; the limit is 400"),
    ("y" * 3000, "KNOWS", "Bob", "source has 3000 characters; the limit is 400"),
    ("Alice", "K" * 101, "Bob", "relation has 101 characters; the limit is 100"),
])
async def test_add_fact_refuses_names_too_long_to_index(memory, group, db_dsn, source, relation, target, message):
    """A random 3,000-character name once failed with asyncpg's ProgramLimitExceededError (btree row
    over 2704 bytes): a 500 through REST."""
    with pytest.raises(InvalidInput, match=message):
        await memory.add_fact(group, source, relation, target, "Alice knows someone.")
    with psycopg.connect(db_dsn) as conn:
        assert conn.execute("SELECT count(*) FROM pgmemory.entities WHERE group_id = %s", (group,)).fetchone() == (0,)
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="target has 401 characters; the limit is 400"):
            conn.execute("SELECT pgmemory.add_fact(%s, 'Alice', 'KNOWS', %s, 'Alice knows someone.')",
                         (group, "z" * 401))


async def test_add_fact_accepts_names_at_the_limit(memory, group):
    import random
    import string

    name = "".join(random.Random(3).choice(string.ascii_letters) for _ in range(400))
    done = await memory.add_fact(group, "Alice", "R" * 100, name, "Alice knows someone.")
    assert done["action"] == "created"


# --- the SQL API takes the times the Python surfaces take -------------------------------------

@pytest.mark.parametrize("args, message", [
    ({"p_valid_from": "infinity"}, "valid_from infinity is out of range"),
    ({"p_valid_to": "-infinity"}, "valid_to -infinity is out of range"),
    ({"p_valid_from": "0500-01-01T00:00Z"}, "valid_from 0500-01-01T00:00:00[+]00:00 is out of range"),
    ({"p_valid_to": "20000-01-01T00:00Z"}, "valid_to 20000-01-01T00:00:00[+]00:00 is out of range"),
    ({"p_reference_time": "infinity"}, "reference_time infinity is out of range"),
    ({"p_reference_time": "3000-01-01T00:00Z"}, "reference_time 3000-01-01T00:00:00[+]00:00 is out of range"),
])
def test_sql_add_fact_refuses_times_out_of_range_and_writes_nothing(db_dsn, group, args, message):
    """pgmemory.add_fact stored a start of +infinity as [infinity,) and failed on an end of
    -infinity with a not-null error from the entity summaries; a year the drivers cannot decode
    would break the group's reads through them. Each is one line naming the argument now."""
    names = ", ".join(f"{k} => %({k})s::timestamptz" for k in args)
    with psycopg.connect(db_dsn) as conn:
        with pytest.raises(psycopg.errors.InvalidParameterValue, match=message) as info:
            conn.execute(f"SELECT pgmemory.add_fact(%(g)s, 'Alice', 'WORKS_FOR', 'Acme', 'Alice works for Acme.', {names})",
                         {"g": group, **args})
        assert "\n" not in str(info.value.diag.message_primary)
        conn.rollback()
        assert conn.execute("SELECT count(*) FROM pgmemory.entities WHERE group_id = %s", (group,)).fetchone() == (0,)


def test_sql_add_fact_takes_the_infinite_bounds_that_mean_something(db_dsn, group):
    """-infinity as a start (since forever) and +infinity as an end (still holds, stored open)."""
    with psycopg.connect(db_dsn) as conn:
        conn.execute("SELECT pgmemory.add_fact(%s, 'Alice', 'WORKS_FOR', 'Acme', 'Alice works for Acme.',"
                     " '-infinity', 'infinity', p_reference_time => '2999-12-31T00:00Z')", (group,))
        assert conn.execute("SELECT lower_inf(valid), lower(valid) = '-infinity', upper_inf(valid)"
                            " FROM pgmemory.facts WHERE group_id = %s", (group,)).fetchall() == [(False, True, True)]


@pytest.mark.parametrize("when", ["infinity", "0999-12-31T23:59:59Z", "30000-01-01T00:00Z"])
def test_sql_enqueue_refuses_a_reference_time_out_of_range(db_dsn, group, when):
    with psycopg.connect(db_dsn) as conn:
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="reference_time .* is out of range"):
            conn.execute("SELECT pgmemory.enqueue_episode(%s, 'hello', p_reference_time => %s::timestamptz)",
                         (group, when))
        conn.rollback()
        assert conn.execute("SELECT count(*) FROM pgmemory.episodes WHERE group_id = %s", (group,)).fetchone() == (0,)


@pytest.mark.parametrize("call, message", [
    ("pgmemory.add_fact(NULL, 'Alice', 'KNOWS', 'Bob', 'Alice knows Bob.')", "group must be a non-empty string"),
    ("pgmemory.add_fact('*', 'Alice', 'KNOWS', 'Bob', 'Alice knows Bob.')", "group '[*]' is reserved"),
    ("pgmemory.add_fact(E'a\\tb', 'Alice', 'KNOWS', 'Bob', 'Alice knows Bob.')", "at most 200 printable characters"),
    ("pgmemory.retract_fact(NULL, gen_random_uuid())", "group_id must be a non-empty string"),
    ("pgmemory.erase_group(NULL)", "group_id must be a non-empty string"),
    ("pgmemory.bump_group_version(NULL)", "group_id must be a non-empty string"),
    ("pgmemory.search_candidates(NULL, 'Alice', NULL, '{}')", "p_groups must be an array of group ids"),
    ("pgmemory.erase_group(' ')", "group_id must be a non-empty string"),
    ("pgmemory.delete_episode(repeat('g', 201), gen_random_uuid())", "at most 200 printable characters"),
    ("pgmemory.add_fact(%(g)s, 'Alice', 'KNOWS', 'Bob', 'Alice knows Bob.', p_attributes => '[1]')",
     "attributes must be a JSON object, got array"),
    ("pgmemory.add_fact(%(g)s, 'Alice', 'KNOWS', 'Bob', 'Alice knows Bob.',"
     " p_attributes => jsonb_build_object('x', repeat('a', 10000)))", "attributes has 10009 characters"),
])
def test_sql_writers_refuse_a_bad_group_or_attributes_in_one_line(db_dsn, group, call, message):
    """The SQL writers check a group id as the Python surfaces do (a NULL one failed on the group
    locks' not-null constraint), and add_fact's attributes as an object of bounded size."""
    with psycopg.connect(db_dsn) as conn:
        with pytest.raises(psycopg.errors.InvalidParameterValue, match=message):
            conn.execute(f"SELECT {call}", {"g": group})
        conn.rollback()
        assert conn.execute("SELECT count(*) FROM pgmemory.group_locks WHERE group_id IS NULL OR group_id IN (%s, '*')",
                            (group,)).fetchone() == (0,)


# --- the SQL writers apply Python's limits and its group id rule ---------------------------------

def refused_in_one_line(conn, call: str, params: dict, message: str) -> None:
    """`SELECT call` fails with 22023 and the one-line message (which names the argument)."""
    with pytest.raises(psycopg.errors.InvalidParameterValue) as info:
        conn.execute(f"SELECT {call}", params)
    assert info.value.sqlstate == "22023"
    assert re.search(message, info.value.diag.message_primary), info.value.diag.message_primary
    conn.rollback()


ENQUEUE = ("pgmemory.enqueue_episode(%(g)s, %(content)s, 'message', %(actor)s, '2024-01-01Z', %(source)s,"
           " %(id)s, %(meta)s::jsonb)")


def enqueue_args(group: str, **changes) -> dict:
    return {"g": group, "content": "I live in Oslo.", "actor": "Kim", "source": "chat", "id": None,
            "meta": None, **changes}


@pytest.mark.parametrize("changes, message", [
    ({"actor": "a" * 201}, "^actor has 201 characters; the limit is 200$"),
    ({"actor": "a" * 10_000_000}, "^actor has 10000000 characters; the limit is 200$"),
    ({"source": "s" * 50_001}, "^source_description has 50001 characters; the limit is 50000$"),
    ({"id": "i" * 201}, "^episode_id has 201 characters; the limit is 200$"),
    ({"meta": json.dumps({"x": "a" * 9_992})}, "^metadata has 10001 characters as JSON; the limit is 10000$"),
    ({"content": "c" * 50_001}, "^episode content has 50001 characters; the limit is 50000"),
    ({"g": "a\u00a0b"}, "^group_id must be at most 200 printable characters$"),
    ({"g": "a\u200bb"}, "^group_id must be at most 200 printable characters$"),
])
def test_sql_enqueue_refuses_what_python_refuses_and_writes_nothing(db_dsn, group, changes, message):
    """pgmemory.enqueue_episode took a 10 MB actor (the worker then failed on an index row too
    big), and a group id with a no-break space that Python then could neither read nor erase."""
    args = enqueue_args(group, **changes)
    with pytest.raises(InvalidInput, match=message.rstrip("$")):
        from pgmemory.ingest.episode import validate_episode
        validate_episode(args["g"], args["content"], actor=args["actor"], reference_time="2024-01-01T00:00:00Z",
                         source_description=args["source"], episode_id=args["id"],
                         metadata=None if args["meta"] is None else json.loads(args["meta"]))
    with psycopg.connect(db_dsn) as conn:
        refused_in_one_line(conn, ENQUEUE, args, message)
        assert conn.execute("SELECT count(*) FROM pgmemory.episodes WHERE group_id IN (%s, %s)",
                            (group, args["g"])).fetchone() == (0,)


def test_sql_enqueue_accepts_values_at_the_limits(db_dsn, group):
    meta = {"x": "a" * 9_991}
    assert len(json.dumps(meta)) == 10_000
    args = enqueue_args(group, content="c" * 50_000, actor="a" * 200, source="s" * 50_000, id="i" * 200,
                        meta=json.dumps(meta))
    with psycopg.connect(db_dsn) as conn:
        eid = conn.execute(f"SELECT {ENQUEUE}", args).fetchone()[0]
        assert conn.execute("SELECT length(content), length(actor), length(source_description), metadata"
                            " FROM pgmemory.episodes WHERE group_id = %s AND id = %s",
                            (group, eid)).fetchone() == (50_000, 200, 50_000, meta)


def test_sql_enqueue_takes_metadata_by_name_after_positional_arguments(db_dsn, group):
    """One function with defaults: the form with metadata by name, and every shorter call."""
    with psycopg.connect(db_dsn) as conn:
        first = conn.execute("SELECT pgmemory.enqueue_episode(%s, 'hi8', 'message', 'A', '2024-01-01Z',"
                             " p_metadata => '{\"a\": 1}')", (group,)).fetchone()[0]
        conn.execute("SELECT pgmemory.enqueue_episode(%s, 'hi2', p_reference_time => '2024-01-01Z')", (group,))
        conn.execute("SELECT pgmemory.enqueue_episode(%s, 'hi5', 'text', NULL, '2024-01-01Z')", (group,))
        conn.execute("SELECT pgmemory.enqueue_episode(%s, 'hi7', 'text', NULL, '2024-01-01Z', '', 'e7')", (group,))
        assert conn.execute("SELECT count(*) FROM pg_proc WHERE proname = 'enqueue_episode'").fetchone() == (1,)
        assert conn.execute("SELECT content, metadata FROM pgmemory.episodes WHERE group_id = %s ORDER BY content",
                            (group,)).fetchall() == [("hi2", {}), ("hi5", {}), ("hi7", {}), ("hi8", {"a": 1})]
        assert conn.execute("SELECT metadata FROM pgmemory.episodes WHERE id = %s", (first,)).fetchone() == ({"a": 1},)


ADD_FACT = "pgmemory.add_fact(%(g)s, %(source)s, %(relation)s, %(target)s, %(fact)s)"


@pytest.mark.parametrize("changes, message", [
    ({"fact": "f" * 60_000}, "^fact has 60000 characters; the limit is 50000$"),
    ({"fact": "f" * 10_000_000}, "^fact has 10000000 characters; the limit is 50000$"),
    ({"source": "s" * 401}, "^source has 401 characters; the limit is 400$"),
    ({"target": " " + "t" * 400}, "^target has 401 characters; the limit is 400$"),
    ({"relation": "works  " * 15}, "^relation has 105 characters; the limit is 100$"),
    ({"g": "a\u00a0b"}, "^group_id must be at most 200 printable characters$"),
    ({"g": "\u200b"}, "^group_id must be at most 200 printable characters$"),
    ({"g": "a\u2028b"}, "^group_id must be at most 200 printable characters$"),
])
async def test_sql_add_fact_refuses_what_python_refuses_and_writes_nothing(memory, db_dsn, group, changes, message):
    """pgmemory.add_fact stored a 10 MB fact (and copied it into the entity summaries); Python
    refused it, and the same group ids Python refuses."""
    args = {"g": group, "source": "Alice", "relation": "KNOWS", "target": "Bob", "fact": "Alice knows Bob.", **changes}
    with pytest.raises(InvalidInput, match=message.rstrip("$")):
        await memory.add_fact(args["g"], args["source"], args["relation"], args["target"], args["fact"])
    with psycopg.connect(db_dsn) as conn:
        refused_in_one_line(conn, ADD_FACT, args, message)
        for table in ("entities", "facts", "fact_claims", "group_locks"):
            assert conn.execute(f"SELECT count(*) FROM pgmemory.{table} WHERE group_id IN (%s, %s)",
                                (group, args["g"])).fetchone() == (0,), table


def test_sql_add_fact_accepts_a_fact_and_names_at_the_limits(db_dsn, group):
    args = {"g": group, "source": "S" * 400, "relation": "R" * 100, "target": "T" * 400, "fact": "f" * 50_000}
    with psycopg.connect(db_dsn) as conn:
        assert conn.execute(f"SELECT {ADD_FACT}", args).fetchone()[0]["action"] == "created"
        assert conn.execute("SELECT length(fact) FROM pgmemory.facts WHERE group_id = %s", (group,)).fetchone() == (50_000,)


def test_sql_group_ids_are_printable_exactly_as_python_says(db_dsn):
    """pgmemory_internal.is_printable (check_group) against str.isprintable() over every assigned
    code point of this Python's Unicode (unassigned ones are left to Python: sql/15_writer_checks.sql)."""
    import unicodedata

    assigned = [c for c in range(1, 0x110000) if unicodedata.category(chr(c)) not in ("Cn", "Cs")]
    with psycopg.connect(db_dsn) as conn:
        sql_printable = set(conn.execute("SELECT c FROM unnest(%s::int[]) c WHERE pgmemory_internal.is_printable(chr(c))",
                                         (assigned,)).fetchall())
    differ = [f"U+{c:04X}" for c in assigned if ((c,) in sql_printable) != chr(c).isprintable()]
    assert differ == []
    with psycopg.connect(db_dsn) as conn:  # and the noncharacters, unassigned in every version
        nonchars = [c for c in range(0xFDD0, 0xFDF0)] + [p * 0x10000 + d for p in range(17) for d in (0xFFFE, 0xFFFF)]
        assert conn.execute("SELECT count(*) FROM unnest(%s::int[]) c WHERE pgmemory_internal.is_printable(chr(c))",
                            (nonchars,)).fetchone() == (0,)
        assert conn.execute("SELECT pgmemory_internal.is_printable('Zoë 東京 a b-1')").fetchone() == (True,)


@pytest.mark.parametrize("opts, message", [
    ({"kinds": ["fact"]}, r"unknown search kind\(s\) in \{fact\}"),
    ({"methods": ["bm25"]}, r"unknown search method\(s\) in \{bm25\}"),
    ({"candidatez": 5}, r"unknown search option\(s\) candidatez"),
    ({"candidates": -1}, "candidates -1 [(]1-1000[)]"),
    ({"candidates": 100000000}, "candidates 100000000"),
    ({"bfs_depth": 50, "methods": ["bfs"]}, "bfs_depth 50"),
    ({"neighbours": 1000}, "neighbours 1000"),
])
def test_sql_search_refuses_unknown_options_and_counts_out_of_range(db_dsn, group, opts, message):
    """A misspelt option, kind or method searched nothing and returned no rows, silently; a
    negative count failed on a LIMIT deep inside; a huge one was taken."""
    with psycopg.connect(db_dsn) as conn:
        with pytest.raises(psycopg.errors.InvalidParameterValue, match=message):
            conn.execute("SELECT * FROM pgmemory.search_group(%s, 'Alice', NULL, %s::jsonb)",
                         (group, json.dumps(opts)))
        conn.rollback()
        assert conn.execute("SELECT count(*) FROM pgmemory.search_group(%s, 'Alice', NULL,"
                            " '{\"kinds\": [\"facts\"], \"candidates\": 1000}')", (group,)).fetchone() == (0,)


def test_sql_search_refuses_a_group_named_twice(db_dsn, group):
    """search_candidates(ARRAY[g, g], ...) counted g's full-text hits twice, so the best hit
    could rank second: a group named twice is refused in one line (the Python surfaces dedupe)."""
    with psycopg.connect(db_dsn) as conn:
        with pytest.raises(psycopg.errors.InvalidParameterValue,
                           match=f"^p_groups names group '{group}' more than once"):
            conn.execute("SELECT * FROM pgmemory.search_candidates(%s, 'Alice', NULL, '{}'::jsonb)",
                         (["other", group, group],))
        conn.rollback()
        assert conn.execute("SELECT count(*) FROM pgmemory.search_candidates(%s, 'Alice', NULL, '{}'::jsonb)",
                            (["other", group],)).fetchone() == (0,)


# --- arguments of the wrong shape on the Python API (CLI audit) -----------------------------

@pytest.mark.parametrize("config", [5, ["combined_hybrid_rrf"], {"limit": 3}, b"combined_hybrid_rrf"])
async def test_search_config_of_the_wrong_type_is_invalid_input(memory, group, config):
    """It was `TypeError: replace() should be called on dataclass instances`."""
    with pytest.raises(InvalidInput, match="config must be a recipe name or a SearchConfig"):
        await memory.search("Oslo", group_ids=[group], config=config)


@pytest.mark.parametrize("filters", [{"as_of": "2024-01-01T00:00:00Z"}, {}, "", "2024-01-01", 5])
async def test_search_filters_that_are_not_search_filters_are_refused(memory, group, filters):
    """A dict of filters (as REST takes them) raised AttributeError, and an empty one, "" or []
    was silently read as no filters at all."""
    with pytest.raises(InvalidInput, match="filters must be a SearchFilters"):
        await memory.search("Oslo", group_ids=[group], filters=filters)


@pytest.mark.parametrize("kinds", [None, 5, object()])
async def test_reembed_kinds_of_the_wrong_type_is_invalid_input(memory, group, kinds):
    with pytest.raises(InvalidInput, match="kinds must be a list"):
        await memory.reembed(group, kinds=kinds)


@pytest.mark.parametrize("when", ["", [], {}, 0])
async def test_add_messages_refuses_an_empty_reference_time_instead_of_reading_now(memory, group, db_dsn, when):
    """Only None means now; an empty string (or 0, [], {}) was silently replaced by now."""
    with pytest.raises(InvalidInput, match="reference_time"):
        await memory.add_messages(group, [{"role": "user", "name": "Kim", "content": "I live in Oslo."}],
                                  reference_time=when)
    assert stored(db_dsn, group) == 0


async def test_a_long_unknown_recipe_or_kind_is_not_echoed_whole(memory, group):
    for call in (memory.search("Oslo", group_ids=[group], config="x" * 100_000),
                 memory.reembed(group, kinds=["x" * 100_000])):
        with pytest.raises(InvalidInput) as caught:
            await call
        assert len(str(caught.value)) < 500
