"""Planted-partition graphs written straight into a group, and the NMI of a found partition."""
from __future__ import annotations

import json
import math
import random
import uuid
from collections import Counter


def plant_graph(conn, group: str, *, blocks: int = 6, size: int = 20, p_in: float = 0.5,
                p_out: float = 0.02, seed: int = 7) -> dict[uuid.UUID, int]:
    """Entities in `blocks` blocks of `size`, each intra-block pair joined by a believed, holding
    fact with probability p_in and each cross pair with p_out. Returns entity id -> block."""
    rng = random.Random(seed)
    # Ids unique to the group but ordered like their index, so a run is reproducible.
    salt = random.Random(group)
    ids = [uuid.UUID(int=(i + 1) << 96 | salt.getrandbits(96)) for i in range(blocks * size)]
    truth = {e: i // size for i, e in enumerate(ids)}
    pairs = [(a, b) for i, a in enumerate(ids) for b in ids[i + 1:]
             if rng.random() < (p_in if truth[a] == truth[b] else p_out)]
    add_entities(conn, group, ids)
    add_facts(conn, group, pairs)
    return truth


def add_entities(conn, group: str, ids, names=None) -> None:
    names = names or [f"E{str(e)[:8]}" for e in ids]
    conn.execute("INSERT INTO pgmemory.entities (id, group_id, name, summary)"
                 " SELECT i, %s, n, n || ' is an entity.' FROM unnest(%s::uuid[], %s::text[]) AS x (i, n)",
                 (group, list(ids), list(names)))


def add_facts(conn, group: str, pairs) -> None:
    """One believed fact, valid since 2020, per (source, target) pair."""
    conn.execute(
        "INSERT INTO pgmemory.facts (id, lineage, group_id, source_id, target_id, relation, fact, valid)"
        " SELECT f, f, %s, s, t, 'KNOWS', 'Entity ' || left(s::text, 8) || ' knows ' || left(t::text, 8) || '.',"
        "        tstzrange('2020-01-01', NULL)"
        "   FROM (SELECT gen_random_uuid() AS f, s, t FROM unnest(%s::uuid[], %s::uuid[]) AS x (s, t)) y",
        (group, [a for a, _ in pairs], [b for _, b in pairs]))


def found_partition(conn, group: str) -> dict[uuid.UUID, uuid.UUID]:
    """Entity -> its current community."""
    return dict(conn.execute("SELECT entity_id, community_id FROM pgmemory.community_members"
                             " WHERE group_id = %s AND ended_at IS NULL", (group,)).fetchall())


def nmi(truth: dict, found: dict) -> float:
    """Normalised mutual information (arithmetic mean of entropies) of two labelings of the
    entities of `truth`; an entity missing from `found` is a cluster of its own."""
    items = list(truth)
    a = [truth[x] for x in items]
    b = [found.get(x, ("alone", x)) for x in items]
    n = len(items)
    ca, cb, cab = Counter(a), Counter(b), Counter(zip(a, b))
    mi = sum(c / n * math.log(c * n / (ca[i] * cb[j])) for (i, j), c in cab.items())
    ha = -sum(c / n * math.log(c / n) for c in ca.values())
    hb = -sum(c / n * math.log(c / n) for c in cb.values())
    return 1.0 if ha + hb == 0 else 2 * mi / (ha + hb)


def apply_new_entity(conn, group: str, name: str, neighbours) -> uuid.UUID:
    """One episode, through pgmemory_internal.apply_episode, that introduces entity `name` with a fact to
    each of `neighbours` (what ingestion writes when an episode brings a new entity)."""
    new = uuid.uuid4()
    episode = uuid.uuid4()
    conn.execute("INSERT INTO pgmemory.episodes (id, group_id, kind, content, valid_at, status)"
                 " VALUES (%s, %s, 'text', %s, now(), 'processing')", (episode, group, f"{name} arrives."))
    claims = [{"id": str(uuid.uuid4()), "kind": "assert", "duplicate_of": None, "contradicts": [],
               "source": str(new), "target": str(n), "relation": "KNOWS", "fact": f"{name} knows {n}.",
               "valid_from": "2020-01-01T00:00:00+00:00", "valid_to": None, "embedding": None,
               "attributes": {}} for n in neighbours]
    plan = {"group": group, "reference_time": "2024-01-01T00:00:00+00:00",
            "new_entities": [{"id": str(new), "name": name, "labels": ["Entity"], "summary": "",
                              "attributes": {}, "embedding": None}],
            "entity_updates": [], "mentions": [str(new)] + [str(n) for n in neighbours],
            "mention_summaries": {}, "claims": claims,
            "usage": {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0}, "embedding": None}
    conn.execute("SELECT pgmemory_internal.apply_episode(%s, %s, %s::jsonb)", (group, episode, json.dumps(plan)))
    return new
