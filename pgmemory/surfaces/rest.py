"""`pgmemory serve`: the REST server (FastAPI; OpenAPI at /docs and /openapi.json).

One long-lived process holds the pool and the embedder (loaded once), so requests cost a search,
not a model load. Episodes are queued (202 + an id to poll) and processed by a worker running in
this process (and by any `pgmemory worker`). Every request but /health and /ready needs an API
key (`Authorization: Bearer pgm_...` or `X-API-Key`) allowed on the groups it names. Errors are
`{"error": {"code", "message"}}` with a stable code; bad input is a 4xx, never a 500.
"""
from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Sequence
from dataclasses import asdict
from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Depends, FastAPI, Query, Request, Security
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer
from starlette.exceptions import HTTPException as StarletteHTTPException

from pgmemory.errors import DatabaseTimeout, DatabaseUnavailable, InvalidInput, NotFound, PgMemoryError, SetupError
from pgmemory.ingest.episode import validate_group_id
from pgmemory.ingest.messages import messages_text
from pgmemory.ingest.pipeline import IngestError
from pgmemory.memory import Memory
from pgmemory.providers.llm import ProviderError
from pgmemory.records import jsonable
from pgmemory.search.config import RECIPES, SearchConfig, resolve_config
from pgmemory.storage.connect import connection_lost, unavailable_reason
from pgmemory.storage.request_groups import narrow_to
from pgmemory.surfaces.api_keys import ApiKey, KeyStore
from pgmemory.surfaces.rest_models import (ContextIn, ContextOut, EpisodeIn, EpisodesIn, ErrorOut, FactIn, MessagesIn,
                                          SearchIn, SearchOut)
from pgmemory.surfaces.serving import served_memory
from pgmemory.surfaces.wire import (body_line, enqueue_batch_json, enqueue_json, filters_from_json, ingest_json,
                                    provider_line, results_json, time_or_now, validation_line)
from pgmemory.validate import check_uuid

log = logging.getLogger("pgmemory.rest")

DEFAULT_MAX_BODY_BYTES = 1_000_000
BODY_UNREADABLE = "There was an error parsing the body"  # FastAPI's 400 for a body json.loads raised on


class ApiError(Exception):
    """An error answered as JSON with an HTTP status and a stable code."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def _error(status: int, code: str, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status, headers=headers)


_HTTP_CODES = {400: "invalid_input", 401: "unauthorized", 403: "forbidden", 404: "not_found",
               405: "method_not_allowed", 413: "payload_too_large", 415: "unsupported_media_type"}


class BodyLimit:
    """ASGI middleware: a request body over `max_bytes` (declared, or counted when streamed
    without a length) is a 413 before the app reads it."""

    def __init__(self, app: Any, max_bytes: int) -> None:
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        message = f"request body over {self.max_bytes} bytes"
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await _error(413, "payload_too_large", message)(scope, receive, send)
            return
        if declared is not None:
            await self.app(scope, receive, send)  # the server stops reading at the declared length
            return
        # A streamed body (no length declared): read it here, at most max_bytes, then replay it.
        chunks, size, more = [], 0, True
        while more:
            event = await receive()
            if event["type"] != "http.request":
                break
            chunks.append(event.get("body", b""))
            size += len(chunks[-1])
            more = event.get("more_body", False)
            if size > self.max_bytes:
                await _error(413, "payload_too_large", message)(scope, receive, send)
                return
        body, replayed = b"".join(chunks), False

        async def replay() -> dict:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}
        await self.app(scope, replay, send)


class Unexpected:
    """ASGI middleware (the innermost): an exception no handler took is answered here, 503
    database_unavailable when Postgres went away, else 500 internal (logged with its traceback).
    Not re-raised, as Starlette's catch-all handler does: uvicorn then drops the connection (a
    client's next request on it fails with a reset) and logs a traceback per request of an outage."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def sending(message: dict) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)
        try:
            await self.app(scope, receive, sending)
        except Exception as exc:
            if started:
                raise
            lost = connection_lost(exc)
            if lost is not None:
                log.warning("database unavailable: %s", " ".join(str(lost).split()) or type(lost).__name__)
                response = _error(503, "database_unavailable", f"database unavailable: {unavailable_reason(lost)}")
            else:
                log.exception("unexpected error")
                response = _error(500, "internal", f"internal error ({type(exc).__name__}); see the server log")
            await response(scope, receive, send)


def create_app(memory: Memory | None = None, *, auth: bool = True, worker_concurrency: int = 1,
               max_body_bytes: int = DEFAULT_MAX_BODY_BYTES, cors_origins: Sequence[str] = (),
               open_options: dict[str, Any] | None = None) -> FastAPI:
    """The REST app. With `memory`, that one is used (and not closed); otherwise Memory.open
    (with `open_options`) at start-up. `worker_concurrency` episodes are processed at once by an
    in-process queue worker (0: none; run `pgmemory worker` instead). `auth=False` serves
    without API keys (every group open): only for a trusted loopback."""

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with served_memory(memory, worker_concurrency=worker_concurrency, auth=auth,
                                 open_options=open_options) as mem:
            app.state.memory = mem
            app.state.keys = KeyStore(mem.pool) if auth else None
            yield

    app = FastAPI(title="pgmemory", version="0.1.0", lifespan=lifespan,
                  description="Bi-temporal knowledge-graph memory on Postgres: episodes in, facts, "
                              "entities and context out. See docs/server.md.")
    app.add_middleware(Unexpected)  # first added: innermost, so CORS and the body limit wrap its answers
    if cors_origins:
        from fastapi.middleware.cors import CORSMiddleware

        app.add_middleware(CORSMiddleware, allow_origins=list(cors_origins), allow_methods=["*"],
                           allow_headers=["Authorization", "X-API-Key", "Content-Type"])
    app.add_middleware(BodyLimit, max_bytes=max_body_bytes)
    _handlers(app)
    _routes(app)
    return app


def _handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def api_error(_request: Request, exc: ApiError) -> JSONResponse:
        return _error(exc.status, exc.code, exc.message)

    @app.exception_handler(InvalidInput)
    async def invalid(_request: Request, exc: InvalidInput) -> JSONResponse:
        return _error(400, "invalid_input", str(exc))

    @app.exception_handler(NotFound)
    async def not_found(_request: Request, exc: NotFound) -> JSONResponse:
        return _error(404, "not_found", str(exc))

    @app.exception_handler(ProviderError)
    async def provider(_request: Request, exc: ProviderError) -> JSONResponse:
        # The embedding or LLM endpoint failed (down, an HTTP error, a malformed reply): not a bug
        # of pgmemory nor of the request, so a 502 naming the provider, not a 500.
        log.warning("provider failed: %s", exc)
        return _error(502, "provider_error", provider_line(exc))

    @app.exception_handler(RequestValidationError)
    async def malformed(request: Request, exc: RequestValidationError) -> JSONResponse:
        media = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if isinstance(exc.body, bytes) and exc.body and not media.endswith("json"):
            # FastAPI reads a body as JSON only when it says it is: a text/plain one (or one with no
            # Content-Type at all) reached the model as bytes
            said = f"not {media[:60]}" if media else "no Content-Type was given"
            return _error(422, "invalid_request", f"body: send JSON with Content-Type: application/json ({said})")
        return _error(422, "invalid_request", validation_line(exc.errors()))

    @app.exception_handler(StarletteHTTPException)
    async def http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 400 and exc.detail == BODY_UNREADABLE and exc.__cause__ is not None:
            return _error(422, "invalid_request", body_line(exc.__cause__))
        if exc.status_code == 405:
            allowed = _allowed_methods(request) or [m.strip() for m in (exc.headers or {}).get("Allow", "").split(",")
                                                    if m.strip()]
            return _error(405, "method_not_allowed", f"method {request.method[:20]} is not allowed on this path: use "
                                                     f"{' or '.join(allowed)}", headers={"Allow": ", ".join(allowed)})
        return _error(exc.status_code, _HTTP_CODES.get(exc.status_code, "http_error"), str(exc.detail),
                      headers=exc.headers)

    @app.exception_handler(PgMemoryError)
    async def pgmemory_error(_request: Request, exc: PgMemoryError) -> JSONResponse:
        if isinstance(exc, DatabaseTimeout):
            return _error(504, "timeout", str(exc))
        if isinstance(exc, (DatabaseUnavailable, SetupError)):
            return _error(503, "database_unavailable", str(exc))
        return _error(500, "internal", str(exc))


def _allowed_methods(request: Request) -> list[str]:
    """The methods some route takes on the request's path (the Allow header of a 405: Starlette
    names only the first matching route's, e.g. POST for a PUT to /v1/groups/G/episodes, which
    GET takes too). Each method is tried against the routes as the router matches them."""
    from starlette.routing import Match

    return [method for method in ("DELETE", "GET", "PATCH", "POST", "PUT")
            if any(route.matches({**request.scope, "method": method})[0] == Match.FULL
                   for route in request.app.router.routes)]


# The two ways to send a key, declared (auto_error off: caller answers 401 itself) so that
# /openapi.json lists them and /docs offers to send one.
BEARER = HTTPBearer(auto_error=False, description="Authorization: Bearer pgm_...")
API_KEY = APIKeyHeader(name="X-API-Key", auto_error=False, description="X-API-Key: pgm_...")


async def caller(request: Request, bearer: HTTPAuthorizationCredentials | None = Security(BEARER),
                 api_key: str | None = Security(API_KEY)) -> ApiKey | None:
    """The request's API key (None when the server runs without auth); 401 without a valid one."""
    keys: KeyStore | None = request.app.state.keys
    if keys is None:
        return None
    token = api_key if api_key is not None else bearer.credentials.strip() if bearer is not None else None
    key = await keys.lookup(token) if token else None
    if key is None:
        raise ApiError(401, "unauthorized", "a valid API key is required (Authorization: Bearer pgm_...)")
    return key


def allow(key: ApiKey | None, groups: Sequence[str], *, write: bool = False) -> None:
    """403 unless the key may read (or write) every group named; then the request's database
    connections are narrowed to those groups (where row-level security is installed)."""
    for group in groups:
        validate_group_id(group)
        if key is not None and not (key.can_write(group) if write else key.can_read(group)):
            raise ApiError(403, "forbidden", f"this key may not {'write' if write else 'read'} group {group!r:.80}")
    narrow_to(groups)


def search_config(body: SearchIn) -> SearchConfig | str:
    """The body's recipe; with center_node_uuid, ranked by graph distance from that entity (as MCP's
    search tools do). A recipe that needs a centre without one is refused naming the field to send."""
    if body.center_node_uuid is not None:
        check_uuid(body.center_node_uuid, "center_node_uuid")  # named as sent, not as SearchConfig's center
        return resolve_config(body.recipe, reranker="node_distance", center=body.center_node_uuid)
    recipe = RECIPES.get(body.recipe)
    if recipe is not None and recipe.reranker == "node_distance" and recipe.center is None:
        raise ApiError(400, "invalid_input", f"recipe {body.recipe} ranks by graph distance from an entity: "
                                             "give its id as center_node_uuid")
    return body.recipe


def _memory(request: Request) -> Memory:
    return request.app.state.memory


def _found(value: Any, what: str) -> Any:
    if value is None or value == []:
        raise ApiError(404, "not_found", f"{what} not found")
    return value


async def _queued(memory: Memory, fields: dict[str, Any]) -> dict[str, Any]:
    """Queue the episode; its id, where it stands and the URL to poll."""
    out = await enqueue_json(memory, fields.pop("group_id"), fields.pop("content"), **fields)
    group, episode_id = (quote(out[k], safe="") for k in ("group_id", "episode_id"))
    return {**out, "status_url": f"/v1/groups/{group}/episodes/{episode_id}"}


# What every /v1 route may answer besides its success, in the shape it has.
ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorOut, "description": what} for status, what in [
        (400, "invalid_input (a value pgmemory refuses) or confirmation_required"),
        (401, "unauthorized: no key, or not an active key"),
        (403, "forbidden: the key may not read or write a group the request names"),
        (404, "not_found"), (413, "payload_too_large"),
        (422, "invalid_request: the body or a parameter is not of the documented shape"),
        (502, "provider_error: the embedding or LLM endpoint failed"),
        (503, "database_unavailable"), (504, "timeout: a search ran past PGMEMORY_SEARCH_TIMEOUT")]}


def _routes(app: FastAPI) -> None:
    Key = Depends(caller)
    v1 = APIRouter(prefix="/v1", responses=ERRORS)

    # HEAD too (out of the schema: one operation per path there): load balancers' health checks
    # often send it, and a 405 marked the server down
    @app.head("/health", include_in_schema=False)
    @app.get("/health", tags=["health"], summary="Liveness: the process answers")
    async def health() -> dict:
        return {"status": "ok"}

    @app.head("/ready", include_in_schema=False)
    @app.get("/ready", tags=["health"], summary="Readiness: Postgres answers through the pool")
    async def ready(request: Request) -> JSONResponse:
        try:
            await _memory(request).pool.fetchval("SELECT 1", timeout=5)
        except Exception as exc:  # noqa: BLE001 - any failure means not ready
            lost = connection_lost(exc)  # why in words when Postgres is down or gone, as the other 503s say
            reason = unavailable_reason(lost) if lost is not None else type(exc).__name__
            return _error(503, "not_ready", f"database not ready: {reason}")
        return JSONResponse({"status": "ready"})

    @v1.post("/groups/{group_id}/episodes", status_code=202, tags=["episodes"],
              summary="Add one episode (queued: 202 + an id to poll; ?wait=true processes it now)")
    async def add_episode(group_id: str, body: EpisodeIn, request: Request, key: ApiKey | None = Key,
                          wait: bool = False) -> Any:
        allow(key, [group_id], write=True)
        fields = dict(group_id=group_id, content=body.content, kind=body.kind, actor=body.actor,
                      reference_time=time_or_now(body.reference_time), source_description=body.source_description,
                      episode_id=body.episode_id, metadata=body.metadata)
        if wait:
            return JSONResponse(await _process(_memory(request), fields), status_code=200)
        return await _queued(_memory(request), fields)

    @v1.post("/groups/{group_id}/episodes/batch", status_code=202, tags=["episodes"],
              summary="Add a batch of episodes (all validated first, nothing stored if one is bad)")
    async def add_batch(group_id: str, body: EpisodesIn, request: Request, key: ApiKey | None = Key) -> dict:
        allow(key, [group_id], write=True)
        # An empty reference_time is refused as in a single episode, not read as "now" ("" is falsy).
        items = [{**e.model_dump(exclude_none=True), "group_id": group_id,
                  "reference_time": time_or_now(None) if e.reference_time is None else e.reference_time}
                 for e in body.episodes]
        return await enqueue_batch_json(_memory(request), group_id, items)

    @v1.post("/groups/{group_id}/messages", status_code=202, tags=["episodes"],
              summary="Add a mem0-style message list as one chat episode (queued; ?wait=true processes it)")
    async def add_messages(group_id: str, body: MessagesIn, request: Request, key: ApiKey | None = Key,
                           wait: bool = False) -> Any:
        allow(key, [group_id], write=True)
        content, actor = messages_text([m.model_dump(exclude_none=True) for m in body.messages])
        fields = dict(group_id=group_id, content=content, kind="message", actor=actor,
                      reference_time=time_or_now(body.reference_time), source_description=body.source_description,
                      episode_id=body.episode_id, metadata=body.metadata)
        if wait:
            return JSONResponse(await _process(_memory(request), fields), status_code=200)
        return await _queued(_memory(request), fields)

    @v1.get("/groups/{group_id}/episodes", tags=["episodes"],
             summary="The group's latest episodes (oldest first), with status and metadata")
    async def list_episodes(group_id: str, request: Request, key: ApiKey | None = Key,
                            last_n: int = Query(10), before: str | None = None,
                            status: str | None = None, before_id: str | None = None) -> dict:
        """Page back with before_id = the first (oldest) episode's id of the previous page."""
        allow(key, [group_id])
        rows = await _memory(request).get_episodes(group_id, last_n=last_n, before=before, status=status,
                                                   before_id=before_id)
        return {"episodes": [r.to_dict() for r in rows]}

    @v1.get("/groups/{group_id}/episodes/{episode_id}", tags=["episodes"],
             summary="One episode: its status (pending, processing, done, failed), error, cost, metadata")
    async def get_episode(group_id: str, episode_id: str, request: Request, key: ApiKey | None = Key) -> dict:
        allow(key, [group_id])
        record = _found(await _memory(request).get_episode(group_id, episode_id), "episode")
        status = await _memory(request).episode_status(episode_id, group_id)
        return {**record.to_dict(), **jsonable({k: status[k] for k in
                                                ("llm_calls", "prompt_tokens", "completion_tokens")})}

    @v1.delete("/groups/{group_id}/episodes/{episode_id}", tags=["episodes"],
                summary="Delete an episode as if never ingested (?erase=true: its text nowhere)")
    async def delete_episode(group_id: str, episode_id: str, request: Request, key: ApiKey | None = Key,
                             erase: bool = False) -> dict:
        """Unknown here is a 404; an episode retracted earlier is one too, unless erase=true (its
        text is then removed from the history it left, as Memory.delete_episode does)."""
        allow(key, [group_id], write=True)
        return asdict(await _memory(request).delete_episode(group_id, episode_id, erase=erase))

    # The answers' shapes are declared (SearchOut, ContextOut) but not validated per request: the
    # JSON is built by results_json and sent as it is.
    @v1.post("/search", tags=["search"], summary="Hybrid search (any recipe, filters on both time axes)",
             response_model=None, responses={200: {"model": SearchOut, "description": "each kind's hits, best first"}})
    async def search(body: SearchIn, request: Request, key: ApiKey | None = Key) -> JSONResponse:
        allow(key, body.group_ids)
        filters = filters_from_json(body.filters.model_dump() if body.filters else None)
        results = await _memory(request).search(body.query, group_ids=body.group_ids, limit=body.limit,
                                                config=search_config(body), filters=filters)
        return JSONResponse(results_json(results))

    @v1.post("/context", tags=["search"], summary="The context string for a prompt (facts first)",
             response_model=None, responses={200: {"model": ContextOut, "description": "the context string"}})
    async def context(body: ContextIn, request: Request, key: ApiKey | None = Key) -> JSONResponse:
        allow(key, body.group_ids)
        filters = filters_from_json(body.filters.model_dump() if body.filters else None)
        text = await _memory(request).context(
            body.query, group_ids=body.group_ids, limit=body.limit, config=search_config(body), filters=filters,
            max_chars=body.max_chars, communities=body.communities, episodes=body.episodes)
        return JSONResponse({"context": text})

    @v1.get("/groups/{group_id}/entities", tags=["graph"], summary="A page of the group's entities by name")
    async def list_entities(group_id: str, request: Request, key: ApiKey | None = Key, limit: int = 100,
                            offset: int = 0, label: str | None = None, name: str | None = None) -> dict:
        allow(key, [group_id])
        rows = await _memory(request).list_entities(group_id, limit=limit, offset=offset, label=label, name=name)
        return {"entities": [r.to_dict() for r in rows]}

    @v1.get("/groups/{group_id}/entities/{entity_id}", tags=["graph"], summary="One entity")
    async def get_entity(group_id: str, entity_id: str, request: Request, key: ApiKey | None = Key) -> dict:
        allow(key, [group_id])
        return _found(await _memory(request).get_entity(group_id, entity_id), "entity").to_dict()

    @v1.get("/groups/{group_id}/entities/{entity_id}/facts", tags=["graph"],
             summary="The facts of an entity (believed versions; ?history=true: every version)")
    async def entity_facts(group_id: str, entity_id: str, request: Request, key: ApiKey | None = Key,
                           history: bool = False) -> dict:
        allow(key, [group_id])
        mem = _memory(request)
        _found(await mem.get_entity(group_id, entity_id), "entity")
        rows = await mem.entity_facts(group_id, entity_id, history=history)
        return {"facts": [r.to_dict() for r in rows]}

    @v1.get("/groups/{group_id}/facts/{fact_id}", tags=["graph"],
             summary="One fact: the believed version (null if retracted) and every version")
    async def get_fact(group_id: str, fact_id: str, request: Request, key: ApiKey | None = Key) -> dict:
        allow(key, [group_id])
        versions = _found(await _memory(request).fact_history(group_id, fact_id), "fact")
        current = next((v for v in versions if v.believed), None)
        return {"current": current.to_dict() if current else None, "history": [v.to_dict() for v in versions]}

    @v1.post("/groups/{group_id}/facts", tags=["graph"],
              summary="State one fact directly (entities by name, in any case; the temporal rules apply)")
    async def add_fact(group_id: str, body: FactIn, request: Request, key: ApiKey | None = Key) -> dict:
        allow(key, [group_id], write=True)
        return jsonable(await _memory(request).add_fact(group_id, **body.model_dump()))

    @v1.delete("/groups/{group_id}/facts/{fact_id}", tags=["graph"],
                summary="Retract a fact: no longer believed (history kept)")
    async def retract_fact(group_id: str, fact_id: str, request: Request, key: ApiKey | None = Key) -> dict:
        allow(key, [group_id], write=True)
        return jsonable(await _memory(request).retract_fact(group_id, fact_id))

    @v1.delete("/groups/{group_id}", tags=["groups"],
                summary="Erase everything of a group: ?confirm=<the group id> is required")
    async def erase_group(group_id: str, request: Request, key: ApiKey | None = Key,
                          confirm: str | None = None) -> dict:
        allow(key, [group_id], write=True)
        given = len(request.query_params.getlist("confirm"))
        if given > 1:  # ?confirm=B&confirm=A is not a confirmation of A (the last one used to win)
            raise ApiError(400, "confirmation_required", f"erasing a group cannot be undone: give ?confirm=<group id> "
                                                         f"once (it was given {given} times)")
        if confirm != group_id:
            raise ApiError(400, "confirmation_required",
                           "erasing a group cannot be undone: repeat the group id as ?confirm=<group id>")
        return {"group_id": group_id, "episodes_erased": await _memory(request).erase_group(group_id)}

    app.include_router(v1)


async def _process(mem: Memory, fields: dict[str, Any]) -> dict[str, Any]:
    """?wait=true: ingest now, in this request; a failed episode is kept (status failed) and reported."""
    try:
        return ingest_json(await mem.add_episode(**fields))
    except IngestError as exc:
        return ingest_json(exc)


def serve(*, host: str, port: int, auth: bool, worker_concurrency: int, max_body_bytes: int,
          cors_origins: Sequence[str], log_level: str = "info",
          open_options: dict[str, Any] | None = None) -> int:
    """Run the REST server with uvicorn until SIGTERM/SIGINT (`open_options` go to Memory.open)."""
    import uvicorn

    app = create_app(auth=auth, worker_concurrency=worker_concurrency, max_body_bytes=max_body_bytes,
                     cors_origins=cors_origins, open_options=open_options)
    uvicorn.run(app, host=host, port=port, log_level=log_level, proxy_headers=False)
    return 0
