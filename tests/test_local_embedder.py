"""The local embedder: same vectors on every path (batch, single, cached, ONNX, torch, sentence-transformers),
explicit truncation, thread and concurrency settings honoured, no network, stored names reused."""
from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from pgmemory.ingest.embed_episode import stored_name_vectors
from pgmemory.providers import local_model
from pgmemory.providers.embedder import (
    EmbeddingError,
    HashEmbedder,
    LocalEmbedder,
    available_cores,
    embedder_from_env,
)
from tests.support import utc

TEXTS = ["Alice", "Bob", "where does Alice work now?", "I left Tencent last week and now I work at OpenAI.",
         "My sister Maya moved to Lisbon in 2021 and she teaches mathematics at a secondary school there.",
         "ok", "Alice"]


def cosines(a, b) -> np.ndarray:
    return (np.asarray(a) * np.asarray(b)).sum(1)


def test_embeds_with_no_network_access() -> None:
    """Loading (exporting the ONNX graph if the cache is cold) and embedding open no socket."""
    script = textwrap.dedent("""
        import asyncio, socket
        def refuse(*args, **kwargs):
            raise RuntimeError("network access attempted")
        socket.socket.connect = refuse
        socket.create_connection = refuse
        socket.getaddrinfo = refuse
        from pgmemory.providers.embedder import LocalEmbedder
        emb = LocalEmbedder()
        vec = asyncio.run(emb.embed(["no network here"]))[0]
        print(len(vec), emb._model.runtime)
    """)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "TRANSFORMERS_"))}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["384", "onnx"]


async def test_batch_single_and_cached_vectors_agree() -> None:
    emb = LocalEmbedder(cache_entries=0)
    batch = await emb.embed(TEXTS)
    single = [(await emb.embed([t]))[0] for t in TEXTS]
    assert cosines(batch, single).min() >= 0.9999
    assert batch[0] == batch[-1]  # identical texts in one call: one vector
    cached = LocalEmbedder()
    first = await cached.embed(TEXTS)
    hits = cached.cache.hits
    again = await cached.embed(list(reversed(TEXTS)))
    assert cached.cache.hits - hits == len(set(TEXTS))  # every text came from the cache ...
    assert again == list(reversed(first))  # ... and the results did not change
    assert cosines(first, batch).min() >= 0.9999


async def test_onnx_torch_and_sentence_transformers_agree() -> None:
    """ONNX Runtime and torch compute what sentence-transformers (the previous code path) computes."""
    from sentence_transformers import SentenceTransformer

    onnx = await LocalEmbedder(runtime="onnx", cache_entries=0).embed(TEXTS)
    torch_vecs = await LocalEmbedder(runtime="torch", cache_entries=0).embed(TEXTS)
    reference = SentenceTransformer(str(local_model.model_dir()), device="cpu").encode(
        TEXTS, normalize_embeddings=True)
    assert cosines(onnx, reference).min() >= 0.999
    assert cosines(torch_vecs, reference).min() >= 0.999


async def test_long_text_is_truncated_to_what_the_model_reads() -> None:
    emb = LocalEmbedder(cache_entries=0)
    model = await emb.model()
    long = " ".join(f"word{i}" for i in range(600))
    assert model.max_tokens == 256 and model.tokenize([long, "short"]).lengths[0] == 256
    a, b = await emb.embed([long, long + " and a tail the model never reads"])
    assert cosines([a], [b])[0] >= 0.99999


def test_batches_group_similar_lengths() -> None:
    lengths = [40, 3, 5, 250, 4, 38, 120, 6]
    batches = local_model.plan_batches(lengths)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    for b in batches:
        assert max(lengths[i] for i in b) <= 2 * max(min(lengths[i] for i in b), 8)
    assert len(local_model.plan_batches([5] * 130)) == 3  # at most 64 texts per batch


async def test_thread_setting_is_honoured() -> None:
    emb = LocalEmbedder(threads=2, workers=1, runtime="onnx")
    model = await emb.model()
    assert model.threads == 2
    assert model.threads_in_use() == 2
    default = LocalEmbedder()
    assert default.threads * default.workers <= available_cores()
    configured = embedder_from_env({"PGMEMORY_EMBED_THREADS": "3", "PGMEMORY_EMBED_WORKERS": "2",
                                    "PGMEMORY_EMBED_RUNTIME": "torch", "PGMEMORY_EMBED_CACHE": "0"})
    assert (configured.threads, configured.workers, configured.runtime, configured.cache.max_entries) == (
        3, 2, "torch", 0)
    for bad in ({"PGMEMORY_EMBED_THREADS": "0"}, {"PGMEMORY_EMBED_WORKERS": "many"},
                {"PGMEMORY_EMBED_RUNTIME": "tpu"}):
        with pytest.raises(EmbeddingError, match="PGMEMORY_EMBED_"):
            embedder_from_env(bad)


async def test_torch_thread_setting_is_honoured() -> None:
    import torch

    model = await LocalEmbedder(threads=1, workers=1, runtime="torch").model()
    assert model.runtime == "torch" and model.threads_in_use() == torch.get_num_threads() == 1


@pytest.mark.parametrize("workers", [1, 2])
async def test_concurrency_bound_is_honoured_and_the_loop_keeps_running(workers: int) -> None:
    emb = LocalEmbedder(workers=workers, threads=1, cache_entries=0)
    model = await emb.model()
    model.peak_active = 0
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0)
            ticks += 1

    running = asyncio.create_task(ticker())
    calls = [emb.embed([f"request {n} about {t}" for t in TEXTS] + [f"a longer text number {n} " * 20])
             for n in range(8)]
    results = await asyncio.gather(*calls)
    running.cancel()
    assert all(len(r) == len(TEXTS) + 1 for r in results)
    assert 1 <= model.peak_active <= workers
    assert ticks > 8  # the event loop ran other work while the model was busy


async def test_stored_entity_names_reuse_their_embedding(db_dsn, group) -> None:
    """A name already stored is not embedded again; a renamed entity's old vector is never reused."""
    seen: list[str] = []

    class Recording(HashEmbedder):
        async def embed(self, texts):
            seen.extend(texts)
            return await super().embed(texts)

    from pgmemory import Memory
    from pgmemory.extract.rules import RuleExtractor

    async with await Memory.open(db_dsn, embedder=Recording(), extractor=RuleExtractor()) as memory:
        await memory.add_episode(group, "I work at Acme Corp.", actor="Alice",
                                 reference_time=utc("2024-01-01"))
        assert {"Alice", "Acme Corp"} <= set(seen)
        seen.clear()
        second = await memory.add_episode(group, "I still work at Acme Corp and I live in Boston.",
                                          actor="Alice", reference_time=utc("2024-02-01"))
        assert {"Alice", "Acme Corp"} <= set(second.entities_merged)
        assert "Alice" not in seen and "Acme Corp" not in seen and "Boston" in seen
        await check_stored(memory, group)


async def check_stored(memory, group) -> None:
    stored = await stored_name_vectors(memory.pool, group, ["Alice", "Acme Corp", "Nobody"])
    assert set(stored) == {"Alice", "Acme Corp"}
    assert cosines([stored["Alice"]], [HashEmbedder().embed_one("Alice")])[0] >= 0.9999
    async with memory.pool.acquire() as conn:
        await conn.execute("UPDATE pgmemory.entities SET name = 'Acme Corporation'"
                           " WHERE group_id = $1 AND name = 'Acme Corp'", group)
    assert await stored_name_vectors(memory.pool, group, ["Acme Corporation"]) == {}


def test_init_exports_the_onnx_graph_so_no_query_waits(empty_dsn, tmp_path, monkeypatch) -> None:
    """Model setup happens at `pgmemory init` (once per cache directory), not at the first query."""
    env = {**os.environ, "PGMEMORY_DSN": empty_dsn, "PGMEMORY_EMBEDDER": "local", "PGMEMORY_CACHE_DIR": str(tmp_path)}
    run = subprocess.run([sys.executable, "-m", "pgmemory.surfaces.cli", "init"], capture_output=True, text=True,
                         env=env, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    graphs = list((tmp_path / "onnx").glob("*.onnx"))
    assert len(graphs) == 1
    assert f"local embedder:  onnx, graph exported at {graphs[0]}" in run.stdout
    monkeypatch.setenv("PGMEMORY_CACHE_DIR", str(tmp_path))
    assert LocalEmbedder().prepare() == f"onnx, graph cached at {graphs[0]}"
    assert LocalEmbedder(runtime="torch").prepare() == "torch"


async def test_episode_text_is_embedded_while_the_extractor_works(db_dsn, group) -> None:
    """The episode's text (its largest encode; with the turn before it, when there is one) is sent to
    the embedder before extraction starts, so the model runs while the extractor and the candidate
    reads do; the stored vector is that text's."""
    events: list[str] = []

    class Recording(HashEmbedder):
        async def embed(self, texts):
            events.extend(f"embed {t}" for t in texts)
            return await super().embed(texts)

    from pgmemory import Memory
    from pgmemory.extract.rules import RuleExtractor

    class Extracting(RuleExtractor):
        async def extract(self, *args, **kwargs):
            events.append("extract")
            return await super().extract(*args, **kwargs)

    async with await Memory.open(db_dsn, embedder=Recording(), extractor=Extracting()) as memory:
        result = await memory.add_episode(group, "I work at Acme Corp.", actor="Alice",
                                          reference_time=utc("2024-01-01"))
        stored = await memory.pool.fetchval("SELECT embedding::text FROM pgmemory.episodes"
                                            " WHERE group_id = $1 AND id = $2", group, result.episode_id)
    assert events.index("embed Alice: I work at Acme Corp.") < events.index("extract") < events.index("embed Alice")
    expected = HashEmbedder().embed_one("Alice: I work at Acme Corp.")
    assert cosines([[float(x) for x in stored.strip("[]").split(",")]], [expected])[0] >= 0.9999
