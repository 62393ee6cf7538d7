"""Vector values for SQL. The package sends every vector parameter in pgvector's binary form
(`as_vectors`: its codec is registered on every pooled connection, so the floats are packed in C
and not printed and parsed back as text). One exception: the search's query vector goes as real[] on
Citus, which cannot EXPLAIN a delegated call with an extension-typed parameter (search/candidates.py).
Text literals (`vector_literals`) remain for callers without the codec: psycopg, bench/ and tests."""
from __future__ import annotations

from collections.abc import Sequence

from pgvector import Vector


def as_vectors(vectors: Sequence[Sequence[float]]) -> list[Vector]:
    """pgvector values for a `vector` / `vector[]` parameter of a pooled asyncpg connection."""
    return [Vector(list(v)) for v in vectors]


def vector_literals(vectors: Sequence[Sequence[float]]) -> list[str]:
    """pgvector text form of each vector, for a `$n::text::vector` parameter (no codec needed)."""
    return ["[" + ",".join(f"{float(x):.7g}" for x in v) + "]" for v in vectors]
