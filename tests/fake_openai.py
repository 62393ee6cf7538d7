"""A scripted, local, OpenAI-compatible HTTP server for provider tests (no network, no keys).

Serves POST /v1/chat/completions and /v1/embeddings on 127.0.0.1 (ephemeral port) from a
thread, one handler thread per request. Each request pops the next scripted item from the
queue of its endpoint; an exhausted queue answers HTTP 400 so a test bug fails loudly
instead of being retried, unless a ``responder`` is set: it then answers chat requests
whose queue is empty (benchmarks use it as a zero-latency scripted model). Every request body is recorded, and the peak number of requests
in flight is tracked so concurrency limits can be checked.

Use the ``fake_openai`` fixture (import it into the test module) or FakeOpenAI.start()/stop().
"""
from __future__ import annotations

import hashlib
import json
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Union


@dataclass(frozen=True)
class Reply:
    """A 200 reply. Chat: ``body`` becomes the message content (JSON-encoded unless a str).
    Embeddings: ``body`` is returned as the whole response."""

    body: Any
    prompt_tokens: int = 10
    completion_tokens: int = 5
    finish_reason: str = "stop"  # "length": the model hit its token limit (body: the cut text)
    refusal: str | None = None  # a refusal (the message's `refusal`; the content is then null)


@dataclass(frozen=True)
class Status:
    """An HTTP error reply in OpenAI's error shape (``headers``: e.g. {"retry-after": "5"})."""

    code: int
    message: str = "scripted error"
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Reset:
    """Send the status line, the headers and part of a 200 body, then drop the connection."""


@dataclass(frozen=True)
class Trickle:
    """A 200 chat reply (``then``, a Reply) whose body is sent one byte every ``seconds``: each
    read gets a byte before any per-read timeout, so only a deadline on the whole call bounds it."""

    seconds: float
    then: Any = None


@dataclass(frozen=True)
class BrokenJSON:
    """A 200 chat completion whose content is not valid JSON (usage still reported)."""

    content: str = '{"name": "Alice", "age": '
    prompt_tokens: int = 10
    completion_tokens: int = 5


@dataclass(frozen=True)
class Delay:
    """Wait ``seconds`` before answering with ``then`` (a client timeout shorter than this fails)."""

    seconds: float
    then: Item | None = None


@dataclass(frozen=True)
class Vectors:
    """A 200 embeddings reply: a deterministic ``dim``-d vector per input text."""

    dim: int
    prompt_tokens: int = 3


Item = Union[Reply, Status, BrokenJSON, Delay, Vectors, Reset, Trickle, dict]


@dataclass
class Recorded:
    """One request the server received."""

    path: str
    headers: dict[str, str]
    body: Any


@dataclass
class FakeOpenAI:
    """The server; ``base_url`` (…/v1) is what clients are pointed at.

    ``responder``, if given, is called with the request body of a chat request that finds
    the scripted queue empty, from the handler thread, and returns the Item to answer.
    """

    host: str = "127.0.0.1"
    requests: list[Recorded] = field(default_factory=list)
    max_in_flight: int = 0
    responder: Callable[[dict[str, Any]], Item] | None = None

    def __post_init__(self) -> None:
        self._queues: dict[str, deque[Item]] = {"chat": deque(), "embeddings": deque()}
        self._lock = threading.Lock()
        self._in_flight = 0
        self._stopping = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        """The OpenAI-style base URL, e.g. http://127.0.0.1:54321/v1."""
        assert self._server is not None, "FakeOpenAI is not started"
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def script(self, *items: Item) -> None:
        """Queue replies for /v1/chat/completions, answered in order."""
        with self._lock:
            self._queues["chat"].extend(items)

    def script_embeddings(self, *items: Item) -> None:
        """Queue replies for /v1/embeddings, answered in order."""
        with self._lock:
            self._queues["embeddings"].extend(items)

    def start(self) -> FakeOpenAI:
        """Bind an ephemeral port and serve from a daemon thread."""
        handler = type("Handler", (_Handler,), {"fake": self})
        self._server = ThreadingHTTPServer((self.host, 0), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving; pending Delay items are cut short."""
        self._stopping.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _next(self, queue: str) -> Item | None:
        with self._lock:
            return self._queues[queue].popleft() if self._queues[queue] else None

    def _enter(self, record: Recorded) -> None:
        with self._lock:
            self.requests.append(record)
            self._in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self._in_flight)

    def _leave(self) -> None:
        with self._lock:
            self._in_flight -= 1


def _vector(text: str, dim: int) -> list[float]:
    """A deterministic pseudo-embedding (not normalised, so clients must normalise)."""
    seed = hashlib.sha256(text.encode()).digest()
    return [(seed[i % len(seed)] - 127.5) / 64 for i in range(dim)]


def _chat_body(content: str | None, request: dict[str, Any], prompt: int, completion: int,
               finish_reason: str = "stop", refusal: str | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": request.get("model", "fake"),
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content, "refusal": refusal},
                "finish_reason": finish_reason,
            }
        ],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        },
    }


class _Handler(BaseHTTPRequestHandler):
    fake: FakeOpenAI
    protocol_version = "HTTP/1.1"
    _in_flight = False

    def log_message(self, format: str, *args: Any) -> None:
        """Keep test output quiet."""

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length", 0))
        raw = self.rfile.read(length)
        try:
            body = json.loads(raw)
        except ValueError:
            body = raw.decode(errors="replace")
        self.fake._enter(Recorded(self.path, dict(self.headers), body))
        self._in_flight = True
        try:
            if self.path.endswith("/chat/completions"):
                item = self.fake._next("chat")
                if item is None and self.fake.responder is not None and isinstance(body, dict):
                    item = self.fake.responder(body)
            elif self.path.endswith("/embeddings"):
                item = self.fake._next("embeddings")
            else:
                self._send(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
                return
            self._answer(item, body if isinstance(body, dict) else {})
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (timeout) before we answered
        finally:
            self._release()

    def _release(self) -> None:
        """Leave the in-flight count once, before the reply is written (the client may go on at once)."""
        if self._in_flight:
            self._in_flight = False
            self.fake._leave()

    def _answer(self, item: Item | None, request: dict[str, Any]) -> None:
        if isinstance(item, Delay):
            self.fake._stopping.wait(item.seconds)
            item = item.then
        if item is None:
            self._send(400, {"error": {"message": "fake_openai: no scripted response left", "type": "invalid_request_error"}})
        elif isinstance(item, Status):
            self._send(item.code, {"error": {"message": item.message, "type": "scripted", "code": item.code}},
                       item.headers)
        elif isinstance(item, Reset):
            self._release()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", "1000")
            self.end_headers()
            self.wfile.write(b'{"id": "chatcmpl-fake", "choi')
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(2)  # (socket.SHUT_RDWR)
        elif isinstance(item, Trickle):
            reply = item.then if isinstance(item.then, Reply) else Reply(item.then)
            content = reply.body if isinstance(reply.body, str) else json.dumps(reply.body)
            data = json.dumps(_chat_body(content, request, reply.prompt_tokens, reply.completion_tokens)).encode()
            self._release()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            for i in range(len(data)):
                if self.fake._stopping.wait(item.seconds):
                    return
                self.wfile.write(data[i:i + 1])
                self.wfile.flush()
        elif isinstance(item, BrokenJSON):
            self._send(200, _chat_body(item.content, request, item.prompt_tokens, item.completion_tokens))
        elif isinstance(item, Vectors):
            inputs = request.get("input", [])
            inputs = [inputs] if isinstance(inputs, str) else inputs
            data = [
                {"object": "embedding", "index": i, "embedding": _vector(str(t), item.dim)}
                for i, t in enumerate(inputs)
            ]
            data.reverse()  # out of order on purpose: clients must sort by index
            usage = {"prompt_tokens": item.prompt_tokens, "total_tokens": item.prompt_tokens}
            self._send(200, {"object": "list", "data": data, "model": request.get("model"), "usage": usage})
        else:
            reply = item if isinstance(item, Reply) else Reply(item)
            if self.path.endswith("/embeddings"):
                self._send(200, reply.body)
                return
            content = reply.body if isinstance(reply.body, str) or reply.body is None else json.dumps(reply.body)
            self._send(200, _chat_body(content, request, reply.prompt_tokens, reply.completion_tokens,
                                       reply.finish_reason, reply.refusal))

    def _send(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        self._release()
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
