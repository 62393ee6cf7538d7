"""Communities: label propagation in SQL, dynamic assignment on ingest, deletes, the AGE mirror."""
from __future__ import annotations

import random
import uuid
from collections import Counter
from datetime import datetime, timezone

from tests.test_graph_mirror import cypher_rows
from tests.communities_support import apply_new_entity, found_partition, nmi, plant_graph


def detect(conn, group):
    out = conn.execute("SELECT pgmemory.detect_communities(%s)", (group,)).fetchone()[0]
    conn.commit()
    return out


def current(conn, group):
    return conn.execute("SELECT count(*) FROM pgmemory.communities WHERE group_id = %s AND ended_at IS NULL",
                        (group,)).fetchone()[0]


def test_planted_partition_is_recovered(conn, group):
    truth = plant_graph(conn, group)
    out = detect(conn, group)
    assert out["converged"] and out["created"] == 6
    assert nmi(truth, found_partition(conn, group)) >= 0.9


def test_planted_partitions_of_other_seeds_are_recovered(conn, group):
    scores = []
    for seed in range(4):
        g = f"{group}-{seed}"
        truth = plant_graph(conn, g, seed=seed, p_out=0.03)
        detect(conn, g)
        scores.append(nmi(truth, found_partition(conn, g)))
    assert min(scores) >= 0.9, scores


def test_detection_is_deterministic_and_keeps_unchanged_communities(conn, group):
    plant_graph(conn, group, seed=3)
    detect(conn, group)
    first = found_partition(conn, group)
    again = detect(conn, group)
    assert again["kept"] == 6 and again["created"] == 0 and again["ended"] == 0
    assert found_partition(conn, group) == first


def test_a_changed_graph_replaces_communities_and_keeps_old_versions(conn, group):
    truth = plant_graph(conn, group, seed=5)
    detect(conn, group)
    before = found_partition(conn, group)
    # Block 0 leaves the graph: every fact touching it has ended (no longer holds now).
    block0 = [e for e, b in truth.items() if b == 0]
    conn.execute("UPDATE pgmemory.facts SET valid = tstzrange('2020-01-01', '2021-01-01')"
                 " WHERE group_id = %s AND (source_id = ANY (%s) OR target_id = ANY (%s))", (group, block0, block0))
    conn.commit()
    out = detect(conn, group)
    assert out["ended"] >= 1 and out["kept"] + out["created"] == out["communities"] == current(conn, group)
    ended = conn.execute("SELECT id FROM pgmemory.communities WHERE group_id = %s AND ended_at IS NOT NULL",
                         (group,)).fetchall()
    assert before[block0[0]] in {r[0] for r in ended}
    # Ended versions keep their members; block 0 is in no current community.
    for (community,) in ended:
        members = conn.execute("SELECT entity_id FROM pgmemory.community_members WHERE community_id = %s"
                               " AND ended_at IS NOT NULL", (community,)).fetchall()
        assert {m for (m,) in members} == {e for e, c in before.items() if c == community}
    assert not set(block0) & set(found_partition(conn, group))
    assert nmi({e: b for e, b in truth.items() if b != 0}, found_partition(conn, group)) >= 0.9


def test_new_entities_join_the_community_a_full_detection_gives_them(conn, group):
    truth = plant_graph(conn, group, seed=2)
    detect(conn, group)
    rng = random.Random(9)
    blocks = {b: [e for e, x in truth.items() if x == b] for b in range(6)}
    everyone = list(truth)
    new = {}
    for i in range(30):
        b = i % 6
        neighbours = rng.sample(blocks[b], 8) + [e for e in rng.sample(everyone, 2) if truth[e] != b]
        new[apply_new_entity(conn, group, f"Newcomer {i}", neighbours)] = b
    conn.commit()
    dynamic = found_partition(conn, group)
    assert set(new) <= set(dynamic)
    how = dict(conn.execute("SELECT entity_id, how FROM pgmemory.community_members"
                            " WHERE group_id = %s AND ended_at IS NULL", (group,)).fetchall())
    assert {how[e] for e in new} == {"joined"}
    # 30 joined against 120 members at detection: past the default threshold (20%).
    assert conn.execute("SELECT drift FROM pgmemory.community_state WHERE group_id = %s",
                        (group,)).fetchone()[0] == 30
    assert conn.execute("SELECT pgmemory.communities_due(%s)", (group,)).fetchone()[0]

    detect(conn, group)
    full = found_partition(conn, group)
    # Map each dynamic community to the full detection's community holding most of its old members.
    old_members: dict = {}
    for e, c in dynamic.items():
        if e not in new:
            old_members.setdefault(c, []).append(full.get(e))
    mapped = {c: Counter(v).most_common(1)[0][0] for c, v in old_members.items()}
    agree = sum(mapped[dynamic[e]] == full.get(e) for e in new) / len(new)
    assert agree >= 0.9
    assert not conn.execute("SELECT pgmemory.communities_due(%s)", (group,)).fetchone()[0]


def test_communities_are_marked_for_refresh_when_their_facts_change(conn, group):
    truth = plant_graph(conn, group, seed=4)
    detect(conn, group)
    member = next(iter(truth))
    community = found_partition(conn, group)[member]
    revision = lambda: conn.execute("SELECT revision FROM pgmemory.communities WHERE id = %s",  # noqa: E731
                                    (community,)).fetchone()[0]
    before = revision()
    apply_new_entity(conn, group, "Late arrival", [e for e, b in truth.items() if b == truth[member]][:6])
    assert revision() == before + 1
    others = conn.execute("SELECT count(*) FROM pgmemory.communities WHERE group_id = %s AND ended_at IS NULL"
                          " AND revision > 1", (group,)).fetchone()[0]
    assert others == 1


ORPHANS = """SELECT count(*) FROM pgmemory.communities c WHERE c.group_id = %s AND (
                 (c.ended_at IS NULL AND (SELECT count(*) FROM pgmemory.community_members m
                                           WHERE m.community_id = c.id AND m.ended_at IS NULL) < 2)
                 OR NOT EXISTS (SELECT 1 FROM pgmemory.community_members m WHERE m.community_id = c.id))"""

CHAT = ["Alice works at Acme.", "Bob works at Acme.", "Alice is friends with Bob.", "Carol lives in Paris.",
        "Dave lives in Paris.", "Carol is married to Dave."]


def graph_members(conn, group):
    rows = cypher_rows(conn, "MATCH (c:Community)-[r:HAS_MEMBER]->(e:Entity) WHERE r.group_id = $g"
                             " RETURN c.uuid, e.uuid, r.group_id", {"g": group})
    return sorted((uuid.UUID(c), uuid.UUID(e)) for c, e, _ in rows)


def table_members(conn, group):
    return sorted(conn.execute("SELECT community_id, entity_id FROM pgmemory.community_members"
                               " WHERE group_id = %s AND ended_at IS NULL", (group,)).fetchall())


async def ingest_chat(memory, group):
    for i, text in enumerate(CHAT):
        await memory.add_episode(group, text, actor="Narrator", episode_id=f"e{i}",
                                 reference_time=datetime(2024, 1, 1 + i, tzinfo=timezone.utc))


async def test_deletes_and_erasing_the_group_leave_no_orphan_community(memory, conn, group):
    await ingest_chat(memory, group)
    out = detect(conn, group)
    assert out["communities"] >= 2
    for i in range(len(CHAT)):
        await memory.delete_episode(group, f"e{i}")
        conn.commit()
        assert conn.execute(ORPHANS, (group,)).fetchone()[0] == 0
        assert graph_members(conn, group) == table_members(conn, group)
    assert current(conn, group) == 0
    # Retracts keep history: every community detected is still there, ended (not deleted);
    # erasing the retracted episodes then removes them (their names may quote the erased text).
    assert conn.execute("SELECT count(*) FILTER (WHERE ended_at IS NOT NULL), count(*) FROM pgmemory.communities"
                        " WHERE group_id = %s", (group,)).fetchone() == (out["communities"],) * 2
    for i in range(len(CHAT)):
        await memory.delete_episode(group, f"e{i}", erase=True)
        conn.commit()
        assert conn.execute(ORPHANS, (group,)).fetchone()[0] == 0
    for table in ("communities", "community_members"):
        assert conn.execute(f"SELECT count(*) FROM pgmemory.{table} WHERE group_id = %s", (group,)).fetchone()[0] == 0
    await ingest_chat(memory, group)
    detect(conn, group)
    await memory.erase_group(group)
    conn.commit()
    for table in ("communities", "community_members", "community_state"):
        assert conn.execute(f"SELECT count(*) FROM pgmemory.{table} WHERE group_id = %s", (group,)).fetchone()[0] == 0
    assert graph_members(conn, group) == []


# Memberships have no foreign keys (migration 0310): the delete paths remove them themselves.
DANGLING = """SELECT count(*) FROM pgmemory.community_members m WHERE m.group_id = %s AND (
                  NOT EXISTS (SELECT 1 FROM pgmemory.entities e WHERE e.group_id = m.group_id AND e.id = m.entity_id)
                  OR NOT EXISTS (SELECT 1 FROM pgmemory.communities c
                                  WHERE c.group_id = m.group_id AND c.id = m.community_id))"""


async def test_erasing_episodes_leaves_no_membership_of_a_deleted_entity_or_community(memory, conn, group):
    await ingest_chat(memory, group)
    detect(conn, group)
    # The two communities linked, and detected without the modularity penalty: one community,
    # the two earlier ones kept as ended versions with their members.
    await memory.add_episode(group, "Alice is friends with Carol.", actor="Narrator", episode_id=f"e{len(CHAT)}",
                             reference_time=datetime(2024, 2, 1, tzinfo=timezone.utc))
    out = conn.execute("SELECT pgmemory.detect_communities(%s, 30, 0.0)", (group,)).fetchone()[0]
    conn.commit()
    assert out["ended"] >= 1
    for i in range(len(CHAT) + 1):
        await memory.delete_episode(group, f"e{i}", erase=True)
        conn.commit()
        assert conn.execute(DANGLING, (group,)).fetchone()[0] == 0
        assert conn.execute(ORPHANS, (group,)).fetchone()[0] == 0
        assert graph_members(conn, group) == table_members(conn, group)
    assert conn.execute("SELECT count(*) FROM pgmemory.community_members WHERE group_id = %s",
                        (group,)).fetchone()[0] == 0


async def test_erasing_an_episode_blanks_the_summaries_that_may_quote_it(memory, conn, group):
    await ingest_chat(memory, group)
    detect(conn, group)
    carol = """SELECT m.community_id FROM pgmemory.community_members m JOIN pgmemory.entities e ON e.id = m.entity_id
                WHERE m.group_id = %s AND m.ended_at IS NULL AND e.name = 'Carol'"""
    conn.execute(f"UPDATE pgmemory.communities SET summary = 'Carol is married to Dave.',"
                 f" summarized_revision = revision WHERE id = ({carol})", (group,))
    conn.commit()
    await memory.delete_episode(group, "e5", erase=True)
    conn.commit()
    rows = conn.execute("SELECT summary, revision > summarized_revision FROM pgmemory.communities"
                        " WHERE group_id = %s", (group,)).fetchall()
    assert rows and all("married" not in summary for summary, _ in rows)
    assert conn.execute(f"SELECT revision > summarized_revision FROM pgmemory.communities WHERE id = ({carol})",
                        (group,)).fetchone()[0]


def test_the_graph_mirror_has_the_current_member_edges(conn, group):
    truth = plant_graph(conn, group, seed=8)
    detect(conn, group)
    members = table_members(conn, group)
    assert len(members) == len(truth) and graph_members(conn, group) == members
    vertices = cypher_rows(conn, "MATCH (c:Community) WHERE c.group_id = $g RETURN c.uuid, c.name, c.group_id",
                           {"g": group})
    assert len(vertices) == 6 and all(v[1] for v in vertices)
    # A new detection that changes the graph: ended versions leave the mirror.
    block = [e for e, b in truth.items() if b == 1]
    conn.execute("UPDATE pgmemory.facts SET valid = tstzrange('2020-01-01', '2021-01-01')"
                 " WHERE group_id = %s AND (source_id = ANY (%s) OR target_id = ANY (%s))", (group, block, block))
    conn.commit()
    detect(conn, group)
    assert graph_members(conn, group) == table_members(conn, group)
    assert len(cypher_rows(conn, "MATCH (c:Community) WHERE c.group_id = $g RETURN c.uuid, c.name, c.group_id",
                           {"g": group})) == current(conn, group)


def test_the_mirror_rebuild_writes_each_member_edge_once(conn, group):
    # rebuild_graph_mirror() mirrors every membership row again (turning the mirror on for a
    # database with data): an edge is found by its two vertices, so a second pass adds nothing.
    plant_graph(conn, group, seed=9)
    detect(conn, group)
    members = table_members(conn, group)
    conn.execute("LOAD 'age'")
    conn.execute("""DELETE FROM pgmemory_graph."HAS_MEMBER" h USING pgmemory.graph_vertices v
                     WHERE v.node_id IN (SELECT m.entity_id FROM pgmemory.community_members m WHERE m.group_id = %s)
                       AND h.end_id OPERATOR(ag_catalog.=) v.vertex_id::text::ag_catalog.graphid""", (group,))
    assert graph_members(conn, group) == []
    for _ in range(2):
        conn.execute("SELECT pgmemory_internal.mirror_member_row(m) FROM pgmemory.community_members m"
                     " WHERE m.group_id = %s AND m.ended_at IS NULL", (group,))
    conn.commit()
    assert graph_members(conn, group) == members and len(members) == 120


async def test_an_erased_name_leaves_no_vector_to_find_it_by(memory, conn, group):
    """Erasing an episode blanks the summaries and names that may quote it, and the name's vector
    too: a community found before by the erased words is not found by them after (cosine included),
    and a community not yet named by a refresh has no distance to rank by."""
    from pgmemory import SearchConfig
    from pgmemory.providers.embedder import HashEmbedder

    await ingest_chat(memory, group)
    detect(conn, group)
    carol = """SELECT m.community_id FROM pgmemory.community_members m JOIN pgmemory.entities e ON e.id = m.entity_id
                WHERE m.group_id = %s AND m.ended_at IS NULL AND e.name = 'Carol'"""
    name = "Carol and Dave's wedding vows"
    vector = (await HashEmbedder().embed([name]))[0]
    conn.execute(f"UPDATE pgmemory.communities SET name = %s, summary = 'Carol is married to Dave.',"
                 f" name_embedding = %s::real[]::vector, summary_kind = 'llm', summarized_revision = revision"
                 f" WHERE id = ({carol})", (name, list(vector), group))
    conn.commit()
    cosine = SearchConfig(kinds=("communities",), methods=("cosine",))

    async def found():
        return [c.name for c in (await memory.search("wedding vows", group_ids=[group], config=cosine)).communities]
    assert await found() == [name]  # the other community has no vector yet: not ranked by cosine
    await memory.delete_episode(group, "e5", erase=True)
    conn.commit()
    assert await found() == []
    assert conn.execute(f"SELECT name_embedding IS NULL FROM pgmemory.communities WHERE id = ({carol})",
                        (group,)).fetchone()[0]


def add_fact(conn, group, source, target):
    """pgmemory.add_fact, as a user writes one; returns the fact's id."""
    return conn.execute("SELECT (pgmemory.add_fact(%s, %s, 'KNOWS', %s, %s))->>'fact_id'",
                        (group, source, target, f"{source} knows {target}.")).fetchone()[0]


def communities_of(conn, group):
    """The group's current communities as sorted lists of member names."""
    return sorted(sorted(r[0]) for r in conn.execute(
        "SELECT array_agg(e.name) FROM pgmemory.community_members m JOIN pgmemory.entities e"
        " ON e.group_id = m.group_id AND e.id = m.entity_id WHERE m.group_id = %s AND m.ended_at IS NULL"
        " GROUP BY m.community_id", (group,)).fetchall())


def test_members_whose_facts_were_retracted_leave_and_the_drift_asks_for_a_detection(conn, group):
    """A community holds its members by facts believed and holding now: once none of a member's
    facts inside it holds (retracted here), the member leaves (kept as history), a community left
    with one member ends, and each departure counts as drift, so communities_due asks for the
    re-detection that a full run would give anyway."""
    cliques = {k: [f"{k}{i}" for i in range(6)] for k in "ABC"}
    facts = {k: [add_fact(conn, group, a, b) for i, a in enumerate(names) for b in names[i + 1:]]
             for k, names in cliques.items()}
    conn.commit()
    detect(conn, group)
    assert communities_of(conn, group) == [cliques[k] for k in "ABC"]
    for fact in facts["B"]:
        conn.execute("SELECT pgmemory.retract_fact(%s, %s)", (group, fact))
    conn.commit()
    assert communities_of(conn, group) == [cliques["A"], cliques["C"]]
    assert conn.execute("SELECT count(*) FROM pgmemory.community_members WHERE group_id = %s"
                        " AND ended_at IS NOT NULL", (group,)).fetchone()[0] == 6  # kept as history
    assert conn.execute("SELECT drift FROM pgmemory.community_state WHERE group_id = %s", (group,)).fetchone()[0] == 6
    assert not conn.execute("SELECT pgmemory.communities_due(%s)", (group,)).fetchone()[0]  # 6 < 10
    for fact in facts["C"]:
        conn.execute("SELECT pgmemory.retract_fact(%s, %s)", (group, fact))
    conn.commit()
    assert communities_of(conn, group) == [cliques["A"]]
    assert conn.execute("SELECT pgmemory.communities_due(%s)", (group,)).fetchone()[0]  # 12 of 18
    out = detect(conn, group)
    assert (out["kept"], out["created"], out["ended"]) == (1, 0, 0)


async def test_a_member_whose_facts_inside_its_community_were_deleted_leaves_it(memory, conn, group):
    await ingest_chat(memory, group)
    await memory.add_episode(group, "Alice is friends with Carol.", actor="Narrator", episode_id="bridge",
                             reference_time=datetime(2024, 2, 1, tzinfo=timezone.utc))
    detect(conn, group)
    acme = next(c for c in communities_of(conn, group) if "Acme" in c)
    assert "Alice" in acme
    for episode in ("e0", "e2"):  # Alice works at Acme; Alice is friends with Bob
        await memory.delete_episode(group, episode)
    conn.commit()
    # Alice (still friends with Carol) no longer belongs with Acme and Bob.
    assert sorted(set(acme) - {"Alice"}) in communities_of(conn, group)
    assert not any("Alice" in c and "Acme" in c for c in communities_of(conn, group))
    assert conn.execute("SELECT drift FROM pgmemory.community_state WHERE group_id = %s", (group,)).fetchone()[0] >= 1


def summarised(conn, group, member, summary):
    """Give the current community of entity `member` a summary written from its facts now."""
    conn.execute("UPDATE pgmemory.communities SET summary = %s, summary_kind = 'llm', summarized_revision = revision"
                 " WHERE id = (SELECT m.community_id FROM pgmemory.community_members m JOIN pgmemory.entities e"
                 "              ON e.group_id = m.group_id AND e.id = m.entity_id"
                 "             WHERE m.group_id = %s AND m.ended_at IS NULL AND e.name = %s)", (summary, group, member))
    conn.commit()


def summaries(conn, group):
    return [r[0] for r in conn.execute("SELECT summary FROM pgmemory.communities WHERE group_id = %s", (group,))]


async def test_erasing_a_retracted_episode_blanks_the_summaries_that_may_quote_it(memory, conn, group):
    """A retract keeps a summary written while the episode was believed (history); erasing the
    episode later must blank it as an erase of a believed episode does, even when no entity of
    the episode was left without facts."""
    await ingest_chat(memory, group)
    detect(conn, group)
    summarised(conn, group, "Carol", "Carol is married to Dave.")
    await memory.delete_episode(group, "e5")  # Carol and Dave still live in Paris: no orphan
    conn.commit()
    assert any("married" in s for s in summaries(conn, group))
    await memory.delete_episode(group, "e5", erase=True)
    conn.commit()
    assert not any("married" in s for s in summaries(conn, group)), summaries(conn, group)


async def test_erasing_blanks_a_summary_written_while_the_entity_was_a_member(memory, conn, group):
    """A member that left its community (its facts there retracted) may be quoted by the summary
    written while it belonged: erasing an episode about it blanks that summary too."""
    await ingest_chat(memory, group)
    await memory.add_episode(group, "Alice is friends with Carol.", actor="Narrator", episode_id="bridge",
                             reference_time=datetime(2024, 2, 1, tzinfo=timezone.utc))
    detect(conn, group)
    summarised(conn, group, "Bob", "Bob works at Acme. Alice is friends with Carol.")
    for episode in ("e0", "e2"):  # Alice leaves the Acme community (still friends with Carol)
        await memory.delete_episode(group, episode)
    conn.commit()
    await memory.delete_episode(group, "bridge", erase=True)
    conn.commit()
    assert not any("friends with Carol" in s for s in summaries(conn, group)), summaries(conn, group)
