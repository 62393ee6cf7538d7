"""Property-based tests (hypothesis) of every input surface: any value is either accepted or
refused with a one-line InvalidInput; never a traceback of another kind, never a write on refusal.
Example counts are modest so the file runs in seconds; a soak run multiplies them with
PGMEMORY_FUZZ_SCALE (e.g. PGMEMORY_FUZZ_SCALE=20 pytest tests/test_fuzz.py)."""
from __future__ import annotations

import dataclasses
import json
import os
import uuid
from datetime import datetime, timedelta, timezone

import psycopg
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from pgmemory import InvalidInput, SearchConfig, SearchFilters
from pgmemory.ingest.episode import validate_episode
from pgmemory.memory import validate_batch
from pgmemory.search.config import RECIPES, resolve_config
from pgmemory.surfaces.ingest_file import read_jsonl

# PGMEMORY_FUZZ_SCALE multiplies every example count (soak runs: e.g. 20).
SCALE = int(os.environ.get("PGMEMORY_FUZZ_SCALE", "1"))
FAST = settings(max_examples=200 * SCALE, deadline=None)
WITH_DB = settings(max_examples=60 * SCALE, deadline=None,
                   suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

# Text with the characters that break drivers spliced in: NUL, lone surrogates, BOM, controls.
BAD_CHARS = ["\x00", "\ud800", "\udfff", "\ufeff", "\n", "\x1f", "🙂", ""]
nasty_text = st.one_of(
    st.builds(lambda a, bad, b: a + bad + b, st.text(max_size=8), st.sampled_from(BAD_CHARS), st.text(max_size=8)),
    st.text(alphabet=st.characters(codec=None, exclude_categories=()), max_size=20),
    st.sampled_from(["", " ", "I live in Oslo."]), st.integers(50_000, 50_002).map(lambda n: "x" * n))
times = st.one_of(
    st.datetimes(timezones=st.just(timezone.utc)),
    st.datetimes(timezones=st.sampled_from([timezone(timedelta(hours=14)), timezone(timedelta(hours=-12))])),
    st.datetimes(),  # naive
    st.sampled_from(["2024-01-01T00:00:00Z", "0001-01-01T00:00:00+05:00", "9999-12-31T23:59:59-05:00",
                     "yesterday", "2024-13-01T00:00:00Z", "infinity", "-infinity", "2024-01-01"]))
anything = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), nasty_text, times,
                     st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
                     st.binary(max_size=5), st.uuids())


def one_line(exc: Exception) -> None:
    assert isinstance(exc, InvalidInput)
    assert "\n" not in str(exc) and str(exc).strip()


VALID_EPISODE = {"group_id": "fuzz", "content": "I live in Oslo.", "kind": "message", "actor": "Kim",
                 "reference_time": "2024-01-01T00:00:00Z", "source_description": "", "episode_id": None}
EPISODE_VALUES = {
    "group_id": nasty_text | anything, "content": nasty_text | anything,
    "kind": st.sampled_from(["message", "text", "json"]) | anything, "actor": nasty_text | anything,
    "reference_time": times | anything, "source_description": nasty_text | anything,
    "episode_id": nasty_text | st.uuids() | anything}


def mutations(valid: dict, values: dict) -> st.SearchStrategy[dict]:
    """A valid argument set with one to three of its fields replaced by arbitrary values, so
    examples reach every check (and the database) instead of failing on the first field."""
    return st.lists(st.sampled_from(sorted(values)), min_size=0, max_size=3, unique=True).flatmap(
        lambda keys: st.fixed_dictionaries({k: values[k] for k in keys}).map(lambda m: {**valid, **m}))


episode_fields = mutations(VALID_EPISODE, EPISODE_VALUES)


@FAST
@given(episode_fields)
def test_episode_validator_accepts_or_refuses_in_one_line(fields):
    args = dict(fields)
    try:
        ep = validate_episode(args.pop("group_id", None), args.pop("content", None), **args)
    except InvalidInput as exc:
        one_line(exc)
        return
    # What is accepted can be stored: UTF-8 encodable, no NUL, a time in the documented range.
    for text in (ep.group_id, ep.content, ep.actor or "", ep.source_description):
        assert "\x00" not in text
        text.encode("utf-8")
    assert datetime(1000, 1, 1, tzinfo=timezone.utc) <= ep.reference_time <= datetime(3000, 1, 1, tzinfo=timezone.utc)


json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | nasty_text,
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                                        max_size=3), max_leaves=8)
jsonl_lines = st.lists(st.one_of(
    episode_fields.map(lambda d: json.dumps({k: (v.isoformat() if isinstance(v, datetime) else v)
                                             for k, v in d.items()}, default=str).encode("utf-8", "surrogatepass")),
    json_values.map(lambda v: json.dumps(v).encode("utf-8", "surrogatepass")),
    st.binary(max_size=30)), max_size=5)


@settings(max_examples=120 * SCALE, deadline=None)
@given(lines=jsonl_lines, bom=st.booleans(), crlf=st.booleans())
@example(lines=[b'{"\\n": null}'], bom=False, crlf=False)  # found by a soak run: a field name with a newline
def test_jsonl_reader_and_batch_validation_accept_or_refuse_in_one_line(tmp_path_factory, lines, bom, crlf):
    path = tmp_path_factory.getbasetemp() / "fuzz.jsonl"
    path.write_bytes((b"\xef\xbb\xbf" if bom else b"") + (b"\r\n" if crlf else b"\n").join(lines))
    try:
        items, numbers = read_jsonl(str(path))
        episodes = validate_batch(items, positions=numbers, unit="line")
    except InvalidInput as exc:
        one_line(exc)
        return
    assert len(episodes) == len(items) == len(numbers)


config_fields = mutations({}, {
    "kinds": st.lists(st.sampled_from(["facts", "entities", "communities", "episodes", "x"]), max_size=4) | anything,
    "methods": st.lists(st.sampled_from(["cosine", "fulltext", "bfs", "y"]), max_size=3) | anything,
    "reranker": st.sampled_from(["rrf", "mmr", "episode_mentions", "node_distance", "z"]) | anything,
    "candidates": st.integers(-5, 2000) | anything, "rrf_k": anything, "mmr_lambda": st.floats() | anything,
    "bfs_depth": st.integers(-1, 7) | anything, "bfs_recent_episodes": anything, "bfs_max_entities": anything,
    "bfs_seeds": st.lists(st.uuids() | st.uuids().map(str) | anything, max_size=3) | anything,
    "center": st.uuids() | anything, "method_weights": anything, "session_weight": st.floats() | anything,
    "session_window_s": st.integers(-10, 40 * 86400) | anything})
filter_fields = mutations({}, {
    "as_of": times | anything, "known_at": times | anything, "include_invalidated": anything,
    "include_superseded": anything, "relation_types": st.lists(nasty_text, max_size=3) | anything,
    "labels": st.lists(nasty_text, max_size=3) | anything, "valid_at_from": times, "expired_at_to": times})


@FAST
@given(config=config_fields, filters=filter_fields)
def test_search_config_and_filters_accept_or_refuse_in_one_line(config, filters):
    try:
        cfg = resolve_config(SearchConfig(**config))
        flt = SearchFilters(**filters)
    except InvalidInput as exc:
        one_line(exc)
        return
    assert all(isinstance(s, uuid.UUID) for s in cfg.bfs_seeds)
    options = flt.to_options()
    json.dumps(options)
    assert isinstance(options["include_invalidated"], bool)


search_args = mutations(
    {"query": "where does Kim work", "group_ids": ["fuzz-base"], "limit": 10, "config": {}, "filters": {}},
    {"query": nasty_text | anything, "group_ids": st.lists(nasty_text, max_size=2) | nasty_text | anything,
     "limit": st.integers(-2, 120) | anything, "config": config_fields, "filters": filter_fields})


@WITH_DB
@given(args=search_args, recipe=st.sampled_from(sorted(RECIPES)))
def test_search_against_the_database_accepts_or_refuses_in_one_line(search_memory, args, recipe):
    try:
        cfg = dataclasses.replace(RECIPES[recipe], **args["config"])
        if cfg.reranker == "cross_encoder":
            cfg = dataclasses.replace(cfg, reranker="rrf")
        results = search_memory.search(args["query"], group_ids=args["group_ids"], limit=args["limit"],
                                       config=cfg, filters=SearchFilters(**args["filters"]))
    except InvalidInput as exc:
        one_line(exc)
        return
    assert all(len(getattr(results, k)) <= args["limit"] for k in ("facts", "entities", "communities", "episodes"))


@WITH_DB
@given(fields=episode_fields)
def test_add_episode_writes_nothing_when_it_refuses(db_dsn, search_memory, fields):
    group = f"fuzz-{uuid.uuid4().hex[:8]}"
    args = dict(fields)
    if isinstance(args["group_id"], str):  # a fresh group per example, keeping the fuzzed suffix
        args["group_id"] = group + args["group_id"][:20]
    try:
        search_memory.add_episode(args.pop("group_id"), args.pop("content"), **args)
    except InvalidInput as exc:
        one_line(exc)
        with psycopg.connect(db_dsn) as conn:
            assert conn.execute("SELECT count(*) FROM pgmemory.episodes WHERE group_id LIKE %s",
                                (group + "%",)).fetchone()[0] == 0


@pytest.fixture(scope="module")
def search_memory(db_dsn):
    """One SyncMemory (offline extractor, hash embedder) shared by the database fuzz tests."""
    from pgmemory import SyncMemory
    from pgmemory.extract.rules import RuleExtractor
    from pgmemory.providers.embedder import HashEmbedder

    memory = SyncMemory(db_dsn, embedder=HashEmbedder(), extractor=RuleExtractor())
    memory.add_episode("fuzz-base", "I work at Acme Corp and live in Oslo.", actor="Kim",
                       reference_time=datetime(2024, 1, 1, tzinfo=timezone.utc))
    yield memory
    memory.close()
