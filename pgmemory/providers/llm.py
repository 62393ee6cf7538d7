"""Structured-output LLM client for any OpenAI-compatible endpoint, with one shared retry policy.

``with_retries`` is the only retry loop in pgmemory's providers: the embedders reuse it.
The openai client's own retries are switched off so attempts are counted exactly once.
"""
from __future__ import annotations

import asyncio
import email.utils
import json
import os
import random
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, TypeVar

import pydantic

from pgmemory.errors import exception_chain

if TYPE_CHECKING:
    import openai
else:
    class _LazyOpenAI:
        """The openai package, imported on first use: importing it costs seconds, and commands
        that call no LLM (search with the local embedder, delete, the CLI's --help) never need it."""

        def __getattr__(self, name: str) -> Any:
            import openai as module

            return getattr(module, name)

    openai = _LazyOpenAI()

T = TypeVar("T")
M = TypeVar("M", bound=pydantic.BaseModel)

DEFAULT_LLM_MODEL = "gpt-4o-mini"
# The openai client refuses to start without a key; local servers (Ollama, vLLM,
# llama.cpp) ignore it, so a placeholder is sent when only a base URL is configured.
PLACEHOLDER_API_KEY = "not-needed"
_RETRYABLE_STATUS = frozenset({408, 429})
_FENCE = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", re.DOTALL | re.IGNORECASE)
_FENCED = re.compile(r"```[A-Za-z]*[ \t]*\n?(.*?)```", re.DOTALL)  # a fenced block anywhere in the text
# A reasoning model's thoughts before its answer (DeepSeek-R1, QwQ, Qwen3 through vLLM or Ollama).
_THINKING = re.compile(r"<(think|thinking|reasoning)>.*?</\1>", re.DOTALL | re.IGNORECASE)
_JSON_STARTS = 64  # at most this many '{' are tried as the start of the JSON in prose


class ProviderError(RuntimeError):
    """A provider call failed for good: not retryable, or retries exhausted."""

    def __init__(self, message: str, *, status_code: int | None = None, attempts: int = 1) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.attempts = attempts


class LLMError(ProviderError):
    """An LLM completion failed; the message names the endpoint, model and last failure."""


class InvalidReply(Exception):
    """The endpoint answered, but not with JSON matching the requested schema (retryable)."""


class Refusal(InvalidReply):
    """The model refused to answer (its message's `refusal`): asking again the same is not retried."""


class Truncated(InvalidReply):
    """The reply was cut at the model's output limit (finish_reason 'length'): asked once more (a
    sampled reply may be shorter), not again: each try bills the longest reply there is."""


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently to retry: exponential backoff with jitter, capped."""

    max_retries: int = 4
    base_delay: float = 0.5
    max_delay: float = 20.0

    def delay(self, retry_index: int, exc: BaseException) -> float:
        """Seconds to wait before retry number ``retry_index`` (0-based); honours Retry-After."""
        ceiling = min(self.max_delay, self.base_delay * (2**retry_index))
        wait = ceiling / 2 + random.uniform(0, ceiling / 2)
        retry_after = _retry_after(exc)
        if retry_after is not None:
            wait = max(wait, min(retry_after, self.max_delay))
        return wait


@dataclass
class Usage:
    """LLM cost counters: every HTTP attempt is a call; tokens from every reply that reported them."""

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        """Prompt plus completion tokens."""
        return self.prompt_tokens + self.completion_tokens

    def add(self, other: Usage) -> None:
        """Fold another counter into this one (e.g. per-episode into per-run)."""
        self.calls += other.calls
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens


def is_retryable(exc: BaseException) -> bool:
    """True for rate limits, server errors, timeouts, connection errors and invalid replies."""
    if isinstance(exc, Refusal):
        return False
    if isinstance(exc, (InvalidReply, openai.APIConnectionError)):
        return True
    if isinstance(exc, openai.APIStatusError):
        return exc.status_code in _RETRYABLE_STATUS or exc.status_code >= 500
    return False


def describe_failure(exc: BaseException) -> str:
    """A short human description of one failed attempt, for error messages."""
    if isinstance(exc, openai.APITimeoutError):
        return "request timed out"
    if isinstance(exc, openai.APIConnectionError):
        return f"connection error: {exc.__cause__ or exc}"
    if isinstance(exc, openai.APIStatusError):
        return f"HTTP {exc.status_code}: {exc.message}"
    if isinstance(exc, InvalidReply):
        return f"invalid reply: {exc}"
    return f"{type(exc).__name__}: {exc}"


def provider_unavailable(exc: BaseException | None) -> bool:
    """Did `exc` come from a provider that is down or overloaded for now (after its retries: a
    connection error or timeout, HTTP 408, 429 or 502 and up), not from what was asked of it? A
    queue worker then gives the episode back and waits instead of failing it."""
    return exc is not None and any(
        isinstance(e, ProviderError) and (isinstance(e.__cause__, openai.APIConnectionError) or (
            e.status_code is not None and (e.status_code in (408, 429) or e.status_code >= 502)))
        for e in exception_chain(exc))


# HTTP answers that say the configuration is wrong, not the request: a key refused (401), a key
# without access (403), an unknown model or endpoint path (404). Every call would get the same.
REFUSED_STATUSES = (401, 403, 404)


def provider_refused(exc: BaseException | None) -> bool:
    """Did `exc` come from a provider that refuses this configuration (the API key, the model, the
    endpoint: HTTP 401, 403, 404)? Every other call would fail the same way until it is fixed,
    so a run stops asking and a queue worker waits, instead of failing episode after episode."""
    return exc is not None and any(
        isinstance(e, ProviderError) and e.status_code in REFUSED_STATUSES for e in exception_chain(exc))


async def with_retries(
    attempt: Callable[[], Awaitable[T]],
    *,
    policy: RetryPolicy,
    what: str,
    error: type[ProviderError],
) -> T:
    """Run ``attempt`` until it succeeds, retrying retryable failures; raise ``error`` otherwise.

    ``what`` names the call (endpoint and model) so the final error says where it failed.
    Only openai API errors and ``InvalidReply`` are handled; anything else is a bug and propagates.
    """
    tries = policy.max_retries + 1
    for index in range(tries):
        try:
            return await attempt()
        except (openai.APIError, InvalidReply) as exc:
            status = exc.status_code if isinstance(exc, openai.APIStatusError) else None
            if not is_retryable(exc) or (isinstance(exc, Truncated) and index >= 1):
                raise error(
                    f"{what} failed (not retryable): {describe_failure(exc)}",
                    status_code=status,
                    attempts=index + 1,
                ) from exc
            if index == tries - 1:
                raise error(
                    f"{what} failed after {tries} attempts; last failure: {describe_failure(exc)}",
                    status_code=status,
                    attempts=tries,
                ) from exc
            await asyncio.sleep(policy.delay(index, exc))
    raise AssertionError("unreachable")


def _retry_after(exc: BaseException) -> float | None:
    """The server's hint in seconds: `retry-after-ms` (OpenAI, Azure), else `Retry-After` as
    seconds or as an HTTP date (RFC 9110); None without one or with one unreadable."""
    if not isinstance(exc, openai.APIStatusError):
        return None
    headers = exc.response.headers
    try:
        return max(float(headers.get("retry-after-ms", "")) / 1000, 0.0)
    except ValueError:
        pass
    value = headers.get("retry-after", "").strip()
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        return None
    return max((when - datetime.now(timezone.utc)).total_seconds(), 0.0)


def _schema_name(schema: type[pydantic.BaseModel]) -> str:
    """A response_format name from the model class: letters, digits, _ and - only, <= 64 chars."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", schema.__name__)[:64] or "reply"


def parse_reply(content: str | None, schema: type[M], *, finish_reason: str | None = None,
                refusal: str | None = None) -> M:
    """Validate a completion's text against ``schema``. Tolerated around the JSON: a reasoning
    model's <think>...</think> block, a ```json fence (with prose before or after it), prose
    before or after the object, a list holding the one object. A refusal raises Refusal; a reply cut at the model's token limit
    (``finish_reason`` "length") says so."""
    if refusal and refusal.strip():
        raise Refusal(f"the model refused: {_one_line(refusal)}")
    cut = Truncated if finish_reason == "length" else InvalidReply
    if not content or not content.strip():
        raise cut("empty content" + _cut(finish_reason))
    fenced = _FENCE.match(content)
    text = fenced.group(1) if fenced else content
    try:
        return schema.model_validate_json(text)
    except pydantic.ValidationError as exc:
        error = exc
    listed = _one_object_in_a_list(text)  # [{...}]: some models wrap the object in a list
    if listed is not None:
        try:
            return schema.model_validate(listed)
        except pydantic.ValidationError as exc:
            error = exc
    elif any(e["type"] == "json_invalid" for e in error.errors()):  # not JSON as a whole: look inside
        for found in _embedded_json(_THINKING.sub("", content)):
            try:
                return schema.model_validate(found)
            except pydantic.ValidationError as exc:
                error = exc  # JSON, of the wrong shape: that is the problem to report
                break
    raise cut(f"does not match {schema.__name__}: {_first_error(error)}{_cut(finish_reason)}") from error


def _one_object_in_a_list(text: str) -> dict | None:
    """The object of a reply that is a JSON list holding one object, else None."""
    try:
        found = json.loads(text)
    except ValueError:
        return None
    return found[0] if isinstance(found, list) and len(found) == 1 and isinstance(found[0], dict) else None


def _embedded_json(text: str):
    """The JSON objects a reply's text holds, most likely first: fenced blocks, then objects
    starting at each of the first _JSON_STARTS '{' (prose before or after them ignored)."""
    for block in _FENCED.findall(text):
        try:
            yield json.loads(block)
        except ValueError:
            pass
    decoder = json.JSONDecoder()
    start = text.find("{")
    for _ in range(_JSON_STARTS):
        if start < 0:
            return
        try:
            found, _end = decoder.raw_decode(text, start)
        except ValueError:
            pass
        else:
            if isinstance(found, dict):
                yield found
        start = text.find("{", start + 1)


def _cut(finish_reason: str | None) -> str:
    """What an error adds when the reply was cut at the model's token limit."""
    return (" (the reply was cut at the model's token limit, finish_reason 'length': shorten the episode"
            " or raise the model's max output tokens)" if finish_reason == "length" else "")


def _one_line(text: str, limit: int = 300) -> str:
    """A model's text on one line, at most `limit` characters."""
    line = " ".join(text.split())
    return line if len(line) <= limit else line[:limit - 1] + "…"


def _first_error(exc: pydantic.ValidationError) -> str:
    """The first validation problem, short enough for a log line."""
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err["loc"]) or "<root>"
    return f"{where}: {err['msg']} ({exc.error_count()} error(s))"


def openai_client(base_url: str | None, api_key: str | None, timeout: float) -> openai.AsyncOpenAI:
    """An AsyncOpenAI client with its own retries off (with_retries is the only retry loop)."""
    return openai.AsyncOpenAI(base_url=base_url, api_key=api_key or PLACEHOLDER_API_KEY,
                              timeout=timeout, max_retries=0)


class LLMClient:
    """Structured completions against an OpenAI-compatible chat endpoint, retried and rate-bounded."""

    def __init__(
        self,
        *,
        model: str = DEFAULT_LLM_MODEL,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 4,
        base_delay: float = 0.5,
        max_concurrency: int = 8,
    ) -> None:
        if max_retries < 0 or max_concurrency < 1 or timeout <= 0 or base_delay < 0:
            raise ValueError(
                "LLMClient needs max_retries >= 0, max_concurrency >= 1, timeout > 0, base_delay >= 0"
            )
        self.model = model
        self.timeout = timeout
        self.policy = RetryPolicy(max_retries=max_retries, base_delay=base_delay)
        self._client = openai_client(base_url, api_key, timeout)
        self._semaphore = asyncio.Semaphore(max_concurrency)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **options: Any) -> LLMClient | None:
        """Build a client from PGMEMORY_LLM_* / OPENAI_API_KEY, or None when no endpoint is configured."""
        env = os.environ if environ is None else environ
        base_url = env.get("PGMEMORY_LLM_BASE_URL") or None
        api_key = env.get("PGMEMORY_LLM_API_KEY") or env.get("OPENAI_API_KEY") or None
        if base_url is None and api_key is None:
            return None
        model = env.get("PGMEMORY_LLM_MODEL") or DEFAULT_LLM_MODEL
        return cls(model=model, base_url=base_url, api_key=api_key, **options)

    @property
    def endpoint(self) -> str:
        """The base URL requests go to (for messages and logs)."""
        return str(self._client.base_url)

    async def complete(
        self, messages: list[dict[str, Any]], schema: type[M], *, usage: Usage | None = None
    ) -> M:
        """Ask for a reply matching ``schema`` (JSON-schema structured output) and validate it."""
        response_format = {
            "type": "json_schema",
            "json_schema": {
                "name": _schema_name(schema),
                "schema": schema.model_json_schema(),
                "strict": False,
            },
        }

        async def attempt() -> M:
            async with self._semaphore:
                if usage is not None:
                    usage.calls += 1
                reply = await self._deadline(self._client.chat.completions.create(
                    model=self.model, messages=messages, response_format=response_format
                ))
            if usage is not None and reply.usage is not None:
                usage.prompt_tokens += reply.usage.prompt_tokens or 0
                usage.completion_tokens += reply.usage.completion_tokens or 0
            if not reply.choices:
                raise InvalidReply("no choices in the completion")
            choice = reply.choices[0]
            return parse_reply(choice.message.content, schema, finish_reason=choice.finish_reason,
                               refusal=getattr(choice.message, "refusal", None))

        return await with_retries(
            attempt,
            policy=self.policy,
            what=f"LLM request to {self.endpoint} (model {self.model})",
            error=LLMError,
        )

    async def _deadline(self, request: Awaitable[T]) -> T:
        """`request` within `timeout` seconds in all: the HTTP client's timeout bounds each read,
        so a server that sends its reply a byte at a time would hold the call for ever. Past the
        deadline it fails as a timeout (retried like one)."""
        try:
            return await asyncio.wait_for(request, self.timeout)
        except asyncio.TimeoutError:
            import httpx

            raise openai.APITimeoutError(request=httpx.Request("POST", f"{self.endpoint}chat/completions")) from None

    async def aclose(self) -> None:
        """Close the underlying HTTP connection pool."""
        await self._client.close()

    async def __aenter__(self) -> LLMClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
