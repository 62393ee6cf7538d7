"""The queue worker: claims pending episodes enqueued by any writer and processes them.

Each of `concurrency` slots claims the next ready episode (pgmemory_internal.claim_episode:
one episode per group at a time, in the group's order, FOR UPDATE SKIP LOCKED),
processes it under its lease and claims again. Idle slots sleep until a NOTIFY on
`pgmemory_episodes` (sent by pgmemory.enqueue_episode), a slot finishing, or the poll
interval (which also picks up episodes whose lease expired after a crash).
`stop()` lets slots finish their current episode; after the grace period they are
cancelled and give their episodes back (status 'pending'). When the queue is empty, a slot runs
the community upkeep (`refresh`, e.g. Memory.refresh_communities) of the groups processed since
the last one: summaries are refreshed lazily, never per episode.
A group kept busy by other writers (its write lock held by another session past lock_timeout,
e.g. an app's own open transaction, or changed in every decide round) is set aside: its episode
goes back to 'pending' without counting an attempt, and the slots go on with the other groups
until a pause (doubling per group, SET_ASIDE_MAX_SECONDS at most) has passed.
On Citus, a worker node down fails every statement that reads all shards, the claim's walk of
the queue among them: once a claim names an unreachable node, the slots claim from the groups of
the nodes that answer (claim_episode's p_reachable_only) and try the full claim again after a
pause (doubling, SET_ASIDE_MAX_SECONDS at most); the stopped node's groups wait, and are claimed
once it is back. An episode whose node went down while it was processed is given back then.
"""
from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import asyncpg

from pgmemory.errors import DatabaseUnavailable
from pgmemory.ingest.episode import Episode, said_time
from pgmemory.ingest.pipeline import EpisodeResult, IngestError, Ingestor, expire_dead_leases
from pgmemory.providers.llm import ProviderError, Usage
from pgmemory.storage.connect import postgres_lost, unreachable_node
from pgmemory.validate import EARLIEST, LATEST

CHANNEL = "pgmemory_episodes"
SET_ASIDE_FIRST_SECONDS = 1.0
SET_ASIDE_MAX_SECONDS = 30.0
PROVIDER_FIRST_PAUSE = 1.0   # an LLM or embedding provider down: a slot waits this long, doubling
PROVIDER_MAX_PAUSE = 60.0    # up to this, before it claims again
# Give-backs for the provider of one episode while the provider answered others (episodes were
# done after its first give-back): past this many, its next claim fails it instead (the episode is
# what the provider cannot answer in time, not an outage).
PROVIDER_STRIKES = 3


@dataclass
class WorkerStats:
    """What a worker has done so far."""

    done: int = 0
    skipped: int = 0
    failed: int = 0
    set_aside: int = 0  # times a busy group's episode was given back to be tried later
    provider_waits: int = 0  # times an episode was given back because its LLM or embedder was down
    in_progress: int = 0
    llm_calls: int = 0
    tokens: int = 0
    errors: list[str] = field(default_factory=list)
    unreachable: set[str] = field(default_factory=set)  # Citus workers (host:port) whose groups wait


class Worker:
    """Processes queued episodes until stopped (or, with drain=True, until nothing is ready)."""

    def __init__(self, ingestor: Ingestor, *, concurrency: int = 1, drain: bool = False,
                 poll_seconds: float = 5.0, grace_seconds: float = 30.0,
                 on_progress: Callable[[WorkerStats], None] | None = None,
                 refresh: Callable[[str], Awaitable[Any]] | None = None) -> None:
        self.ingestor = ingestor
        self.refresh = refresh
        self._touched: set[str] = set()
        self.concurrency = concurrency
        self.drain = drain
        self.poll_seconds = poll_seconds
        self.grace_seconds = grace_seconds
        self.on_progress = on_progress
        self.stats = WorkerStats()
        self._stopping = asyncio.Event()
        self._now = asyncio.Event()  # stop without waiting for the grace period
        self._wake = asyncio.Event()
        # episodes whose attempt Postgres going away left unended: (episode, its usage, attempt number)
        self._interrupted: list[tuple[Episode, Usage, int | None]] = []
        self._aside: dict[str, tuple[float, float]] = {}  # busy group -> (loop time it is tried again, pause)
        self._provider_pause = 0.0  # (doubles while the provider stays down, up to PROVIDER_MAX_PAUSE)
        # group whose community summaries the LLM failed -> (loop time they are tried again, pause)
        self._summaries_later: dict[str, tuple[float, float]] = {}
        # episode given back for its provider -> (stats.done at its first give-back, strikes: later
        # give-backs once episodes were done after that one)
        self._strikes: dict[Any, tuple[int, int]] = {}
        # (Citus) a node was found down: claim from the reachable ones until this loop time, then
        # try the full claim again; the pause doubles while the node stays down
        self._partial = (0.0, 0.0)  # (until, pause)

    def stop(self, *, now: bool = False) -> None:
        """Stop claiming; current episodes finish (or are given back after the grace period, or
        at once with now=True: a second Ctrl-C)."""
        self._stopping.set()
        self._wake.set()
        if now:
            self._now.set()

    async def run(self) -> WorkerStats:
        """Run the slots until stopped or drained; returns the stats. Losing Postgres (a restart,
        a failover) does not end it: the slots and the listener wait for the server and go on.
        The listener holds a pooled connection while it runs: on a pool of one connection it would
        hold the only one (no slot could claim), so there the slots poll instead."""
        listener = asyncio.create_task(self._listen()) if self.ingestor.pool.get_max_size() > 1 else None
        try:
            slots = [asyncio.create_task(self._slot()) for _ in range(self.concurrency)]
            stopping = asyncio.create_task(self._stopping.wait())
            all_slots = asyncio.gather(*slots, return_exceptions=True)
            await asyncio.wait([stopping, all_slots], return_when=asyncio.FIRST_COMPLETED)
            if not all_slots.done():
                now = asyncio.create_task(self._now.wait())
                await asyncio.wait([all_slots, now], timeout=self.grace_seconds, return_when=asyncio.FIRST_COMPLETED)
                now.cancel()
                for task in slots:
                    if not task.done():
                        task.cancel()
            stopping.cancel()
            for result in await asyncio.gather(*slots, return_exceptions=True):
                if isinstance(result, BaseException) and not isinstance(result, asyncio.CancelledError):
                    raise result
        finally:
            if listener is not None:
                listener.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await listener
        return self.stats

    async def _listen(self) -> None:
        """LISTEN on the channel on one pooled connection, again on a new one whenever the
        connection is lost (then wake the slots: notifications may have been missed)."""
        pool = self.ingestor.pool
        while True:
            try:
                async with pool.acquire() as conn:
                    await conn.add_listener(CHANNEL, self._notified)
                    self._wake.set()
                    try:
                        while not _closed(conn):
                            await asyncio.sleep(min(self.poll_seconds, 5.0))
                    finally:
                        with contextlib.suppress(asyncpg.PostgresError, asyncpg.InterfaceError, OSError):
                            await conn.remove_listener(CHANNEL, self._notified)
            except asyncio.CancelledError:
                raise
            except asyncpg.InterfaceError:
                pass  # the pool took back a connection it found lost
            except Exception as exc:  # noqa: BLE001 - only a lost server is waited for
                if not postgres_lost(exc):
                    raise
            await asyncio.sleep(min(self.poll_seconds, 1.0))

    def _notified(self, *_args) -> None:
        self._wake.set()

    async def _pause(self, seconds: float) -> None:
        """Sleep, but wake at once on stop()."""
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), seconds)

    async def _slot(self) -> None:
        pool = self.ingestor.pool
        backoff = 0.0
        while not self._stopping.is_set():
            self._wake.clear()
            try:
                await self._give_back_interrupted()
                row = await self._claim()
                if row is None and await self._expire_dead_leases():
                    continue  # a crashed process of this host held some: claim again at once
            except Exception as exc:  # noqa: BLE001 - only a lost server is waited for
                if not postgres_lost(exc):
                    raise
                backoff = min(max(2 * backoff, 0.25), max(self.poll_seconds, 0.25))
                await self._pause(backoff)  # the pool reconnects once the server is back
                continue
            backoff = 0.0
            if row is None:
                await self._refresh_touched()
                now = asyncio.get_running_loop().time()  # groups whose pause ended had nothing to claim
                self._aside = {g: v for g, v in self._aside.items() if v[0] > now}
                if self._aside:  # a busy group's episodes still wait: look again when its pause ends
                    with contextlib.suppress(asyncio.TimeoutError):
                        await asyncio.wait_for(self._wake.wait(), min(self._next_retry(), self.poll_seconds))
                    continue
                if self.drain and self.stats.in_progress == 0:
                    self._wake.set()  # let the other idle slots see that the queue is drained
                    return
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), self.poll_seconds)
                continue
            # (in the speaker's UTC offset, stored apart: the date rules count from their local date)
            ep = Episode(row["episode_id"], row["group_id"], row["content"], row["kind"],
                         row["valid_at"] and said_time(row["valid_at"], row["reference_offset"]),
                         row["actor"], row["source_description"])
            if ep.reference_time is None:
                await self._refuse(ep, f"InvalidInput: reference_time {row['stated_at']} is out of range: it must be"
                                       f" between {EARLIEST:%Y-%m-%d} and {LATEST:%Y-%m-%d} (UTC)")
                continue
            self.stats.in_progress += 1
            self._touched.add(ep.group_id)
            struck = self._strikes.get(ep.id, (0, 0))[1] >= PROVIDER_STRIKES
            try:
                self._count(await self.ingestor.process(ep, set_aside_when_busy=True,
                                                        wait_for_provider=not (self.drain or struck)))
                self._aside.pop(ep.group_id, None)
                self._strikes.pop(ep.id, None)
                self._provider_pause = 0.0
            except IngestError as exc:
                self.stats.llm_calls += exc.usage.calls  # (billed, whatever became of the episode)
                self.stats.tokens += exc.usage.total_tokens
                if exc.given_back == "busy":
                    self._set_aside(ep.group_id)
                elif exc.given_back == "provider":
                    # Not the episode's fault, as far as one can tell: given back ('pending', the
                    # attempt not counted), its group set aside (the others go first: are they
                    # answered?), and this slot waits before it claims again.
                    self.stats.provider_waits += 1
                    first_done, strikes = self._strikes.get(ep.id, (self.stats.done, 0))
                    self._strikes[ep.id] = (first_done, strikes + (self.stats.done > first_done))
                    self._provider_pause = min(max(2 * self._provider_pause, PROVIDER_FIRST_PAUSE), PROVIDER_MAX_PAUSE)
                    backoff = self._provider_pause
                    # (the group's pause outlasts the slot's, so the next claim goes to another group)
                    self._set_aside(ep.group_id, count=False, at_least=2 * backoff)
                elif postgres_lost(exc):
                    # Not the episode's fault: it goes back to 'pending' (process() gave it back,
                    # or the next claim round does once the server answers), in its group's order.
                    self._interrupted.append((ep, exc.usage if exc.unsettled is not None else Usage(),
                                              exc.unsettled or None))
                    backoff = 0.25
                    node = unreachable_node(exc)
                    if node is not None:  # (Citus) its worker went down: claim from the others
                        self._node_down(node)
                else:
                    self._strikes.pop(ep.id, None)
                    self.stats.failed += 1
                    self.stats.errors.append(str(exc))
            finally:
                self.stats.in_progress -= 1
                self._wake.set()  # the group's next episode may be ready now
            if backoff:
                await self._pause(backoff)
            if self.on_progress is not None:
                self.on_progress(self.stats)

    async def _claim(self) -> asyncpg.Record | None:
        """Claim the next ready episode with its content. While a Citus node is known down (until
        its pause ends) only the groups of the nodes that answer are looked at, and the full claim
        only when none of them has work (is the node back?); a full claim that meets a node down
        starts that (stats.unreachable names the node until a full claim succeeds)."""
        partial = asyncio.get_running_loop().time() < self._partial[0]
        if partial:
            row = await self._claim_and_read(True)
            if row is not None:
                return row
        try:
            row = await self._claim_and_read(False)
        except Exception as exc:  # noqa: BLE001 - only a node down is handled here
            node = unreachable_node(exc)
            if node is None:
                raise
            self._node_down(node)
            return None if partial else await self._claim_and_read(True)
        self._partial = (0.0, 0.0)  # every node answered
        self.stats.unreachable.clear()
        return row

    async def _claim_and_read(self, reachable_only: bool) -> asyncpg.Record | None:
        """One transaction: claim, then read the claimed episode pinned to its group (joined to
        the claim's result, Citus read every shard of pgmemory.episodes, and failed while any node
        was down). A connection lost before the end takes the claim back with it."""
        async with self.ingestor.pool.acquire() as conn, conn.transaction():
            claimed = await conn.fetchrow(
                "SELECT group_id, episode_id FROM pgmemory_internal.claim_episode($1, $2, $3, $4)",
                self.ingestor.owner, timedelta(seconds=self.ingestor.lease_seconds), self._set_aside_now(),
                reachable_only)
            if claimed is None:
                return None
            # (valid_at NULL: a time no driver reads, stored past enqueue_episode's checks)
            return await conn.fetchrow(
                "SELECT e.group_id, e.id AS episode_id, e.content, e.kind, e.actor, e.source_description,"
                "       CASE WHEN e.valid_at BETWEEN $3 AND $4 THEN e.valid_at END AS valid_at,"
                "       e.valid_at::text AS stated_at, e.reference_offset"
                " FROM pgmemory.episodes e WHERE e.group_id = $1 AND e.id = $2",
                claimed["group_id"], claimed["episode_id"], EARLIEST, LATEST)

    def _node_down(self, node: str) -> None:
        """Note a Citus node found down: claims look at the other nodes' groups for a pause that
        doubles while it stays down (SET_ASIDE_FIRST_SECONDS .. SET_ASIDE_MAX_SECONDS)."""
        pause = min(max(2 * self._partial[1], SET_ASIDE_FIRST_SECONDS), SET_ASIDE_MAX_SECONDS)
        self._partial = (asyncio.get_running_loop().time() + pause, pause)
        self.stats.unreachable.add(node)

    async def _expire_dead_leases(self) -> int:
        """expire_dead_leases on every group; while a Citus node is down (the statement reads every
        shard) none are expired: the leases end by themselves."""
        try:
            return await expire_dead_leases(self.ingestor.pool)
        except Exception as exc:  # noqa: BLE001 - only a node down is handled here
            node = unreachable_node(exc)
            if node is None:
                raise
            self._node_down(node)
            return 0

    def _set_aside(self, group: str, *, count: bool = True, at_least: float = 0.0) -> None:
        """Try a busy group again after a pause that doubles while it stays busy (`count`: in
        stats.set_aside; a group set aside for its provider is counted in provider_waits)."""
        pause = min(2 * self._aside.get(group, (0.0, SET_ASIDE_FIRST_SECONDS / 2))[1], SET_ASIDE_MAX_SECONDS)
        pause = max(pause, at_least)
        self._aside[group] = (asyncio.get_running_loop().time() + pause, pause)
        self.stats.set_aside += count

    def _set_aside_now(self) -> list[str]:
        """The groups whose pause has not ended (the claim skips them); the others are tried again."""
        now = asyncio.get_running_loop().time()
        return [g for g, (until, _) in self._aside.items() if until > now]

    def _next_retry(self) -> float:
        """Seconds until the first set-aside group may be tried again (0 when one may be now)."""
        now = asyncio.get_running_loop().time()
        return max(0.0, min(until for until, _ in self._aside.values()) - now)

    async def _refuse(self, ep: Episode, reason: str) -> None:
        """Fail a claimed episode that cannot be processed as stored, and go on with the others."""
        try:
            await self.ingestor.end_attempt(ep, reason)
        except Exception as exc:  # noqa: BLE001 - only a lost server is waited for
            if not postgres_lost(exc):
                raise
            return  # its lease expires and the next claim round meets it again
        self.stats.failed += 1
        self.stats.errors.append(reason)
        self._wake.set()  # the group's next episode may be ready now
        if self.on_progress is not None:
            self.on_progress(self.stats)

    async def _give_back_interrupted(self) -> None:
        """Give back ('pending') the episodes whose processing a lost connection interrupted and
        that this worker may still hold (a no-op for those process() already gave back)."""
        waiting = []  # (Citus) episodes of groups whose worker is still down: given back later
        try:
            while self._interrupted:
                ep, usage, attempt = self._interrupted.pop()
                try:
                    await self.ingestor.end_attempt(ep, None, usage, attempt)
                except Exception as exc:  # noqa: BLE001 - a node down holds back its groups only
                    node = unreachable_node(exc)
                    if node is None:
                        self._interrupted.append((ep, usage, attempt))  # given back at the next claim round
                        raise
                    self._node_down(node)
                    waiting.append((ep, usage, attempt))
                except BaseException:
                    self._interrupted.append((ep, usage, attempt))
                    raise
        finally:
            self._interrupted.extend(waiting)

    async def _refresh_touched(self) -> None:
        """Community upkeep of the groups processed since the last idle moment (one slot at a time
        per group; a failure is reported and the group is tried again at the next idle moment).
        Summaries the LLM failed (left marked) are tried again at an idle moment after a pause
        that doubles while they keep failing (PROVIDER_FIRST_PAUSE .. PROVIDER_MAX_PAUSE)."""
        now = asyncio.get_running_loop().time()
        later = {g for g, (when, _) in self._summaries_later.items() if when > now}
        while self.refresh is not None and (self._touched - later) and not self._stopping.is_set():
            group = (self._touched - later).pop()
            self._touched.discard(group)
            try:
                out = await self.refresh(group)
                if getattr(out, "error", None):
                    self.stats.errors.append(f"community summaries of group {group!r}: {out.error}")
                    pause = min(max(2 * self._summaries_later.get(group, (0.0, 0.0))[1], PROVIDER_FIRST_PAUSE),
                                PROVIDER_MAX_PAUSE)
                    self._summaries_later[group] = (asyncio.get_running_loop().time() + pause, pause)
                    self._touched.add(group)
                    later.add(group)
                else:
                    self._summaries_later.pop(group, None)
            except Exception as exc:  # noqa: BLE001 - database, provider and lost-connection errors
                if not (isinstance(exc, (asyncpg.PostgresError, asyncpg.InterfaceError, OSError, ProviderError,
                                         DatabaseUnavailable))  # (a DatabaseTimeout: a detection cut)
                        or postgres_lost(exc)):
                    raise
                self.stats.errors.append(f"communities of group {group!r}: {type(exc).__name__}: {exc}")
                self._touched.add(group)  # tried again at the next idle moment
                return

    def _count(self, result: EpisodeResult) -> None:
        if result.status == "done":
            self.stats.done += 1
        else:
            self.stats.skipped += 1
        self.stats.llm_calls += result.llm_calls
        self.stats.tokens += result.prompt_tokens + result.completion_tokens


def _closed(conn: asyncpg.Connection) -> bool:
    """Is this pooled connection gone (closed, or taken back by the pool after it was lost)?"""
    try:
        return conn.is_closed()
    except asyncpg.InterfaceError:
        return True
