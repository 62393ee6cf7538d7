"""Full text: the exact top k probes the small sets of several query words together (one GIN
scan and one scoring statement for several sets), unless their words come together in documents."""
from __future__ import annotations

import math

import psycopg

from tests.test_fulltext import KINDS

INSERT, HITS, REFERENCE = KINDS["episodes"]
CALLS = ("SELECT coalesce(sum(calls), 0) FROM pg_stat_xact_user_functions"
         " WHERE schemaname = 'pgmemory_internal' AND funcname = 'text_scores'")


def top_k_and_probes(conn: psycopg.Connection, group: str, query: str, k: int) -> tuple[list, int]:
    """The top k of the episodes' full text, and how many probes (text_scores calls) it took."""
    with conn.transaction(force_rollback=True):
        conn.execute("SET LOCAL track_functions = 'pl'")
        hits = conn.execute(HITS, (group, query, k)).fetchall()
        return hits, conn.execute(CALLS).fetchone()[0]


def assert_exact(conn: psycopg.Connection, group: str, query: str, ks: range) -> None:
    """The top k for each k has the unpruned reference's scores and rows (up to exact ties at the k-th)."""
    expected = conn.execute(REFERENCE, {"g": group, "q": query}).fetchall()
    for k in ks:
        hits = conn.execute(HITS, (group, query, k)).fetchall()
        assert len(hits) == min(k, len(expected)), k
        assert all(math.isclose(s, e, rel_tol=1e-9) for (_, s), (_, e) in zip(hits, expected)), k
        cut = expected[k - 1][1] if len(expected) >= k else -1
        assert {i for i, s in hits if s > cut * (1 + 1e-9)} == {i for i, s in expected if s > cut * (1 + 1e-9)}, k


def test_small_sets_of_several_words_are_probed_together_and_exact(db_dsn, group):
    # "when did Eric Moore visit Rotterdam": three rare words (60-130 of 6,000 documents) and a
    # common one; the sets of two or three of them hold 0-6 documents each, fewer than k together.
    texts = ([f"filler text number {i}" for i in range(4_000)] + [f"visit number {i}" for i in range(1_500)]
             + [f"eric number {i}" for i in range(55)] + [f"moore number {i}" for i in range(120)]
             + [f"rotterdam number {i}" for i in range(55)]
             + ["eric moore said hello", "eric moore again", "eric moore at home", "eric moore visit",
                "eric rotterdam", "moore rotterdam trip", "moore rotterdam", "rotterdam moore visit",
                "eric visit", "visit rotterdam port", "eric moore visit rotterdam"])
    query = "when did Eric Moore visit Rotterdam"
    with psycopg.connect(db_dsn) as conn:
        conn.execute(INSERT, {"g": group, "t": texts})
        conn.commit()
        assert_exact(conn, group, query, range(1, 41))
        _, probes = top_k_and_probes(conn, group, query, 20)
    # The four words make 15 sets; of the first 8 (best bounds first) the whole set is left to the
    # next, the next is probed alone, the 6 after it together: then the single words. One probe a
    # set would be 7 before the single words.
    assert probes <= 6


def test_words_said_together_are_probed_one_set_at_a_time_and_exact(empty_dsn):
    """"Pied Piper Software" and "Pied Piper Labs": "pied" and "piper" are in the same 424
    documents, so the first set probed (12 documents) holds far more than their counts suggest
    (0.02 in 43,000 documents), and the sets are probed one at a time: the second one (12 more)
    fills the top 20, and the 424 of "pied piper", which a batch of the sets after the first would
    have read, are not read. A database of its own: the plans of the shared one depend on the
    other tests' groups."""
    from pgmemory.storage.setup import init_database

    group = "g"
    texts = ([f"filler text number {i}" for i in range(40_000)]
             + [f"person {i} works for pied piper software" for i in range(12)]
             + [f"person {i} works for pied piper labs" for i in range(400)]
             + [f"person {i} is a member of pied piper" for i in range(12)]
             + [f"software number {i}" for i in range(150)] + [f"member number {i}" for i in range(3_000)])
    query = "who is a member of Pied Piper Software"
    fetched = ("SELECT idx_tup_fetch FROM pg_stat_xact_user_tables WHERE schemaname = 'pgmemory'"
               " AND relname = 'episodes'")
    with psycopg.connect(empty_dsn) as conn:
        init_database(conn, 384)
        conn.execute(INSERT, {"g": group, "t": texts})
        conn.commit()
        conn.execute("ANALYZE pgmemory.episodes")
        conn.commit()
        assert_exact(conn, group, query, (1, 5, 12, 13, 20, 24, 25, 40))
        with conn.transaction(force_rollback=True):
            before = conn.execute(fetched).fetchone()[0]
            conn.execute(HITS, (group, query, 20)).fetchall()
            read = conn.execute(fetched).fetchone()[0] - before
    assert read < 100
