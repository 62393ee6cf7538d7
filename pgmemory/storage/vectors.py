"""Vector values for SQL: arrays of vectors travel as pgvector text literals (asyncpg has no vector[] codec)."""
from __future__ import annotations

from collections.abc import Sequence


def vector_literals(vectors: Sequence[Sequence[float]]) -> list[str]:
    """pgvector text form of each vector, for a `$n::text[]::vector[]` parameter."""
    return ["[" + ",".join(f"{float(x):.7g}" for x in v) + "]" for v in vectors]
