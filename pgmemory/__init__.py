"""pgmemory: a Postgres-native, bi-temporal knowledge-graph memory for LLM agents."""
from pgmemory.errors import DatabaseUnavailable, InvalidInput, MigrationError, PgMemoryError, SetupError
from pgmemory.ingest.pipeline import EpisodeResult, IngestError
from pgmemory.memory import DeleteResult, Memory, SyncMemory
from pgmemory.search.config import RECIPES, SearchConfig, SearchFilters
from pgmemory.search.types import CommunityHit, EntityHit, EpisodeHit, FactHit, SearchResults

__all__ = [
    "RECIPES", "CommunityHit", "EntityHit", "EpisodeHit", "FactHit", "SearchConfig", "SearchFilters",
    "SearchResults", "DatabaseUnavailable", "DeleteResult", "EpisodeResult", "IngestError", "InvalidInput", "Memory",
    "MigrationError", "PgMemoryError", "SetupError", "SyncMemory",
]
__version__ = "0.1.0"
