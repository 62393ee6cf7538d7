"""The REST server against a real Postgres (the server tests' own database, so its in-process worker sees
only these tests' episodes): queued ingestion and polling, search and context on both time axes,
the graph reads, deletes, API keys (a key for one group never sees another), JSON errors with a
stable code and a 4xx for every kind of bad input; `pgmemory serve` as a real uvicorn process."""
from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from datetime import datetime, timezone

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pgmemory import Memory
from pgmemory.extract.rules import RuleExtractor
from pgmemory.providers.embedder import HashEmbedder
from pgmemory.surfaces.api_keys import create_key
from pgmemory.surfaces.rest import create_app
from tests import support


@pytest.fixture(scope="module")
def rest_dsn(served_dsn):
    return served_dsn


@pytest.fixture(scope="module")
async def rest_memory(rest_dsn):
    memory = await Memory.open(rest_dsn, embedder=HashEmbedder(), extractor=RuleExtractor())
    yield memory
    await memory.close()


@pytest.fixture(scope="module")
async def server(rest_memory):
    """The app (auth on, one in-process worker) and two keys: A writes group-a, B writes group-b."""
    memory = rest_memory
    app = create_app(memory, worker_concurrency=1, max_body_bytes=200_000)
    _, key_a = await create_key(memory.pool, "a", read=[], write=["group-a"])
    _, key_b = await create_key(memory.pool, "b", read=["shared"], write=["group-b"])
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://pgmemory") as client:
            yield client, {"a": {"Authorization": f"Bearer {key_a}"}, "b": {"X-API-Key": key_b}}


async def wait_done(client, headers, group: str, episode_id: str) -> dict:
    """Poll the episode's status until the worker finished it (a bound on the wait, not a timing assert)."""
    for _ in range(600):
        body = (await client.get(f"/v1/groups/{group}/episodes/{episode_id}", headers=headers)).json()
        if body["status"] in ("done", "failed"):
            return body
        await asyncio.sleep(0.05)
    raise AssertionError(f"episode {episode_id} still {body['status']}")


def error(response: httpx.Response) -> tuple[int, str]:
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}, body
    return response.status_code, body["error"]["code"]


async def test_health_ready_and_openapi_need_no_key(server):
    client, _ = server
    assert (await client.get("/health")).json() == {"status": "ok"}
    assert (await client.get("/ready")).json() == {"status": "ready"}
    for path in ("/health", "/ready"):  # load balancers' checks send HEAD (it was a 405)
        head = await client.head(path)
        assert head.status_code == 200 and head.content == b""
    paths = (await client.get("/openapi.json")).json()["paths"]
    assert {"/v1/search", "/v1/context", "/v1/groups/{group_id}/episodes", "/v1/groups/{group_id}/messages",
            "/v1/groups/{group_id}/entities/{entity_id}/facts"} <= set(paths)
    assert (await client.get("/docs")).status_code == 200


async def test_queued_episode_is_processed_and_searchable(server):
    client, keys = server
    r = await client.post("/v1/groups/group-a/episodes", headers=keys["a"], json={
        "content": "I left Tencent last week and now work at OpenAI.", "actor": "Alice",
        "reference_time": "2024-01-15T10:00:00Z", "metadata": {"session": "s1"}})
    assert r.status_code == 202 and r.json()["status"] in ("pending", "processing", "done")  # workers run
    done = await wait_done(client, keys["a"], "group-a", r.json()["episode_id"])
    assert (done["status"], done["metadata"]) == ("done", {"session": "s1"})
    again = await client.post("/v1/groups/group-a/episodes", headers=keys["a"], json={
        "content": "I left Tencent last week and now work at OpenAI.", "actor": "Alice",
        "reference_time": "2024-01-15T10:00:00Z", "metadata": {"session": "s1"}})
    # The same episode posted again is where it stands: a client is not told to wait for it.
    assert (again.status_code, again.json()["episode_id"], again.json()["status"]) == (202, done["id"], "done")
    found = (await client.post("/v1/search", headers=keys["a"], json={
        "query": "where does Alice work", "group_ids": ["group-a"]})).json()
    assert any("OpenAI" in f["fact"] for f in found["facts"])
    before = (await client.post("/v1/search", headers=keys["a"], json={
        "query": "where does Alice work", "group_ids": ["group-a"],
        "filters": {"as_of": "2023-01-01T00:00:00Z"}})).json()
    assert not any("OpenAI" in f["fact"] for f in before["facts"])
    other_session = (await client.post("/v1/search", headers=keys["a"], json={
        "query": "where does Alice work", "group_ids": ["group-a"], "filters": {"metadata": {"session": "s2"}}})).json()
    assert other_session["facts"] == [] and other_session["episodes"] == []
    ctx = (await client.post("/v1/context", headers=keys["a"], json={
        "query": "where does Alice work", "group_ids": ["group-a"], "max_chars": 2000})).json()["context"]
    assert "OpenAI" in ctx


async def test_messages_batch_and_wait(server):
    client, keys = server
    r = await client.post("/v1/groups/group-b/messages?wait=true", headers=keys["b"], json={
        "messages": [{"role": "user", "name": "Bo", "content": "I moved to Denver."},
                     {"role": "assistant", "content": "Nice!"}], "reference_time": "2024-02-01T09:00:00Z"})
    assert r.status_code == 200 and r.json()["status"] == "done"
    r = await client.post("/v1/groups/group-b/episodes/batch", headers=keys["b"], json={"episodes": [
        {"content": "I like jazz.", "actor": "Bo", "reference_time": "2024-02-02T09:00:00Z"},
        {"content": "I adopted a cat.", "actor": "Bo", "reference_time": "2024-02-03T09:00:00Z"}]})
    assert r.status_code == 202 and len(r.json()["episode_ids"]) == 2
    for eid in r.json()["episode_ids"]:
        assert (await wait_done(client, keys["b"], "group-b", eid))["status"] == "done"
    # The same batch again says each episode is done; with a new one beside, each where it stands.
    jazz, cat = r.json()["episode_ids"]
    again = (await client.post("/v1/groups/group-b/episodes/batch", headers=keys["b"], json={"episodes": [
        {"content": "I like jazz.", "actor": "Bo", "reference_time": "2024-02-02T09:00:00Z"},
        {"content": "I adopted a cat.", "actor": "Bo", "reference_time": "2024-02-03T09:00:00Z"}]})).json()
    assert (again["status"], again["episodes"]) == ("done", [{"episode_id": jazz, "status": "done"},
                                                             {"episode_id": cat, "status": "done"}])
    mixed = (await client.post("/v1/groups/group-b/episodes/batch", headers=keys["b"], json={"episodes": [
        {"content": "I like jazz.", "actor": "Bo", "reference_time": "2024-02-02T09:00:00Z"},
        {"content": "I sold my bike.", "actor": "Bo", "reference_time": "2024-02-03T10:00:00Z"}]})).json()
    assert mixed["episodes"][0] == {"episode_id": jazz, "status": "done"}
    if mixed["episodes"][1]["status"] != "done":  # a worker may have taken and finished it already
        assert mixed["status"] == "mixed"
    assert (await wait_done(client, keys["b"], "group-b", mixed["episode_ids"][1]))["status"] == "done"
    listed = (await client.get("/v1/groups/group-b/episodes?last_n=10", headers=keys["b"])).json()["episodes"]
    assert [e["content"] for e in listed] == ["Bo: I moved to Denver.\nAssistant: Nice!", "I like jazz.",
                                              "I adopted a cat.", "I sold my bike."]
    # Paging back: before_id = the oldest episode of the page just read.
    url = "/v1/groups/group-b/episodes?last_n=1&before_id="
    older = (await client.get(url + listed[1]["id"], headers=keys["b"])).json()["episodes"]
    assert [e["id"] for e in older] == [listed[0]["id"]]
    r = await client.get(url + "no-such-episode", headers=keys["b"])
    assert error(r) == (400, "invalid_input") and "before_id" in r.json()["error"]["message"]
    # A bad episode in a batch: nothing of the batch is stored.
    r = await client.post("/v1/groups/group-b/episodes/batch", headers=keys["b"], json={"episodes": [
        {"content": "I like tea.", "actor": "Bo", "reference_time": "2024-02-04T09:00:00Z"},
        {"content": "x", "reference_time": "2024-02-04"}]})
    assert error(r) == (400, "invalid_input") and "episode 2" in r.json()["error"]["message"]
    listed = (await client.get("/v1/groups/group-b/episodes", headers=keys["b"])).json()["episodes"]
    assert len(listed) == 4


async def test_an_episode_id_used_for_other_content_is_a_400_and_its_batch_stores_nothing(server, rest_memory):
    client, _ = server
    _, key = await create_key(rest_memory.pool, "reuse", read=[], write=["group-reuse"])
    headers, url = {"X-API-Key": key}, "/v1/groups/group-reuse/episodes"
    tea = {"content": "I like tea.", "actor": "Bo", "episode_id": "bo-1", "reference_time": "2024-03-01T09:00:00Z"}
    assert (await client.post(url, headers=headers, json=tea)).status_code == 202
    assert (await client.post(url, headers=headers, json=tea)).status_code == 202  # the same episode again: a no-op
    r = await client.post(url, headers=headers, json={**tea, "content": "I like coffee."})
    assert error(r) == (400, "invalid_input")
    assert r.json()["error"]["message"].startswith("episode id 'bo-1' (") and "already used" in r.text
    r = await client.post(f"{url}/batch", headers=headers, json={"episodes": [
        {"content": "I like rain.", "actor": "Bo", "reference_time": "2024-03-02T09:00:00Z"},
        {**tea, "content": "I like coffee."}]})
    assert error(r) == (400, "invalid_input") and r.json()["error"]["message"].startswith("episode 2: episode id 'bo-1'")
    listed = (await client.get(url, headers=headers)).json()["episodes"]
    assert [e["content"] for e in listed] == ["I like tea."]


async def test_graph_reads_fact_history_and_deletes(server):
    client, keys = server
    h = keys["a"]
    first = (await client.post("/v1/groups/group-a/facts", headers=h, json={
        "source": "Ann", "relation": "LIVES_IN", "target": "Oslo", "fact": "Ann lives in Oslo.",
        "valid_from": "2019-01-01T00:00:00Z"})).json()
    await client.post("/v1/groups/group-a/facts", headers=h, json={
        "source": "Ann", "relation": "LIVES_IN", "target": "Rome", "fact": "Ann lives in Rome.",
        "valid_from": "2021-01-01T00:00:00Z", "functional": True})
    ents = (await client.get("/v1/groups/group-a/entities?name=ann", headers=h)).json()["entities"]
    ann = next(e for e in ents if e["name"] == "Ann")
    assert (await client.get(f"/v1/groups/group-a/entities/{ann['id']}", headers=h)).json()["name"] == "Ann"
    facts = (await client.get(f"/v1/groups/group-a/entities/{ann['id']}/facts", headers=h)).json()["facts"]
    assert sorted(f["target"] for f in facts) == ["Oslo", "Rome"]
    history = (await client.get(f"/v1/groups/group-a/facts/{first['fact_id']}", headers=h)).json()
    assert len(history["history"]) == 2 and history["current"]["valid_to"].startswith("2021-01-01")
    r = await client.delete(f"/v1/groups/group-a/facts/{first['fact_id']}", headers=h)
    assert r.status_code == 200
    assert (await client.get(f"/v1/groups/group-a/facts/{first['fact_id']}", headers=h)).json()["current"] is None
    assert error(await client.delete(f"/v1/groups/group-a/facts/{first['fact_id']}", headers=h)) == (404, "not_found")
    r = await client.post("/v1/groups/group-a/episodes?wait=true", headers=h, json={
        "content": "I bought a bike.", "actor": "Cal", "reference_time": "2024-03-01T00:00:00Z",
        "episode_id": "bike-1"})
    assert r.json()["status"] == "done"
    r = await client.delete("/v1/groups/group-a/episodes/bike-1", headers=h)
    assert r.status_code == 200 and set(r.json()) >= {"facts_retracted", "entities_removed"}
    assert error(await client.get("/v1/groups/group-a/episodes/bike-1", headers=h)) == (404, "not_found")
    assert error(await client.delete("/v1/groups/group-a/episodes/bike-1", headers=h)) == (404, "not_found")
    # Retracted already, it can still be erased (its text then nowhere), as from Python, CLI and SQL.
    r = await client.delete("/v1/groups/group-a/episodes/bike-1?erase=true", headers=h)
    assert r.status_code == 200 and r.json()["erased"] is True, r.json()
    r = await client.post("/v1/search", headers=h, json={"query": "bike", "group_ids": ["group-a"],
                                                         "filters": {"include_invalidated": True}})
    assert not any("bike" in e["content"] for e in r.json()["episodes"])
    assert error(await client.delete("/v1/groups/group-a/episodes/never-was?erase=true", headers=h)) == \
        (404, "not_found")


async def test_search_and_context_rank_by_distance_from_a_centre_entity(server):
    """center_node_uuid (as MCP's search tools take it) ranks by graph distance from that entity,
    the node_distance reranker: recipe edge_node_distance, which needs a centre, runs through REST
    (it was refused, naming config.center, which no body could set); another group's entity is refused."""
    client, keys = server
    h = keys["a"]
    for source, target in (("Cendra", "Centerburg"), ("Centerburg", "Centria"), ("Farley", "Farborough")):
        await client.post("/v1/groups/group-a/facts", headers=h, json={
            "source": source, "relation": "NEAR", "target": target, "fact": f"{source} is near {target}."})
    entities = (await client.get("/v1/groups/group-a/entities?name=cendra", headers=h)).json()["entities"]
    cendra = next(e["id"] for e in entities if e["name"] == "Cendra")
    query = "near Farborough Centria Centerburg"
    for recipe in ("edge_node_distance", "edge_hybrid_rrf"):
        r = await client.post("/v1/search", headers=h, json={
            "query": query, "group_ids": ["group-a"], "recipe": recipe, "center_node_uuid": cendra})
        assert r.status_code == 200, r.text
        near = [f for f in r.json()["facts"] if f["relation"] == "NEAR"]
        assert [f["fact"] for f in near][:2] == ["Cendra is near Centerburg.", "Centerburg is near Centria."], recipe
        assert [f["distance"] for f in near][:2] == [0, 1] and near[-1]["fact"] == "Farley is near Farborough."
        r = await client.post("/v1/context", headers=h, json={
            "query": query, "group_ids": ["group-a"], "recipe": recipe, "center_node_uuid": cendra})
        assert r.status_code == 200 and "Cendra is near Centerburg." in r.json()["context"], r.text
    for path in ("/v1/search", "/v1/context"):
        r = await client.post(path, headers=h, json={"query": query, "group_ids": ["group-a"],
                                                     "recipe": "edge_node_distance"})
        assert error(r) == (400, "invalid_input") and "center_node_uuid" in r.json()["error"]["message"]
        r = await client.post(path, headers=keys["b"], json={"query": query, "group_ids": ["group-b"],
                                                             "center_node_uuid": cendra})
        assert error(r) == (400, "invalid_input") and "not an entity of the searched groups" in r.text
        r = await client.post(path, headers=h, json={"query": query, "group_ids": ["group-a"],
                                                     "center_node_uuid": "not-a-uuid"})
        assert error(r) == (400, "invalid_input")


async def test_a_failing_embedder_is_a_502_naming_the_provider(rest_memory, fake_openai):
    """The embedding endpoint (the local fake OpenAI server) answering HTTP 500, then vectors of the
    wrong size: a 502 provider_error in one line saying the embedding provider failed, not a 500."""
    from pgmemory.providers.embedder import OpenAIEmbedder
    from tests.fake_openai import Status, Vectors

    embedder = OpenAIEmbedder(model="embed-test", dim=384, base_url=fake_openai.base_url, max_retries=0)
    app = create_app(Memory(rest_memory.pool, embedder, RuleExtractor()), auth=False, worker_concurrency=0)
    fake_openai.script_embeddings(Status(500, "upstream\nexploded"), Vectors(dim=3), Vectors(dim=3))
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://pgmemory") as client:
            r = await client.post("/v1/search", json={"query": "where does Ann live", "group_ids": ["group-e"]})
            assert error(r) == (502, "provider_error")
            message = r.json()["error"]["message"]
            assert message.startswith("the embedding provider failed: embedding request to ") and "\n" not in message
            r = await client.post("/v1/context", json={"query": "where does Ann live", "group_ids": ["group-e"]})
            assert error(r) == (502, "provider_error") and "returned 3-d vectors" in r.json()["error"]["message"]
            r = await client.post("/v1/groups/group-e/facts", json={
                "source": "Ann", "relation": "LIVES_IN", "target": "Oslo", "fact": "Ann lives in Oslo."})
            assert error(r) == (502, "provider_error")
            assert (await client.get("/v1/groups/group-e/entities")).json()["entities"] == []  # nothing written
    await embedder.aclose()


async def test_a_failing_llm_reranker_is_a_502_naming_the_llm(rest_memory, fake_openai):
    """A search whose recipe reranks with the LLM (cross encoder) while the LLM endpoint (the local
    fake OpenAI server) answers HTTP 500: a 502 provider_error saying the LLM provider failed."""
    from pgmemory.providers.llm import LLMClient
    from pgmemory.providers.reranker import LLMCrossEncoder
    from tests.fake_openai import Status

    client = LLMClient(base_url=fake_openai.base_url, api_key="test", model="fake", timeout=5, max_retries=0)
    memory = Memory(rest_memory.pool, rest_memory.embedder, RuleExtractor())
    memory.cross_encoder = LLMCrossEncoder(client)
    app = create_app(memory, auth=False, worker_concurrency=0)
    fake_openai.script(Status(500, "model\noverloaded"))
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://pgmemory") as http:
            r = await http.post("/v1/groups/group-llm/facts", json={
                "source": "Ann", "relation": "LIVES_IN", "target": "Oslo", "fact": "Ann lives in Oslo."})
            assert r.status_code < 300, r.text
            r = await http.post("/v1/search", json={"query": "where does Ann live", "group_ids": ["group-llm"],
                                                    "recipe": "combined_cross_encoder"})
            assert error(r) == (502, "provider_error")
            message = r.json()["error"]["message"]
            assert message.startswith("the LLM provider failed: ") and "\n" not in message
            r = await http.post("/v1/search", json={"query": "where does Ann live", "group_ids": ["group-llm"]})
            assert r.status_code == 200 and "Oslo" in str(r.json())  # the default recipe does not call it
    await client.aclose()


async def test_a_key_never_sees_another_group(server):
    client, keys = server
    await client.post("/v1/groups/group-a/episodes?wait=true", headers=keys["a"], json={
        "content": "My PIN is 4321 and I work at Secretcorp.", "actor": "Ada", "reference_time": "2024-04-01T00:00:00Z"})
    a_entity = (await client.get("/v1/groups/group-a/entities?name=secretcorp", headers=keys["a"])).json()["entities"][0]
    b = keys["b"]
    for method, url, body in [
            ("POST", "/v1/search", {"query": "Secretcorp PIN", "group_ids": ["group-a"]}),
            ("POST", "/v1/search", {"query": "Secretcorp PIN", "group_ids": ["group-b", "group-a"]}),
            ("POST", "/v1/context", {"query": "Secretcorp", "group_ids": ["group-a"]}),
            ("GET", "/v1/groups/group-a/episodes", None),
            ("GET", "/v1/groups/group-a/entities", None),
            ("POST", "/v1/groups/group-a/episodes", {"content": "hi", "reference_time": "2024-01-01T00:00:00Z"}),
            ("POST", "/v1/groups/shared/episodes", {"content": "hi", "reference_time": "2024-01-01T00:00:00Z"}),
            ("DELETE", "/v1/groups/group-a?confirm=group-a", None)]:
        assert error(await client.request(method, url, json=body, headers=b)) == (403, "forbidden"), url
    # Another group's ids, asked for under the key's own group: not found, nothing leaks.
    assert error(await client.get(f"/v1/groups/group-b/entities/{a_entity['id']}", headers=b)) == (404, "not_found")
    found = (await client.post("/v1/search", headers=b, json={"query": "Secretcorp PIN 4321",
                                                               "group_ids": ["group-b"]})).json()
    assert "Secretcorp" not in str(found) and "4321" not in str(found)
    assert (await client.post("/v1/search", headers=b, json={"query": "x", "group_ids": ["shared"]})).status_code == 200
    for headers in ({}, {"Authorization": "Bearer pgm_nope"}, {"X-API-Key": "secret"}):
        assert error(await client.get("/v1/groups/group-a/episodes", headers=headers)) == (401, "unauthorized")


@pytest.mark.parametrize("method, url, body, expected", [
    ("POST", "/v1/search", {"query": "", "group_ids": ["group-a"]}, (400, "invalid_input")),
    ("POST", "/v1/search", {"query": "x", "group_ids": ["group-a"], "limit": 0}, (400, "invalid_input")),
    ("POST", "/v1/search", {"query": "x", "group_ids": ["group-a"], "recipe": "nope"}, (400, "invalid_input")),
    ("POST", "/v1/search", {"query": "x", "group_ids": ["group-a"], "filters": {"as_of": "2020-01-01T00:00"}},
     (400, "invalid_input")),
    ("POST", "/v1/search", {"query": "x", "group_ids": ["group-a"], "filters": {"as_of": "yesterday"}},
     (400, "invalid_input")),
    ("POST", "/v1/search", {"query": "x", "group_ids": ["group-a"], "filters": {"relation_types": "WORKS_FOR"}},
     (422, "invalid_request")),
    ("POST", "/v1/search", {"query": 42, "group_ids": ["group-a"]}, (422, "invalid_request")),
    # A flag is JSON true/false only (as in MCP and the Python API): "yes", "no" or 1 are refused, not guessed at.
    ("POST", "/v1/search", {"query": "x", "group_ids": ["group-a"], "filters": {"include_invalidated": "yes"}},
     (422, "invalid_request")),
    ("POST", "/v1/context", {"query": "x", "group_ids": ["group-a"], "episodes": 1}, (422, "invalid_request")),
    # ... and a count is a number: true is not a limit of 1 (the Python API refuses limit=True too).
    ("POST", "/v1/search", {"query": "x", "group_ids": ["group-a"], "limit": True}, (422, "invalid_request")),
    ("POST", "/v1/context", {"query": "x", "group_ids": ["group-a"], "max_chars": True}, (422, "invalid_request")),
    ("POST", "/v1/groups/group-a/facts", {"source": "Ann", "relation": "LIKES", "target": "Tea", "fact": "Ann likes tea.",
                                          "negated": "no"}, (422, "invalid_request")),
    ("POST", "/v1/search", {"query": "x", "group_ids": ["group-a"], "extra": 1}, (422, "invalid_request")),
    ("POST", "/v1/search", {"query": "x", "group_ids": []}, (422, "invalid_request")),
    ("POST", "/v1/search", "not json", (422, "invalid_request")),
    ("POST", "/v1/groups/group-a/episodes", {"content": "x", "reference_time": "2024-01-01T00:00:00Z",
                                             "kind": "poem"}, (400, "invalid_input")),
    ("POST", "/v1/groups/group-a/episodes", {"content": "x\u0000y"}, (400, "invalid_input")),
    ("POST", "/v1/groups/group-a/episodes", {"content": "x", "metadata": {"a": "\u0000"}}, (400, "invalid_input")),
    ("POST", "/v1/groups/group-a/episodes", {"content": "x" * 300_000}, (413, "payload_too_large")),
    ("POST", "/v1/groups/group-a/messages", {"messages": [{"role": "user"}]}, (422, "invalid_request")),
    ("GET", "/v1/groups/group-a/entities/not-a-uuid", None, (400, "invalid_input")),
    ("GET", "/v1/groups/group-a/entities?limit=0", None, (400, "invalid_input")),
    ("GET", "/v1/groups/group-a/entities?limit=abc", None, (422, "invalid_request")),
    ("GET", "/v1/groups/group-a/episodes?status=gone", None, (400, "invalid_input")),
    ("GET", "/v1/groups/group-a/facts/00000000-0000-0000-0000-000000000001", None, (404, "not_found")),
    ("DELETE", "/v1/groups/group-a", None, (400, "confirmation_required")),
    ("DELETE", "/v1/groups/group-a?confirm=group-b", None, (400, "confirmation_required")),
    ("GET", "/v1/nothing", None, (404, "not_found")),
    ("PUT", "/v1/search", None, (405, "method_not_allowed")),
])
async def test_bad_input_is_a_json_4xx(server, method, url, body, expected):
    client, keys = server
    kwargs = {"content": body} if isinstance(body, str) else {"json": body}
    before = (await client.get("/v1/groups/group-a/episodes?last_n=1000", headers=keys["a"])).json()["episodes"]
    assert error(await client.request(method, url, headers=keys["a"], **kwargs)) == expected
    after = (await client.get("/v1/groups/group-a/episodes?last_n=1000", headers=keys["a"])).json()["episodes"]
    assert after == before


async def test_a_streamed_body_over_the_limit_is_a_413(server):
    client, keys = server

    async def chunks():
        for _ in range(30):
            yield b'{"content": "' + b"x" * 10_000 + b'"}'
    r = await client.post("/v1/groups/group-a/episodes", headers=keys["a"], content=chunks())
    assert "content-length" not in r.request.headers
    assert error(r) == (413, "payload_too_large")


async def test_erase_group_with_confirmation(server):
    client, keys = server
    await client.post("/v1/groups/group-b/episodes?wait=true", headers=keys["b"], json={
        "content": "I live in Quito.", "actor": "Eve", "reference_time": "2024-05-01T00:00:00Z"})
    r = await client.delete("/v1/groups/group-b?confirm=group-b", headers=keys["b"])
    assert r.status_code == 200 and r.json()["episodes_erased"] >= 1
    assert (await client.get("/v1/groups/group-b/episodes", headers=keys["b"])).json()["episodes"] == []


@pytest.mark.parametrize("origins, allowed", [((), None), (("https://app.example",), "https://app.example")])
async def test_cors_is_off_unless_an_origin_is_given(rest_memory, origins, allowed):
    app = create_app(rest_memory, worker_concurrency=0, cors_origins=origins)
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://pgmemory") as client:
            r = await client.options("/v1/search", headers={"Origin": "https://app.example",
                                                             "Access-Control-Request-Method": "POST"})
            assert r.headers.get("access-control-allow-origin") == allowed
            r = await client.get("/health", headers={"Origin": "https://evil.example"})
            assert "access-control-allow-origin" not in r.headers


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_pgmemory_serve_runs_uvicorn_with_keys(rest_dsn):
    env = {**os.environ, "PGMEMORY_DSN": rest_dsn, "PGMEMORY_EMBEDDER": "hash"}
    env.pop("PGMEMORY_LLM_BASE_URL", None)
    env.pop("OPENAI_API_KEY", None)
    made = subprocess.run([sys.executable, "-m", "pgmemory.surfaces.cli", "keys", "create", "cli-test",
                           "--write", "cli-g"], env=env, capture_output=True, text=True, timeout=120)
    assert made.returncode == 0, made.stderr
    token = made.stdout.split("secret (shown once, store it now): ")[1].strip()
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "pgmemory.surfaces.cli", "serve", "--port", str(port),
                             "--workers", "0"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"{base}/ready", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read() if proc.poll() else ""
            time.sleep(0.2)
        headers = {"Authorization": f"Bearer {token}"}
        r = httpx.post(f"{base}/v1/groups/cli-g/episodes", headers=headers,
                       json={"content": "I work at Umbrella.", "actor": "Flo"})
        assert r.status_code == 202
        assert httpx.get(f"{base}/v1/groups/cli-g/episodes/{r.json()['episode_id']}",
                         headers=headers).json()["status"] == "pending"  # --workers 0: left to `pgmemory worker`
        assert httpx.post(f"{base}/v1/search", headers=headers,
                          json={"query": "x", "group_ids": ["other"]}).status_code == 403
        listed = subprocess.run([sys.executable, "-m", "pgmemory.surfaces.cli", "keys", "list"], env=env,
                                capture_output=True, text=True, timeout=120)
        assert "cli-test" in listed.stdout and token not in listed.stdout
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def _containers(inner: st.SearchStrategy) -> st.SearchStrategy:
    return st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)


SCALARS = st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=False, allow_infinity=False)
JSON = st.recursive(SCALARS | st.text(), _containers, max_leaves=6)
FIELDS = ("query", "group_ids", "limit", "recipe", "filters", "max_chars", "content", "kind", "actor",
          "reference_time", "metadata", "messages", "episode_id", "as_of", "known_at", "relation_types")
BODIES = st.dictionaries(st.sampled_from(FIELDS), JSON, max_size=5) | JSON
PATHS = st.sampled_from(["/v1/search", "/v1/context", "/v1/groups/fuzz/episodes", "/v1/groups/fuzz/messages",
                         "/v1/groups/fuzz/episodes/batch", "/v1/groups/fuzz/facts"])
QUERIES = st.dictionaries(st.sampled_from(["limit", "offset", "label", "name", "last_n", "before", "status",
                                           "history", "erase", "wait", "confirm"]), st.text(max_size=12), max_size=3)
GETS = st.sampled_from(["/v1/groups/fuzz/entities", "/v1/groups/fuzz/episodes", "/v1/groups/fuzz/episodes/x",
                        "/v1/groups/fuzz/entities/00000000-0000-0000-0000-000000000001/facts"])


def test_no_body_or_query_string_is_a_500(rest_dsn):
    """Any JSON body on the write and search routes, any query string on the reads: a 2xx or a
    JSON 4xx, never a 5xx (the server runs without keys here, so bodies reach the Memory API)."""
    from starlette.testclient import TestClient

    app = create_app(auth=False, worker_concurrency=0,
                     open_options={"dsn": rest_dsn, "embedder": HashEmbedder(), "extractor": RuleExtractor()})
    with TestClient(app, raise_server_exceptions=False) as client:
        @settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
        @given(path=PATHS, body=BODIES, get=GETS, params=QUERIES)
        def check(path, body, get, params):
            for response in (client.post(path, json=body), client.get(get, params=params)):
                assert response.status_code < 500, (path, body, get, params, response.text)
                if response.status_code >= 400:
                    assert set(response.json()["error"]) == {"code", "message"}
        check()


async def test_connections_carry_the_request_groups(rest_dsn):
    """Each connection handed to a request is set to that request's groups (pgmemory.groups, what
    the database's row-level security narrows by); outside a request (the queue worker): none."""
    from pgmemory.storage.request_groups import apply_request_groups, narrow_to

    memory = await Memory.open(rest_dsn, embedder=HashEmbedder(), extractor=RuleExtractor(), pool_size=2,
                               on_acquire=apply_request_groups)

    async def request(groups):
        if groups is not None:
            narrow_to(groups)
        await asyncio.sleep(0)  # let the other request interleave
        async with memory.pool.acquire() as conn:
            return await conn.fetchval("SELECT current_setting('pgmemory.groups')")
    try:
        seen = await asyncio.gather(request(["group-a"]), request(["group-b", "shared"]), request(None))
        assert seen == ['["group-a"]', '["group-b", "shared"]', ""]
    finally:
        await memory.close()



async def test_ingest_gives_its_connection_back_without_its_request_groups(rest_dsn):
    """Ingestion holds one pooled connection per phase; on a pool of one, the request that
    ingested leaves no narrowing behind: the next caller outside a request sees none, the next
    request sees only its own groups."""
    from pgmemory.storage.request_groups import apply_request_groups, narrow_to

    memory = await Memory.open(rest_dsn, embedder=HashEmbedder(), extractor=RuleExtractor(), pool_size=1,
                               on_acquire=apply_request_groups)

    async def ingest_as(groups):
        narrow_to(groups)
        return await memory.add_episode(groups[0], "I work at Held Corp.", actor="Hana",
                                        reference_time="2024-01-01T00:00:00Z")

    async def setting_as(groups):
        if groups is not None:
            narrow_to(groups)
        async with memory.pool.acquire() as conn:
            return await conn.fetchval("SELECT current_setting('pgmemory.groups')")
    try:
        assert (await asyncio.create_task(ingest_as(["held-a"]))).status == "done"
        assert await asyncio.create_task(setting_as(None)) == ""
        assert await asyncio.create_task(setting_as(["held-b"])) == '["held-b"]'
    finally:
        await memory.close()


@pytest.fixture(scope="module")
def server_login(rest_dsn):
    """A login subject to row-level security, granted every group (how a server should connect)."""
    yield from support.server_login(rest_dsn)


async def test_on_a_restricted_login_the_database_narrows_each_request(rest_memory, server_login):
    """The second wall: on a login under row-level security, a request narrowed to group A sees
    nothing of B even when it asks for B (as a bug in the key check would), and the REST server
    runs on such a login (keys readable, 403 for another group)."""
    from pgmemory.storage.request_groups import NarrowToRequestGroups, narrow_to

    await rest_memory.add_episode("wall-a", "I work at Alphacorp.", actor="Ada", reference_time="2024-01-01T00:00:00Z")
    await rest_memory.add_episode("wall-b", "I work at Betacorp.", actor="Ben", reference_time="2024-01-01T00:00:00Z")
    memory = await Memory.open(server_login, embedder=HashEmbedder(), extractor=RuleExtractor(),
                               on_acquire=NarrowToRequestGroups())

    async def search_as(request_groups, asked):
        if request_groups is not None:
            narrow_to(request_groups)
        results = await memory.search("where does Ben work Betacorp", group_ids=asked)
        return {h.group_id for kind in ("facts", "entities", "episodes") for h in getattr(results, kind)}
    try:
        assert await asyncio.create_task(search_as(None, ["wall-b"])) == {"wall-b"}  # granted '*': sees B
        assert await asyncio.create_task(search_as(["wall-a"], ["wall-b"])) == set()
        assert await asyncio.create_task(search_as(["wall-a"], ["wall-a", "wall-b"])) <= {"wall-a"}
    finally:
        await memory.close()

    _, key = await create_key(rest_memory.pool, "wall", read=["wall-a"], write=[])
    app = create_app(worker_concurrency=0, open_options={"dsn": server_login, "embedder": HashEmbedder(),
                                                         "extractor": RuleExtractor()})
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://pgmemory") as client:
            headers = {"Authorization": f"Bearer {key}"}
            found = (await client.post("/v1/search", headers=headers, json={
                "query": "where does Ada work Alphacorp", "group_ids": ["wall-a"]})).json()
            assert any("Alphacorp" in f["fact"] for f in found["facts"])
            assert error(await client.post("/v1/search", headers=headers, json={
                "query": "Betacorp", "group_ids": ["wall-b"]})) == (403, "forbidden")


async def test_analyst_sql_in_a_narrowed_request_sees_only_that_requests_groups(rest_memory, server_login):
    """Memory.sql narrows within the groups a request's connection is narrowed to: its group_ids
    (or none) never widen what the request sees."""
    from pgmemory.storage.request_groups import NarrowToRequestGroups, narrow_to

    for group, text in (("sqlwall-a", "I work at Alphacorp."), ("sqlwall-b", "I work at Betacorp.")):
        await rest_memory.add_episode(group, text, actor="Ada", reference_time="2024-01-01T00:00:00Z")
    memory = await Memory.open(server_login, embedder=HashEmbedder(), on_acquire=NarrowToRequestGroups())
    query = "SELECT DISTINCT group_id FROM episode_log WHERE group_id LIKE 'sqlwall-%' ORDER BY 1"

    async def sql_as(request_groups, asked):
        narrow_to(request_groups)
        return [g for (g,) in (await memory.sql(query, group_ids=asked)).rows]
    try:
        assert await asyncio.create_task(sql_as(["sqlwall-a"], None)) == ["sqlwall-a"]
        assert await asyncio.create_task(sql_as(["sqlwall-a"], ["sqlwall-b"])) == []
        assert await asyncio.create_task(sql_as(["sqlwall-a"], ["sqlwall-a", "sqlwall-b"])) == ["sqlwall-a"]
        assert await asyncio.create_task(sql_as(["sqlwall-a", "sqlwall-b"], ["sqlwall-b"])) == ["sqlwall-b"]
    finally:
        await memory.close()


@pytest.mark.parametrize("content_type, body, says", [
    ("application/json", b'{"query": "x", "group_ids": ["group-a"],}', "body is not valid JSON: Expecting property name"),
    ("application/json", b"not json", "body is not valid JSON: Expecting value at character 0"),
    ("application/json", b'{"query": "\xff", "group_ids": ["group-a"]}', "body is not UTF-8 text: byte 0xff at position 11"),
    ("application/json", b'{"query": "x", "group_ids": ["group-a"], "filters": {"metadata": '
     + b'{"a": ' * 3000 + b"1" + b"}" * 3002, "body nests its arrays and objects too deeply"),
    ("application/json", b'{"query": "x", "group_ids": ["group-a"], "limit": ' + b"9" * 5000 + b"}",
     "body is not valid JSON: Exceeds the limit (4300 digits) for integer string conversion"),
    ("text/plain", b'{"query": "x", "group_ids": ["group-a"]}', "body: send JSON with Content-Type: application/json"),
])
async def test_a_body_that_is_not_json_says_why(server, content_type, body, says):
    """A body FastAPI cannot read as JSON: a 422 invalid_request whose one line says what is wrong
    with it (not a 400 'There was an error parsing the body', nor '0: JSON decode error')."""
    client, keys = server
    r = await client.post("/v1/search", headers={**keys["a"], "Content-Type": content_type}, content=body)
    assert error(r) == (422, "invalid_request")
    message = r.json()["error"]["message"]
    assert message.startswith(says) and "\n" not in message, message


async def test_openapi_declares_the_api_key_and_the_error_shape(server):
    """/openapi.json (and so /docs' Authorize button and generated clients) says what the routes
    take and answer: the key as a bearer token or X-API-Key on every /v1 route (not on /health,
    /ready), and errors as {"error": {"code", "message"}}, not FastAPI's {"detail": [...]}."""
    client, keys = server
    spec = (await client.get("/openapi.json")).json()
    schemes = spec["components"]["securitySchemes"]
    assert sorted((s["type"], s.get("scheme") or s.get("name")) for s in schemes.values()) == \
        [("apiKey", "X-API-Key"), ("http", "bearer")]
    assert "HTTPValidationError" not in spec["components"]["schemas"]
    error_schema = spec["components"]["schemas"]["ErrorOut"]
    assert error_schema["required"] == ["error"]
    for path, operations in spec["paths"].items():
        for method, operation in operations.items():
            if path.startswith("/v1/"):
                assert sorted(k for s in operation["security"] for k in s) == sorted(schemes), (method, path)
                for status in ("401", "403", "422"):
                    content = operation["responses"][status]["content"]["application/json"]["schema"]
                    assert content == {"$ref": "#/components/schemas/ErrorOut"}, (method, path, status)
            else:
                assert "security" not in operation, path
    # What it declares is what the server takes: either header, the bearer scheme in any case.
    token = keys["a"]["Authorization"].split()[1]
    for headers in ({"X-API-Key": token}, {"Authorization": f"Bearer {token}"}, {"Authorization": f"bearer {token}"}):
        assert (await client.get("/v1/groups/group-a/episodes?last_n=1", headers=headers)).status_code == 200
    for headers in ({}, {"Authorization": token}, {"Authorization": f"Basic {token}"}, {"X-API-Key": "pgm_x"}):
        assert error(await client.get("/v1/groups/group-a/episodes", headers=headers)) == (401, "unauthorized")


async def test_openapi_declares_the_search_and_context_answers_they_give(server):
    """/openapi.json declares what /v1/search and /v1/context answer (the hits of each kind with
    their fields; times with a zone), not a bare object; and a real answer is exactly of that shape."""
    from pgmemory.surfaces.rest_models import ContextOut, SearchOut

    client, keys = server
    spec = (await client.get("/openapi.json")).json()
    for path, model in (("/v1/search", "SearchOut"), ("/v1/context", "ContextOut")):
        answer = spec["paths"][path]["post"]["responses"]["200"]["content"]["application/json"]["schema"]
        assert answer == {"$ref": f"#/components/schemas/{model}"}, path
    schemas = spec["components"]["schemas"]
    assert schemas["FactOut"]["properties"]["valid_from"]["anyOf"][0] == {"type": "string", "format": "date-time"}
    await client.post("/v1/groups/group-a/facts", headers=keys["a"], json={
        "source": "Shapely", "relation": "WORKS_FOR", "target": "Shapecorp", "fact": "Shapely works for Shapecorp.",
        "valid_from": "2020-01-01T00:00:00Z"})
    await client.post("/v1/groups/group-a/episodes?wait=true", headers=keys["a"], json={
        "content": "Shapely: I work at Shapecorp.", "reference_time": "2024-01-15T10:00:00Z"})
    body = {"query": "Shapely Shapecorp", "group_ids": ["group-a"], "filters": {"include_invalidated": True}}
    found = (await client.post("/v1/search", headers=keys["a"], json=body)).json()
    assert found["facts"] and found["entities"] and found["episodes"]
    SearchOut.model_validate(found)  # extra fields forbidden, times must carry their zone
    ContextOut.model_validate((await client.post("/v1/context", headers=keys["a"], json=body)).json())


async def test_a_group_named_twice_searches_as_once(server):
    """group_ids ["g", "g"] is the search of ["g"]: the same hits with the same ranks (the full-text
    candidates of a group named twice were counted twice, pushing the top hit to rank 2, 3, ...)."""
    client, keys = server
    await client.post("/v1/groups/group-a/facts", headers=keys["a"], json={
        "source": "Twyla", "relation": "WORKS_FOR", "target": "Twicecorp", "fact": "Twyla works for Twicecorp."})
    once = (await client.post("/v1/search", headers=keys["a"], json={
        "query": "Twyla Twicecorp", "group_ids": ["group-a"]})).json()
    assert any("Twicecorp" in f["fact"] for f in once["facts"])
    for groups in (["group-a", "group-a"], ["group-a", "group-a", "group-a"]):
        again = (await client.post("/v1/search", headers=keys["a"], json={
            "query": "Twyla Twicecorp", "group_ids": groups})).json()
        for kind in ("facts", "entities", "episodes"):
            assert [(h["id"], h["ranks"]) for h in again[kind]] == [(h["id"], h["ranks"]) for h in once[kind]], kind


async def test_status_url_works_for_a_group_id_with_url_characters(server, rest_memory):
    """The status_url of a queued episode is a URL that reaches it, whatever the group id holds
    ('?', '#', '%', spaces, non-ASCII): each part percent-encoded."""
    from urllib.parse import quote

    group = "odd? grüp #1%"
    _, key = await create_key(rest_memory.pool, "odd", read=[], write=[group])
    headers = {"X-API-Key": key}
    for path, body in [("episodes", {"content": "Al: I like jam.", "episode_id": "jam 1/2?"}),
                       ("messages", {"messages": [{"role": "user", "content": "I like figs."}]})]:
        r = await server[0].post(f"/v1/groups/{quote(group, safe='')}/{path}", headers=headers, json=body)
        assert r.status_code == 202, r.text
        status_url = r.json()["status_url"]
        assert status_url.startswith("/v1/groups/odd%3F%20gr%C3%BCp%20%231%25/episodes/"), status_url
        found = await server[0].get(status_url, headers=headers)
        assert found.status_code == 200 and found.json()["id"] == r.json()["episode_id"], found.text


async def test_a_reference_time_with_an_offset_dates_by_the_speakers_day(server):
    """23:30 at -05:00 is already the next day in UTC: "yesterday" is the speaker's (May 7, from
    their midnight), through the queue and its worker."""
    client, keys = server
    r = await client.post("/v1/groups/group-a/episodes", headers=keys["a"], json={
        "content": "I started at Initech yesterday.", "actor": "Dana", "reference_time": "2023-05-08T23:30:00-05:00"})
    assert (await wait_done(client, keys["a"], "group-a", r.json()["episode_id"]))["status"] == "done"
    found = (await client.post("/v1/search", headers=keys["a"], json={
        "query": "where does Dana work", "group_ids": ["group-a"]})).json()
    fact = next(f for f in found["facts"] if "Initech" in f["fact"])
    assert datetime.fromisoformat(fact["valid_from"]) == datetime(2023, 5, 7, 5, 0, tzinfo=timezone.utc)


async def test_a_batch_episode_with_an_empty_reference_time_is_refused_as_a_single_one_is(server):
    """reference_time "" is a 400 in a batch too (it was read as "now": "" is falsy), and the batch stores nothing."""
    client, keys = server
    before = (await client.get("/v1/groups/group-a/episodes?last_n=1000", headers=keys["a"])).json()["episodes"]
    single = await client.post("/v1/groups/group-a/episodes", headers=keys["a"],
                               json={"content": "Ann: an empty time.", "reference_time": ""})
    batch = await client.post("/v1/groups/group-a/episodes/batch", headers=keys["a"],
                              json={"episodes": [{"content": "Ann: one.", "reference_time": "2024-01-01T00:00:00Z"},
                                                 {"content": "Ann: an empty time.", "reference_time": ""}]})
    assert error(single) == error(batch) == (400, "invalid_input")
    assert batch.json()["error"]["message"] == "episode 2: reference_time is empty"
    after = (await client.get("/v1/groups/group-a/episodes?last_n=1000", headers=keys["a"])).json()["episodes"]
    assert after == before


@pytest.mark.parametrize("method, url, allowed", [
    ("PUT", "/v1/search", "POST"),
    ("PUT", "/v1/groups/group-a/episodes", "GET, POST"),  # two routes on one path: both named, not the first's
    ("POST", "/v1/groups/group-a/episodes/00000000-0000-0000-0000-000000000001", "DELETE, GET"),
    ("DELETE", "/health", "GET"),
])
async def test_a_method_not_allowed_names_the_allowed_ones_and_sends_allow(server, method, url, allowed):
    """A 405 carries the Allow header (RFC 9110: the handler dropped Starlette's) listing every method
    the path takes, and says so in its one line (it was 'Method Not Allowed')."""
    client, keys = server
    r = await client.request(method, url, headers=keys["a"])
    assert error(r) == (405, "method_not_allowed")
    assert r.headers["allow"] == allowed
    assert r.json()["error"]["message"] == (f"method {method} is not allowed on this path: use "
                                            f"{allowed.replace(', ', ' or ')}")


async def test_a_json_body_without_a_content_type_says_to_send_one(server):
    """No Content-Type at all: FastAPI hands the body over as bytes; the 422 says what to send (it
    said 'body: Input should be a valid dictionary or object to extract fields from')."""
    client, keys = server
    r = await client.post("/v1/search", headers=keys["a"], content=b'{"query": "x", "group_ids": ["group-a"]}')
    assert "content-type" not in r.request.headers
    assert error(r) == (422, "invalid_request")
    assert r.json()["error"]["message"] == ("body: send JSON with Content-Type: application/json "
                                            "(no Content-Type was given)")


@pytest.mark.parametrize("method, url, body, says", [
    ("GET", "/v1/groups/group-a/episodes?before_id=", None, "before_id must be a UUID or a non-empty string"),
    ("POST", "/v1/search", {"query": "x", "group_ids": ["group-a"], "center_node_uuid": "not-a-uuid"},
     "center_node_uuid must be a UUID, got 'not-a-uuid'"),
    ("POST", "/v1/context", {"query": "x", "group_ids": ["group-a"], "center_node_uuid": "12"},
     "center_node_uuid must be a UUID, got '12'"),
])
async def test_a_bad_id_is_named_as_the_parameter_it_came_in(server, method, url, body, says):
    """Not as the Python API's name for it (episode_id, center)."""
    client, keys = server
    r = await client.request(method, url, headers=keys["a"], json=body)
    assert error(r) == (400, "invalid_input")
    assert r.json()["error"]["message"] == says


async def test_erase_needs_one_confirmation_not_the_last_of_several(server, rest_memory):
    """?confirm=other&confirm=<group> does not erase the group (the last value used to win)."""
    client, keys = server
    r = await client.post("/v1/groups/group-a/episodes?wait=true", headers=keys["a"], json={"content": "Ann: keep me."})
    assert r.status_code == 200  # processed now: no status left to change under a later test
    before = (await client.get("/v1/groups/group-a/episodes?last_n=1000", headers=keys["a"])).json()["episodes"]
    for query in ("confirm=group-b&confirm=group-a", "confirm=group-a&confirm=group-a"):
        assert error(await client.delete(f"/v1/groups/group-a?{query}", headers=keys["a"])) == \
            (400, "confirmation_required")
    after = (await client.get("/v1/groups/group-a/episodes?last_n=1000", headers=keys["a"])).json()["episodes"]
    assert [e["id"] for e in after] == [e["id"] for e in before] and before


@pytest.mark.parametrize("content, says", [
    ('{"a": NaN}', "json episode is not valid JSON: NaN is not a JSON value"),
    ('[1, -Infinity]', "json episode is not valid JSON: -Infinity is not a JSON value"),
    ("[" + "9" * 5000 + "]", "json episode cannot be read: Exceeds the limit (4300 digits) for integer string "
                             "conversion: value has 5000 digits"),
])
@pytest.mark.parametrize("wait", ["false", "true"])
async def test_a_json_episode_python_reads_but_json_has_not_is_a_400(server, content, says, wait):
    """NaN/Infinity were refused queued (by Postgres' json) but ingested with ?wait=true (json.loads
    reads them); an integer of over 4300 digits was a 500 (json.loads' ValueError) either way."""
    client, keys = server
    before = (await client.get("/v1/groups/group-a/episodes?last_n=1000", headers=keys["a"])).json()["episodes"]
    r = await client.post(f"/v1/groups/group-a/episodes?wait={wait}", headers=keys["a"],
                          json={"kind": "json", "content": content})
    assert error(r) == (400, "invalid_input")
    assert r.json()["error"]["message"] == says
    after = (await client.get("/v1/groups/group-a/episodes?last_n=1000", headers=keys["a"])).json()["episodes"]
    assert [e["id"] for e in after] == [e["id"] for e in before]
