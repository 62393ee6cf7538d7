"""Wrappers that time the non-database work of ingestion (extractor and embedder calls)."""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from pgmemory.extract.types import Extractor
from pgmemory.providers.embedder import Embedder


@dataclass
class Stopwatch:
    """Seconds spent so far outside the database (extractor and embedder), summed over calls."""

    total: float = 0.0


class TimedExtractor:
    """Delegates to an extractor and adds the time of every call to a Stopwatch."""

    def __init__(self, inner: Extractor, watch: Stopwatch) -> None:
        self.inner = inner
        self.watch = watch
        self.client = getattr(inner, "client", None)
        self.decides_locally = getattr(inner, "decides_locally", False)

    async def _timed(self, call: Any) -> Any:
        started = time.perf_counter()
        try:
            return await call
        finally:
            self.watch.total += time.perf_counter() - started

    async def extract(self, episode, previous, usage, *, entity_types=None, edge_types=None):
        """Timed ``extract``."""
        return await self._timed(self.inner.extract(episode, previous, usage, entity_types=entity_types,
                                                    edge_types=edge_types))

    async def resolve_entities(self, episode, previous, questions, usage):
        """Timed ``resolve_entities``."""
        return await self._timed(self.inner.resolve_entities(episode, previous, questions, usage))

    async def judge_facts(self, episode, questions, usage):
        """Timed ``judge_facts``."""
        return await self._timed(self.inner.judge_facts(episode, questions, usage))


class TimedEmbedder:
    """Delegates to an embedder and adds the time of every call to a Stopwatch."""

    def __init__(self, inner: Embedder, watch: Stopwatch) -> None:
        self.inner = inner
        self.watch = watch
        self.dim = inner.dim
        self.name = inner.name

    async def embed(self, texts: list[str]) -> list[list[float]]:
        """Timed ``embed``."""
        started = time.perf_counter()
        try:
            return await self.inner.embed(texts)
        finally:
            self.watch.total += time.perf_counter() - started
