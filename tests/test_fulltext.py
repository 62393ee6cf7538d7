"""Full text: Okapi BM25 over tsvector with per-group statistics kept in the writers' transactions."""
from __future__ import annotations

import math
import uuid

import psycopg

from tests.support import utc

K1, B = 0.3, 0.1  # the constants of sql/fulltext/tsvector.sql

STATS = """
    SELECT 'doc', kind, '', docs, total_len FROM pgmemory.text_stats WHERE group_id = %(g)s AND docs <> 0
    UNION ALL
    SELECT 'term', kind, term, docs, 0 FROM pgmemory.term_stats WHERE group_id = %(g)s AND docs <> 0
    ORDER BY 1, 2, 3
"""


def stats_now_and_rebuilt(conn: psycopg.Connection, group: str) -> tuple[list, list]:
    """The statistics the triggers kept, and the ones recomputed from the tables (rolled back)."""
    kept = conn.execute(STATS, {"g": group}).fetchall()
    with conn.transaction(force_rollback=True):
        conn.execute("SELECT pgmemory.rebuild_text_stats()")
        rebuilt = conn.execute(STATS, {"g": group}).fetchall()
    return kept, rebuilt


async def test_statistics_follow_inserts_updates_and_deletes(memory, db_dsn, group):
    for n, text in enumerate(["I work at Acme Corp.", "I left Acme Corp and now work at Globex.",
                              "My sister Ann lives in Oslo.", "I love sailing and sailing loves me."]):
        await memory.add_episode(group, text, actor="Zoe", reference_time=utc(f"2024-0{n + 1}-01"),
                                 episode_id=f"z{n}")
    await memory.delete_episode(group, "z2")
    with psycopg.connect(db_dsn) as conn:
        kept, rebuilt = stats_now_and_rebuilt(conn, group)
    assert kept == rebuilt
    kinds = {row[1] for row in kept if row[0] == "doc"}
    assert kinds == {"episodes", "facts", "entities"}
    assert [r[3] for r in kept if r[:2] == ("doc", "episodes")] == [3]
    # Only the text of z0, z1 and z3 counts: "sister" went with the deleted episode.
    assert "sister" not in {r[2] for r in kept if r[1] == "episodes"}


def test_scores_are_okapi_bm25_of_the_group(db_dsn, group):
    texts = ["sailing in Oslo", "sailing sailing sailing", "dinner in Oslo with Ann", "work at Acme",
             "a long story about a boat trip to Oslo and back home again"]
    other = f"{group}-other"
    with psycopg.connect(db_dsn) as conn:
        for g, items in ((group, texts), (other, ["sailing"] * 20)):
            for text in items:
                conn.execute("INSERT INTO pgmemory.episodes (id, group_id, kind, content, valid_at)"
                             " VALUES (%s, %s, 'text', %s, now())", (uuid.uuid4(), g, text))
        conn.commit()
        docs = {r[0]: (r[1], r[2]) for r in conn.execute(
            "SELECT ep.id, ep.content, array_agg(u.lexeme || ':' || coalesce(array_length(u.positions, 1), 1))"
            " FROM pgmemory.episodes ep, unnest(ep.tsv) u WHERE ep.group_id = %s GROUP BY ep.group_id, ep.id", (group,))}
        hits = conn.execute("SELECT id, score FROM pgmemory.episode_text_hits(ARRAY[%s], 'sailing to Oslo', 10,"
                            " NULL, NULL)", (group,)).fetchall()
    # Okapi BM25; the document length counts distinct lexemes (the group's average, from
    # text_stats, counts positions).
    tf = {i: {p.split(":")[0]: int(p.split(":")[1]) for p in lexemes} for i, (_, lexemes) in docs.items()}
    avgdl = sum(sum(t.values()) for t in tf.values()) / len(tf)
    n = len(tf)

    def score(i: uuid.UUID) -> float:
        total = 0.0
        for term in ("sail", "oslo"):
            df = sum(1 for t in tf.values() if term in t)
            if term in tf[i]:
                f = tf[i][term]
                total += (math.log(1 + (n - df + 0.5) / (df + 0.5)) * f * (K1 + 1)
                          / (f + K1 * (1 - B + B * len(tf[i]) / avgdl)))
        return total

    expected = sorted(((i, score(i)) for i in tf if score(i) > 0), key=lambda x: (-x[1], x[0]))
    assert [i for i, _ in hits] == [i for i, _ in expected]
    assert all(math.isclose(s, e, rel_tol=1e-9) for (_, s), (_, e) in zip(hits, expected))
    # The other group's twenty "sailing" rows do not make sailing common here.
    assert docs[hits[0][0]][0] == "sailing in Oslo"
