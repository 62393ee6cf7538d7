"""Community upkeep between episodes: re-detect past the drift threshold, then name and summarise.

Episodes only mark communities (sql/57_communities.sql: a new entity joins its neighbours'
plurality community, the communities whose facts changed get a new revision). This module does
the rest lazily — at the end of an ingest run, when the worker is idle, on rebuild — in this
order: a full detection (pgmemory.detect_communities, one SQL call, its own transaction) when
forced or when the drift has passed the threshold; then the communities due for a summary are
read (no lock, no transaction), summarised with no connection held (an LLM map-reduce over the
members' summaries, or offline an extractive summary: the most central facts' sentences and the
central entities' names), their names embedded, and each written by one short statement that
keeps it marked if it changed meanwhile. The LLM calls are added to the group's community cost.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from pgmemory.config import Timeouts
from pgmemory.errors import DatabaseTimeout, error_line
from pgmemory.extract.community_prompts import CommunitySummaryReply, map_messages, reduce_messages
from pgmemory.providers.embedder import Embedder
from pgmemory.providers.llm import LLMClient, ProviderError, Usage, provider_refused, provider_unavailable

MAP_CHUNK = 25  # members per map call; a community this small takes one call
MAP_FACTS = 10  # central facts shown with each chunk
BATCH = 50  # communities read per round
EXTRACTIVE_FACTS = 4
NAME_ENTITIES = 3
MAX_NAME_CHARS = 200
MAX_SUMMARY_CHARS = 2000


@dataclass
class CommunityRefresh:
    """What one refresh of a group did, and what it cost."""

    group_id: str
    detection: dict[str, Any] | None = None  # pgmemory.detect_communities' counts when one ran
    refreshed: int = 0
    failed: int = 0  # left marked: the LLM failed on them or was down (retried by the next refresh)
    error: str | None = None  # the LLM's last failure, one line
    usage: Usage = field(default_factory=Usage)


def extractive_summary(members: list[dict], facts: list[str]) -> tuple[str, str]:
    """(name, summary) without an LLM: the central entities' names; the most central facts'
    sentences (else the central members' own summaries)."""
    names = [m["name"] for m in members[:NAME_ENTITIES]]
    sentences = list(dict.fromkeys(facts))[:EXTRACTIVE_FACTS] or [
        m["summary"] for m in members[:NAME_ENTITIES] if m.get("summary")]
    return _clip(", ".join(names), MAX_NAME_CHARS), _clip(" ".join(sentences), MAX_SUMMARY_CHARS)


async def llm_summary(llm: LLMClient, members: list[dict], facts: list[str], usage: Usage) -> tuple[str, str]:
    """(name, summary) by map-reduce: one call per chunk of members, then one to merge the chunks."""
    chunks = [members[i:i + MAP_CHUNK] for i in range(0, len(members), MAP_CHUNK)] or [[]]
    parts = [await llm.complete(map_messages(chunk, facts[:MAP_FACTS]), CommunitySummaryReply, usage=usage)
             for chunk in chunks]
    while len(parts) > 1:
        groups = [parts[i:i + MAP_CHUNK] for i in range(0, len(parts), MAP_CHUNK)]
        parts = [await llm.complete(reduce_messages([f"{p.name}: {p.summary}" for p in group]),
                                    CommunitySummaryReply, usage=usage) for group in groups]
    name = " ".join(parts[0].name.split()) or extractive_summary(members, facts)[0]
    return _clip(name, MAX_NAME_CHARS), _clip(" ".join(parts[0].summary.split()), MAX_SUMMARY_CHARS)


async def refresh_communities(pool: asyncpg.Pool, embedder: Embedder, llm: LLMClient | None, group_id: str,
                              *, rebuild: bool = False, force: bool = False,
                              on_summary: Callable[[], None] | None = None) -> CommunityRefresh:
    """Re-detect the group's communities when `rebuild` or when drift is due, then name and
    summarise the communities due: offline every one marked; with an LLM those never summarised
    or changed community_refresh_changes times (setting, default 4) since their summary, every
    marked one when `force`. `on_summary` is called after each community summarised or failed
    (progress: a large group's LLM summaries take minutes). Never holds a transaction or the
    group lock while the LLM or embedder works."""
    out = CommunityRefresh(group_id)
    if rebuild or await pool.fetchval("SELECT pgmemory.communities_due($1)", group_id):
        try:
            out.detection = await pool.fetchval("SELECT pgmemory.detect_communities($1)", group_id)
        except (asyncpg.QueryCanceledError, asyncpg.LockNotAvailableError) as exc:
            raise detection_timeout(group_id, exc) from None
    seen: set = set()
    try:
        while True:
            rows = [r for r in await pool.fetch("SELECT * FROM pgmemory_internal.community_digests($1, $2, $3)", group_id,
                                                BATCH, 1 if llm is None or force else None)
                    if r["id"] not in seen]
            if not rows:
                break
            seen.update(r["id"] for r in rows)
            written = []
            down = False
            for i, r in enumerate(rows):
                try:
                    if llm is not None:
                        name, summary = await llm_summary(llm, r["members"], r["facts"], out.usage)
                    else:
                        name, summary = extractive_summary(r["members"], r["facts"])
                except ProviderError as exc:
                    out.failed += 1
                    out.error = error_line(exc)
                    if provider_unavailable(exc) or provider_refused(exc):
                        # Down or overloaded (after its retries), or refusing the key or model: every
                        # other community would get the same answer; they stay marked for the next refresh.
                        out.failed += len(rows) - i - 1
                        down = True
                        break
                    if on_summary is not None:
                        on_summary()
                    continue
                written.append((r, name, summary))
                if on_summary is not None:
                    on_summary()
            vectors = await embedder.embed([name for _, name, _ in written]) if written else []
            kind = "extractive" if llm is None else "llm"
            for (r, name, summary), vector in zip(written, vectors):
                if await pool.fetchval("SELECT pgmemory_internal.write_community_summary($1, $2, $3, $4, $5, $6, $7)",
                                       group_id, r["id"], r["revision"], name, summary, vector, kind):
                    out.refreshed += 1
            if down:
                break
    finally:
        if out.usage.calls:
            await pool.execute("SELECT pgmemory_internal.add_community_usage($1, $2, $3, $4)", group_id, out.usage.calls,
                               out.usage.prompt_tokens, out.usage.completion_tokens)
    return out


def detection_timeout(group_id: str, exc: Exception) -> DatabaseTimeout:
    """The one-line error of a detection cancelled by the statement or lock timeout: it is one
    statement, so nothing of it was written."""
    timeouts = Timeouts.from_env()
    if isinstance(exc, asyncpg.LockNotAvailableError):
        why = (f"waited longer than {timeouts.lock_s:g} s (PGMEMORY_LOCK_TIMEOUT) for the group's write lock "
               "(another writer holds it)")
        fix = "run it again once that writer is done"
    elif "statement timeout" in str(exc):
        why = f"ran longer than {timeouts.statement_s:g} s (PGMEMORY_STATEMENT_TIMEOUT) and was cancelled"
        fix = "raise PGMEMORY_STATEMENT_TIMEOUT and run it again"
    else:
        why = "was cancelled"
        fix = "run it again"
    return DatabaseTimeout(f"community detection of group {group_id!r} {why}; nothing of it was written "
                           f"(the communities are as before): {fix} "
                           f"(pgmemory communities rebuild --group {group_id})")


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 1].rstrip() + "…"
