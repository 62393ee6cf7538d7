"""The JSON shapes shared by the REST and MCP servers: filters and times in, results out."""
from __future__ import annotations

from dataclasses import asdict, fields
from datetime import datetime, timezone
from typing import Any

from pgmemory.errors import InvalidInput
from pgmemory.ingest.episode import parse_time
from pgmemory.ingest.pipeline import EpisodeResult, IngestError
from pgmemory.records import jsonable
from pgmemory.search.config import SearchFilters
from pgmemory.search.types import SearchResults

TIME_FILTERS = tuple(f.name for f in fields(SearchFilters) if f.type == "datetime | None")
FILTER_FIELDS = tuple(f.name for f in fields(SearchFilters))


def filters_from_json(data: dict[str, Any] | None) -> SearchFilters:
    """SearchFilters from a JSON object: times as ISO 8601 strings with a zone, lists as lists."""
    if data is None:
        return SearchFilters()
    if not isinstance(data, dict):
        raise InvalidInput("filters must be an object")
    unknown = sorted(k for k in data if k not in FILTER_FIELDS)
    if unknown:
        raise InvalidInput(f"unknown filter(s) {', '.join(unknown)[:200]}; allowed: {', '.join(FILTER_FIELDS)}")
    values = {k: v for k, v in data.items() if v is not None}
    for name in TIME_FILTERS:
        if name in values:
            values[name] = parse_time(values[name], name)
    for name in ("relation_types", "labels"):
        if name in values and isinstance(values[name], list):
            values[name] = tuple(values[name])
    return SearchFilters(**values)


def time_or_now(value: str | None, name: str = "reference_time") -> datetime:
    """An ISO 8601 time with a zone, or now (UTC) when omitted."""
    return datetime.now(timezone.utc) if value is None else parse_time(value, name)


def results_json(results: SearchResults) -> dict[str, Any]:
    """Search results as JSON (ids and times as strings)."""
    return jsonable(results.to_dict())


def ingest_json(result: EpisodeResult | IngestError) -> dict[str, Any]:
    """What ingesting one episode did, or why it failed (the episode is kept as 'failed')."""
    if isinstance(result, IngestError):
        return {"episode_id": str(result.episode_id), "status": "failed", "error": str(result)}
    return jsonable(asdict(result))
