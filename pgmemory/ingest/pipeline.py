"""One episode end to end: read -> decide -> apply, under a lease.

The raw episode is committed first: it is the lossless record and survives a
failure. Whoever processes it holds a lease (status 'processing', renewed while
it works; an expired lease is taken over), so one episode is never processed
twice at once. Candidate sets are read without a lock or transaction, the
extractor/LLM decides with no connection held, and one short transaction takes
the group lock and applies everything derived from the episode (with status
'done') after checking the group's change counter: if another writer changed
the group since the read, candidates are read again under the lock and only
questions whose candidates changed go back to the extractor (bounded rounds,
then the episode fails and can be retried). Concurrent writers never create
duplicate entities or facts; other groups run in parallel.
"""
from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import os
import random
import socket
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TypeVar

import asyncpg
from pgvector import Vector

from pgmemory.extract.types import (EntityDecision, EntityQuestion, EpisodeInput, ExtractedFact, Extraction,
                                    Extractor, FactDecision, FactQuestion)
from pgmemory.ingest.embed_episode import discard, embed_names_and_facts, start_episode_vector, start_own_vector
from pgmemory.ingest.episode import Episode, id_in_use, offset_seconds, said_time, stored_differs
from pgmemory.ingest.invalidation import FactPlan, plan_facts
from pgmemory.ingest.resolve_entities import ResolvedEntity, read_entity_candidates, resolve_entities
from pgmemory.ingest.resolve_facts import attach_endpoints, judge_facts
from pgmemory.providers.embedder import Embedder
from pgmemory.providers.llm import Usage, provider_refused, provider_unavailable
from pgmemory.storage.connect import postgres_lost
from pgmemory.storage.vectors import as_vectors

CONTEXT_EPISODES = 4
DEFAULT_LEASE_SECONDS = 300.0
DECIDE_ROUNDS = 8  # rounds that asked the LLM, before a group kept busy fails the episode (retryable)
ROUNDS_CAP = 32  # all read -> decide -> apply rounds (those answered from memory cost only reads)
STATISTICS_EVERY = 25  # applied episodes per process between checks for tables that outgrew their statistics
SERIALIZATION_ATTEMPTS = 5  # tries of a write refused with 40001 (a concurrent writer of the group, below)

T = TypeVar("T")


async def serialization_backoff(attempt: int) -> None:
    """The pause before try `attempt` + 1 of a write refused with serialization_failure (40001):
    short and jittered (about 10, 20, 40, 80 ms), so writers that collided do not collide again."""
    await asyncio.sleep(0.01 * 2 ** (attempt - 1) * random.uniform(0.5, 1.5))


async def retry_serialization(call: Callable[[], Awaitable[T]], attempts: int = SERIALIZATION_ATTEMPTS) -> T:
    """Run `call` (one write transaction that acquires its own connection) again when the database
    refuses it with serialization_failure (40001), at most `attempts` times in all. The fact
    functions raise it when a concurrent writer of the group recorded a version after the
    transaction began (its time, now(), is earlier: closing that version there would end it before
    it began, sql/30_fact_versions.sql); a new transaction has a later time. No connection or lock
    is held during the pause: `call` has given its connection back when it raises."""
    for attempt in range(1, attempts + 1):
        try:
            return await call()
        except asyncpg.SerializationError:
            if attempt >= attempts:
                raise
        await serialization_backoff(attempt)
    raise AssertionError("unreachable")


@dataclass
class EpisodeResult:
    """What ingesting one episode did, and what it cost."""

    episode_id: uuid.UUID
    group_id: str
    status: str  # "done" | "skipped" (already ingested) | "busy" (another worker holds its lease)
    entities_created: list[str] = field(default_factory=list)
    entities_merged: list[str] = field(default_factory=list)
    facts_created: list[str] = field(default_factory=list)
    facts_duplicate: int = 0
    facts_invalidated: int = 0
    facts_retracted: int = 0
    llm_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    db_seconds: float = 0.0  # reads, the apply transaction and the statistics refresh
    store_seconds: float = 0.0  # the raw episode's INSERT and lease before them (its own transaction)
    decide_rounds: int = 1

    def __str__(self) -> str:
        return (f"episode {self.episode_id} {self.status}: {len(self.entities_created)} entities and "
                f"{len(self.facts_created)} facts created, {self.facts_invalidated} invalidated; "
                f"{self.llm_calls} LLM calls")


class IngestError(Exception):
    """Processing an episode failed; the raw episode is kept with status 'failed', unless it was
    given back ('pending', the attempt not counted): `given_back` says why, 'busy' (other writers
    of the group) or 'provider' (the LLM or embedding provider down for now)."""

    def __init__(self, episode_id: uuid.UUID, cause: BaseException, given_back: str | None = None,
                 usage: Usage | None = None, unsettled: int | None = None) -> None:
        super().__init__(f"episode {episode_id} failed: {type(cause).__name__}: {cause}")
        self.episode_id = episode_id
        self.cause = cause
        self.given_back = given_back
        self.usage = usage or Usage()  # the LLM calls of the attempt that failed (billed all the same)
        # Postgres lost before the attempt could be ended: its number (0 when unknown), for the
        # caller to end it, with self.usage, once the server answers (Worker); else None.
        self.unsettled = unsettled


class NotAttempted(Exception):
    """An episode of a bulk run left untried: the provider refused the configuration (the API key,
    the model) on an earlier one, and would refuse it the same way (provider_refused)."""


class GroupBusy(Exception):
    """The group changed between every read and apply of DECIDE_ROUNDS rounds that asked the LLM
    (or of ROUNDS_CAP rounds in all): retry later."""


def group_busy(exc: BaseException | None) -> bool:
    """Whether processing stopped because of other writers of the group, not the episode: it
    changed in every round (GroupBusy), or its write lock stayed taken past lock_timeout."""
    if isinstance(exc, IngestError):
        exc = exc.cause
    return isinstance(exc, (GroupBusy, asyncpg.LockNotAvailableError))


@functools.cache
def _process_space() -> str:
    """A short name for the set of processes this one can see by pid: the boot (each machine, each
    reboot) and the pid namespace (each container); where there is no boot id (not Linux), the
    network card. Two hosts with one host name, or containers sharing the host's name (host
    network), differ."""
    parts = []
    for read in (lambda: open("/proc/sys/kernel/random/boot_id").read().strip(),
                 lambda: str(os.stat("/proc/self/ns/pid").st_ino)):
        with contextlib.suppress(OSError):
            parts.append(read())
    if not parts:
        parts.append(f"{uuid.getnode():012x}")  # (random per process when there is none: never "dead here")
    return hashlib.sha1("|".join(parts).encode()).hexdigest()[:8]


def worker_id() -> str:
    """A lease owner name unique to this process: host, pid, a random suffix and where its pid
    means something (_process_space)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}:{_process_space()}"


def _dead_here(owner: str | None) -> bool:
    """True when a lease owner is a process this one can see by pid (same host, boot and pid
    namespace) that no longer runs (killed or crashed). An owner named elsewhere (or in the older
    host:pid:suffix form, which did not say where) is left to its lease's expiry."""
    host, pid, _, space = ((owner or "").split(":") + ["", "", "", ""])[:4]
    if host != socket.gethostname() or space != _process_space() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


async def expire_dead_leases(pool: asyncpg.Pool | asyncpg.Connection, group_id: str | None = None) -> int:
    """End at once the leases held by processes of this host that are gone (kill -9, a crash),
    instead of waiting for them to expire; returns how many owners were found dead. `pool` may be
    a connection the caller holds."""
    owners = await pool.fetch(
        "SELECT DISTINCT lease_owner FROM pgmemory.episodes WHERE status = 'processing'"
        " AND lease_until > clock_timestamp() AND ($1::text IS NULL OR group_id = $1)", group_id)
    dead = [r["lease_owner"] for r in owners if _dead_here(r["lease_owner"])]
    if dead:
        # statement_timestamp(): Citus refuses volatile calls (clock_timestamp) inside an UPDATE.
        await pool.execute("UPDATE pgmemory.episodes SET lease_until = statement_timestamp()"
                           " WHERE status = 'processing' AND lease_owner = ANY ($1::text[])", dead)
    return len(dead)


@dataclass
class Ingestor:
    """Runs the pipeline with one pool, embedder and extractor; leases in the name of `owner`."""

    pool: asyncpg.Pool
    embedder: Embedder
    extractor: Extractor
    lease_seconds: float = DEFAULT_LEASE_SECONDS
    owner: str = field(default_factory=worker_id)
    _applied: int = field(default=0, init=False, repr=False)

    async def ingest(self, ep: Episode, *, entity_types=None, edge_types=None) -> EpisodeResult:
        """Store and process one validated episode in this process; a done episode id is a no-op.
        Its own text's vector is computed from the start, while the raw episode is stored."""
        own = start_own_vector(self.embedder, ep.as_input())
        try:
            return await self._ingest(ep, own, entity_types, edge_types)
        finally:
            discard(own)

    async def _ingest(self, ep: Episode, own: asyncio.Task, entity_types, edge_types) -> EpisodeResult:
        started = time.perf_counter()
        async with self.pool.acquire() as conn:
            state = await _store_raw(conn, ep, self.owner, self.lease_seconds)
            for _ in range(2):
                if state == "leased" or state == "done":
                    break
                state = await conn.fetchval("SELECT pgmemory_internal.lease_episode($1, $2, $3, $4::interval)",
                                            ep.group_id, ep.id, self.owner, _interval(self.lease_seconds))
                # (on the held connection: a second acquire waits for ever on an exhausted pool)
                if state == "busy" and not await expire_dead_leases(conn, ep.group_id):
                    break
        stored = time.perf_counter() - started
        if state != "leased":
            return EpisodeResult(ep.id, ep.group_id, "skipped" if state == "done" else "busy", store_seconds=stored)
        result = await self.process(ep, entity_types=entity_types, edge_types=edge_types, own_vector=own)
        result.store_seconds = stored
        return result

    async def process(self, ep: Episode, *, entity_types=None, edge_types=None,
                      own_vector: asyncio.Task | None = None, set_aside_when_busy: bool = False,
                      wait_for_provider: bool = False) -> EpisodeResult:
        """Process an episode whose lease this owner holds (`own_vector`: its own text's vector, if
        already started). A failure is recorded ('failed', with its cost) and raised as
        IngestError; a cancellation gives the episode back ('pending'). With
        `set_aside_when_busy` (the queue worker), a group kept busy by other writers
        (group_busy) gives the episode back too, the attempt not counted, and raises IngestError
        with given_back 'busy'; so does an LLM or embedding provider down for now
        (provider_unavailable), or refusing its configuration (provider_refused: a wrong key or
        model, which an operator fixes), with `wait_for_provider` (a worker that runs until
        stopped): given_back 'provider'."""
        usage = Usage()
        attempt = None  # which lease of the episode this is (its `attempts` as this owner took it)
        renewal = asyncio.create_task(self._renew(ep))
        try:
            attempt = await self.pool.fetchval(
                "SELECT attempts FROM pgmemory.episodes WHERE group_id = $1 AND id = $2 AND lease_owner = $3"
                " AND status = 'processing'", ep.group_id, ep.id, self.owner)
            result = await self._process(ep, usage, entity_types, edge_types, own_vector)
        except asyncio.CancelledError:
            await asyncio.shield(self.end_attempt(ep, None, usage, attempt))
            raise
        except Exception as exc:
            given_back = ("busy" if set_aside_when_busy and group_busy(exc)
                          else "provider" if wait_for_provider and (provider_unavailable(exc) or provider_refused(exc))
                          else None)
            if given_back:
                await self.pool.execute("SELECT pgmemory_internal.set_aside_episode($1, $2, $3, $4, $5, $6)",
                                        ep.group_id, ep.id, self.owner, usage.calls, usage.prompt_tokens,
                                        usage.completion_tokens)
                raise IngestError(ep.id, exc, given_back, usage) from exc
            if not postgres_lost(exc):
                await self.end_attempt(ep, f"{type(exc).__name__}: {exc}", usage, attempt)
                raise IngestError(ep.id, exc, usage=usage) from exc
            # Postgres went away: not the episode's fault, so it is given back ('pending', to be
            # processed again in its group's order), not marked failed. If the server is still
            # away the lease stays until the caller gives it back (Worker) or it expires. The
            # connection may have been lost after the apply committed, before its answer came:
            # the attempt number tells end_attempt whether this attempt applied it (its usage
            # then counted already).
            try:
                await self.end_attempt(ep, None, usage, attempt)
            except Exception:  # noqa: BLE001 - still away: the caller ends it later, with its usage
                raise IngestError(ep.id, exc, usage=usage, unsettled=attempt or 0) from exc
            raise IngestError(ep.id, exc, usage=usage) from exc
        finally:
            renewal.cancel()
        if result.status != "done":
            # The apply wrote nothing: another attempt applied the episode, or took this one's
            # lease over. The calls made were billed all the same: added to the episode's cost
            # (once: not retried if the answer is lost).
            try:
                await self.end_attempt(ep, None, usage, attempt)
            except Exception as exc:
                if not postgres_lost(exc):
                    raise
                raise IngestError(ep.id, exc, usage=usage) from exc
            result.llm_calls, result.prompt_tokens = usage.calls, usage.prompt_tokens
            result.completion_tokens = usage.completion_tokens
        return result

    async def _refresh_statistics(self, db: "_TimedDb") -> None:
        """Every STATISTICS_EVERY applied episodes, analyse the tables that outgrew their planner
        statistics (pgmemory_internal.refresh_statistics: young tables grow faster than autovacuum
        looks, and plans made for near-empty tables read several times the rows). Counted as DB
        time of the episode that runs it."""
        self._applied += 1
        if self._applied % STATISTICS_EVERY == 0:
            try:
                await db.fetchval("SELECT pgmemory_internal.refresh_statistics()")
            except asyncpg.PostgresError:
                pass  # planner statistics only: the episode is applied, autovacuum analyses later

    async def end_attempt(self, ep: Episode, error: str | None, usage: Usage | None = None,
                          attempt: int | None = None) -> None:
        """End this owner's attempt at an episode: 'failed' with `error`, else given back
        ('pending'); the LLM usage of the attempt is added to the episode's, unless the episode
        was applied by this very attempt (`attempt`: its number, when known), whose apply added it."""
        usage = usage or Usage()
        await self.pool.execute("SELECT pgmemory_internal.end_attempt($1, $2, $3, $4, $5, $6, $7, $8)",
                                ep.group_id, ep.id, self.owner, error, usage.calls, usage.prompt_tokens,
                                usage.completion_tokens, attempt)

    async def _renew(self, ep: Episode) -> None:
        """Keep the lease alive while this process works on the episode."""
        while True:
            await asyncio.sleep(self.lease_seconds / 3)
            try:
                await self.pool.fetchval("SELECT pgmemory_internal.renew_lease($1, $2, $3, $4::interval)",
                                         ep.group_id, ep.id, self.owner, _interval(self.lease_seconds))
            except (OSError, asyncpg.PostgresError):
                pass  # the next renewal tries again; apply checks the lease anyway

    async def _process(self, ep: Episode, usage: Usage, entity_types, edge_types,
                       own_vector: asyncio.Task | None) -> EpisodeResult:
        # A local extractor never waits for an LLM: each phase then runs on one held connection.
        db = _TimedDb(self.pool, hold=bool(getattr(self.extractor, "decides_locally", False)))
        try:
            return await self._phases(db, ep, usage, entity_types, edge_types, own_vector)
        finally:
            await db.release()

    async def _phases(self, db: "_TimedDb", ep: Episode, usage: Usage, entity_types, edge_types,
                      own_vector: asyncio.Task | None) -> EpisodeResult:
        episode = ep.as_input()
        own_vector = own_vector or start_own_vector(self.embedder, episode)
        episode_embedding = None
        try:
            previous = await _previous(db, ep)
            await db.release()  # no connection held while extracting and embedding
            # The episode's vector (with the turn before it) is finished while the extractor works.
            episode_embedding = start_episode_vector(self.embedder, episode, previous, own_vector)
            await asyncio.sleep(0)  # the encode is sent before the extractor takes the event loop
            return await self._decide_and_apply(db, ep, episode, previous, usage, entity_types, edge_types,
                                                episode_embedding)
        finally:
            for task in (episode_embedding, own_vector):
                if task is not None:
                    discard(task)

    async def _decide_and_apply(self, db: "_TimedDb", ep: Episode, episode: EpisodeInput,
                                previous: list[EpisodeInput], usage: Usage, entity_types, edge_types,
                                episode_embedding: asyncio.Task) -> EpisodeResult:
        extraction = await self.extractor.extract(episode, previous, usage,
                                                  entity_types=entity_types, edge_types=edge_types)
        names = [e.name for e in extraction.entities]
        sentences = [fact_embedding_text(f) for f in extraction.facts]
        name_vecs, fact_vecs = await embed_names_and_facts(self.pool, self.embedder, ep.group_id, names, sentences)
        decisions = _Decisions(self.extractor)
        conflicts = asking_rounds = 0
        for rounds in range(1, ROUNDS_CAP + 1):
            asked = decisions.asked
            version, resolved, plan = await _decide(db, ep, extraction, name_vecs, fact_vecs, decisions, previous,
                                                    usage)
            asking_rounds += decisions.asked > asked
            episode_vec = await episode_embedding  # computed meanwhile; done before any lock is taken
            try:
                out = await db.fetchval(_APPLY, ep.group_id, ep.id, self.owner, version,
                                        *_payload(ep, resolved, plan, usage, episode_vec))
                if out["state"] == "changed":
                    # Another writer changed the group since the read. With an LLM: read again (no
                    # lock, no transaction); only questions whose candidates changed go back to it.
                    # A round that asked it nothing counts only toward ROUNDS_CAP: in a group other
                    # writers keep changing, most rounds are such (8 rounds in all failed 9 of 40
                    # episodes of 10 LLM writers of one group, each having asked 2-3 times).
                    if not getattr(self.extractor, "decides_locally", False):
                        if asking_rounds >= DECIDE_ROUNDS:
                            break
                        continue
                    # A local extractor re-decides under the lock, so the next apply cannot miss.
                    started = time.perf_counter()
                    await db.release()
                    try:
                        async with self.pool.acquire() as conn, conn.transaction():
                            await conn.execute("SELECT pgmemory_internal.lock_group($1)", ep.group_id)
                            try:
                                version, resolved, plan = await _decide(conn, ep, extraction, name_vecs,
                                                                        fact_vecs, decisions.cached(), previous,
                                                                        usage)
                            except _NotDecided:
                                continue  # cannot happen with a local extractor; read again to be safe
                            out = await conn.fetchval(_APPLY, ep.group_id, ep.id, self.owner, version,
                                                      *_payload(ep, resolved, plan, usage, episode_vec))
                    finally:
                        db.seconds += time.perf_counter() - started
            except asyncpg.SerializationError:
                # A concurrent writer recorded a version after this apply's transaction began (its
                # transaction time is earlier; retry_serialization): nothing was written. Read and
                # decide again in a new round, after a short pause with no connection held.
                conflicts += 1
                if conflicts >= SERIALIZATION_ATTEMPTS:
                    raise
                await db.release()
                await serialization_backoff(conflicts)
                continue
            if out["state"] in ("done", "lost"):  # applied by someone else / our lease was taken over
                return EpisodeResult(ep.id, ep.group_id, "skipped" if out["state"] == "done" else "busy")
            result = EpisodeResult(ep.id, ep.group_id, "done", decide_rounds=rounds)
            _fill(result, resolved, out["applied"], usage)
            await self._refresh_statistics(db)
            result.db_seconds = db.seconds
            return result
        raise GroupBusy(f"group {ep.group_id!r} changed during each of {rounds} rounds; retry later")


async def _decide(db, ep: Episode, extraction: Extraction, name_vecs, fact_vecs, decisions: "_Decisions",
                  previous: list[EpisodeInput], usage: Usage) -> tuple[int, list[ResolvedEntity], FactPlan]:
    """Read candidates through `db` (two round trips: the group's change counter with the entity
    candidates, then both fact candidate sets) and let `decisions` answer the questions they
    raise; returns the counter read with the first candidates, the entities and the plan."""
    episode = ep.as_input()
    version, rows = await read_entity_candidates(db, ep.group_id, extraction.entities, name_vecs)
    resolved = await resolve_entities(rows, extraction.entities, name_vecs, decisions, episode, previous, usage)
    facts = attach_endpoints(extraction.facts, resolved, fact_vecs)
    judged = await judge_facts(db, ep.group_id, facts, decisions, episode, usage)
    return version, resolved, plan_facts(judged)


class _NotDecided(Exception):
    """A question changed since the extractor answered it (asked only with the group lock held)."""


class _Decisions:
    """The extractor's answers, kept across read -> decide -> apply rounds: a question whose
    candidates are the same as before is answered from memory, so a round after a concurrent
    change re-asks only the inputs whose candidates changed (as a set: the same candidates read in
    another order, such as one re-recorded meanwhile, are the same question). `cached()` answers
    from memory only (used under the group lock, where no LLM call may wait)."""

    def __init__(self, extractor: Extractor, *, entities=None, facts=None, ask: bool = True) -> None:
        self._extractor = extractor
        self._entities: dict[tuple, EntityDecision | None] = {} if entities is None else entities
        self._facts: dict[tuple, FactDecision | None] = {} if facts is None else facts
        self._ask = ask
        self.asked = 0  # calls to the extractor so far

    def cached(self) -> "_Decisions":
        """These answers for use under the group lock: new questions go to the extractor only
        when it decides locally (no LLM call may wait while the lock is held)."""
        ask = bool(getattr(self._extractor, "decides_locally", False))
        return _Decisions(self._extractor, entities=self._entities, facts=self._facts, ask=ask)

    async def resolve_entities(self, episode, previous, questions: list[EntityQuestion],
                               usage) -> list[EntityDecision]:
        keys = {q.index: (q.index, q.entity.name, tuple(sorted(c.id for c in q.candidates))) for q in questions}
        missing = [q for q in questions if keys[q.index] not in self._entities]
        if missing:
            if not self._ask:
                raise _NotDecided()
            self.asked += 1
            answers = {d.index: d for d in await self._extractor.resolve_entities(episode, previous, missing,
                                                                                  usage)}
            for q in missing:
                self._entities[keys[q.index]] = answers.get(q.index)
        return [d for q in questions if (d := self._entities[keys[q.index]]) is not None]

    async def judge_facts(self, episode, questions: list[FactQuestion], usage) -> list[FactDecision]:
        keys = {q.index: (q.index, q.fact.source, q.fact.target, q.fact.relation, q.fact.fact, q.fact.negated,
                          tuple(sorted(c.id for c in q.duplicates)), tuple(sorted(c.id for c in q.contradictions)))
                for q in questions}
        missing = [q for q in questions if keys[q.index] not in self._facts]
        if missing:
            if not self._ask:
                raise _NotDecided()
            self.asked += 1
            answers = {d.index: d for d in await self._extractor.judge_facts(episode, missing, usage)}
            for q in missing:
                self._facts[keys[q.index]] = answers.get(q.index)
        return [d for q in questions if (d := self._facts[keys[q.index]]) is not None]


class _TimedDb:
    """One-query calls outside the apply transaction, timed. With `hold` (a local extractor,
    which never waits for an LLM) the queries of a phase share one pooled connection, taken at
    the first query and given back by `release()` (one acquire per phase, not per query);
    without it each query takes a connection only for itself, so none is held while the LLM
    decides. Each acquire runs the pool's on_acquire hook, which sets the request's groups."""

    def __init__(self, pool: asyncpg.Pool, *, hold: bool = False) -> None:
        self._pool = pool
        self._hold = hold
        self._conn: asyncpg.Connection | None = None
        self.seconds = 0.0

    async def _run(self, method: str, query: str, args):
        started = time.perf_counter()
        try:
            if not self._hold:
                return await getattr(self._pool, method)(query, *args)
            if self._conn is None:
                self._conn = await self._pool.acquire()
            return await getattr(self._conn, method)(query, *args)
        finally:
            self.seconds += time.perf_counter() - started

    async def fetch(self, query: str, *args):
        return await self._run("fetch", query, args)

    async def fetchval(self, query: str, *args):
        return await self._run("fetchval", query, args)

    async def release(self) -> None:
        """Give the held connection back to the pool (no-op when none is held)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            await self._pool.release(conn)


def _interval(seconds: float) -> timedelta:
    return timedelta(seconds=seconds)


FACT_TEXT_RECIPE = "sentence (source relation-in-words target)"  # names fact_embedding_text for reembed


def fact_embedding_text(fact: ExtractedFact) -> str:
    """What a fact's embedding is computed from: its sentence plus the relation in words, so
    questions phrased by relation ("where does X work") find sentences that do not say it."""
    relation = fact.relation.lower().replace("_", " ")
    return f"{fact.fact} ({fact.source} {relation} {fact.target})"


async def _store_raw(conn: asyncpg.Connection, ep: Episode, owner: str, lease_seconds: float) -> str:
    """Insert the raw episode, leased to `owner` ('leased'), unless its id exists; then return the
    stored status. One statement: no worker can claim it in between. A retracted episode with the
    id (kept as history) gives way to it (pgmemory_internal.forget_retracted_episode). The id of
    another episode (other content, kind, actor or time) is refused, naming what differs."""
    try:
        row = await conn.fetchrow(
            "INSERT INTO pgmemory.episodes (id, group_id, kind, content, actor, source_description, valid_at,"
            " status, lease_owner, lease_until, attempts, metadata, reference_offset)"
            " VALUES ($1, $2, $3, $4, $5, $6, $7, 'processing', $8, clock_timestamp() + $9::interval, 1, $10::jsonb,"
            "         make_interval(secs => $11::float8))"
            " ON CONFLICT (group_id, id) DO NOTHING RETURNING 'leased'",
            ep.id, ep.group_id, ep.kind, ep.content, ep.actor, ep.source_description, ep.reference_time,
            owner, _interval(lease_seconds), ep.metadata, offset_seconds(ep.reference_time))
    except asyncpg.InsufficientPrivilegeError:
        # Row-level security said no ("new row violates ... policy for table episodes"): the group's
        # write lock says why in one line (a login that may only read, or a group not among its own).
        await conn.execute("SELECT pgmemory_internal.lock_group($1)", ep.group_id)
        raise
    if row is not None:
        return row[0]
    stored = await conn.fetchrow("SELECT content, kind, actor, valid_at, status, retracted_at FROM pgmemory.episodes"
                                 " WHERE group_id = $1 AND id = $2", ep.group_id, ep.id)
    if stored is not None and stored["retracted_at"] is not None:
        await conn.execute("SELECT pgmemory_internal.forget_retracted_episode($1, $2)", ep.group_id, ep.id)
        stored = None
    if stored is None:  # the retracted one gave way (or the row went in between): stored as new
        return await _store_raw(conn, ep, owner, lease_seconds)
    differs = stored_differs(stored, ep)
    if differs:
        raise id_in_use(ep, differs=differs)
    return stored["status"]


# The LIMIT is a constant, not a parameter: with a parameter the generic plan is costed for 10% of
# the group's episodes, so the prepared statement was planned anew on every call (custom plan).
_PREVIOUS = (
    "SELECT content, kind, valid_at, reference_offset, actor, source_description FROM pgmemory.episodes"
    " WHERE group_id = $1 AND id <> $2 AND retracted_at IS NULL AND (valid_at, seq) < ($3, coalesce("
    "   (SELECT seq FROM pgmemory.episodes WHERE group_id = $1 AND id = $2), 9223372036854775807))"
    f" ORDER BY valid_at DESC, seq DESC LIMIT {int(CONTEXT_EPISODES)}")


async def _previous(conn: asyncpg.Connection, ep: Episode) -> list[EpisodeInput]:
    """The episodes just before this one in its group, by reference time and then arrival (seq):
    the extractor's context and the turn before in the episode's vector. Episodes with the same
    time that arrived later (a queued session's next turns) are not before it."""
    rows = await conn.fetch(_PREVIOUS, ep.group_id, ep.id, ep.reference_time)
    return [EpisodeInput(r["content"], r["kind"], said_time(r["valid_at"], r["reference_offset"]), r["actor"],
                         r["source_description"])
            for r in reversed(rows)]


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


# The apply: the payload (JSON) and the vectors it refers to by number (one binary vector[]).
_APPLY = "SELECT pgmemory_internal.apply_if_unchanged($1, $2, $3, $4, $5::jsonb, $6::vector[])"


class _Vectors:
    """The vectors of one apply payload, sent apart as a binary vector[] parameter: the payload
    names each by its position (a JSON integer), so no vector is printed as text here and parsed
    back on the server (0.63 vs 0.23 ms per payload of five 384-d vectors; the same float4s)."""

    def __init__(self) -> None:
        self.values: list[Vector] = []

    def ref(self, values) -> int | None:
        """The payload's reference to `values` (None stays None)."""
        if values is None:
            return None
        self.values.extend(as_vectors([values]))
        return len(self.values) - 1


def _payload(ep: Episode, resolved: list[ResolvedEntity], plan: FactPlan, usage: Usage,
             episode_vec) -> tuple[dict, list[Vector]]:
    """The decisions of one episode for pgmemory_internal.apply_episode (format documented there)
    and the vectors they refer to."""
    vectors = _Vectors()
    ref = vectors.ref
    unique = {r.id: r for r in resolved}.values()
    new_entities = [{
        "id": str(r.id), "name": r.name, "labels": r.entity.labels, "summary": r.entity.summary,
        "attributes": r.entity.attributes, "embedding": ref(r.embedding)} for r in unique if r.is_new]
    updates = [{
        "id": str(r.id), "name": r.name if r.renamed else None,
        "labels": r.new_labels, "attributes": r.entity.attributes}
        for r in unique if not r.is_new and (r.renamed or r.new_labels or r.entity.attributes)]
    claims = [{
        "id": str(c.id), "kind": c.kind, "duplicate_of": c.duplicate_of, "contradicts": list(c.contradicts),
        "source": str(c.judged.source.id), "target": str(c.judged.target.id),
        "relation": c.judged.fact.relation, "fact": c.judged.fact.fact,
        "valid_from": _iso(c.judged.fact.valid_at), "valid_to": _iso(c.judged.fact.invalid_at),
        "embedding": ref(c.judged.embedding), "attributes": c.judged.fact.attributes}
        for c in plan.claims]
    payload = {
        "group": ep.group_id,
        "reference_time": ep.reference_time.isoformat(),
        "new_entities": new_entities,
        "entity_updates": updates,
        "mentions": [str(r.id) for r in unique],
        "mention_summaries": {str(r.id): r.entity.summary for r in unique if r.entity.summary},
        "mention_details": {str(r.id): {
            "said_name": r.entity.name, "renamed_to": r.name if r.renamed else None,
            "labels": list(r.entity.labels), "attributes": r.entity.attributes} for r in unique},
        "claims": claims,
        "usage": {"calls": usage.calls, "prompt_tokens": usage.prompt_tokens,
                  "completion_tokens": usage.completion_tokens},
        "embedding": ref(episode_vec),
    }
    return payload, vectors.values


def _fill(result: EpisodeResult, resolved: list[ResolvedEntity], applied: dict, usage: Usage) -> None:
    unique = {r.id: r for r in resolved}.values()
    result.entities_created = [r.name for r in unique if r.is_new]
    result.entities_merged = [r.name for r in unique if not r.is_new]
    result.facts_created = list(applied["created"])
    result.facts_duplicate = applied["duplicates"]
    result.facts_invalidated = applied["ended"]
    result.facts_retracted = applied["withdrawn"]
    result.llm_calls = usage.calls
    result.prompt_tokens = usage.prompt_tokens
    result.completion_tokens = usage.completion_tokens
