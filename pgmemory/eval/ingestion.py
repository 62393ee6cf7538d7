"""Load a benchmark conversation into its own pgmemory group, once.

Each conversation (LoCoMo sample, LongMemEval question) gets the group
``eval-<benchmark>-<id>``; every turn becomes a message episode whose
``episode_id`` is the turn id, whose actor is the speaker and whose reference
time is the real session date.  A group that already holds exactly these
turns, all done, built with the same embedder, extractor and ingestion code
(a hash of the extractor and ingestion modules, migrations and stored SQL
other than search) from the same turns (a hash of their ids, speakers,
texts and times), is reused; anything else is erased and ingested again.
"""
from __future__ import annotations

import hashlib
import json
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from pgmemory.eval.readers import Conversation
from pgmemory.eval.retrieval import session_numbers
from pgmemory.ingest.episode import episode_uuid
from pgmemory.ingest.pipeline import EpisodeResult, IngestError
from pgmemory.memory import Memory
from pgmemory.storage.migrate import MIGRATIONS_DIR, ROOT, SQL_DIR

BENCHMARK_NAMES = {"locomo": "LoCoMo", "longmemeval": "LongMemEval"}


@dataclass(frozen=True)
class IngestReport:
    """What loading one conversation took (zeros when the group was reused)."""

    episodes: int
    reused: bool
    failed: int
    seconds: float
    llm_calls: int
    tokens: int

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return asdict(self)


def group_id(benchmark: str, conversation_id: str) -> str:
    """The pgmemory group that holds one benchmark conversation."""
    return f"eval-{benchmark}-{conversation_id}"


def ingestion_fingerprint() -> str:
    """A short hash of the code that decides what ingestion stores: the extractor and ingestion
    modules, the migrations and the stored SQL except search's."""
    package = ROOT / "pgmemory"
    paths = [*(package / "extract").rglob("*.py"), *(package / "ingest").rglob("*.py"),
             *MIGRATIONS_DIR.glob("*.sql"), *(p for p in SQL_DIR.rglob("*.sql") if "search" not in p.name)]
    digest = hashlib.sha256()
    for path in sorted(paths):
        digest.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:10]


def build_marker(memory: Memory) -> str:
    """Names the embedder, the extractor and the ingestion code, so a group built otherwise is
    not reused."""
    extractor = memory.extractor
    model = getattr(getattr(extractor, "client", None), "model", None)
    label = type(extractor).__name__ + (f" {model}" if model else "")
    return f"[pgmemory eval; embedder {memory.embedder.name}; extractor {label}; code {ingestion_fingerprint()}]"


def conversation_marker(memory: Memory, benchmark: str, conversation: Conversation) -> str:
    """The build marker with a hash of what the conversation's episodes say (turn ids, speakers,
    texts, times, sessions), so a group holding another file's turns under the same ids is not
    reused."""
    digest = hashlib.sha256()
    for episode in episodes(benchmark, "", conversation, ""):
        digest.update(json.dumps(episode, sort_keys=True, default=str).encode() + b"\0")
    return f"{build_marker(memory)[:-1]}; content {digest.hexdigest()[:12]}]"


def episode_map(group: str, conversation: Conversation) -> dict[uuid.UUID, str]:
    """Episode UUID -> turn id, to read search results back as turns."""
    return {episode_uuid(group, t.turn_id): t.turn_id for t in conversation.turns}


def episodes(benchmark: str, group: str, conversation: Conversation, marker: str) -> list[dict[str, Any]]:
    """The add_episodes batch of a conversation: one message per turn, in order."""
    name = BENCHMARK_NAMES[benchmark]
    numbers = session_numbers(conversation.turns)
    return [
        {
            "group_id": group,
            "content": t.text,
            "kind": "message",
            "actor": t.speaker,
            "reference_time": t.time,
            "source_description": f"{name} {conversation.conversation_id} session {numbers[t.session_id]} {marker}",
            "episode_id": t.turn_id,
        }
        for t in conversation.turns
    ]


async def is_ingested(memory: Memory, group: str, expected: int, marker: str) -> bool:
    """True when the group holds exactly `expected` episodes, all done, with this build marker."""
    async with memory.pool.acquire() as conn:
        row = await conn.fetchrow(
            "SELECT count(*) AS total,"
            " count(*) FILTER (WHERE status = 'done' AND right(source_description, length($2)) = $2) AS done"
            " FROM pgmemory.episodes WHERE group_id = $1", group, marker)
    return row["total"] == expected and row["done"] == expected


async def ingest_conversation(memory: Memory, benchmark: str, conversation: Conversation,
                              on_episode: Callable[[], None]) -> IngestReport:
    """Reuse the conversation's group if complete, else erase it and ingest every turn."""
    group = group_id(benchmark, conversation.conversation_id)
    marker = conversation_marker(memory, benchmark, conversation)
    if await is_ingested(memory, group, len(conversation.turns), marker):
        for _ in conversation.turns:
            on_episode()
        return IngestReport(len(conversation.turns), True, 0, 0.0, 0, 0)
    await memory.erase_group(group)
    started = time.perf_counter()
    results = await memory.add_episodes(episodes(benchmark, group, conversation, marker),
                                        on_done=lambda _: on_episode(), communities=True)
    done = [r for r in results if isinstance(r, EpisodeResult)]
    return IngestReport(
        episodes=len(results),
        reused=False,
        failed=sum(1 for r in results if isinstance(r, IngestError)),
        seconds=round(time.perf_counter() - started, 3),
        llm_calls=sum(r.llm_calls for r in done),
        tokens=sum(r.prompt_tokens + r.completion_tokens for r in done),
    )
