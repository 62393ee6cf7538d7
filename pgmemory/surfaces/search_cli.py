"""`pgmemory search`: results as readable tables, or one JSON object with --json. With PGMEMORY_URL
set (and PGMEMORY_API_KEY), the search runs on that REST server, which has the embedder loaded
already, so the command starts no model and opens no database connection."""
from __future__ import annotations

import json
import os
from datetime import datetime, timezone
from typing import Any

from pgmemory.errors import DatabaseUnavailable, InvalidInput, PgMemoryError
from pgmemory.records import jsonable
from pgmemory.search.config import SearchFilters
from pgmemory.search.types import SINCE_FOREVER, SearchResults


def cli_time(value: str, flag: str) -> datetime:
    """A --as-of / --known-at value: ISO 8601; a bare date or time without a zone is read as UTC
    (the Python API stays strict and refuses naive datetimes)."""
    try:
        parsed = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        raise InvalidInput(f"{flag} {value!r} is not an ISO 8601 date or datetime "
                           "(e.g. 2022-01-01 or 2022-01-01T09:00:00+02:00)") from None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=timezone.utc)


def _day(value: datetime | None, missing: str) -> str:
    if value == SINCE_FOREVER:
        return "forever"
    return value.astimezone(timezone.utc).strftime("%Y-%m-%d") if value else missing


def _cut(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[:width - 1] + "…"


def render(results: SearchResults) -> str:
    """Readable tables of the four result lists (dates in UTC)."""
    out = [f"FACTS ({len(results.facts)}; dates UTC)",
           f"  {'score':>6}  {'valid from':<10}  {'valid to':<10}  {'known since':<11}  fact"]
    for f in results.facts:
        start = "unknown" if f.valid_from_unknown else _day(f.valid_from, "")
        out.append(f"  {f.score:6.4f}  {start:<10}  {_day(f.valid_to, 'present'):<10}  "
                   f"{_day(f.recorded_from, ''):<11}  {_cut(f.fact, 80)}")
    out.append(f"ENTITIES ({len(results.entities)})")
    for e in results.entities:
        out.append(f"  {e.score:6.4f}  {_cut(e.name, 30):<30}  {_cut(e.summary, 70)}".rstrip())
    if results.communities:
        out.append(f"COMMUNITIES ({len(results.communities)})")
        for c in results.communities:
            out.append(f"  {c.score:6.4f}  {_cut(c.name, 30):<30}  {_cut(c.summary, 70)}")
    out.append(f"EPISODES ({len(results.episodes)})")
    for ep in results.episodes:
        who = f"{ep.actor}: " if ep.actor else ""
        out.append(f"  {ep.score:6.4f}  {_day(ep.valid_at, ''):<10}  {_cut(who + ep.content, 90)}")
    return "\n".join(out)


async def search_command(query: str, group: str, *, limit: int, recipe: str, as_of: str | None,
                         known_at: str | None, include_invalidated: bool, as_json: bool) -> int:
    """Run one search and print it."""
    filters = SearchFilters(
        as_of=cli_time(as_of, "--as-of") if as_of else None,
        known_at=cli_time(known_at, "--known-at") if known_at else None,
        include_invalidated=include_invalidated)
    url = os.environ.get("PGMEMORY_URL")
    if url:
        results = await remote_search(url, query, group, limit=limit, recipe=recipe, filters=filters)
    else:
        from pgmemory.memory import Memory

        async with Memory.open() as memory:
            results = await memory.search(query, group_ids=[group], limit=limit, config=recipe, filters=filters)
    if as_json:
        print(json.dumps(jsonable(results.to_dict()), default=str, indent=2))
    else:
        print(render(results))
    return 0


async def remote_search(url: str, query: str, group: str, *, limit: int, recipe: str,
                        filters: SearchFilters) -> SearchResults:
    """POST /v1/search on a running `pgmemory serve` (PGMEMORY_API_KEY as the bearer key), with the
    standard library's HTTP client: importing an HTTP package would cost more than the search."""
    import asyncio
    import urllib.error
    import urllib.parse
    import urllib.request

    from pgmemory.surfaces.wire import results_from_json

    url = url.strip()
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # (raises ValueError for a port that is not a number)
    except ValueError as exc:
        parts, reason = None, str(exc)
    else:
        reason = "" if parts.scheme in ("http", "https") and parts.hostname else "not an http(s) URL"
    if reason:
        raise InvalidInput(f"PGMEMORY_URL {url!r:.200} is not the address of a pgmemory server ({reason}; e.g. "
                           "http://127.0.0.1:8080); unset it to search the database directly")
    body: dict[str, Any] = {"query": query, "group_ids": [group], "limit": limit, "recipe": recipe,
                            "filters": {k: v for k, v in filters.to_options().items() if v not in (None, [], False)}}
    headers = {"Content-Type": "application/json"}
    if os.environ.get("PGMEMORY_API_KEY"):
        headers["Authorization"] = f"Bearer {os.environ['PGMEMORY_API_KEY']}"
    request = urllib.request.Request(url.rstrip("/") + "/v1/search", data=json.dumps(body).encode(),
                                     headers=headers, method="POST")

    def post() -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()

    try:
        status, raw = await asyncio.to_thread(post)
    except (urllib.error.URLError, OSError) as exc:
        raise DatabaseUnavailable(f"pgmemory server {url} unreachable ({getattr(exc, 'reason', exc)}); "
                                  "unset PGMEMORY_URL to search the database directly") from None
    if status != 200:
        try:
            message = json.loads(raw)["error"]["message"]
        except (ValueError, KeyError, TypeError):
            message = raw[:200].decode(errors="replace")
        raise (InvalidInput if status < 500 else PgMemoryError)(f"server answered {status}: {message}")
    try:
        return results_from_json(json.loads(raw))
    except (ValueError, KeyError, TypeError, AttributeError):
        raise PgMemoryError(f"{url} answered 200 with something other than a pgmemory search result "
                            f"({raw[:80].decode(errors='replace')!r}): is PGMEMORY_URL a `pgmemory serve`?") from None
