"""Reuse instead of recompute: identical texts in a call are embedded once, hot texts come from an LRU."""
from __future__ import annotations

from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable

DEFAULT_CACHE_ENTRIES = 4096


class EmbeddingCache:
    """A small in-process LRU of text -> vector (entity names, repeated queries); 0 entries disables it."""

    def __init__(self, max_entries: int = DEFAULT_CACHE_ENTRIES) -> None:
        if max_entries < 0:
            raise ValueError(f"embedding cache size must be >= 0, got {max_entries}")
        self.max_entries = max_entries
        self._items: OrderedDict[str, list[float]] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._items)

    def get(self, text: str) -> list[float] | None:
        """A copy of the cached vector of ``text`` (marked recently used), or None."""
        vec = self._items.get(text)
        if vec is None:
            self.misses += 1
            return None
        self._items.move_to_end(text)
        self.hits += 1
        return list(vec)

    def discard(self, texts: Iterable[str]) -> None:
        """Forget ``texts`` (those cached), e.g. so that a timed search embeds its query as a first one does."""
        for text in texts:
            self._items.pop(text, None)

    def clear(self) -> None:
        """Forget every text (after an erase: the cache must not keep the erased words)."""
        self._items.clear()

    def put(self, text: str, vec: list[float]) -> None:
        """Remember ``vec`` for ``text``, evicting the least recently used entry beyond the limit."""
        if self.max_entries == 0:
            return
        self._items[text] = list(vec)
        self._items.move_to_end(text)
        while len(self._items) > self.max_entries:
            self._items.popitem(last=False)


async def embed_reusing(texts: list[str], cache: EmbeddingCache,
                        compute: Callable[[list[str]], Awaitable[list[list[float]]]]) -> list[list[float]]:
    """Vectors for ``texts`` in order: cached ones reused, the distinct rest computed in ONE call."""
    found: dict[str, list[float]] = {}
    missing: list[str] = []
    pending: set[str] = set()
    for text in texts:
        if text in found or text in pending:
            continue
        vec = cache.get(text)
        if vec is None:
            missing.append(text)
            pending.add(text)
        else:
            found[text] = vec
    if missing:
        for text, vec in zip(missing, await compute(missing)):
            cache.put(text, vec)
            found[text] = vec
    return [list(found[t]) for t in texts]
