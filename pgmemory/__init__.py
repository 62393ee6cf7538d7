"""pgmemory: a Postgres-native, bi-temporal knowledge-graph memory for LLM agents."""
from pgmemory.errors import DatabaseUnavailable, InvalidInput, MigrationError, PgMemoryError, SetupError
from pgmemory.ingest.pipeline import EpisodeResult, IngestError
from pgmemory.memory import DeleteResult, Memory
from pgmemory.records import EntityRecord, EpisodeRecord, FactVersion
from pgmemory.search.config import RECIPES, SearchConfig, SearchFilters
from pgmemory.search.types import CommunityHit, EntityHit, EpisodeHit, FactHit, SearchResults
from pgmemory.sync import SyncMemory

__all__ = [
    "RECIPES", "CommunityHit", "EntityHit", "EpisodeHit", "FactHit", "SearchConfig", "SearchFilters",
    "SearchResults", "DatabaseUnavailable", "DeleteResult", "EntityRecord", "EpisodeRecord", "EpisodeResult",
    "FactVersion", "IngestError", "InvalidInput", "Memory", "MigrationError", "PgMemoryError", "SetupError",
    "SyncMemory",
]
__version__ = "0.1.0"
