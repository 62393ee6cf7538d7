"""The JSON shapes shared by the REST and MCP servers: filters and times in, results out."""
from __future__ import annotations

from dataclasses import asdict, fields
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import BeforeValidator

from pgmemory.errors import InvalidInput
from pgmemory.ingest.episode import parse_time
from pgmemory.records import jsonable
from pgmemory.search.config import SearchFilters
from pgmemory.search.types import CommunityHit, EntityHit, EpisodeHit, FactHit, SearchResults

if TYPE_CHECKING:
    from pgmemory.ingest.pipeline import EpisodeResult, IngestError
    from pgmemory.memory import Memory

MAX_GROUPS = 100  # groups one request may name (REST bodies and MCP calls alike)


def _not_a_flag(value: Any) -> Any:
    if isinstance(value, bool):
        raise ValueError("a count must be a number, not true or false")
    return value


# A count in a REST body or an MCP call (limit, max_chars, max_facts, ...): JSON true or false is
# refused, as the Python API refuses limit=True (check_int); pydantic's lax int reads true as 1.
Count = Annotated[int, BeforeValidator(_not_a_flag)]
TIME_FILTERS = tuple(f.name for f in fields(SearchFilters) if f.type == "datetime | None")
FILTER_FIELDS = tuple(f.name for f in fields(SearchFilters))


def validation_line(errors: list[Any]) -> str:
    """pydantic's validation errors as one line: where the first is (a dotted path, "body" left
    out) and what is wrong there."""
    first = errors[0] if errors else {}
    if first.get("type") == "json_invalid":  # FastAPI: the body is no JSON; loc ends at the character
        at = first.get("loc", ())[-1:] or ("?",)
        return f"body is not valid JSON: {first.get('ctx', {}).get('error', 'decode error')} at character {at[0]}"
    where = ".".join(str(p) for p in first.get("loc", ()) if p != "body")
    line = f"{where or 'body'}: {first.get('msg', 'invalid request')}"
    return line.splitlines()[0]


def body_line(exc: BaseException) -> str:
    """Why a request body could not be read as JSON at all (what FastAPI reports as 'There was an
    error parsing the body'), in one line."""
    if isinstance(exc, UnicodeDecodeError):
        return f"body is not UTF-8 text: byte 0x{exc.object[exc.start]:02x} at position {exc.start}"
    if isinstance(exc, RecursionError):
        return "body nests its arrays and objects too deeply to be read"
    return f"body is not valid JSON: {' '.join(str(exc).split(';')[0].split()) or type(exc).__name__}"[:300]


def provider_line(exc: BaseException) -> str:
    """A failed embedding or LLM provider call (pgmemory.providers ProviderError) as one line that
    says which provider failed, for the surfaces: the caller can do nothing about it but retry."""
    from pgmemory.providers.embedder import EmbeddingError

    what = "embedding provider" if isinstance(exc, EmbeddingError) else "LLM provider"
    return f"the {what} failed: {' '.join(str(exc).split()) or type(exc).__name__}"[:1000]


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
    from pgmemory.ingest.pipeline import IngestError  # not at import: the remote CLI search loads no driver

    if isinstance(result, IngestError):
        return {"episode_id": str(result.episode_id), "status": "failed", "error": str(result)}
    return jsonable(asdict(result))


async def enqueue_json(memory: Memory, group_id: str, content: str, **fields: Any) -> dict[str, Any]:
    """Queue one episode (idempotent by id) and say where it stands as it is answered: 'pending'
    (queued), or 'processing' / 'done' / 'failed' when a worker took it already or the same
    episode was posted before (a client re-posting a done episode is not told to wait for it)."""
    episode_id = await memory.enqueue_episode(group_id, content, **fields)
    row = await memory.episode_status(episode_id, group_id)
    return {"episode_id": str(episode_id), "group_id": group_id, "status": row["status"] if row else "pending"}


async def enqueue_batch_json(memory: Memory, group_id: str, items: list[dict[str, Any]]) -> dict[str, Any]:
    """Queue a batch (all or none) and say where each episode stands, as enqueue_json does for one;
    `status` is theirs when they all agree, else 'mixed' (see `episodes`)."""
    ids = await memory.enqueue_episodes(items)
    rows = await memory.episode_statuses(group_id, ids)
    statuses = [row["status"] if row else "pending" for row in rows]
    return {"group_id": group_id, "status": statuses[0] if len(set(statuses)) == 1 else "mixed",
            "episode_ids": [str(i) for i in ids],
            "episodes": [{"episode_id": str(i), "status": s} for i, s in zip(ids, statuses)]}


_HIT_TYPES = {"facts": FactHit, "entities": EntityHit, "communities": CommunityHit, "episodes": EpisodeHit}


def results_from_json(data: dict[str, Any]) -> SearchResults:
    """SearchResults back from results_json (times parsed; ids stay strings)."""
    out = SearchResults()
    for kind, cls in _HIT_TYPES.items():
        times = [f.name for f in fields(cls) if "datetime" in str(f.type)]
        hits = []
        for item in data.get(kind, []):
            item = {k: v for k, v in item.items() if k in {f.name for f in fields(cls)}}
            for name in times:
                if isinstance(item.get(name), str):
                    item[name] = datetime.fromisoformat(item[name])
            hits.append(cls(**item))
        setattr(out, kind, hits)
    return out
