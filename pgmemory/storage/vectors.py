"""Vector values for SQL as pgvector text literals, for the reads that send arrays of vectors
(`$n::text[]::vector[]`). The apply (ingest/pipeline.py) and the search's query vector
(search/candidates.py) send theirs in binary instead, through pgvector's codec on the pool."""
from __future__ import annotations

from collections.abc import Sequence


def vector_literals(vectors: Sequence[Sequence[float]]) -> list[str]:
    """pgvector text form of each vector, for a `$n::text[]::vector[]` parameter."""
    return ["[" + ",".join(f"{float(x):.7g}" for x in v) + "]" for v in vectors]
