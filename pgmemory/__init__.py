"""pgmemory: a Postgres-native, bi-temporal knowledge-graph memory for LLM agents."""
from pgmemory.errors import DatabaseUnavailable, InvalidInput, MigrationError, PgMemoryError, SetupError
from pgmemory.ingest.pipeline import EpisodeResult, IngestError
from pgmemory.memory import DeleteResult, Memory, SyncMemory

__all__ = [
    "DatabaseUnavailable", "DeleteResult", "EpisodeResult", "IngestError", "InvalidInput", "Memory",
    "MigrationError", "PgMemoryError", "SetupError", "SyncMemory",
]
__version__ = "0.1.0"
