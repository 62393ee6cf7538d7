"""Recompute stored vectors with the current code (`pgmemory reembed`, Memory.reembed): episode
vectors (their text and the turns before them, embed_episode), entity name vectors, fact and claim
sentence vectors. A database ingested by older code keeps the vectors that code computed; this
brings them to what ingestion stores now.

Each group and kind is walked in key order in batches: the texts of a batch are embedded with no
transaction open, then its vectors and the walk's position (pgmemory.reembed_progress) are written
in ONE transaction. An interrupted run resumes after the last committed batch; a finished run is
not redone until the embedder or the text-to-vector recipe changes (or `restart`). Every read and
write names the group.
"""
from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg

from pgmemory.errors import InvalidInput
from pgmemory.extract.types import EpisodeInput, ExtractedFact
from pgmemory.ingest import embed_episode
from pgmemory.ingest.embed_episode import episode_vectors
from pgmemory.ingest.episode import validate_group_id
from pgmemory.ingest.pipeline import FACT_TEXT_RECIPE, fact_embedding_text
from pgmemory.providers.embedder import Embedder
from pgmemory.storage.vectors import as_vectors

KINDS = ("episodes", "entities", "facts")  # what a caller names; facts covers their claims too
DEFAULT_BATCH = 256
MAX_BATCH = 10_000


@dataclass(frozen=True)
class ReembedProgress:
    """Where one walk stands after a committed batch (or at its start / when it is skipped)."""

    group_id: str
    kind: str  # episodes | entities | facts | fact_claims
    rows_done: int
    rows_total: int
    state: str  # "running" | "finished" | "current" (already done with this recipe: nothing to do)

    def __str__(self) -> str:
        what = {"current": "already current", "finished": "done"}.get(self.state, "running")
        return f"reembed {self.kind} of {self.group_id!r}: {self.rows_done}/{self.rows_total} rows, {what}"


@dataclass(frozen=True)
class ReembedResult:
    """What one walk did: rows re-embedded in this call, and whether it resumed an earlier run."""

    group_id: str
    kind: str
    rows: int
    batches: int
    resumed: bool
    current: bool  # nothing to do: a finished run with the same recipe
    seconds: float


@dataclass(frozen=True)
class _Walk:
    """One table's vectors: rows after a key (in key order), their texts, and the update."""

    kind: str
    select: str   # $1 group, $2 key after (jsonb, NULL: from the start), $3 limit
    update: str   # $1 group, $2 row key, $3 vector (, $4 what the text was made from)
    count: str    # $1 group


def _fact_walk(kind: str, table: str, key: str) -> _Walk:
    """Facts (key version_id) and claims (key seq): sentence + relation + current entity names."""
    return _Walk(
        kind,
        f"SELECT f.{key} AS key, f.fact, f.relation, s.name AS source, t.name AS target FROM pgmemory.{table} f"
        "  JOIN pgmemory.entities s ON s.group_id = f.group_id AND s.id = f.source_id"
        "  JOIN pgmemory.entities t ON t.group_id = f.group_id AND t.id = f.target_id"
        f" WHERE f.group_id = $1 AND ($2::jsonb IS NULL OR f.{key} > ($2::jsonb #>> '{{}}')::bigint)"
        f" ORDER BY f.{key} LIMIT $3",
        f"UPDATE pgmemory.{table} SET embedding = $3::vector WHERE group_id = $1 AND {key} = $2",
        f"SELECT count(*) FROM pgmemory.{table} WHERE group_id = $1")


_WALKS = {
    "episodes": _Walk(
        "episodes",
        "SELECT id, seq, kind, content, actor, valid_at, source_description, status, retracted_at FROM pgmemory.episodes"
        " WHERE group_id = $1 AND ($2::jsonb IS NULL OR (valid_at, seq) > (($2::jsonb ->> 0)::timestamptz,"
        "                                                                  ($2::jsonb ->> 1)::bigint))"
        " ORDER BY valid_at, seq LIMIT $3",
        "UPDATE pgmemory.episodes SET embedding = $3::vector WHERE group_id = $1 AND id = $2 AND status = 'done'",
        "SELECT count(*) FROM pgmemory.episodes WHERE group_id = $1"),
    "entities": _Walk(
        "entities",
        "SELECT id AS key, name FROM pgmemory.entities"
        " WHERE group_id = $1 AND ($2::jsonb IS NULL OR id > ($2::jsonb #>> '{}')::uuid) ORDER BY id LIMIT $3",
        # the entity's name vector (pgmemory.entity_name_vectors), if it still has the name embedded
        "INSERT INTO pgmemory.entity_name_vectors (group_id, entity_id, name_embedding)"
        " SELECT e.group_id, e.id, $3::vector FROM pgmemory.entities e"
        " WHERE e.group_id = $1 AND e.id = $2 AND e.name = $4"
        " ON CONFLICT (group_id, entity_id) DO UPDATE SET name_embedding = excluded.name_embedding",
        "SELECT count(*) FROM pgmemory.entities WHERE group_id = $1"),
    "facts": _fact_walk("facts", "facts", "version_id"),
    "fact_claims": _fact_walk("fact_claims", "fact_claims", "seq"),
}
_EPISODES_BEFORE = (
    "SELECT kind, content, actor, valid_at, source_description FROM pgmemory.episodes"
    " WHERE group_id = $1 AND (valid_at, seq) <= (($2::jsonb ->> 0)::timestamptz, ($2::jsonb ->> 1)::bigint)"
    # the turns before as ingestion reads them: current ones (a retracted episode, re-embedded for
    # known-at searches, keeps its own text first)
    " AND (retracted_at IS NULL OR seq = ($2::jsonb ->> 1)::bigint)"
    " ORDER BY valid_at DESC, seq DESC LIMIT $3")
_PROGRESS = "SELECT recipe, after_key, rows_done, finished FROM pgmemory.reembed_progress WHERE group_id = $1 AND kind = $2"
_SAVE_PROGRESS = (
    "INSERT INTO pgmemory.reembed_progress (group_id, kind, recipe, after_key, rows_done, finished, updated_at)"
    " VALUES ($1, $2, $3, $4::jsonb, $5, $6, now()) ON CONFLICT (group_id, kind) DO UPDATE SET"
    " recipe = excluded.recipe, after_key = excluded.after_key, rows_done = excluded.rows_done,"
    " finished = excluded.finished, updated_at = excluded.updated_at")


def recipe(kind: str, embedder: Embedder) -> str:
    """Names what a kind's vectors are computed from and by which embedder."""
    how = {"episodes": embed_episode.episode_vector_recipe(), "entities": "name"}.get(kind, FACT_TEXT_RECIPE)
    return f"{embedder.name}; {how}"


def walks_of(kinds: Sequence[str]) -> list[str]:
    """The table walks of the kinds asked (facts: their versions, then their claims)."""
    if isinstance(kinds, (str, bytes)) or not isinstance(kinds, (list, tuple)):
        raise InvalidInput(f"kinds must be a list of {', '.join(KINDS)}, got {type(kinds).__name__}")
    bad = [k for k in kinds if k not in KINDS]
    if bad or not kinds:
        raise InvalidInput(f"kind must be one of {', '.join(KINDS)}, got {', '.join(f'{k!s:.40}' for k in bad) or 'none'}")
    return [w for k in KINDS if k in kinds for w in (("facts", "fact_claims") if k == "facts" else (k,))]


async def groups_to_walk(pool: asyncpg.Pool, group_id: str | None) -> list[str]:
    """The group asked (which must hold episodes or entities), or every group that does."""
    if group_id is None:
        rows = await pool.fetch("SELECT group_id FROM pgmemory.episodes UNION SELECT group_id FROM pgmemory.entities"
                                " ORDER BY 1")
        return [r[0] for r in rows]
    group = validate_group_id(group_id)
    found = await pool.fetchval("SELECT EXISTS (SELECT 1 FROM pgmemory.episodes WHERE group_id = $1)"
                                " OR EXISTS (SELECT 1 FROM pgmemory.entities WHERE group_id = $1)", group)
    if not found:
        raise InvalidInput(f"group {group!r} has no episodes or entities")
    return [group]


async def reembed(pool: asyncpg.Pool, embedder: Embedder, *, group_id: str | None = None,
                  kinds: Sequence[str] = KINDS, batch: int = DEFAULT_BATCH, restart: bool = False,
                  on_progress: Callable[[ReembedProgress], None] | None = None) -> list[ReembedResult]:
    """Recompute the stored vectors of `kinds` in one group (or every group), batch by batch."""
    if not isinstance(batch, int) or isinstance(batch, bool) or not 1 <= batch <= MAX_BATCH:
        raise InvalidInput(f"batch must be an integer between 1 and {MAX_BATCH}, got {batch!r}")
    walks = walks_of(kinds)
    results = []
    for group in await groups_to_walk(pool, group_id):
        for kind in walks:
            results.append(await _walk(pool, embedder, group, _WALKS[kind], batch, restart, on_progress))
    return results


async def _walk(pool: asyncpg.Pool, embedder: Embedder, group: str, walk: _Walk, batch: int, restart: bool,
                on_progress: Callable[[ReembedProgress], None] | None) -> ReembedResult:
    started = time.perf_counter()
    wanted = recipe(walk.kind, embedder)
    total = await pool.fetchval(walk.count, group)
    saved = await pool.fetchrow(_PROGRESS, group, walk.kind)
    same = saved is not None and saved["recipe"] == wanted and not restart
    if same and saved["finished"]:
        if on_progress:
            # every row there is now is current (rows deleted since the run no longer count)
            on_progress(ReembedProgress(group, walk.kind, total, total, "current"))
        return ReembedResult(group, walk.kind, 0, 0, False, True, 0.0)
    after = saved["after_key"] if same else None
    done_before = saved["rows_done"] if same else 0
    resumed = same and after is not None
    window: deque[EpisodeInput] = deque(maxlen=max(1, embed_episode.PREVIOUS_TURNS))
    if walk.kind == "episodes" and after is not None:
        rows = await pool.fetch(_EPISODES_BEFORE, group, after, window.maxlen)
        window.extend(_episode_input(r) for r in reversed(rows))
    rows_done, batches, finished = done_before, 0, False
    while not finished:
        rows = await pool.fetch(walk.select, group, after, batch)
        finished = len(rows) < batch
        updates = await _vectors(embedder, walk.kind, rows, window) if rows else []  # no transaction open
        after = _key(walk.kind, rows[-1]) if rows else after
        rows_done += len(updates)
        async with pool.acquire() as conn, conn.transaction():
            if updates:
                await conn.executemany(walk.update, [(group, *u) for u in updates])
            await conn.execute(_SAVE_PROGRESS, group, walk.kind, wanted, after, rows_done, finished)
        batches += 1
        if on_progress:
            on_progress(ReembedProgress(group, walk.kind, rows_done, total, "finished" if finished else "running"))
    return ReembedResult(group, walk.kind, rows_done - done_before, batches, resumed, False,
                         round(time.perf_counter() - started, 3))


def _key(kind: str, row: asyncpg.Record) -> Any:
    """The walk position after `row`, as a JSON value for the $2::jsonb parameter."""
    if kind == "episodes":
        return [row["valid_at"].isoformat(), row["seq"]]
    return str(row["key"]) if kind == "entities" else row["key"]


def _episode_input(row: asyncpg.Record) -> EpisodeInput:
    return EpisodeInput(row["content"], row["kind"], row["valid_at"], row["actor"], row["source_description"])


async def _vectors(embedder: Embedder, kind: str, rows: list[asyncpg.Record],
                   window: deque[EpisodeInput]) -> list[tuple[Any, ...]]:
    """(row key, vector[, name]) of the rows to update, their texts embedded in one call."""
    if kind == "episodes":
        items, ids = [], []
        for r in rows:  # every current episode is context for the next; only done ones hold a vector
            ep = _episode_input(r)
            if r["status"] == "done":
                items.append((ep, list(window)))
                ids.append(r["id"])
            if r["retracted_at"] is None:  # a retracted one (history) is no turn before, as in ingestion
                window.append(ep)
        return list(zip(ids, as_vectors(await episode_vectors(embedder, items)))) if items else []
    if kind == "entities":
        vectors = await embedder.embed([r["name"] for r in rows])
        return [(r["key"], v, r["name"]) for r, v in zip(rows, as_vectors(vectors))]
    texts = [fact_embedding_text(ExtractedFact(r["source"], r["target"], r["relation"], r["fact"])) for r in rows]
    return [(r["key"], v) for r, v in zip(rows, as_vectors(await embedder.embed(texts)))]
