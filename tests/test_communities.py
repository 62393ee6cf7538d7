"""Communities: label propagation in SQL, dynamic assignment on ingest, deletes, the AGE mirror."""
from __future__ import annotations

from tests.communities_support import found_partition, nmi, plant_graph


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
    assert out["kept"] == 5 and out["ended"] == 1
    ended = conn.execute("SELECT id FROM pgmemory.communities WHERE group_id = %s AND ended_at IS NOT NULL",
                         (group,)).fetchall()
    assert [r[0] for r in ended] == [before[block0[0]]]
    # The ended version keeps its members; none of them is in a current community.
    kept_members = conn.execute("SELECT count(*) FROM pgmemory.community_members WHERE community_id = %s",
                                (before[block0[0]],)).fetchone()[0]
    assert kept_members == 20
    assert current(conn, group) == 5
    assert not set(block0) & set(found_partition(conn, group))
