"""φ: one call to pgmemory.search_group / search_candidates, parsed into typed hits."""
from __future__ import annotations

import json
import time
import uuid
from collections.abc import Awaitable, Iterable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from typing import Any

import asyncpg

from pgmemory.config import Timeouts
from pgmemory.errors import DatabaseTimeout, InvalidInput
from pgmemory.search import rerank
from pgmemory.search.categories import member_lexemes
from pgmemory.search.config import SearchConfig, SearchFilters
from pgmemory.search.types import SINCE_FOREVER, CommunityHit, EntityHit, EpisodeHit, FactHit, Hit, SearchResults


def options(config: SearchConfig, filters: SearchFilters, *, with_embeddings: bool,
            limit: int | None = None, query: str | None = None) -> dict[str, Any]:
    """The jsonb options of one search call; each method's pool is config.pool(limit). With `limit`
    and the plain RRF reranker, the database describes only what can be among each kind's best
    `limit` after the reranking of pgmemory.search.engine ("fuse"): facts by RRF, entities by RRF
    with described ones first, episodes by RRF, the neighbour bonus and the speaker factor (the
    query's words decide that, so episodes are cut only with `query`, or without a speaker weight)
    unless session proximity reorders them. The caller still reranks what it receives: the same
    formula on the same candidates gives the same results. Options without a value (None) are left
    out: the database reads a missing key as null, and the JSON each call encodes and the server
    parses is ~40% shorter. `members`: the lexemes of a list question's category members
    (pgmemory.search.categories), with a members weight and the query."""
    fuse = None
    members = (member_lexemes(query) if query and config.members_weight > 0 and "fulltext" in config.methods
               and "episodes" in config.kinds else ())
    if limit is not None and config.reranker == "rrf":
        episodes = None
        if not config.session_weight and (query is not None or not config.speaker_weight):
            episodes = {"neighbour_weight": config.neighbour_weight, "speaker_weight": config.speaker_weight,
                        "query_words": " ".join(rerank.casefolded_words(query or ""))}
        fuse = {"k": config.rrf_k, "weights": config.fusion_weights(),
                "limit": limit, "episodes": episodes}
    opts = {
        "fuse": fuse,
        **filters.to_options(),
        "kinds": list(config.kinds),
        "methods": list(config.methods),
        "candidates": config.pool(limit),
        "bfs_depth": config.bfs_depth,
        "bfs_recent_episodes": config.bfs_recent_episodes,
        "bfs_max_entities": config.bfs_max_entities,
        "bfs_seeds": [str(s) for s in config.bfs_seeds],
        "center": str(config.center) if config.center else None,
        "neighbours": config.neighbours if config.neighbour_weight > 0 else 0,
        "neighbour_span": config.neighbour_span,
        "neighbour_window_s": config.session_window_s,
        "prf_docs": config.prf_docs if config.prf_weight > 0 and "fulltext" in config.methods else 0,
        "prf_terms": config.prf_terms,
        "members": list(members) or None,
        "with_embeddings": with_embeddings,
    }
    return {key: value for key, value in opts.items() if value is not None}


async def fetch_candidates(conn: asyncpg.Connection, group_ids: list[str], query: str,
                           embedding: list[float] | None, opts: dict[str, Any],
                           timings: dict[str, float] | None = None, *,
                           distributed: bool | None = None) -> SearchResults:
    """All candidates of every kind and method, in one round trip. One group: search_group (on
    Citus delegated to the group's worker); several: search_candidates over all of them (on
    Citus, pgmemory.search.fanout instead). `distributed` False (the database is known to be one
    node): the query vector goes as pgvector's own binary `vector` (SEARCH_ONE_NODE); otherwise
    as a real[] (SEARCH_ONE). With `timings`, the seconds spent in the SQL call ("sql") and in
    decoding its rows ("decode") are added to it."""
    opts = widened(opts)
    one, many = (SEARCH_ONE_NODE, SEARCH_MANY_NODE) if distributed is False else (SEARCH_ONE, SEARCH_MANY)
    if len(group_ids) == 1:
        return await timed_decode(fetch_rows(conn, one, group_ids[0], query, embedding, opts), timings)
    return await timed_decode(fetch_rows(conn, many, group_ids, query, embedding, opts), timings)


async def timed_decode(rows: Awaitable[list[asyncpg.Record]], timings: dict[str, float] | None) -> SearchResults:
    """Await the candidate rows and decode them; with `timings`, add the seconds of each step
    ("sql", "decode") to it."""
    started = time.perf_counter()
    fetched_rows = await rows
    fetched = time.perf_counter()
    results = decode(fetched_rows)
    if timings is not None:
        timings["sql"] = timings.get("sql", 0.0) + fetched - started
        timings["decode"] = timings.get("decode", 0.0) + time.perf_counter() - fetched
    return results


def widened(opts: dict[str, Any]) -> dict[str, Any]:
    """A metadata filter drops candidates after ranking, so the pool is widened first."""
    if opts.get("metadata"):
        return {**opts, "candidates": min(opts.get("candidates", 30) * METADATA_WIDEN, 1000)}
    return opts


async def fetch_rows(conn: asyncpg.Connection, statement: str, groups: str | list[str], query: str,
                     embedding: list[float] | None, opts: dict[str, Any]) -> list[asyncpg.Record]:
    """One search call (SEARCH_ONE or SEARCH_MANY, or their *_NODE forms), cancelled after
    PGMEMORY_SEARCH_TIMEOUT. The metadata filter travels in `opts` (search_candidates applies it),
    so a one-group call stays a bare function call, which Citus delegates to the group's worker.
    The query vector goes in binary (any sequence of floats, a numpy array too), no text literal
    to format and parse (~0.3 ms a call at 384 dimensions): SEARCH_ONE / SEARCH_MANY take a real[]
    (asyncpg's own codec) cast to vector by the server, because Citus cannot EXPLAIN a delegated
    call whose parameter is of an extension's type ("Could not get remote plan"); the *_NODE forms,
    for a database known to be one node, take pgvector's binary `vector` (its codec, registered on
    every pooled connection, packs the floats in C, where asyncpg's real[] encoder asks each of the
    384 floats whether it is a sub-array). Both round each component once to the nearest float4:
    the server sees the same vector."""
    limit = Timeouts.from_env().search_s
    if embedding is not None and not isinstance(embedding, list) and not hasattr(embedding, "ndim"):
        embedding = list(embedding)  # pgvector's codec takes a list or a numpy array
    try:
        return await conn.fetch(statement, groups, query, embedding, opts, timeout=limit)
    except TimeoutError:
        raise DatabaseTimeout(f"search took longer than {limit:g} s and was cancelled "
                              "(PGMEMORY_SEARCH_TIMEOUT); `pgmemory doctor` lists backends stuck on locks") from None


def decode(rows: Iterable[Any]) -> SearchResults:
    """Rows (kind, id, version_id, ranks, detail) as typed hits, in row order. An id the details
    name more than once (the entity several facts are about, the episode several came from) is
    parsed once: UUID parsing was the largest part of decoding an edge-only search's rows."""
    results = SearchResults()
    lists = {kind: getattr(results, name) for kind, name in _LISTS.items()}
    ids: dict[str, uuid.UUID] = {}
    for row in rows:  # records, or dicts (pgmemory.search.fanout.merge)
        kind = row["kind"]
        lists[kind].append(_hit(kind, row["id"], row["version_id"], row["ranks"], row["detail"], ids))
    return results


SEARCH_ONE = ("SELECT kind, id, version_id, ranks, detail"
              " FROM pgmemory.search_group($1, $2, $3::real[]::vector, $4::jsonb) c")
SEARCH_MANY = ("SELECT kind, id, version_id, ranks, detail"
               " FROM pgmemory.search_candidates($1, $2, $3::real[]::vector, $4::jsonb) c")
# On a database known to be one node (Memory reads the layout when it opens): the vector in
# pgvector's binary format, which Citus could not EXPLAIN when delegating the call (fetch_rows).
SEARCH_ONE_NODE = SEARCH_ONE.replace("$3::real[]::vector", "$3::vector")
SEARCH_MANY_NODE = SEARCH_MANY.replace("$3::real[]::vector", "$3::vector")
METADATA_WIDEN = 4  # candidates per method read when a metadata filter will drop some

_LISTS = {"fact": "facts", "entity": "entities", "community": "communities", "episode": "episodes"}


@contextmanager
def refused_ids_as_input_errors() -> Iterator[None]:
    """The database refuses a seed or centre outside the caller's groups (and a depth out of
    range) with SQLSTATE 22023: surface that as the one-line InvalidInput it is."""
    try:
        yield
    except asyncpg.InvalidParameterValueError as exc:
        raise InvalidInput(exc.args[0] if exc.args else str(exc)) from None


def _time(value: str | None) -> datetime | None:
    """A timestamp from the JSON detail (written in the session's time zone), in UTC: None for an
    open bound (NULL or 'infinity'), SINCE_FOREVER for '-infinity' (true since forever, which is
    not the same as an unknown start)."""
    if not value or value == "infinity":
        return None
    if value == "-infinity":
        return SINCE_FOREVER
    return datetime.fromisoformat(value).astimezone(timezone.utc)


def _offset(seconds: int | None) -> timedelta | None:
    """A speaker's UTC offset from the detail's seconds (None: no offset kept, UTC)."""
    return None if seconds is None else timedelta(seconds=seconds)


def _embedding(detail: dict[str, Any]) -> list[float] | None:
    raw = detail.get("embedding")
    return json.loads(raw) if raw else None


def _uuid(text: str, ids: dict[str, uuid.UUID]) -> uuid.UUID:
    """The UUID of `text`, parsed once per `ids` (UUIDs are immutable: sharing one is safe)."""
    parsed = ids.get(text)
    if parsed is None:
        parsed = ids[text] = uuid.UUID(text)
    return parsed


def _hit(kind: str, id_: uuid.UUID, version_id: int | None, ranks: dict[str, int],
         d: dict[str, Any], ids: dict[str, uuid.UUID]) -> Hit:
    base = dict(id=id_, group_id=d["group_id"], ranks=ranks, embedding=_embedding(d))
    if kind == "fact":
        return FactHit(
            **base, version_id=version_id, relation=d["relation"], fact=d["fact"],
            source_id=_uuid(d["source_id"], ids), source=d["source"],
            target_id=_uuid(d["target_id"], ids), target=d["target"],
            valid_from=_time(d["valid_from"]), valid_to=_time(d["valid_to"]),
            valid_from_unknown=d["valid_from_unknown"],
            recorded_from=_time(d["recorded_from"]), recorded_to=_time(d["recorded_to"]),
            episodes=[_uuid(e, ids) for e in d["episodes"]], attributes=d["attributes"],
            distance=d.get("distance"), said_offset=_offset(d.get("said_offset")))
    if kind == "entity":
        return EntityHit(**base, name=d["name"], summary=d["summary"], labels=d["labels"],
                         attributes=d["attributes"], mentions=d["mentions"], distance=d.get("distance"))
    if kind == "community":
        return CommunityHit(**base, name=d["name"], summary=d["summary"])
    return EpisodeHit(**base, content=d["content"], kind=d["kind"], actor=d["actor"],
                      valid_at=_time(d["valid_at"]), said_offset=_offset(d.get("said_offset")),
                      recorded_at=_time(d["recorded_at"]),
                      source_description=d["source_description"],
                      neighbour_of={_uuid(e, ids): n for e, n in (d.get("neighbour_of") or {}).items()})
