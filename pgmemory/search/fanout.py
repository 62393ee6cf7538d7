"""A search of several groups on Citus: each group's search delegated to its worker, in parallel,
then merged into the ranks one node gives for the same data.

On one node, search_candidates ranks each method's candidates over all the searched groups at
once. On Citus a query over several groups is not routed to one worker, so instead every group's
search_group call (one task on the group's worker) runs at the same time on its own pooled
connection, with `with_keys`: each row carries the sort key of each method that found it. The
merge sorts each method's candidates of all the groups by that key and keeps the best k, which
is the list one node builds (a group's own top k holds every one of its rows in the global top
k). The episode list "facts" is rebuilt from the merged fact ranks, the neighbouring turns are
kept for the best episodes overall, and a metadata filter is applied after the ranks, as on one
node. The default BFS seeds are the entities of the latest episodes of all the searched groups
(read per group first, delegated), and a caller's seeds and centre go to their own group's call.
Per group, not overall: the bfs_max_entities cap of the walk, and the pseudo-relevance feedback
words (the "prf" list): each group's call takes them from its own best full-text hits, one node
from the best full-text hits of all the searched groups.
"""
from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg

from pgmemory.errors import InvalidInput
from pgmemory.search.candidates import SEARCH_ONE, fetch_rows, timed_decode, widened
from pgmemory.search.types import SearchResults

DERIVED = {"facts"}  # the episode list built from the fact lists, not from a sort key of its own
UNSEEDED = {"members"}  # lists whose hits bring no neighbouring turns (sql/70_search.sql)


# SQLSTATE of search_candidates when a caller that took the database for one node (option
# single_node) searches several groups of a database distributed since (sql/70_search.sql).
DISTRIBUTED_SINCE = "PMDST"


async def is_distributed(conn: asyncpg.Connection) -> bool:
    """Whether the database is a Citus coordinator with pgmemory distributed (init's setting)."""
    return bool(await conn.fetchval("SELECT (pgmemory_internal.setting('distributed') #>> '{}')::boolean"))


@dataclass
class Layout:
    """Whether pgmemory's tables are distributed, read once (Memory keeps one): it changes only
    when init distributes a running database, which a search of several groups then learns from
    search_candidates (DISTRIBUTED_SINCE) and records here."""

    distributed: bool | None = None  # None: not read yet

    async def known(self, conn: asyncpg.Connection) -> bool:
        """The layout, read from the database the first time only."""
        if self.distributed is None:
            self.distributed = await is_distributed(conn)
        return self.distributed


async def _each(pool: asyncpg.Pool, groups: list[str],
                call: Callable[[asyncpg.Connection, str], Awaitable[Any]]) -> list[Any]:
    """call(conn, group) for every group at once, each on its own pooled connection (no
    connection is held while waiting for another, so a busy pool only queues)."""
    async def one(group: str) -> Any:
        async with pool.acquire() as conn:
            return await call(conn, group)
    return list(await asyncio.gather(*(one(g) for g in groups)))


async def _split_ids(pool: asyncpg.Pool, groups: list[str], opts: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per group, its share of the caller's BFS seeds and centre; refuses an id of no searched
    group with the message one node gives (sql/70_search.sql, require_group_entities)."""
    seeds = [str(s) for s in opts.get("bfs_seeds") or []]
    center = opts.get("center")
    wanted = sorted(set(seeds + ([str(center)] if center else [])))
    owners: dict[str, str] = {}
    found = await _each(pool, groups, lambda conn, g: conn.fetch(
        "SELECT pgmemory_internal.entities_of_group($1, $2::uuid[]) AS id", g, wanted))
    for group, rows in zip(groups, found):
        owners.update({str(r["id"]): group for r in rows})
    for what, ids in (("bfs seed", seeds), ("center", [str(center)] if center else [])):
        for i in ids:
            if i not in owners:
                raise InvalidInput(f"{what} {i} is not an entity of the searched groups")
    out = {}
    for group in groups:
        mine = [s for s in seeds if owners[s] == group]
        out[group] = {"bfs_seeds": mine, "center": center if center and owners[str(center)] == group else None}
        if seeds and not mine:
            out[group]["bfs_seed_episodes"] = []  # seeds were given: no default seeds in this group
    return out


async def _latest_episodes(pool: asyncpg.Pool, groups: list[str], opts: dict[str, Any]) -> dict[str, list[str]]:
    """The default BFS seed episodes: the latest done episodes of all the searched groups
    together (as one node picks them), by group."""
    n = opts.get("bfs_recent_episodes", 3)
    # A timestamptz parameter, not text cast in SQL: Citus delegates a call whose argument is
    # `$2::text::timestamptz` as a cstring cast the worker refuses ("cannot cast type cstring").
    known_at = datetime.fromisoformat(opts["known_at"]) if opts.get("known_at") else None
    found = await _each(pool, groups, lambda conn, g: conn.fetch(
        "SELECT id, valid_at FROM pgmemory_internal.latest_episodes($1, $2::timestamptz, $3)", g, known_at, n))
    latest = sorted(((r["valid_at"], g, str(r["id"])) for g, rows in zip(groups, found) for r in rows),
                    reverse=True)[:n]
    return {g: [i for _, owner, i in latest if owner == g] for g in groups}


async def fetch_fanned_out(pool: asyncpg.Pool, group_ids: list[str], query: str, embedding: list[float] | None,
                           opts: dict[str, Any], timings: dict[str, float] | None = None) -> SearchResults:
    """The candidates of several groups on Citus, ranked over all of them (see the module)."""
    return await timed_decode(fanned_out_rows(pool, group_ids, query, embedding, opts), timings)


async def fanned_out_rows(pool: asyncpg.Pool, group_ids: list[str], query: str, embedding: list[float] | None,
                          opts: dict[str, Any]) -> list[dict[str, Any]]:
    """Every group's search_group rows (with_keys), fetched at once and merged."""
    group_ids = list(dict.fromkeys(group_ids))  # a group named twice is searched once, as on one node
    opts = {**widened(opts), "with_keys": True}
    per_group: dict[str, dict[str, Any]] = {g: {} for g in group_ids}
    if opts.get("bfs_seeds") or opts.get("center"):
        per_group = await _split_ids(pool, group_ids, opts)
    if "bfs" in opts.get("methods", ()) and not opts.get("bfs_seeds"):
        for group, episodes in (await _latest_episodes(pool, group_ids, opts)).items():
            per_group[group]["bfs_seed_episodes"] = episodes
    found = await _each(pool, group_ids, lambda conn, g: fetch_rows(
        conn, SEARCH_ONE, g, query, embedding, {**opts, **per_group[g]}))
    return merge([r for rows in found for r in rows], opts.get("candidates", 30), opts.get("neighbours", 0))


def _ident(row: dict[str, Any]) -> tuple[str, str, str]:
    return (row["detail"]["group_id"], row["kind"], str(row["version_id"] if row["kind"] == "fact" else row["id"]))


def merge(rows: list[Any], k: int, neighbours: int) -> list[dict[str, Any]]:
    """Rows of every group's search (with_keys) with the ranks of one search over all of them."""
    rows = [dict(r) for r in rows]
    ranks: dict[tuple[str, str, str], dict[str, int]] = {_ident(r): {} for r in rows}

    def rank(candidates: list[tuple[Any, tuple[str, str, str]]], method: str) -> None:
        for position, (_, ident) in enumerate(sorted(candidates)[:k], start=1):
            ranks[ident][method] = position

    methods = {(r["kind"], m) for r in rows for m in r["ranks"] if m not in DERIVED}
    for kind, method in sorted(methods):
        rank([(r["detail"]["keys"][method], _ident(r)) for r in rows
              if r["kind"] == kind and method in r["ranks"]], method)
    # Episodes that the best facts came from, by the best merged rank of those facts.
    fact_rank = {(g, i): min(v.get("cosine", k + 1), v.get("fulltext", k + 1))
                 for (g, kind, i), v in ranks.items() if kind == "fact"}
    via = []
    for r in rows:
        if r["kind"] == "episode" and r["detail"].get("via"):
            best = min(fact_rank.get((r["detail"]["group_id"], str(v)), k + 1) for v in r["detail"]["via"])
            if best <= k:
                via.append(((best, str(r["id"])), _ident(r)))
    rank(via, "facts")
    # Neighbouring turns: kept for the best `neighbours` episodes overall.
    seeds = {i: [r for m, r in v.items() if m not in UNSEEDED] for i, v in ranks.items() if i[1] == "episode"}
    best_episodes = {ident[2] for _, ident in sorted(((min(v), i[2]), i) for i, v in seeds.items() if v)[:neighbours]}
    out = []
    for r in rows:
        detail = r["detail"]
        near = {h: d for h, d in (detail.get("neighbour_of") or {}).items() if h in best_episodes}
        mine = ranks[_ident(r)]
        if (mine or near) and detail.get("matches", True):
            out.append({**r, "ranks": mine, "detail": {**detail, "neighbour_of": near or None}})
    return out
