"""The MCP server end to end with the official SDK's own client: in-process (every tool, error
paths), over stdio (`pgmemory mcp` as a subprocess) and over streamable HTTP with API keys (a key
for one group never reaches another). On the server tests' database: the in-process worker sees only
those tests' episodes."""
from __future__ import annotations

import asyncio
import os
import socket
import sys
import time
import uuid

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from pgmemory import Memory
from pgmemory.extract.rules import RuleExtractor
from pgmemory.providers.embedder import HashEmbedder
from pgmemory.surfaces.api_keys import ApiKey, create_key
from pgmemory.surfaces.mcp_server import build_server

TOOLS = {"add_memory", "search_memory_nodes", "search_memory_facts", "get_episodes", "delete_episode",
         "delete_entity_edge", "get_entity_edge", "clear_graph", "get_status"}


@pytest.fixture(scope="module")
def mcp_dsn(served_dsn):
    return served_dsn


@pytest.fixture(scope="module")
async def mcp_memory(mcp_dsn):
    memory = await Memory.open(mcp_dsn, embedder=HashEmbedder(), extractor=RuleExtractor())
    yield memory
    await memory.close()


def env_for(dsn: str) -> dict[str, str]:
    env = {**os.environ, "PGMEMORY_DSN": dsn, "PGMEMORY_EMBEDDER": "hash"}
    env.pop("PGMEMORY_LLM_BASE_URL", None)
    env.pop("OPENAI_API_KEY", None)
    return env


async def call(client: Client, tool: str, **arguments) -> dict:
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, result.content
    return result.structured_content


async def refused(client: Client, tool: str, **arguments) -> str:
    result = await client.call_tool(tool, arguments)
    assert result.is_error, result.structured_content
    [text] = [c.text for c in result.content]
    assert "\n" not in text and "Traceback" not in text
    return text


async def test_every_tool_in_process(mcp_memory):
    server = build_server(mcp_memory, default_group="mcp-a", worker_concurrency=1, auth=False)
    async with Client(server) as client:
        assert {t.name for t in (await client.list_tools()).tools} == TOOLS
        assert (await call(client, "get_status"))["status"] == "ok"
        queued = await call(client, "add_memory", name="move", episode_body="Kim: I moved to Austin.",
                            source="message", source_description="chat",
                            reference_time="2020-05-01T00:00:00Z")
        assert queued["status"] in ("pending", "processing", "done")  # the in-process worker may have taken it
        for _ in range(600):  # the in-process worker processes it (a bound on the wait, not a timing assert)
            [episode] = (await call(client, "get_episodes"))["episodes"]
            if episode["status"] == "done":
                break
            await asyncio.sleep(0.05)
        assert episode["status"] == "done" and episode["metadata"] == {"name": "move"}
        again = await call(client, "add_memory", name="move", episode_body="Kim: I moved to Austin.",
                           source="message", source_description="chat", reference_time="2020-05-01T00:00:00Z")
        assert (again["episode_id"], again["status"]) == (queued["episode_id"], "done")  # not "pending": no wait
        done = await call(client, "add_memory", name="move2", episode_body="Kim: I moved to Boston.", source="message",
                          reference_time="2023-05-01T00:00:00Z", wait=True)
        assert done["status"] == "done"

        now = (await call(client, "search_memory_facts", query="where does Kim live"))["facts"]
        assert [f["fact"] for f in now if "Boston" in f["fact"]] and not [f for f in now if "Austin" in f["fact"]]
        then = (await call(client, "search_memory_facts", query="where does Kim live",
                           as_of="2021-01-01T00:00:00Z"))["facts"]
        assert [f for f in then if "Austin" in f["fact"]] and not [f for f in then if "Boston" in f["fact"]]
        believed_2021 = (await call(client, "search_memory_facts", query="Boston Austin",
                                    known_at="2021-01-01T00:00:00Z"))["facts"]
        assert believed_2021 == []  # nothing was recorded yet in 2021 (transaction time)
        nodes = (await call(client, "search_memory_nodes", query="Boston"))["nodes"]
        boston = next(n for n in nodes if n["name"] == "Boston")
        centred = (await call(client, "search_memory_facts", query="moved", center_node_uuid=boston["uuid"]))["facts"]
        assert centred

        fact = next(f for f in now if "Boston" in f["fact"])
        edge = await call(client, "get_entity_edge", uuid=fact["uuid"])
        assert edge["current"]["fact"] == fact["fact"]
        await call(client, "delete_entity_edge", uuid=fact["uuid"])
        assert (await call(client, "get_entity_edge", uuid=fact["uuid"]))["current"] is None
        deleted = await call(client, "delete_episode", uuid=done["episode_id"])
        assert "facts_retracted" in deleted
        # Deleted (retracted) already: deleting again is refused, erasing its text still works.
        assert "does not exist in group" in await refused(client, "delete_episode", uuid=done["episode_id"])
        assert (await call(client, "delete_episode", uuid=done["episode_id"], erase=True))["erased"] is True

        # Error paths: one line each, the server keeps serving.
        assert "confirm" in await refused(client, "clear_graph")
        assert "unknown source" in await refused(client, "add_memory", name="x", episode_body="x", source="poem")
        assert "time zone" in await refused(client, "search_memory_facts", query="x", as_of="2021-01-01T00:00")
        assert "not found" in await refused(client, "get_entity_edge", uuid="00000000-0000-0000-0000-000000000001")
        assert "does not exist in group" in await refused(client, "delete_episode", uuid="nope")
        # A count out of range names the argument the caller gave, not the search's own `limit`.
        assert (await refused(client, "search_memory_facts", query="x", max_facts=0)).endswith(
            ": max_facts must be between 1 and 100, got 0")
        assert (await refused(client, "search_memory_nodes", query="x", max_nodes=101)).endswith(
            ": max_nodes must be between 1 and 100, got 101")
        assert "fact id" in await refused(client, "delete_entity_edge", uuid="not-a-uuid")
        # An empty time, label or centre is refused, not read as "none given".
        assert (await refused(client, "search_memory_facts", query="x", as_of="")).endswith(": as_of is empty")
        assert (await refused(client, "search_memory_nodes", query="x", known_at="")).endswith(": known_at is empty")
        assert "entity is empty" in await refused(client, "search_memory_nodes", query="x", entity="")
        assert "center_node_uuid must be a UUID" in await refused(client, "search_memory_facts", query="x", center_node_uuid="")
        # Wrongly typed or missing arguments: one line naming the argument.
        assert await refused(client, "search_memory_facts", query=5) == \
            "Error executing tool search_memory_facts: query: Input should be a valid string"
        assert (await refused(client, "search_memory_facts", query="x", group_ids="mcp-a")).endswith(
            ": group_ids: Input should be a valid list")
        assert (await refused(client, "search_memory_facts", query="x", group_ids=[1, 2])).endswith(
            ": group_ids.0: Input should be a valid string")
        assert (await refused(client, "search_memory_facts", query="x", group_ids=["mcp-a"] * 101)).endswith(
            ": group_ids names 101 groups; at most 100 per call")
        assert (await refused(client, "get_episodes", last_n="ten")).endswith(": last_n: Input should be a valid"
                                                                             " integer, unable to parse string as"
                                                                             " an integer")
        assert (await refused(client, "add_memory", episode_body="x")).endswith(": name: Field required")
        # A flag is JSON true/false only: "yes" or 1 is refused, as the Python API refuses it.
        assert (await refused(client, "delete_episode", uuid="nope", erase="yes")).endswith(
            ": erase: Input should be a valid boolean")
        assert (await refused(client, "search_memory_facts", query="x", include_invalidated=1)).endswith(
            ": include_invalidated: Input should be a valid boolean")
        # ... and a count is a number: true is not max_facts=1 (the Python API refuses limit=True too).
        for tool, count in (("search_memory_facts", "max_facts"), ("search_memory_nodes", "max_nodes")):
            assert (await refused(client, tool, query="x", **{count: True})).endswith(
                f": {count}: Value error, a count must be a number, not true or false")
        assert (await refused(client, "get_episodes", last_n=False)).endswith(
            ": last_n: Value error, a count must be a number, not true or false")
        assert (await refused(client, "add_memory", name="x", episode_body="x", wait="no")).endswith(
            ": wait: Input should be a valid boolean")
        # An empty list is not the default group here: erasing is never a fallback.
        assert "group_ids is empty" in await refused(client, "clear_graph", group_ids=[], confirm=True)
        assert (await call(client, "get_episodes"))["episodes"]
        erased = await call(client, "clear_graph", confirm=True)
        assert erased["erased"]["mcp-a"] >= 1
        assert (await call(client, "get_episodes"))["episodes"] == []


async def test_a_failing_embedder_is_one_line(mcp_memory, fake_openai):
    """The embedding endpoint answering HTTP 500: the tool says the embedding provider failed."""
    from pgmemory.providers.embedder import OpenAIEmbedder
    from tests.fake_openai import Status

    embedder = OpenAIEmbedder(model="embed-test", dim=384, base_url=fake_openai.base_url, max_retries=0)
    memory = Memory(mcp_memory.pool, embedder, RuleExtractor())
    fake_openai.script_embeddings(Status(500, "upstream\nexploded"))
    async with Client(build_server(memory, default_group="mcp-embed", worker_concurrency=0, auth=False)) as client:
        text = await refused(client, "search_memory_facts", query="where does Kim live")
        assert "the embedding provider failed: " in text and "embedding request to" in text
    await embedder.aclose()


async def test_no_default_group_means_each_call_names_one(mcp_memory):
    async with Client(build_server(mcp_memory, worker_concurrency=0, auth=False)) as client:
        assert "no group given" in await refused(client, "get_episodes")
        assert (await call(client, "get_episodes", group_id="mcp-none"))["episodes"] == []


async def test_a_server_with_auth_refuses_a_call_without_headers(mcp_memory):
    """Fail closed: with auth on (the default), a call that carries no headers at all (in process,
    or any transport that drops them) is refused like one without a key, not trusted with every group."""
    async with Client(build_server(mcp_memory, default_group="mcp-a", worker_concurrency=0)) as client:
        assert "unauthorized" in await refused(client, "get_status")
        assert "unauthorized" in await refused(client, "get_episodes", group_id="mcp-a")
        assert "unauthorized" in await refused(client, "search_memory_facts", query="Austin")


async def test_stdio_transport(mcp_dsn):
    params = StdioServerParameters(command=sys.executable, args=["-m", "pgmemory.surfaces.cli", "mcp", "--group",
                                                                  "mcp-stdio", "--workers", "0"], env=env_for(mcp_dsn))
    async with Client(params) as client:
        assert {t.name for t in (await client.list_tools()).tools} == TOOLS
        done = await call(client, "add_memory", name="job", episode_body="Lu: I work at Initech.", source="message",
                          reference_time="2024-01-01T00:00:00Z", wait=True)
        assert done["status"] == "done"
        facts = (await call(client, "search_memory_facts", query="where does Lu work"))["facts"]
        assert any("Initech" in f["fact"] for f in facts)
        assert "confirm" in await refused(client, "clear_graph")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_get_status_counts_the_groups_a_key_may_read():
    """What get_status narrows its queue count to: the key's read and write groups, or all with '*'."""
    assert ApiKey(uuid.uuid4(), "k", ("r", "w"), ("w",)).readable_groups() == ("r", "w")
    assert ApiKey(uuid.uuid4(), "k", (), ("*",)).readable_groups() is None
    assert ApiKey(uuid.uuid4(), "k", ("*",), ("w",)).readable_groups() is None


async def test_http_transport_needs_a_key_for_the_group(mcp_dsn, mcp_memory):
    _, key = await create_key(mcp_memory.pool, "mcp-http", read=[], write=["mcp-h"])
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "pgmemory.surfaces.cli", "mcp", "--transport", "http", "--port", str(port),
        "--workers", "0", env=env_for(mcp_dsn), stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                async with httpx.AsyncClient() as probe:
                    await probe.get(url, timeout=2)
                break
            except httpx.TransportError:
                assert proc.returncode is None and time.monotonic() < deadline
                await asyncio.sleep(0.2)

        async def session(headers: dict[str, str]) -> Client:
            http = httpx2.AsyncClient(headers=headers, timeout=60)
            return Client(streamable_http_client(url, http_client=http))

        async with await session({"Authorization": f"Bearer {key}"}) as client:
            assert {t.name for t in (await client.list_tools()).tools} == TOOLS
            done = await call(client, "add_memory", name="a", episode_body="Mo: I live in Oslo.", group_id="mcp-h",
                              source="message",
                              reference_time="2024-01-01T00:00:00Z", wait=True)
            assert done["status"] == "done"
            facts = (await call(client, "search_memory_facts", query="Oslo", group_ids=["mcp-h"]))["facts"]
            assert any("Oslo" in f["fact"] for f in facts)
            assert "forbidden" in await refused(client, "search_memory_facts", query="Oslo", group_ids=["mcp-a"])
            assert "forbidden" in await refused(client, "get_episodes", group_id="mcp-stdio")
            assert "forbidden" in await refused(client, "clear_graph", group_ids=["mcp-h", "other"], confirm=True)
            # A group id that is no group id is named as such, before (and whatever) the key allows.
            assert (await refused(client, "get_episodes", group_id="")).endswith(": group_id must be a non-empty string")
            assert "NUL" in await refused(client, "search_memory_facts", query="Oslo", group_ids=["mcp-h", "x\u0000"])
            assert "'*' is reserved" in await refused(client, "add_memory", name="a", episode_body="x", group_id="*")
            # get_status counts the queue of the key's groups only, not another group's episodes.
            await call(client, "add_memory", name="q", episode_body="Mo: I like tea.", group_id="mcp-h",
                       reference_time="2024-01-02T00:00:00Z")
            for i in range(3):
                await mcp_memory.enqueue_episode("mcp-other", f"Ann: secret {i}.", reference_time="2024-01-01T00:00:00Z")
            assert (await call(client, "get_status"))["episodes_queued"] == 1
        async with await session({}) as client:
            assert "unauthorized" in await refused(client, "get_status")
            assert "unauthorized" in await refused(client, "get_episodes", group_id="mcp-h")
        async with await session({"X-API-Key": "pgm_" + "0" * 40}) as client:
            assert "unauthorized" in await refused(client, "search_memory_nodes", query="Oslo", group_ids=["mcp-h"])
    finally:
        proc.terminate()
        await proc.wait()
        for group in ("mcp-h", "mcp-other"):
            await mcp_memory.erase_group(group)


async def test_a_bad_id_is_named_as_the_argument_it_came_in(mcp_memory):
    """An id the tools refuse is named by the argument the model sent (uuid, before_id,
    center_node_uuid), not by the Python API's name for it (episode_id, center)."""
    async with Client(build_server(mcp_memory, default_group="mcp-names", worker_concurrency=0, auth=False)) as client:
        assert (await refused(client, "delete_episode", uuid=" ")).endswith(": uuid must be a UUID or a non-empty string")
        assert (await refused(client, "add_memory", name="n", episode_body="Ann: hi.", uuid="")).endswith(
            ": uuid must be a UUID or a non-empty string")
        assert (await refused(client, "get_episodes", before_id="")).endswith(
            ": before_id must be a UUID or a non-empty string")
        for tool in ("search_memory_facts", "search_memory_nodes"):
            assert (await refused(client, tool, query="x", center_node_uuid="not-a-uuid")).endswith(
                ": center_node_uuid must be a UUID, got 'not-a-uuid'")
        assert (await call(client, "get_episodes"))["episodes"] == []  # nothing was written


async def test_an_empty_entity_label_is_named_as_entity(mcp_memory):
    """search_memory_nodes' entity="" was refused as 'labels values is empty' (the filter it becomes)."""
    async with Client(build_server(mcp_memory, default_group="mcp-names", worker_concurrency=0, auth=False)) as client:
        assert (await refused(client, "search_memory_nodes", query="x", entity=" ")).endswith(": entity is empty")
        assert (await refused(client, "search_memory_nodes", query="x", entity="L" * 201)).endswith(
            ": entity has 201 characters; the limit is 200")


async def test_a_json_episode_with_nan_or_a_huge_integer_is_refused_in_one_line(mcp_memory):
    """source=json: NaN was ingested with wait=true (refused queued) and a 5000-digit integer was an
    unexpected ValueError; both are one line now, and nothing is stored."""
    async with Client(build_server(mcp_memory, default_group="mcp-json", worker_concurrency=0, auth=False)) as client:
        for wait in (False, True):
            assert (await refused(client, "add_memory", name="j", episode_body='{"a": NaN}', source="json",
                                  wait=wait)).endswith(": json episode is not valid JSON: NaN is not a JSON value")
            assert "json episode cannot be read: Exceeds the limit (4300 digits)" in await refused(
                client, "add_memory", name="j", episode_body="[" + "9" * 5000 + "]", source="json", wait=wait)
        assert (await call(client, "get_episodes"))["episodes"] == []
