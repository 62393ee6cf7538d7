"""pgmemory: a Postgres-native, bi-temporal knowledge-graph memory for LLM agents.

The public names below are imported on first use (PEP 562), so `import pgmemory` and the CLI
start fast; `from pgmemory import Memory` imports what Memory needs.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from pgmemory.errors import DatabaseUnavailable, InvalidInput, MigrationError, PgMemoryError, SetupError

_LAZY = {
    "EpisodeResult": "pgmemory.ingest.pipeline", "IngestError": "pgmemory.ingest.pipeline",
    "DeleteResult": "pgmemory.memory", "Memory": "pgmemory.memory",
    "EntityRecord": "pgmemory.records", "EpisodeRecord": "pgmemory.records", "FactVersion": "pgmemory.records",
    "RECIPES": "pgmemory.search.config", "SearchConfig": "pgmemory.search.config",
    "SearchFilters": "pgmemory.search.config",
    "CommunityHit": "pgmemory.search.types", "EntityHit": "pgmemory.search.types",
    "EpisodeHit": "pgmemory.search.types", "FactHit": "pgmemory.search.types",
    "SearchResults": "pgmemory.search.types",
    "SyncMemory": "pgmemory.sync",
}

if TYPE_CHECKING:
    from pgmemory.ingest.pipeline import EpisodeResult, IngestError
    from pgmemory.memory import DeleteResult, Memory
    from pgmemory.records import EntityRecord, EpisodeRecord, FactVersion
    from pgmemory.search.config import RECIPES, SearchConfig, SearchFilters
    from pgmemory.search.types import CommunityHit, EntityHit, EpisodeHit, FactHit, SearchResults
    from pgmemory.sync import SyncMemory


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'pgmemory' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])


__all__ = [
    "RECIPES", "CommunityHit", "EntityHit", "EpisodeHit", "FactHit", "SearchConfig", "SearchFilters",
    "SearchResults", "DatabaseUnavailable", "DeleteResult", "EntityRecord", "EpisodeRecord", "EpisodeResult",
    "FactVersion", "IngestError", "InvalidInput", "Memory", "MigrationError", "PgMemoryError", "SetupError",
    "SyncMemory",
]
__version__ = "0.1.0"
