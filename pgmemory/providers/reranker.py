"""Cross-encoder rerankers: score (query, passage) pairs. An OpenAI-compatible LLM, or a
local sentence-transformers cross-encoder when one is installed on disk."""
from __future__ import annotations

import asyncio
import os
from typing import Protocol

from pydantic import BaseModel, Field

from pgmemory.errors import SetupError
from pgmemory.providers.llm import LLMClient, Usage


class CrossEncoder(Protocol):
    """Relevance of each passage to the query; higher is more relevant."""

    async def score(self, query: str, passages: list[str]) -> list[float]: ...


class _Score(BaseModel):
    id: str = Field(description="Passage id, e.g. P3")
    score: float = Field(description="Relevance to the query from 0 (none) to 10 (answers it)")


class _Scores(BaseModel):
    scores: list[_Score]


_SYSTEM = ("You rank passages for a search engine. For every passage, give a relevance score from 0 "
           "(unrelated) to 10 (directly answers the query). Judge each passage on its own.")


class LLMCrossEncoder:
    """Scores all passages of one query in a single LLM call."""

    def __init__(self, client: LLMClient) -> None:
        self.client = client
        self.usage = Usage()

    async def score(self, query: str, passages: list[str]) -> list[float]:
        """One structured call; passages the model skips score 0."""
        if not passages:
            return []
        listing = "\n".join(f"P{i}: {p}" for i, p in enumerate(passages))
        reply = await self.client.complete(
            [{"role": "system", "content": _SYSTEM},
             {"role": "user", "content": f"QUERY: {query}\n\nPASSAGES:\n{listing}"}],
            _Scores, usage=self.usage)
        by_id = {s.id.strip().upper(): s.score for s in reply.scores}
        return [float(by_id.get(f"P{i}", 0.0)) for i in range(len(passages))]


class LocalCrossEncoder:
    """A sentence-transformers CrossEncoder loaded from a local directory (never downloaded)."""

    def __init__(self, path: str) -> None:
        if not os.path.isdir(path):
            raise SetupError(f"cross-encoder model directory {path!r} does not exist")
        self.path = path
        self._model = None

    async def score(self, query: str, passages: list[str]) -> list[float]:
        """Scores from the model, computed in a worker thread."""
        def run() -> list[float]:
            if self._model is None:
                os.environ.setdefault("HF_HUB_OFFLINE", "1")
                from sentence_transformers import CrossEncoder as STCrossEncoder

                self._model = STCrossEncoder(self.path, device="cpu")
            return [float(s) for s in self._model.predict([(query, p) for p in passages])]
        return await asyncio.to_thread(run) if passages else []


def cross_encoder_from_env() -> CrossEncoder | None:
    """PGMEMORY_CROSS_ENCODER (a local model directory) wins; else the configured LLM; else None."""
    path = os.environ.get("PGMEMORY_CROSS_ENCODER")
    if path:
        return LocalCrossEncoder(path)
    client = LLMClient.from_env()
    return LLMCrossEncoder(client) if client else None
