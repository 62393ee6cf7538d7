"""The vectors of an apply payload (pgmemory_internal.apply_episode): by number into the binary
vector[] parameter (what the pipeline sends), or as pgvector text in a JSON string or a JSON array
(what a SQL writer may send). Every form stores the same vectors; an ingested episode stores
exactly the vectors its embedder computed."""
from __future__ import annotations

import json
import random
import uuid
from datetime import datetime, timezone

import pytest

from pgmemory.ingest.embed_episode import blend
from pgmemory.providers.embedder import HashEmbedder

DIM = 384


def _vectors(seed: int, n: int) -> list[list[float]]:
    rnd = random.Random(seed)
    return [[rnd.uniform(-1, 1) for _ in range(DIM)] for _ in range(n)]


def _text(v: list[float]) -> str:
    return "[" + ",".join(repr(x) for x in v) + "]"


def _apply(conn, group: str, form: str, vecs: list[list[float]]) -> tuple[uuid.UUID, uuid.UUID, uuid.UUID]:
    """Apply one episode with a new entity (vecs[0]), a claim (vecs[1]) and its own vector (vecs[2])."""
    def ref(i: int):
        return {"number": i, "string": _text(vecs[i]), "array": vecs[i]}[form]

    episode, ann, bob, claim = uuid.uuid4(), uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    conn.execute("INSERT INTO pgmemory.episodes (id, group_id, kind, content, valid_at, status)"
                 " VALUES (%s, %s, 'text', 'Ann knows Bob.', now(), 'processing')", (episode, group))
    plan = {"group": group, "reference_time": "2024-01-01T00:00:00+00:00",
            "new_entities": [{"id": str(ann), "name": "Ann", "labels": ["Entity"], "summary": "",
                              "attributes": {}, "embedding": ref(0)},
                             {"id": str(bob), "name": "Bob", "labels": ["Entity"], "summary": "",
                              "attributes": {}, "embedding": None}],
            "entity_updates": [], "mentions": [str(ann), str(bob)], "mention_summaries": {},
            "claims": [{"id": str(claim), "kind": "assert", "duplicate_of": None, "contradicts": [],
                        "source": str(ann), "target": str(bob), "relation": "KNOWS", "fact": "Ann knows Bob.",
                        "valid_from": None, "valid_to": None, "embedding": ref(1), "attributes": {}}],
            "usage": {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0}, "embedding": ref(2)}
    given = [_text(v) for v in vecs] if form == "number" else None
    conn.execute("SELECT pgmemory_internal.apply_episode(%s, %s, %s::jsonb, %s::text[]::vector[])",
                 (group, episode, json.dumps(plan), given))
    return episode, ann, claim


@pytest.mark.parametrize("form", ["number", "string", "array"])
def test_a_payload_vector_by_number_string_or_array_is_stored_as_given(conn, group, form):
    vecs = _vectors(7, 3)
    episode, ann, claim = _apply(conn, group, form, vecs)
    stored = conn.execute(
        "SELECT (SELECT name_embedding = %s::vector FROM pgmemory.entity_name_vectors WHERE group_id = %s AND entity_id = %s),"
        "       (SELECT count(*) FROM pgmemory.entity_name_vectors WHERE group_id = %s),"
        "       (SELECT embedding = %s::vector FROM pgmemory.facts WHERE group_id = %s AND id = %s),"
        "       (SELECT embedding = %s::vector FROM pgmemory.fact_claims WHERE group_id = %s AND id = %s),"
        "       (SELECT embedding = %s::vector AND status = 'done' FROM pgmemory.episodes WHERE group_id = %s AND id = %s)",
        (_text(vecs[0]), group, ann, group, _text(vecs[1]), group, claim, _text(vecs[1]), group, claim,
         _text(vecs[2]), group, episode)).fetchone()
    assert stored == (True, 1, True, True, True)  # Bob, without a vector, has none


async def test_an_ingested_episode_stores_the_vectors_its_embedder_computed(memory, group):
    at = datetime(2024, 3, 1, tzinfo=timezone.utc)
    await memory.add_episode(group, "I work at Initech.", kind="text", actor="Ann", reference_time=at)
    rows = await memory.pool.fetch(
        "SELECT 'episode' AS what, e.content AS text, e.embedding::text AS v FROM pgmemory.episodes e WHERE e.group_id = $1"
        " UNION ALL SELECT 'name', x.name, nv.name_embedding::text FROM pgmemory.entities x"
        "   JOIN pgmemory.entity_name_vectors nv ON nv.group_id = x.group_id AND nv.entity_id = x.id WHERE x.group_id = $1",
        group)
    assert {r["what"] for r in rows} == {"episode", "name"}
    embedder = HashEmbedder()
    for r in rows:
        text = "Ann: I work at Initech." if r["what"] == "episode" else r["text"]
        vector = (await embedder.embed([text]))[0]
        expected = _text(blend([vector]) if r["what"] == "episode" else vector)
        assert await memory.pool.fetchval("SELECT $1::text::vector = $2::text::vector", r["v"], expected), r["what"]
