"""`SyncMemory`: the blocking API for scripts and notebooks.

Every method is a real method with Memory's signature (so help() and autocompletion show it).
The async Memory runs on a private event loop in a daemon thread, so the calls also work where an
event loop is already running (Jupyter), and the pool never moves between loops.
"""
from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from pgmemory.analyst.runner import SqlResult
from pgmemory.ingest.communities import CommunityRefresh
from pgmemory.ingest.pipeline import EpisodeResult, IngestError
from pgmemory.ingest.reembed import DEFAULT_BATCH, KINDS, ReembedProgress, ReembedResult
from pgmemory.ingest.worker import WorkerStats
from pgmemory.memory import DeleteResult, Memory
from pgmemory.records import EntityRecord, EpisodeRecord, FactVersion
from pgmemory.search.config import SearchConfig, SearchFilters
from pgmemory.search.types import SearchResults

T = TypeVar("T")


class SyncMemory:
    """Blocking wrapper around Memory: `with SyncMemory() as m: m.add_episode(...)`. Options are
    those of Memory.open (dsn, embedder, extractor, pool_size, lease_seconds)."""

    def __init__(self, dsn: str | None = None, **options: Any) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="pgmemory-sync", daemon=True)
        self._thread.start()
        try:
            self._memory: Memory = self._run(Memory.open(dsn, **options))
        except BaseException:
            self._stop_loop()
            raise

    def _run(self, coro: Coroutine[Any, Any, T] | Any) -> T:
        """Run a coroutine on the private loop and wait for its result (or exception); after
        close(), one line saying so (the coroutine is closed, not left unawaited)."""
        if self._loop.is_closed():
            if asyncio.iscoroutine(coro):
                coro.close()
            raise RuntimeError("this SyncMemory is closed: open a new one")
        return asyncio.run_coroutine_threadsafe(_as_coroutine(coro), self._loop).result()

    def _stop_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    @property
    def memory(self) -> Memory:
        """The async Memory underneath (its coroutines must run on this wrapper's loop)."""
        return self._memory

    def close(self) -> None:
        """Close the pool and stop the private event loop."""
        if self._loop.is_closed():
            return
        try:
            self._run(self._memory.close())
        finally:
            self._stop_loop()

    def __enter__(self) -> "SyncMemory":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # Writing

    def add_episode(self, group_id: str, content: str, *, kind: str = "message",
                    actor: str | None = None, reference_time: Any,
                    source_description: str = "", episode_id: Any = None,
                    entity_types: dict[str, type] | None = None,
                    edge_types: dict[str, type] | None = None,
                    metadata: Mapping[str, Any] | None = None) -> EpisodeResult:
        """See Memory.add_episode."""
        return self._run(self._memory.add_episode(
            group_id, content, kind=kind, actor=actor, reference_time=reference_time,
            source_description=source_description, episode_id=episode_id, entity_types=entity_types,
            edge_types=edge_types, metadata=metadata))

    def add_messages(self, group_id: str, messages: Sequence[Mapping[str, Any]], *,
                     metadata: Mapping[str, Any] | None = None, reference_time: Any = None,
                     source_description: str = "", episode_id: Any = None) -> EpisodeResult:
        """See Memory.add_messages."""
        return self._run(self._memory.add_messages(
            group_id, messages, metadata=metadata, reference_time=reference_time,
            source_description=source_description, episode_id=episode_id))

    def add_episodes(self, episodes: Iterable[Mapping[str, Any]], *, concurrency: int = 4,
                     on_done: Callable[[EpisodeResult | IngestError], None] | None = None,
                     entity_types: dict[str, type] | None = None,
                     edge_types: dict[str, type] | None = None,
                     communities: bool = False) -> list[EpisodeResult | IngestError]:
        """See Memory.add_episodes (on_done runs on the wrapper's thread)."""
        return self._run(self._memory.add_episodes(episodes, concurrency=concurrency, on_done=on_done,
                                                   entity_types=entity_types, edge_types=edge_types,
                                                   communities=communities))

    def refresh_communities(self, group_id: str, *, force: bool = False,
                            on_summary: Callable[[], None] | None = None) -> CommunityRefresh:
        """See Memory.refresh_communities."""
        return self._run(self._memory.refresh_communities(group_id, force=force, on_summary=on_summary))

    def reembed(self, group_id: str | None = None, *, kinds: Sequence[str] = KINDS,
                batch: int = DEFAULT_BATCH, restart: bool = False,
                on_progress: Callable[[ReembedProgress], None] | None = None) -> list[ReembedResult]:
        """See Memory.reembed (on_progress runs on the wrapper's thread)."""
        return self._run(self._memory.reembed(group_id, kinds=kinds, batch=batch, restart=restart,
                                              on_progress=on_progress))

    def build_communities(self, group_id: str, *, on_summary: Callable[[], None] | None = None) -> CommunityRefresh:
        """See Memory.build_communities."""
        return self._run(self._memory.build_communities(group_id, on_summary=on_summary))

    def enqueue_episode(self, group_id: str, content: str, *, kind: str = "message",
                        actor: str | None = None, reference_time: Any,
                        source_description: str = "", episode_id: Any = None,
                        metadata: Mapping[str, Any] | None = None) -> uuid.UUID:
        """See Memory.enqueue_episode."""
        return self._run(self._memory.enqueue_episode(
            group_id, content, kind=kind, actor=actor, reference_time=reference_time,
            source_description=source_description, episode_id=episode_id, metadata=metadata))

    def enqueue_episodes(self, episodes: Iterable[Mapping[str, Any]]) -> list[uuid.UUID]:
        """See Memory.enqueue_episodes."""
        return self._run(self._memory.enqueue_episodes(episodes))

    def add_fact(self, group_id: str, source: str, relation: str, target: str, fact: str, *,
                 valid_from: Any = None, valid_to: Any = None, negated: bool = False,
                 functional: bool = False, attributes: Mapping[str, Any] | None = None,
                 reference_time: Any = None) -> dict[str, Any]:
        """See Memory.add_fact."""
        return self._run(self._memory.add_fact(
            group_id, source, relation, target, fact, valid_from=valid_from, valid_to=valid_to,
            negated=negated, functional=functional, attributes=attributes, reference_time=reference_time))

    def retract_fact(self, group_id: str, fact_id: Any) -> dict[str, Any]:
        """See Memory.retract_fact."""
        return self._run(self._memory.retract_fact(group_id, fact_id))

    def worker(self, *, concurrency: int = 1, drain: bool = False, poll_seconds: float = 5.0,
               grace_seconds: float = 30.0, on_progress: Callable[[WorkerStats], None] | None = None,
               communities: bool = True) -> WorkerStats:
        """Run Memory.worker(...) to its end and return its stats: with drain=True once nothing is
        ready, else until Ctrl-C (the current episodes finish within grace_seconds or go back to
        pending, as with `pgmemory worker`). on_progress runs on the wrapper's thread."""
        worker = self._memory.worker(concurrency=concurrency, drain=drain, poll_seconds=poll_seconds,
                                     grace_seconds=grace_seconds, on_progress=on_progress,
                                     communities=communities)
        running = asyncio.run_coroutine_threadsafe(worker.run(), self._loop)
        try:
            return running.result()
        except KeyboardInterrupt:
            self._loop.call_soon_threadsafe(worker.stop)
            try:
                running.result()
            except KeyboardInterrupt:  # a second Ctrl-C: give the current episodes back at once
                self._loop.call_soon_threadsafe(lambda: worker.stop(now=True))
                running.result()
            raise

    def retry(self, group_id: str | None = None, *,
              on_done: Callable[[EpisodeResult | IngestError], None] | None = None
              ) -> list[EpisodeResult | IngestError]:
        """See Memory.retry."""
        return self._run(self._memory.retry(group_id, on_done=on_done))

    def delete_episode(self, group_id: str, episode_id: Any, *, erase: bool = False) -> DeleteResult:
        """See Memory.delete_episode."""
        return self._run(self._memory.delete_episode(group_id, episode_id, erase=erase))

    def erase_group(self, group_id: str) -> int:
        """See Memory.erase_group."""
        return self._run(self._memory.erase_group(group_id))

    # Searching

    def search(self, query: str, *, group_ids: list[str] | str, limit: int = 10,
               config: SearchConfig | str | None = None,
               filters: SearchFilters | None = None) -> SearchResults:
        """See Memory.search."""
        return self._run(self._memory.search(query, group_ids=group_ids, limit=limit, config=config,
                                             filters=filters))

    def context(self, query: str, *, group_ids: list[str] | str, limit: int = 10,
                config: SearchConfig | str | None = None, filters: SearchFilters | None = None,
                max_chars: int = 8000, communities: bool = False, episodes: bool = False) -> str:
        """See Memory.context."""
        return self._run(self._memory.context(query, group_ids=group_ids, limit=limit, config=config,
                                              filters=filters, max_chars=max_chars, communities=communities,
                                              episodes=episodes))

    def bfs(self, seeds: Iterable[Any], *, group_ids: list[str] | str, depth: int = 2,
            engine: str = "sql") -> dict[Any, int]:
        """See Memory.bfs."""
        return self._run(self._memory.bfs(seeds, group_ids=group_ids, depth=depth, engine=engine))

    def sql(self, query: str, *, group_ids: Sequence[str] | str | None = None, max_rows: int = 1000,
            timeout_s: float = 30) -> SqlResult:
        """See Memory.sql."""
        return self._run(self._memory.sql(query, group_ids=group_ids, max_rows=max_rows, timeout_s=timeout_s))

    # Reading

    def episode_status(self, episode_id: Any, group_id: str) -> dict[str, Any] | None:
        """See Memory.episode_status."""
        return self._run(self._memory.episode_status(episode_id, group_id))

    def episode_statuses(self, group_id: str, episode_ids: Iterable[Any]) -> list[dict[str, Any] | None]:
        """See Memory.episode_statuses."""
        return self._run(self._memory.episode_statuses(group_id, episode_ids))

    def get_episode(self, group_id: str, episode_id: Any) -> EpisodeRecord | None:
        """See Memory.get_episode."""
        return self._run(self._memory.get_episode(group_id, episode_id))

    def get_episodes(self, group_id: str, *, last_n: int = 10, before: Any = None,
                     status: str | None = None, before_id: Any = None) -> list[EpisodeRecord]:
        """See Memory.get_episodes."""
        return self._run(self._memory.get_episodes(group_id, last_n=last_n, before=before, status=status,
                                                   before_id=before_id))

    def get_entity(self, group_id: str, entity_id: Any) -> EntityRecord | None:
        """See Memory.get_entity."""
        return self._run(self._memory.get_entity(group_id, entity_id))

    def list_entities(self, group_id: str, *, limit: int = 100, offset: int = 0,
                      label: str | None = None, name: str | None = None) -> list[EntityRecord]:
        """See Memory.list_entities."""
        return self._run(self._memory.list_entities(group_id, limit=limit, offset=offset, label=label,
                                                    name=name))

    def entity_facts(self, group_id: str, entity_id: Any, *, history: bool = False) -> list[FactVersion]:
        """See Memory.entity_facts."""
        return self._run(self._memory.entity_facts(group_id, entity_id, history=history))

    def fact_history(self, group_id: str, fact_id: Any) -> list[FactVersion]:
        """See Memory.fact_history."""
        return self._run(self._memory.fact_history(group_id, fact_id))

    def get_fact(self, group_id: str, fact_id: Any) -> FactVersion | None:
        """See Memory.get_fact."""
        return self._run(self._memory.get_fact(group_id, fact_id))


async def _as_coroutine(awaitable: Any) -> Any:
    return await awaitable
