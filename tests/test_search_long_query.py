"""A long query (an agent pasting a document) is scored on its 32 rarest lexemes per kind of text
(pgmemory.text_max_lexemes), so its full text costs what a 32-lexeme query costs; an ordinary
question, which holds far fewer, ranks exactly as without the bound."""
from __future__ import annotations

import json
import random
from datetime import datetime, timedelta, timezone
from pathlib import Path

import httpx
import psycopg
import pytest

from pgmemory import Memory
from pgmemory.extract.rules import RuleExtractor
from pgmemory.ingest.episode import episode_uuid
from pgmemory.providers.embedder import HashEmbedder
from pgmemory.search.config import MAX_QUERY_CHARS, SearchFilters, resolve_config

LOCOMO_DEV = Path("/work/shared/data/locomo/locomo-dev.json")
T0 = datetime(2024, 3, 1, 9, 0, tzinfo=timezone.utc)
COMMON = [f"c{i:02d}" for i in range(40)]  # each in about half the chat's turns
RARE = [f"r{i:02d}" for i in range(60)]    # only in the document; r00-r09 in one turn too
# (words of a letter and digits are one lexeme each, unstemmed: the parser's numword)
DOCUMENT = " ".join(COMMON + RARE)
KEPT = RARE[10:42]  # the 32 rarest of the document's lexemes: df 1, by lexeme (r00-r09 have df 2)
EPISODE_TEXT = resolve_config("episode_hybrid_rrf", methods=("fulltext",))


async def _add_chat(memory: Memory, group: str) -> None:
    rng = random.Random(5)
    turns = [" ".join(rng.sample(COMMON, 20)) for _ in range(40)]
    turns[7] += " " + " ".join(RARE[:10])
    await memory.add_episodes(
        [{"group_id": group, "content": text, "episode_id": f"t{i}", "reference_time": T0 + timedelta(minutes=i)}
         for i, text in enumerate(turns)]
        + [{"group_id": group, "content": DOCUMENT, "episode_id": "doc", "reference_time": T0 + timedelta(days=1)}])


def _ranked(results) -> list[tuple]:
    return [(h.id, round(h.score, 12)) for kind in (results.facts, results.entities, results.episodes) for h in kind]


async def _unbounded(db_dsn: str) -> Memory:
    """A Memory whose connections search without the bound (pgmemory.text_max_lexemes = 0)."""
    async def no_bound(conn) -> None:
        await conn.execute("SELECT set_config('pgmemory.text_max_lexemes', '0', false)")
    return await Memory.open(db_dsn, embedder=HashEmbedder(), extractor=RuleExtractor(), on_acquire=no_bound)


async def test_a_long_query_is_scored_on_its_32_rarest_lexemes(memory, group):
    await _add_chat(memory, group)
    doc = episode_uuid(group, "doc")
    pasted = await memory.search(DOCUMENT, group_ids=[group], config=EPISODE_TEXT, limit=20)
    rarest = await memory.search(" ".join(KEPT), group_ids=[group], config=EPISODE_TEXT, limit=20)
    assert pasted.episodes[0].id == doc
    # the same list and scores as the query of the kept lexemes alone: the turns sharing only its
    # common words (and t7, sharing r00-r09) are not candidates
    assert [(h.id, h.score) for h in pasted.episodes] == [(h.id, h.score) for h in rarest.episodes]
    assert [h.id for h in pasted.episodes] == [doc]


KEPT_SQL = ("SELECT pgmemory_internal.query_lexemes(ARRAY[%s], 'episodes',"
            " tsvector_to_array(to_tsvector('english', %s)))")


async def test_the_bound_keeps_the_rarest_lexemes_of_each_kind(conn, memory, group):
    await _add_chat(memory, group)
    assert conn.execute(KEPT_SQL, (group, DOCUMENT)).fetchone()[0] == KEPT
    short = "c03 r01 c05 unknownword"  # at most 32 lexemes: all of them, known or not
    assert conn.execute(KEPT_SQL, (group, short)).fetchone()[0] == sorted(short.split())
    conn.execute("SET pgmemory.text_max_lexemes = 0")  # 0: no bound
    assert len(conn.execute(KEPT_SQL, (group, DOCUMENT)).fetchone()[0]) == 100


@pytest.mark.parametrize("query", ["what did c03 say about r05", " ".join(RARE[:20] + COMMON[:12])])
async def test_an_ordinary_query_ranks_the_same_with_and_without_the_bound(memory, db_dsn, group, query):
    """Up to 32 lexemes (the second query holds exactly 32) nothing is cut: every kind's results
    and scores of the default recipe are those of a search without the bound."""
    await _add_chat(memory, group)
    await memory.add_fact(group, "Ann", "LIKES", "Tea", "Ann likes tea, c03 and r05.")
    unbounded = await _unbounded(db_dsn)
    try:
        for config in ("combined_hybrid_rrf", resolve_config("combined_hybrid_rrf", prf_weight=0.5)):
            found = await memory.search(query, group_ids=[group], config=config, limit=20)
            assert found.episodes and _ranked(found) == _ranked(
                await unbounded.search(query, group_ids=[group], config=config, limit=20))
        longer = query + " r59"
        if len(longer.split()) > 32:  # one lexeme more: the bound now leaves the commonest out
            assert _ranked(await memory.search(longer, group_ids=[group], config=EPISODE_TEXT)) != _ranked(
                await unbounded.search(longer, group_ids=[group], config=EPISODE_TEXT))
    finally:
        await unbounded.close()


@pytest.mark.skipif(not LOCOMO_DEV.exists(), reason="LoCoMo dev subset not present")
def test_no_locomo_dev_question_is_cut(conn):
    questions = [q["question"] for c in json.loads(LOCOMO_DEV.read_text()) for q in c["qa"]]
    cut = conn.execute(
        "SELECT count(*) FILTER (WHERE pgmemory_internal.query_lexemes(ARRAY['g'], 'episodes', l) IS DISTINCT FROM l),"
        "       max(cardinality(l)), pgmemory_internal.text_max_lexemes()"
        "  FROM unnest(%s::text[]) AS q, tsvector_to_array(to_tsvector('english', q)) AS l", (questions,)).fetchone()
    assert len(questions) > 300 and cut[0] == 0 and cut[1] < cut[2], cut


async def test_a_pasted_document_through_every_surface(memory, group):
    """Memory.search (default recipe, as-of too), Memory.context, REST /v1/search and /v1/context
    and MCP's search tools answer a query of MAX_QUERY_CHARS, the copied episode first."""
    from mcp import Client

    from pgmemory.surfaces.mcp_server import build_server
    from pgmemory.surfaces.rest import create_app

    await _add_chat(memory, group)
    doc = episode_uuid(group, "doc")
    query = (DOCUMENT + " " + " ".join(f"x{i:03d}" for i in range(1000)))[:MAX_QUERY_CHARS].rsplit(" ", 1)[0]
    for filters in (None, SearchFilters(as_of=T0 + timedelta(days=2))):
        found = await memory.search(query, group_ids=[group], filters=filters)
        assert found.episodes[0].id == doc
    text = await memory.context(query, group_ids=[group], episodes=True)
    assert DOCUMENT[:200] in text
    app = create_app(memory, worker_concurrency=0, auth=False)
    async with app.router.lifespan_context(app), httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://pgmemory") as client:
        r = await client.post("/v1/search", json={"query": query, "group_ids": [group]})
        assert r.status_code == 200 and r.json()["episodes"][0]["id"] == str(doc), r.text
        r = await client.post("/v1/context", json={"query": query, "group_ids": [group]})
        assert r.status_code == 200, r.text
    async with Client(build_server(memory, default_group=group, worker_concurrency=0, auth=False)) as client:
        for tool in ("search_memory_facts", "search_memory_nodes"):
            result = await client.call_tool(tool, {"query": query})
            assert not result.is_error, result.content


async def test_a_long_query_of_several_groups(memory, group):
    """Each group keeps its own rarest lexemes: both groups' copies of the document are found, as of
    a time too (the as-of entities' lexemes are the groups' rarest together)."""
    other = f"{group}-b"
    await _add_chat(memory, group)
    await memory.add_episodes([{"group_id": other, "content": " ".join(COMMON[:30] + RARE[40:]), "episode_id": "o",
                                "reference_time": T0}])
    for filters in (None, SearchFilters(as_of=T0 + timedelta(days=2))):
        found = await memory.search(DOCUMENT, group_ids=[group, other], filters=filters)
        assert {episode_uuid(group, "doc"), episode_uuid(other, "o")} <= {h.id for h in found.episodes[:2]}
