"""The Python API: `Memory`, the async core (`SyncMemory` in pgmemory.sync blocks on it)."""
from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import Awaitable, Callable, Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

import asyncpg
import psycopg
from pydantic import BaseModel

from pgmemory.errors import InvalidInput, NotFound, SetupError, WorkerUnreachable, error_line
from pgmemory.extract.types import ExtractedFact, Extractor
from pgmemory.ingest.communities import CommunityRefresh, refresh_communities
from pgmemory.ingest.episode import (MAX_CONTENT_CHARS, Episode, episode_uuid, id_in_use, offset_seconds,
                                     parse_time, said_time, validate_episode, validate_group_id, validate_group_ids)
from pgmemory.ingest.messages import messages_text
from pgmemory.ingest.pipeline import (DEFAULT_LEASE_SECONDS, EpisodeResult, IngestError, Ingestor, NotAttempted,
                                      expire_dead_leases, fact_embedding_text, retry_serialization)
from pgmemory.ingest.reembed import DEFAULT_BATCH, KINDS, ReembedProgress, ReembedResult, reembed
from pgmemory.ingest.worker import Worker, WorkerStats
from pgmemory.providers.embedder import Embedder, embedder_from_env
from pgmemory.providers.llm import LLMClient, provider_refused
from pgmemory.providers.reranker import CrossEncoder, cross_encoder_from_env
from pgmemory import reads
from pgmemory.records import EntityRecord, EpisodeRecord, FactVersion
from pgmemory.search.config import NO_FILTERS, SearchConfig, SearchFilters, resolve_config
from pgmemory.search.candidates import refused_ids_as_input_errors
from pgmemory.search.context import build_context, shown_config
from pgmemory.search.engine import check_request, run_search
from pgmemory.search.fanout import Layout
from pgmemory.search.types import SearchResults
from pgmemory.storage.connect import connect, create_pool, resolve_dsn, unreachable_node
from pgmemory.storage.request_groups import execute_outside_transactions
from pgmemory.storage.vectors import as_vectors
from pgmemory.validate import (MAX_ENTITY_NAME_CHARS, MAX_RELATION_CHARS, check_bool, check_int, check_list,
                               check_metadata, check_text, check_uuid, check_uuids)

if TYPE_CHECKING:  # the analyst runner (sqlglot, ~1 s to import) loads on the first sql() call
    from pgmemory.analyst.runner import SqlResult

EPISODE_FIELDS = ("group_id", "content", "kind", "actor", "reference_time", "source_description",
                  "episode_id", "metadata")


@dataclass(frozen=True)
class DeleteResult:
    """What deleting an episode did."""

    facts_retracted: int  # believed before, no longer (history kept)
    facts_removed: int  # of the entities only this episode introduced: withdrawn (retract) or deleted (erase)
    entities_removed: int  # entities only this episode introduced: retired (retract) or deleted (erase)
    facts_changed: int = 0  # still believed, with a changed interval (or re-opened)
    erased: bool = False


def default_extractor(llm: LLMClient | None = None) -> Extractor:
    """The LLM extractor when an endpoint is configured, else the offline rules."""
    llm = llm or LLMClient.from_env()
    if llm is not None:
        from pgmemory.extract.llm import LLMExtractor

        return LLMExtractor(llm)
    from pgmemory.extract.rules import RuleExtractor

    return RuleExtractor()


def ensure_initialised(dsn: str, dim: int, embedder: str | None = None) -> None:
    """Bring the database up to this pgmemory's schema and SQL and check it was built with this
    embedder (see storage.setup.ensure_current)."""
    from pgmemory.storage.setup import ensure_current

    with connect(dsn) as conn:
        try:
            ensure_current(conn, dim, embedder)
        except psycopg.errors.InsufficientPrivilege as exc:
            raise SetupError(f"this login may not initialise or upgrade the database ({exc.diag.message_primary}): "
                             "run `pgmemory init` as the database owner first") from None


def default_dsn(dim: int, embedder: str | None = None) -> str:
    """Where a Memory opened without a DSN connects: PGMEMORY_DSN as is (initialised), else the
    embedded server, initialised as its owner, through its restricted app login
    (pgmemory.storage.app_login), so row-level security applies to everything Memory runs."""
    from pgmemory.config import Settings
    from pgmemory.storage.app_login import app_dsn

    settings = Settings.from_env()
    owner = resolve_dsn(settings)
    ensure_initialised(owner, dim, embedder)
    return owner if settings.dsn else app_dsn(owner, settings.data_dir)


def _worker_unreachable(node: str, group: str, exc: BaseException | None) -> WorkerUnreachable:
    """The one-line failure of an episode whose group's Citus worker is down (`exc`: what this
    episode met; None: an earlier episode of its group met it, and this one was not tried)."""
    what = (f"({error_line(exc)}); nothing half-written was kept" if exc is not None
            else "(an earlier episode of the group met it); not attempted")
    return WorkerUnreachable(f"Citus worker {node}, which holds group {group!r}, is unreachable {what}: "
                             "run the same command again once the worker is back", node, group)


class Memory:
    """Bi-temporal knowledge-graph memory on Postgres. Open with `await Memory.open()`."""

    def __init__(self, pool: asyncpg.Pool, embedder: Embedder, extractor: Extractor, *,
                 lease_seconds: float = DEFAULT_LEASE_SECONDS) -> None:
        self.pool = pool
        self.embedder = embedder
        self.extractor = extractor
        self.cross_encoder: CrossEncoder | None = None
        self.ingestor = Ingestor(pool, embedder, extractor, lease_seconds=lease_seconds)
        # Whether the tables are distributed (Citus): read once (at open, else at the first search
        # of several groups), not on every search; a later `init` that distributes is noticed.
        self.layout = Layout()

    @classmethod
    def open(cls, dsn: str | None = None, *, embedder: Embedder | None = None,
             extractor: Extractor | None = None, pool_size: int = 10,
             lease_seconds: float = DEFAULT_LEASE_SECONDS,
             on_acquire: Callable[[asyncpg.Connection], Awaitable[None]] | None = None) -> "OpeningMemory":
        """Connect (starting the embedded server if no DSN), initialise if needed, build the pool.
        Without a DSN (and no PGMEMORY_DSN) the pool connects as the embedded server's restricted
        app login, subject to row-level security (init runs as the owner).
        `lease_seconds`: how long an episode this process works on stays leased to it without a
        renewal (renewed every third of it); after a crash, others take the episode over then.
        `on_acquire`: a coroutine run on each pooled connection as it is handed out (servers use it
        to narrow connections to the request's groups, pgmemory.storage.request_groups).
        Use as `memory = await Memory.open()` or `async with Memory.open() as memory:`."""
        return OpeningMemory(cls._open(dsn, embedder=embedder, extractor=extractor, pool_size=pool_size,
                                       lease_seconds=lease_seconds, on_acquire=on_acquire))

    @classmethod
    async def _open(cls, dsn: str | None, *, embedder: Embedder | None, extractor: Extractor | None,
                    pool_size: int, lease_seconds: float,
                    on_acquire: Callable[[asyncpg.Connection], Awaitable[None]] | None = None) -> "Memory":
        check_int(pool_size, "pool_size", 1, 1000)
        if isinstance(lease_seconds, bool) or not isinstance(lease_seconds, (int, float)) or not (
                1 <= lease_seconds <= 86400):
            raise InvalidInput(f"lease_seconds must be between 1 and 86400, got {lease_seconds!r}")
        embedder = embedder or embedder_from_env()
        if dsn is None:
            dsn = await asyncio.to_thread(default_dsn, embedder.dim, getattr(embedder, "name", None))
        else:
            await asyncio.to_thread(ensure_initialised, dsn, embedder.dim, getattr(embedder, "name", None))
        pool = await create_pool(dsn, max_size=pool_size, on_acquire=on_acquire)
        memory = cls(pool, embedder, extractor or default_extractor(), lease_seconds=lease_seconds)
        async with pool.acquire() as conn:
            await memory.layout.known(conn)
        return memory

    async def close(self) -> None:
        """Close the pool (and the LLM client, if any)."""
        await self.pool.close()
        client = getattr(self.extractor, "client", None)
        if client is not None:
            await client.aclose()

    async def sql(self, query: str, *, group_ids: Sequence[str] | str | None = None, max_rows: int = 1000,
                  timeout_s: float = 30) -> "SqlResult":
        """Analyst SQL (one SELECT over the analyst views, FOR SYSTEM_TIME / FOR VALID_TIME clauses
        allowed; docs/sql.md) in a READ ONLY transaction with a statement timeout and a row cap.
        `group_ids` narrows what is seen; the database never shows more than this login may see."""
        from pgmemory.analyst.runner import run_async
        async with self.pool.acquire() as conn:
            return await run_async(conn, query, groups=group_ids, max_rows=max_rows, timeout_s=timeout_s)

    async def __aenter__(self) -> "Memory":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def add_episode(self, group_id: str, content: str, *, kind: str = "message",
                          actor: str | None = None, reference_time: Any,
                          source_description: str = "", episode_id: Any = None,
                          entity_types: dict[str, type] | None = None,
                          edge_types: dict[str, type] | None = None,
                          metadata: Mapping[str, Any] | None = None) -> EpisodeResult:
        """Ingest one episode: entities, facts and invalidations in one transaction. `metadata`
        (a JSON object) is stored with the episode and can filter searches (SearchFilters.metadata).

        Raises InvalidInput (nothing written) or IngestError (raw episode kept as 'failed').
        """
        ep = validate_episode(group_id, content, kind=kind, actor=actor, reference_time=reference_time,
                              source_description=source_description, episode_id=episode_id,
                              metadata=metadata)
        check_custom_types(entity_types, "entity_types")
        check_custom_types(edge_types, "edge_types")
        return await self.ingestor.ingest(ep, entity_types=entity_types, edge_types=edge_types)

    async def add_messages(self, group_id: str, messages: Sequence[Mapping[str, Any]], *,
                           metadata: Mapping[str, Any] | None = None, reference_time: Any = None,
                           source_description: str = "", episode_id: Any = None) -> EpisodeResult:
        """Ingest a mem0-style message list `[{"role", "content", "name"?}]` as one chat episode
        ("Speaker: text" lines; the speaker is `name`, else the role capitalised, and "Assistant"
        is not an entity). `reference_time` defaults to now."""
        content, actor = messages_text(messages)
        return await self.add_episode(group_id, content, kind="message", actor=actor,
                                      reference_time=datetime.now(timezone.utc) if reference_time is None
                                      else reference_time,
                                      source_description=source_description, episode_id=episode_id,
                                      metadata=metadata)

    async def add_episodes(self, episodes: Iterable[Mapping[str, Any]], *, concurrency: int = 4,
                           on_done: Callable[[EpisodeResult | IngestError], None] | None = None,
                           entity_types: dict[str, type] | None = None,
                           edge_types: dict[str, type] | None = None,
                           communities: bool = False) -> list[EpisodeResult | IngestError]:
        """Bulk ingest: all episodes validated first (nothing written if any is malformed),
        then ordered within each group and parallel across groups. Failures are returned, not raised
        (on Citus, a worker down fails its groups' episodes with WorkerUnreachable; the others go on).
        Once the LLM or embedding provider refuses the configuration (a wrong API key or model:
        provider_refused), the episodes not started yet are not sent (IngestError of NotAttempted,
        nothing stored): fix it and run the same batch again (done episodes are skipped).
        communities=True: each group's communities are refreshed once its episodes are done
        (`refresh_communities`)."""
        check_int(concurrency, "concurrency", 1, 1000)
        check_bool(communities, "communities")
        check_custom_types(entity_types, "entity_types")
        check_custom_types(edge_types, "edge_types")
        validated = validate_batch(episodes)
        by_group: dict[str, list[tuple[int, Episode]]] = {}
        for i, ep in enumerate(validated):
            by_group.setdefault(ep.group_id, []).append((i, ep))
        results: list[EpisodeResult | IngestError | None] = [None] * len(validated)
        gate = asyncio.Semaphore(concurrency)
        refused: list[IngestError] = []  # the first episode the provider refused the configuration on

        async def run_group(items: list[tuple[int, Episode]]) -> None:
            node = None  # (Citus) the worker holding this group, once it was found unreachable
            async with gate:
                for i, ep in items:
                    if refused:  # the same key or model would be refused again: not sent, not stored
                        results[i] = IngestError(ep.id, NotAttempted(
                            f"not attempted: the provider refused episode {refused[0].episode_id} "
                            f"({error_line(refused[0].cause)})"))
                    elif node is not None:  # the group's later episodes wait too, in order
                        results[i] = IngestError(ep.id, _worker_unreachable(node, ep.group_id, None))
                    else:
                        try:
                            results[i] = await self.ingestor.ingest(ep, entity_types=entity_types,
                                                                     edge_types=edge_types)
                        except Exception as exc:  # noqa: BLE001 - an episode's failure, or its worker's
                            # A Citus worker down fails its groups only: the others go on.
                            node = unreachable_node(exc)
                            if node is not None:
                                usage = exc.usage if isinstance(exc, IngestError) else None
                                unsettled = exc.unsettled if isinstance(exc, IngestError) else None
                                results[i] = IngestError(ep.id, _worker_unreachable(node, ep.group_id, exc),
                                                         usage=usage, unsettled=unsettled)
                            elif isinstance(exc, IngestError):
                                results[i] = exc
                                if provider_refused(exc.cause):
                                    refused.append(exc)
                            else:
                                raise
                    if on_done is not None:
                        on_done(results[i])
                if communities and items and node is None:
                    await self.refresh_communities(items[0][1].group_id)

        # A failure that is not an episode's own (the server gone) stops every group: the others
        # are cancelled and awaited before it propagates, so none is left running past the call.
        # (A Citus worker down is its groups' failure: their episodes fail with WorkerUnreachable.)
        tasks = [asyncio.create_task(run_group(items)) for items in by_group.values()]
        try:
            await asyncio.gather(*tasks)
        except BaseException:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
        return results  # type: ignore[return-value]

    async def enqueue_episode(self, group_id: str, content: str, *, kind: str = "message",
                              actor: str | None = None, reference_time: Any,
                              source_description: str = "", episode_id: Any = None,
                              metadata: Mapping[str, Any] | None = None) -> uuid.UUID:
        """Store a pending episode for `pgmemory worker` (the SQL function pgmemory.enqueue_episode,
        which any writer can call); idempotent by id, InvalidInput if the id is already used by a
        different episode of the group (other content, kind, actor or reference time). Returns the
        episode's UUID."""
        ep = validate_episode(group_id, content, kind=kind, actor=actor, reference_time=reference_time,
                              source_description=source_description, episode_id=episode_id,
                              metadata=metadata)
        async with self.pool.acquire() as conn:
            return await _enqueue(conn, ep, episode_id)

    async def enqueue_episodes(self, episodes: Iterable[Mapping[str, Any]]) -> list[uuid.UUID]:
        """Store a batch of pending episodes (the fields of add_episodes): all validated first, then
        enqueued in one transaction, so one refused (an id already used by a different episode)
        leaves none stored. Returns their UUIDs in order."""
        items = check_list(episodes, "episodes")
        validated = validate_batch(items)
        ids = []
        async with self.pool.acquire() as conn, conn.transaction():
            # Each enqueue takes its group's write lock; taken here in name order, whatever the
            # episodes' order, so two batches (or an app's transaction) never wait on each other in a cycle.
            for group in sorted({ep.group_id for ep in validated}):
                await conn.execute("SELECT pgmemory_internal.lock_group($1)", group)
            for n, (item, ep) in enumerate(zip(items, validated), 1):
                try:
                    ids.append(await _enqueue(conn, ep, item.get("episode_id")))
                except InvalidInput as exc:
                    raise InvalidInput(f"episode {n}: {exc}") from None
        return ids

    def worker(self, *, concurrency: int = 1, drain: bool = False, poll_seconds: float = 5.0,
               grace_seconds: float = 30.0, on_progress: Callable[[WorkerStats], None] | None = None,
               communities: bool = True) -> Worker:
        """A queue worker on this memory's pool (`await worker.run()`, `worker.stop()`): it processes
        pending episodes of every group, one at a time per group, in order; drain=True returns
        once nothing is ready. communities=True: when idle, it refreshes the communities of the
        groups it processed (`refresh_communities`)."""
        for name, value, low in (("concurrency", concurrency, 1), ("poll_seconds", poll_seconds, 0.01),
                                 ("grace_seconds", grace_seconds, 0)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < low:
                raise InvalidInput(f"{name} must be a number of at least {low}, got {value!r}")
        if not isinstance(concurrency, int) or not isinstance(drain, bool):
            raise InvalidInput("concurrency must be an integer and drain a bool")
        check_bool(communities, "communities")
        return Worker(self.ingestor, concurrency=concurrency, drain=drain, poll_seconds=poll_seconds,
                      grace_seconds=grace_seconds, on_progress=on_progress,
                      refresh=self.refresh_communities if communities else None)

    async def search(self, query: str, *, group_ids: list[str] | str, limit: int = 10,
                     config: SearchConfig | str | None = None,
                     filters: SearchFilters | None = None) -> SearchResults:
        """Hybrid search (cosine, full text, BFS) over facts, entities, communities and episodes,
        reranked; `config` is a recipe name or SearchConfig, `filters` fixes both time axes."""
        groups = check_request(query, group_ids, limit)
        cfg = resolve_config(config)
        if filters is not None and not isinstance(filters, SearchFilters):
            raise InvalidInput(f"filters must be a SearchFilters (pgmemory.SearchFilters(as_of=..., known_at=...)), "
                               f"got {type(filters).__name__}")
        if cfg.reranker == "cross_encoder" and self.cross_encoder is None:
            self.cross_encoder = cross_encoder_from_env()
        return await run_search(self.pool, self.embedder, self.cross_encoder, query, groups, limit,
                                cfg, filters or NO_FILTERS, layout=self.layout)

    async def context(self, query: str, *, group_ids: list[str] | str, limit: int = 10,
                      config: SearchConfig | str | None = None, filters: SearchFilters | None = None,
                      max_chars: int = 8000, communities: bool = False, episodes: bool = False) -> str:
        """The paper's context string for a query: facts with UTC date ranges (one-day events
        "on <date>"), entities with summaries (and community summaries / raw episodes on request),
        never more than max_chars, facts first. With as-of filters, only that slice's text.
        Only the kinds it shows are searched (episodes and communities when asked for)."""
        check_int(max_chars, "max_chars", 200, 1_000_000)
        check_bool(communities, "communities")
        check_bool(episodes, "episodes")
        config = shown_config(resolve_config(config), communities=communities, episodes=episodes)
        results = await self.search(query, group_ids=group_ids, limit=limit, config=config, filters=filters)
        return build_context(results, max_chars=max_chars, communities=communities, episodes=episodes)

    async def bfs(self, seeds: Iterable[Any], *, group_ids: list[str] | str, depth: int = 2,
                  engine: str = "sql") -> dict[Any, int]:
        """Entities within `depth` hops of `seeds` over believed facts -> distance. engine "sql"
        (recursive SQL, the default: faster, see bench/) or "age" (Cypher over the AGE mirror)."""
        groups = validate_group_ids(group_ids)
        check_int(depth, "depth", 1, 5)
        if engine not in ("sql", "age"):
            raise InvalidInput(f"unknown BFS engine {engine!r:.40}: use sql or age")
        seed_ids = list(check_uuids(seeds, "seeds"))
        function = "bfs_entities_age" if engine == "age" else "bfs_entities"
        async with self.pool.acquire() as conn:
            if engine == "age" and await conn.fetchval("SELECT pgmemory_internal.setting('graph_mode') #>> '{}'") != "age":
                raise InvalidInput("BFS engine 'age' needs Apache AGE; this database uses SQL traversal")
            try:
                with refused_ids_as_input_errors():
                    rows = await conn.fetch(f"SELECT entity_id, distance FROM pgmemory.{function}($1, $2, $3)",
                                            groups, seed_ids, depth)
            except asyncpg.InsufficientPrivilegeError:
                if engine != "age":
                    raise
                # The AGE graph is the owner's only (docs/sql.md, Tenancy): no login may load AGE.
                raise InvalidInput("BFS engine 'age' reads the AGE graph, which only the database owner may "
                                   "read (this login may not): use engine 'sql'") from None
        return {r["entity_id"]: r["distance"] for r in rows}

    async def retry(self, group_id: str | None = None, *,
                    on_done: Callable[[EpisodeResult | IngestError], None] | None = None
                    ) -> list[EpisodeResult | IngestError]:
        """Re-run failed or unfinished (pending, or processing with an expired lease) episodes,
        oldest first within each group. Episodes another worker holds a live lease on are left to it."""
        if group_id is not None:
            validate_group_id(group_id)
        await expire_dead_leases(self.pool, group_id)
        async with self.pool.acquire() as conn:
            rows = await conn.fetch(
                "SELECT id, group_id, content, kind, actor, valid_at, reference_offset, source_description"
                " FROM pgmemory.episodes WHERE (status IN ('failed', 'pending')"
                " OR (status = 'processing' AND lease_until <= clock_timestamp()))"
                " AND ($1::text IS NULL OR group_id = $1) ORDER BY group_id, valid_at, recorded_at, seq",
                group_id)
        batch = [{"group_id": r["group_id"], "content": r["content"], "kind": r["kind"],
                  "actor": r["actor"], "reference_time": said_time(r["valid_at"], r["reference_offset"]),
                  "source_description": r["source_description"], "episode_id": r["id"]} for r in rows]
        return await self.add_episodes(batch, on_done=on_done)

    async def episode_status(self, episode_id: Any, group_id: str) -> dict[str, Any] | None:
        """Status, attempts, error and LLM cost of one episode of the group (None if unknown there or
        retracted: it is history, not current)."""
        return (await self.episode_statuses(group_id, [episode_id]))[0]

    async def episode_statuses(self, group_id: str, episode_ids: Iterable[Any]) -> list[dict[str, Any] | None]:
        """episode_status of several episodes of the group in one read, in the order asked."""
        group = validate_group_id(group_id)
        eids = [episode_uuid(group, e) for e in check_list(episode_ids, "episode_ids")]
        async with self.pool.acquire() as conn:
            rows = await conn.fetch(
                "SELECT id, group_id, status, attempts, error, llm_calls, prompt_tokens, completion_tokens"
                " FROM pgmemory.episodes WHERE group_id = $1 AND id = ANY($2::uuid[]) AND retracted_at IS NULL",
                group, eids)
        found = {row["id"]: dict(row) for row in rows}
        return [found.get(eid) for eid in eids]

    async def delete_episode(self, group_id: str, episode_id: Any, *, erase: bool = False) -> DeleteResult:
        """Delete an episode of `group_id` as if it had never been ingested (retract): the facts it
        touched are re-folded from the other episodes' claims, the entities it mentioned re-derived
        from the other mentions, and the changes recorded as new versions; entities only it
        introduced are retired (history kept). `erase=True` also rewrites the history that derives
        from it so its text is nowhere (logged without content); an episode retracted earlier can
        still be erased. An episode of another group is not found."""
        group = validate_group_id(group_id)
        eid = episode_uuid(group, episode_id)
        if not isinstance(erase, bool):
            raise InvalidInput(f"erase must be true or false, got {erase!r}")
        try:
            out = await self._retried_write("SELECT pgmemory.delete_episode($1, $2, $3)", group, eid, erase)
        except asyncpg.NoDataFoundError:
            raise NotFound(f"episode {episode_id!r:.80} does not exist in group {group!r}") from None
        async with self.pool.acquire() as conn:
            await self._reembed_names(conn, group, out.get("renamed") or [])
            if erase:
                self._forget_embedded_texts()
                await _vacuum_text_tables(conn)
        return DeleteResult(out["facts_retracted"], out["facts_removed"], out["entities_removed"],
                            out["facts_changed"], out["erased"])

    def _forget_embedded_texts(self) -> None:
        """After an erase: the embedder's in-process cache (text -> vector) holds the texts it
        embedded, the erased ones among them; all are forgotten (the next uses embed again)."""
        cache = getattr(self.embedder, "cache", None)
        if cache is not None:
            cache.clear()

    async def _reembed_names(self, conn: asyncpg.Connection, group: str, entity_ids: list[str]) -> None:
        """Embed the names a delete gave back to entities (the stored vector embedded a name that is
        gone); the embedder runs with no transaction open."""
        if not entity_ids:
            return
        rows = await conn.fetch("SELECT e.id, e.name FROM pgmemory.entities e WHERE e.group_id = $1"
                                " AND e.id = ANY($2::uuid[]) AND NOT EXISTS (SELECT FROM pgmemory.entity_name_vectors v"
                                " WHERE v.group_id = e.group_id AND v.entity_id = e.id)", group, entity_ids)
        if not rows:
            return
        vectors = await self.embedder.embed([r["name"] for r in rows])
        await conn.executemany(
            "INSERT INTO pgmemory.entity_name_vectors (group_id, entity_id, name_embedding)"
            " SELECT e.group_id, e.id, $3::vector FROM pgmemory.entities e"
            " WHERE e.group_id = $1 AND e.id = $2 AND e.name = $4 ON CONFLICT DO NOTHING",
            [(group, r["id"], vec, r["name"]) for r, vec in zip(rows, as_vectors(vectors))])

    async def add_fact(self, group_id: str, source: str, relation: str, target: str, fact: str, *,
                       valid_from: Any = None, valid_to: Any = None, negated: bool = False,
                       functional: bool = False, attributes: Mapping[str, Any] | None = None,
                       reference_time: Any = None) -> dict[str, Any]:
        """State one fact directly (like Graphiti's add_triplet): entities by name, in any case (created
        if missing), deduped within the pair, the same temporal rules as ingestion
        (pgmemory.add_fact). Returns what it did: fact_id, action, ended, withdrawn, ..."""
        group = validate_group_id(group_id)
        for name, value, limit in (("source", source, MAX_ENTITY_NAME_CHARS), ("relation", relation, MAX_RELATION_CHARS),
                                   ("target", target, MAX_ENTITY_NAME_CHARS), ("fact", fact, MAX_CONTENT_CHARS)):
            check_text(value, name, max_chars=limit)
        times = [None if v is None else parse_time(v, n)
                 for n, v in (("valid_from", valid_from), ("valid_to", valid_to),
                              ("reference_time", reference_time))]
        if not isinstance(negated, bool) or not isinstance(functional, bool):
            raise InvalidInput("negated and functional must be true or false")
        if attributes is not None and not isinstance(attributes, Mapping):
            raise InvalidInput("attributes must be an object")
        attributes = check_metadata(None if attributes is None else dict(attributes), "attributes")
        sentence = fact_embedding_text(ExtractedFact(source.strip(), target.strip(), relation.strip(), fact.strip()))
        src_vec, tgt_vec, fact_vec = await self.embedder.embed([source.strip(), target.strip(), sentence])
        try:
            return await self._retried_write(
                "SELECT pgmemory.add_fact($1, $2, $3, $4, $5, $6, $7, $8, $9, $10::jsonb, $11, $12, $13, $14)",
                group, source, relation, target, fact, *times[:2], negated, functional, attributes,
                times[2], fact_vec, src_vec, tgt_vec)
        except asyncpg.InvalidParameterValueError as exc:
            raise InvalidInput(str(exc).splitlines()[0]) from None

    async def retract_fact(self, group_id: str, fact_id: Any) -> dict[str, Any]:
        """Stop believing one fact of `group_id` (history kept; pgmemory.retract_fact). Returns
        fact_id, action, withdrawn and changed (facts that hold again or with another interval)."""
        group = validate_group_id(group_id)
        fid = check_uuid(fact_id, "fact id")
        try:
            return await self._retried_write("SELECT pgmemory.retract_fact($1, $2)", group, fid)
        except asyncpg.NoDataFoundError:
            raise NotFound(f"fact {fid} is not believed in group {group!r}") from None

    async def _retried_write(self, query: str, *args: Any) -> Any:
        """One write of the SQL API (add_fact, retract_fact, delete_episode) in its own transaction,
        run again when a concurrent writer of the group got in first (40001, retry_serialization)."""
        async def once() -> Any:
            async with self.pool.acquire() as conn:
                return await conn.fetchval(query, *args)
        return await retry_serialization(once)

    async def reembed(self, group_id: str | None = None, *, kinds: Sequence[str] = KINDS,
                      batch: int = DEFAULT_BATCH, restart: bool = False,
                      on_progress: Callable[[ReembedProgress], None] | None = None) -> list[ReembedResult]:
        """Recompute stored vectors (episodes, entities, facts) with the current code and embedder,
        in one group or every group: batches of `batch` rows, one transaction each, resumable
        (pgmemory/ingest/reembed.py). `on_progress` hears every committed batch."""
        check_bool(restart, "restart")
        if isinstance(kinds, str):
            kinds = [kinds]
        if not isinstance(kinds, (list, tuple, set, frozenset)):
            raise InvalidInput(f"kinds must be a list of episodes, entities, facts, got {type(kinds).__name__}")
        return await reembed(self.pool, self.embedder, group_id=group_id, kinds=list(kinds), batch=batch,
                             restart=restart, on_progress=on_progress)

    async def refresh_communities(self, group_id: str, *, force: bool = False,
                                  on_summary: Callable[[], None] | None = None) -> CommunityRefresh:
        """Community upkeep for one group (pgmemory/ingest/communities.py): a full re-detection when
        the drift since the last one is past the threshold, then new names and summaries (LLM
        map-reduce when an LLM is configured, else extractive) for the communities changed since
        their last summary (with an LLM: changed `community_refresh_changes` times, default 4, unless
        `force`). Episodes only mark communities; call this after a batch (`add_episodes` with
        `communities=True`, `pgmemory ingest` and the idle worker do). `on_summary()` is called
        after each community summarised or failed (progress)."""
        check_bool(force, "force")
        return await refresh_communities(self.pool, self.embedder, self._llm(), validate_group_id(group_id),
                                         force=force, on_summary=on_summary)

    async def build_communities(self, group_id: str, *,
                                on_summary: Callable[[], None] | None = None) -> CommunityRefresh:
        """Detect the group's communities afresh now (pgmemory.detect_communities: the replaced
        ones are kept as ended versions), then name and summarise the new ones (`on_summary` as
        in refresh_communities)."""
        return await refresh_communities(self.pool, self.embedder, self._llm(), validate_group_id(group_id),
                                         rebuild=True, on_summary=on_summary)

    def _llm(self) -> LLMClient | None:
        """The extractor's LLM client, if it has one (community summaries use the same model)."""
        client = getattr(self.extractor, "client", None)
        return client if isinstance(client, LLMClient) else None

    async def erase_group(self, group_id: str) -> int:
        """Erase every episode, entity, fact and community of a group; returns episodes erased."""
        validate_group_id(group_id)
        async with self.pool.acquire() as conn:
            erased = await conn.fetchval("SELECT pgmemory.erase_group($1)", group_id)
            self._forget_embedded_texts()
            await _vacuum_text_tables(conn)
        return erased

    async def get_episode(self, group_id: str, episode_id: Any) -> EpisodeRecord | None:
        """One episode of the group (content, status, metadata, ...), or None if unknown there."""
        group = validate_group_id(group_id)
        eid = episode_uuid(group, episode_id)
        async with self.pool.acquire() as conn:
            return await reads.get_episode(conn, group, eid)

    async def get_episodes(self, group_id: str, *, last_n: int = 10, before: Any = None,
                           status: str | None = None, before_id: Any = None) -> list[EpisodeRecord]:
        """The group's latest `last_n` (1-1000) episodes by reference time then arrival, oldest first;
        only those with `status` (pending, processing, done, failed) and before `before` (a time).
        To page back, pass the first returned episode's id as `before_id` (its reference time as
        `before` is optional): episodes sharing a reference time are then neither skipped nor repeated."""
        group = validate_group_id(group_id)
        check_int(last_n, "last_n", 1, 1000)
        if status is not None and status not in reads.EPISODE_STATUSES:
            raise InvalidInput(f"unknown episode status {status!r:.40}: use {', '.join(reads.EPISODE_STATUSES)}")
        before_t = None if before is None else parse_time(before, "before")
        anchor = None if before_id is None else episode_uuid(group, before_id, "before_id")
        async with self.pool.acquire() as conn:
            rows = await reads.get_episodes(conn, group, last_n=last_n, before=before_t, status=status,
                                            before_id=anchor)
        if rows is None:
            raise InvalidInput(f"before_id: episode {before_id!r:.80} does not exist in group {group!r}")
        return rows

    async def get_entity(self, group_id: str, entity_id: Any) -> EntityRecord | None:
        """One entity of the group as it is now (name, labels, summary, attributes), or None."""
        group = validate_group_id(group_id)
        eid = check_uuid(entity_id, "entity id")
        async with self.pool.acquire() as conn:
            return await reads.get_entity(conn, group, eid)

    async def list_entities(self, group_id: str, *, limit: int = 100, offset: int = 0,
                            label: str | None = None, name: str | None = None) -> list[EntityRecord]:
        """A page of the group's entities ordered by name: `limit` (1-1000) after `offset`; only
        those with `label`, or whose name contains `name` (case-insensitive)."""
        group = validate_group_id(group_id)
        check_int(limit, "limit", 1, 1000)
        check_int(offset, "offset", 0, 10_000_000)
        for value, what in ((label, "label"), (name, "name")):
            if value is not None:
                check_text(value, what, max_chars=200)
        async with self.pool.acquire() as conn:
            return await reads.list_entities(conn, group, limit=limit, offset=offset, label=label, name=name)

    async def entity_facts(self, group_id: str, entity_id: Any, *, history: bool = False) -> list[FactVersion]:
        """The facts an entity of the group is an endpoint of: their believed versions (ended
        ones too), or with `history=True` every version ever recorded."""
        group = validate_group_id(group_id)
        eid = check_uuid(entity_id, "entity id")
        check_bool(history, "history")
        async with self.pool.acquire() as conn:
            return await reads.entity_facts(conn, group, eid, history=history)

    async def fact_history(self, group_id: str, fact_id: Any) -> list[FactVersion]:
        """Every version of one fact of the group, oldest belief first (empty if unknown there)."""
        group = validate_group_id(group_id)
        fid = check_uuid(fact_id, "fact id")
        async with self.pool.acquire() as conn:
            return await reads.fact_history(conn, group, fid)

    async def get_fact(self, group_id: str, fact_id: Any) -> FactVersion | None:
        """The believed version of one fact of the group, or None (unknown there, or retracted)."""
        return reads.current_version(await self.fact_history(group_id, fact_id))


ERASED_TEXT_TABLES = ("episodes", "episode_mentions", "entities", "entity_versions", "facts", "fact_claims",
                      "retractions", "term_stats", "communities")
# The AGE mirror's label tables that hold text: names, summaries, episode content, fact sentences
# (believed: RELATES_TO; no longer believed: PAST_BELIEF); and the parents they inherit from, whose
# statistics are gathered over all their labels.
ERASED_GRAPH_TABLES = ("Entity", "Episode", "Community", "RELATES_TO", "PAST_BELIEF",
                       "_ag_label_vertex", "_ag_label_edge")


async def _enqueue(conn: asyncpg.Connection, ep: Episode, given_id: Any) -> uuid.UUID:
    """pgmemory.enqueue_episode for a validated episode; what the database refuses (after
    validation, only an id already used by another episode) is InvalidInput."""
    try:
        return await conn.fetchval(
            "SELECT pgmemory.enqueue_episode($1, $2, $3, $4, $5, $6, $7, $8::jsonb, make_interval(secs => $9::float8))",
            ep.group_id, ep.content, ep.kind, ep.actor, ep.reference_time, ep.source_description, str(ep.id),
            ep.metadata, offset_seconds(ep.reference_time))
    except asyncpg.InvalidParameterValueError as exc:
        message = str(exc).splitlines()[0]
        used = re.search(r"already used by a different episode: its (\w+) differs", message)
        raise (id_in_use(ep, given_id, used[1]) if used else InvalidInput(message)) from None


async def _vacuum_text_tables(conn: asyncpg.Connection) -> None:
    """After an erase, VACUUM (ANALYZE) the tables (and AGE label tables) that held its text: dead
    row versions and their index entries are removed now rather than by autovacuum, and the
    planner's statistics (pg_stats: most common values, histogram bounds, most common lexemes),
    which copy column values, are rebuilt from the rows that remain."""
    # Only the tables this role may vacuum (their owner, or MAINTAIN on Postgres 17+: an app login
    # is granted it), so an app login on Postgres 16 is not warned once per table, and the label
    # tables only where it may reach them (an app login has no right on the mirror's schema, and
    # naming them failed the call after the erase had committed).
    rows = await conn.fetch(
        "SELECT c.oid::regclass::text AS t FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE ((n.nspname = 'pgmemory' AND c.relname = ANY ($1::text[]))"
        "        OR (n.nspname = 'pgmemory_graph' AND c.relname = ANY ($2::text[])"
        "            AND has_schema_privilege(n.oid, 'USAGE')))"
        "   AND c.relkind IN ('r', 'p')"
        "   AND (pg_has_role(c.relowner, 'USAGE') OR CASE WHEN current_setting('server_version_num')::int >= 170000"
        "        THEN has_table_privilege(c.oid, 'MAINTAIN') ELSE false END)", list(ERASED_TEXT_TABLES),
        list(ERASED_GRAPH_TABLES))
    if rows:
        await execute_outside_transactions(conn, "VACUUM (SKIP_LOCKED, ANALYZE) " + ", ".join(r["t"] for r in rows))


def check_custom_types(types: Any, name: str) -> None:
    """entity_types / edge_types: None or a dict of type name -> pydantic model class."""
    if types is None:
        return
    if not isinstance(types, Mapping) or not all(
            isinstance(k, str) and k.strip() and isinstance(v, type) and issubclass(v, BaseModel)
            for k, v in types.items()):
        raise InvalidInput(f"{name} must be a dict of type name -> pydantic model class")


def validate_batch(episodes: Iterable[Mapping[str, Any]], *,
                   positions: Sequence[int] | None = None, unit: str = "episode") -> list[Episode]:
    """Validate every episode of a batch; the first malformed one is named by its position
    (`positions[i]`, e.g. file line numbers, else 1, 2, ...). One id used twice in a group with
    different content is an error naming both positions (the same episode twice is a no-op)."""
    out: list[Episode] = []
    first: dict[tuple[str, uuid.UUID], tuple[int, Episode]] = {}
    for i, item in enumerate(check_list(episodes, "episodes")):
        n = positions[i] if positions is not None else i + 1
        if not isinstance(item, Mapping):
            raise InvalidInput(f"{unit} {n}: expected an object, got {type(item).__name__}")
        unknown = sorted(repr(k) for k in item if k not in EPISODE_FIELDS)
        if unknown:
            raise InvalidInput(f"{unit} {n}: unknown field(s) {', '.join(unknown)[:200]}; "
                               f"allowed: {', '.join(EPISODE_FIELDS)}")
        try:
            ep = validate_episode(
                item.get("group_id"), item.get("content"), kind=item.get("kind", "message"),
                actor=item.get("actor"), reference_time=item.get("reference_time"),
                source_description=item.get("source_description", ""), episode_id=item.get("episode_id"),
                metadata=item.get("metadata"))
        except InvalidInput as exc:
            raise InvalidInput(f"{unit} {n}: {exc}") from None
        seen = first.setdefault((ep.group_id, ep.id), (n, ep))
        if seen[1] is not ep and not _same_episode(seen[1], ep):
            given = item.get("episode_id")
            raise InvalidInput(f"{unit}s {seen[0]} and {n} use the same episode_id {given!r:.80} in group "
                               f"{ep.group_id!r:.80} for different episodes; give each its own id")
        out.append(ep)
    return out


def _same_episode(a: Episode, b: Episode) -> bool:
    return (a.content, a.kind, a.actor, a.reference_time, a.source_description) == \
        (b.content, b.kind, b.actor, b.reference_time, b.source_description)



class OpeningMemory:
    """What Memory.open returns: await it for the Memory, or use it as `async with` (the memory
    is closed on exit)."""

    def __init__(self, opening: Any) -> None:
        self._opening = opening
        self._memory: Memory | None = None

    def __await__(self) -> Generator[Any, None, Memory]:
        return self._opening.__await__()

    async def __aenter__(self) -> Memory:
        self._memory = await self._opening
        return self._memory

    async def __aexit__(self, *exc: object) -> None:
        if self._memory is not None:
            await self._memory.close()
