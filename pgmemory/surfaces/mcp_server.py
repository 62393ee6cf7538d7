"""`pgmemory mcp`: the MCP server (official `mcp` SDK) with Graphiti's tools plus as-of search.

Tools: add_memory, search_memory_nodes, search_memory_facts (both with as_of = valid time and
known_at = transaction time), get_episodes, delete_episode, delete_entity_edge, get_entity_edge,
clear_graph, get_status. Transports: stdio (a local agent launches it; trusted like the user who
runs it) and streamable HTTP (every call needs an API key, `Authorization: Bearer pgm_...`,
allowed on the groups it names). Episodes are queued and processed by a worker in this process.
A tool given bad input answers is_error with one line; it never crashes the server.
"""
from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass
from typing import Any

from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from pydantic import StrictBool, ValidationError

from pgmemory.errors import PgMemoryError
from pgmemory.ingest.episode import episode_uuid, validate_group_id
from pgmemory.ingest.pipeline import IngestError
from pgmemory.memory import Memory
from pgmemory.providers.llm import ProviderError
from pgmemory.records import jsonable
from pgmemory.search.config import MAX_LIMIT, METHODS, SearchConfig, SearchFilters
from pgmemory.storage.connect import connection_lost, unavailable_reason
from pgmemory.storage.request_groups import narrow_to
from pgmemory.surfaces.api_keys import ApiKey, KeyStore
from pgmemory.surfaces.serving import served_memory
from pgmemory.surfaces.wire import (MAX_GROUPS, Count, enqueue_json, ingest_json, provider_line, time_or_now,
                                   validation_line)
from pgmemory.validate import check_int, check_text, check_uuid

INSTRUCTIONS = (
    "pgmemory is a bi-temporal knowledge-graph memory. add_memory stores an episode (text, chat "
    "messages as 'Speaker: text' lines, or JSON); facts and entities are extracted from it. "
    "search_memory_facts finds facts with their valid time; pass as_of (ISO 8601 with a zone) to ask "
    "what was true then, and known_at to ask what was believed then. search_memory_nodes finds "
    "entities with their summaries.")

SOURCES = {"text": "text", "message": "message", "json": "json"}

# A tool's true/false argument: JSON true or false only. pydantic's lax mode would read "yes", "no",
# "1" or 0 as a boolean, which the Python API refuses (check_bool); a model sending "no" for erase
# or confirm gets told, not guessed at.
Flag = StrictBool


@dataclass
class State:
    """What the tools share: the memory, the key store (HTTP with auth) and the default group."""

    memory: Memory | None = None
    keys: KeyStore | None = None
    default_group: str | None = None


class Server(MCPServer):
    """MCPServer whose refusal of a tool's arguments (wrong type, missing) is one line naming the
    argument, not pydantic's multi-line report."""

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            if isinstance(exc, UnexpectedToolError) or not isinstance(exc.__cause__, ValidationError):
                raise
            raise ToolError(f"Error executing tool {name}: {validation_line(exc.__cause__.errors())}") \
                from exc.__cause__


def build_server(memory: Memory | None = None, *, default_group: str | None = None, auth: bool = True,
                 worker_concurrency: int = 1, open_options: dict[str, Any] | None = None) -> MCPServer:
    """The MCP server. With `memory`, that one is used (and not closed); otherwise Memory.open at
    start-up. With `auth`, every call needs an API key in its headers (a call without headers, such
    as one in process, is refused): pass auth=False for stdio or an app calling its own server."""
    state = State(default_group=default_group)

    @contextlib.asynccontextmanager
    async def lifespan(_server: MCPServer) -> AsyncIterator[dict]:
        async with served_memory(memory, worker_concurrency=worker_concurrency, auth=auth,
                                 open_options=open_options) as mem:
            state.memory = mem
            state.keys = KeyStore(mem.pool) if auth else None
            yield {}

    server = Server("pgmemory", instructions=INSTRUCTIONS, version="0.1.0", lifespan=lifespan)
    _tools(server, state)
    return server


async def _key(ctx: Context, state: State) -> ApiKey | None:
    """The caller's key (None without auth: stdio, or a server built with auth=False); ToolError
    without a valid one. With auth, a call that carries no headers is refused, not trusted."""
    if state.keys is None:
        return None
    headers = (ctx.headers if ctx is not None else None) or {}
    token = headers.get("x-api-key")
    header = headers.get("authorization", "")
    if token is None and header.lower().startswith("bearer "):
        token = header[7:].strip()
    key = await state.keys.lookup(token) if token else None
    if key is None:
        raise ToolError("unauthorized: a valid API key is required (Authorization: Bearer pgm_...)")
    return key


async def _groups(ctx: Context, state: State, groups: list[str] | str | None, *, write: bool = False) -> list[str]:
    """The groups a call names (else the default group), each allowed for the caller's key."""
    if groups is None or groups == []:
        if state.default_group is None:
            raise ToolError("no group given and the server has no default group (pgmemory mcp --group G)")
        groups = [state.default_group]
    if isinstance(groups, str):
        groups = [groups]
    if len(groups) > MAX_GROUPS:
        raise ToolError(f"group_ids names {len(groups)} groups; at most {MAX_GROUPS} per call")
    key = await _key(ctx, state)
    for group in groups:
        validate_group_id(group)  # a bad id is named as such, not as one the key may not use
        if key is not None and not (key.can_write(group) if write else key.can_read(group)):
            raise ToolError(f"forbidden: this key may not {'write' if write else 'read'} group {group!r:.80}")
    narrow_to(groups)  # this call's database connections see only these groups (with RLS installed)
    return list(groups)


def _tool_errors(fn):
    """Turn pgmemory's errors, a failed embedding or LLM provider call, and Postgres gone away
    into the one-line ToolError the model reads."""
    import functools

    @functools.wraps(fn)
    async def wrapped(*args: Any, **kwargs: Any) -> Any:
        try:
            return await fn(*args, **kwargs)
        except PgMemoryError as exc:
            raise ToolError(str(exc)) from None
        except ProviderError as exc:
            raise ToolError(provider_line(exc)) from None
        except Exception as exc:
            lost = connection_lost(exc)
            if lost is None:
                raise
            raise ToolError(f"database unavailable: {unavailable_reason(lost)}; try again once it is back") from None
    return wrapped


def _filters(as_of: str | None, known_at: str | None, include_invalidated: bool = False,
             labels: tuple[str, ...] = ()) -> SearchFilters:
    from pgmemory.ingest.episode import parse_time

    return SearchFilters(as_of=parse_time(as_of, "as_of") if as_of is not None else None,
                         known_at=parse_time(known_at, "known_at") if known_at is not None else None,
                         include_invalidated=include_invalidated, labels=labels)


def _config(kind: str, center: str | None) -> SearchConfig:
    """A search of one kind: hybrid with RRF, or with a centre every method ranked by graph distance."""
    if center is None:
        return SearchConfig(kinds=(kind,), methods=("cosine", "fulltext"), reranker="rrf")
    check_uuid(center, "center_node_uuid")  # named as the caller gave it, not as SearchConfig's center
    return SearchConfig(kinds=(kind,), methods=METHODS, reranker="node_distance", center=center)


def _tools(server: MCPServer, state: State) -> None:
    def mem() -> Memory:
        assert state.memory is not None
        return state.memory

    @server.tool()
    @_tool_errors
    async def add_memory(name: str, episode_body: str, ctx: Context, group_id: str | None = None,
                         source: str = "text", source_description: str = "", uuid: str | None = None,
                         reference_time: str | None = None, metadata: dict[str, Any] | None = None,
                         wait: Flag = False) -> dict[str, Any]:
        """Add an episode to memory. source: "text", "message" (chat lines "Speaker: text") or
        "json" (a JSON string). reference_time: when it was said (ISO 8601 with a zone; default
        now). Queued and processed in the background unless wait is true; returns its episode id."""
        [group] = await _groups(ctx, state, group_id, write=True)
        if source not in SOURCES:
            raise ToolError(f"unknown source {source!r:.40}: use text, message or json")
        if uuid is not None:
            episode_uuid(group, uuid, "uuid")  # a bad id is named as the argument it came in, not episode_id
        fields = dict(kind=SOURCES[source], reference_time=time_or_now(reference_time),
                      source_description=source_description, episode_id=uuid,
                      metadata={**(metadata or {}), "name": name} if name else metadata)
        if wait:
            try:
                return ingest_json(await mem().add_episode(group, episode_body, **fields))
            except IngestError as exc:
                return ingest_json(exc)
        out = await enqueue_json(mem(), group, episode_body, **fields)
        said = "queued for processing" if out["status"] == "pending" else out["status"]
        return {**out, "message": f"episode {name!r:.60} {said}"}

    @server.tool()
    @_tool_errors
    async def search_memory_nodes(query: str, ctx: Context, group_ids: list[str] | None = None,
                                  max_nodes: Count = 10, center_node_uuid: str | None = None,
                                  entity: str | None = None, as_of: str | None = None,
                                  known_at: str | None = None) -> dict[str, Any]:
        """Search entities (nodes) with their summaries. entity: only entities with this label.
        center_node_uuid: rank by graph distance from that entity. as_of / known_at (ISO 8601 with a
        zone): entities as they were at that valid time / as believed at that transaction time."""
        groups = await _groups(ctx, state, group_ids)
        check_int(max_nodes, "max_nodes", 1, MAX_LIMIT)  # named as the caller gave it, not as the search's `limit`
        if entity is not None:
            check_text(entity, "entity", max_chars=200)  # named as the caller gave it, not as the filter's labels
        config = _config("entities", center_node_uuid)
        results = await mem().search(query, group_ids=groups, limit=max_nodes, config=config,
                                     filters=_filters(as_of, known_at, labels=(entity,) if entity is not None else ()))
        return {"nodes": [jsonable({"uuid": e.id, "name": e.name, "summary": e.summary, "labels": e.labels,
                                    "group_id": e.group_id, "attributes": e.attributes}) for e in results.entities]}

    @server.tool()
    @_tool_errors
    async def search_memory_facts(query: str, ctx: Context, group_ids: list[str] | None = None,
                                  max_facts: Count = 10, center_node_uuid: str | None = None,
                                  as_of: str | None = None, known_at: str | None = None,
                                  include_invalidated: Flag = False) -> dict[str, Any]:
        """Search facts (edges) with their valid time. as_of: what was true at that time (valid
        time); known_at: as believed at that time (transaction time); both ISO 8601 with a zone.
        Ended facts are left out unless include_invalidated."""
        groups = await _groups(ctx, state, group_ids)
        check_int(max_facts, "max_facts", 1, MAX_LIMIT)
        config = _config("facts", center_node_uuid)
        results = await mem().search(query, group_ids=groups, limit=max_facts, config=config,
                                     filters=_filters(as_of, known_at, include_invalidated))
        return {"facts": [_fact_json(f) for f in results.facts]}

    @server.tool()
    @_tool_errors
    async def get_episodes(ctx: Context, group_id: str | None = None, last_n: Count = 10,
                           before_id: str | None = None) -> dict[str, Any]:
        """The group's latest episodes (oldest first) with their processing status. To page back,
        pass the first (oldest) returned episode's id as before_id."""
        [group] = await _groups(ctx, state, group_id)
        return {"episodes": [e.to_dict() for e in await mem().get_episodes(group, last_n=last_n,
                                                                          before_id=before_id)]}

    @server.tool()
    @_tool_errors
    async def delete_episode(uuid: str, ctx: Context, group_id: str | None = None, erase: Flag = False) -> dict[str, Any]:
        """Delete an episode as if it had never been added (its facts re-derived from the others);
        erase: also remove its text from history (an episode deleted earlier can still be erased)."""
        [group] = await _groups(ctx, state, group_id, write=True)
        episode_uuid(group, uuid, "uuid")  # a bad id is named as the argument it came in
        return asdict(await mem().delete_episode(group, uuid, erase=erase))

    @server.tool()
    @_tool_errors
    async def delete_entity_edge(uuid: str, ctx: Context, group_id: str | None = None) -> dict[str, Any]:
        """Retract a fact (edge): no longer believed; its history is kept."""
        [group] = await _groups(ctx, state, group_id, write=True)
        return jsonable(await mem().retract_fact(group, uuid))

    @server.tool()
    @_tool_errors
    async def get_entity_edge(uuid: str, ctx: Context, group_id: str | None = None) -> dict[str, Any]:
        """One fact (edge): its believed version (null if retracted) and every version."""
        [group] = await _groups(ctx, state, group_id)
        versions = await mem().fact_history(group, uuid)
        if not versions:
            raise ToolError(f"fact {uuid!r:.80} not found in group {group!r:.80}")
        current = next((v for v in versions if v.believed), None)
        return {"current": current.to_dict() if current else None, "history": [v.to_dict() for v in versions]}

    @server.tool()
    @_tool_errors
    async def clear_graph(ctx: Context, group_ids: list[str] | None = None, confirm: Flag = False) -> dict[str, Any]:
        """Erase everything of the given groups (default: the server's group). Cannot be undone:
        confirm must be true."""
        if group_ids is not None and not group_ids:  # (an empty list is the default group elsewhere)
            raise ToolError("group_ids is empty: name the groups to erase, or leave it out for the server's group")
        groups = await _groups(ctx, state, group_ids, write=True)
        if confirm is not True:
            raise ToolError("clear_graph erases the groups for good: call it again with confirm=true")
        return {"erased": {g: await mem().erase_group(g) for g in groups}}

    @server.tool()
    @_tool_errors
    async def get_status(ctx: Context) -> dict[str, Any]:
        """Is the server connected to Postgres; episodes waiting in the queue (of the groups the
        caller's key may read; over stdio, of every group)."""
        key = await _key(ctx, state)
        groups = None if key is None else key.readable_groups()
        if groups is not None:
            narrow_to(groups)
        try:
            waiting = await mem().pool.fetchval(
                "SELECT count(*) FROM pgmemory.episodes WHERE status IN ('pending', 'processing')"
                " AND ($1::text[] IS NULL OR group_id = ANY($1))", groups, timeout=5)
        except Exception as exc:  # noqa: BLE001 - reported, not raised: this is the health tool
            return {"status": "error", "message": f"database not reachable: {type(exc).__name__}"}
        return {"status": "ok", "message": "connected to Postgres", "episodes_queued": waiting}


def _fact_json(f: Any) -> dict[str, Any]:
    return jsonable({"uuid": f.id, "group_id": f.group_id, "fact": f.fact, "relation": f.relation,
                     "source": f.source, "source_uuid": f.source_id, "target": f.target, "target_uuid": f.target_id,
                     "valid_at": f.valid_from if not f.valid_from_unknown else None, "invalid_at": f.valid_to,
                     "created_at": f.recorded_from, "expired_at": f.recorded_to, "episodes": f.episodes})


def run(*, transport: str, host: str, port: int, default_group: str | None, auth: bool,
        worker_concurrency: int, open_options: dict[str, Any] | None = None) -> int:
    """Run the MCP server on stdio or streamable HTTP until stopped (`open_options` go to Memory.open)."""
    # Over stdio no key is asked (the agent runs this as its user), so no key store is opened.
    server = build_server(default_group=default_group, auth=auth and transport != "stdio",
                          worker_concurrency=worker_concurrency, open_options=open_options)
    if transport == "stdio":
        server.run("stdio")
    else:
        server.run("streamable-http", host=host, port=port)
    return 0
