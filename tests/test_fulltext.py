"""Full text: Okapi BM25 over tsvector with per-group statistics kept in the writers' transactions."""
from __future__ import annotations

import itertools
import math
import uuid

import psycopg
import pytest

from tests.support import utc

K1, B = 0.3, 0.1  # the constants of sql/fulltext/tsvector.sql

# The two ways text_top_k finds the exact top k: the steps (bounds over sets of lexemes) and the
# one pass (every document holding a query lexeme scored) it takes when the lexemes hold few
# documents. pgmemory.text_probe_rows prices a probe: 0 forces the steps, a huge price the one pass.
PATHS = {"steps": "-c pgmemory.text_probe_rows=0", "one_pass": "-c pgmemory.text_probe_rows=1e9"}


@pytest.fixture(params=sorted(PATHS))
def text_path(request) -> str:
    """The connection options that force one of text_top_k's two paths."""
    return PATHS[request.param]

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
    # Retracted, z2 is kept as history (a known-at search before the retract finds it by its words):
    # it still counts, as past fact versions and retired entities do.
    assert [r[3] for r in kept if r[:2] == ("doc", "episodes")] == [4]
    assert "sister" in {r[2] for r in kept if r[1] == "episodes"}
    await memory.delete_episode(group, "z2", erase=True)
    with psycopg.connect(db_dsn) as conn:
        kept, rebuilt = stats_now_and_rebuilt(conn, group)
    assert kept == rebuilt
    assert [r[3] for r in kept if r[:2] == ("doc", "episodes")] == [3]
    # Only the text of z0, z1 and z3 counts: "sister" went with the erased episode.
    assert "sister" not in {r[2] for r in kept if r[1] == "episodes"}



async def test_statistics_follow_text_updates_and_skip_other_updates(memory, db_dsn, group):
    """The update trigger counts only rows whose text changed: a summary rewritten by hand moves
    the statistics, a status / embedding update of many rows leaves them exactly as they were."""
    for n, text in enumerate(["I work at Acme Corp.", "My brother Ben lives in Lima."]):
        await memory.add_episode(group, text, actor="Zoe", reference_time=utc(f"2024-0{n + 1}-01"),
                                 episode_id=f"u{n}")
    with psycopg.connect(db_dsn) as conn:
        before = conn.execute(STATS, {"g": group}).fetchall()
        conn.execute("UPDATE pgmemory.episodes SET error = 'x' WHERE group_id = %s", (group,))
        conn.execute("UPDATE pgmemory.facts SET attributes = attributes WHERE group_id = %s", (group,))
        assert conn.execute(STATS, {"g": group}).fetchall() == before
        conn.execute("UPDATE pgmemory.entities SET summary = CASE WHEN name = 'Ben' THEN 'a quokka keeper'"
                     " ELSE summary END WHERE group_id = %s", (group,))
        # Text rewritten in several rows of one statement (episodes and facts count them per row).
        conn.execute("UPDATE pgmemory.episodes SET content = content || ' Wombats wombats.', error = NULL"
                     " WHERE group_id = %s", (group,))
        conn.execute("UPDATE pgmemory.facts SET fact = fact || ' Platypus!' WHERE group_id = %s", (group,))
        kept, rebuilt = stats_now_and_rebuilt(conn, group)
        conn.rollback()
    assert kept == rebuilt
    assert "quokka" in {r[2] for r in kept if r[1] == "entities"}
    assert "wombat" in {r[2] for r in kept if r[1] == "episodes"}
    assert "platypus" in {r[2] for r in kept if r[1] == "facts"}

# Per lexeme of the group's episodes: the kept bound of its term frequency and the true largest one.
TERM_FREQUENCIES = """
    SELECT t.term, t.max_tf, (SELECT max(coalesce(array_length(u.positions, 1), 1))
                                FROM pgmemory.episodes e, unnest(e.tsv) u
                               WHERE e.group_id = t.group_id AND u.lexeme = t.term)
      FROM pgmemory.term_stats t WHERE t.group_id = %s AND t.kind = 'episodes' ORDER BY 1"""


def test_term_frequency_bound_is_never_below_the_true_one(db_dsn, group):
    """term_stats.max_tf (what the exact top k bounds a lexeme's share by) is set by inserts, raised
    by a rewrite that says a word more often (df unchanged), kept after the document that set it
    is gone; rebuild_text_stats gives the exact value."""
    with psycopg.connect(db_dsn) as conn:
        add_texts(conn, group, ["sailing in Oslo", "sailing sailing sailing", "a boat"])
        kept = {term: (bound, true) for term, bound, true in conn.execute(TERM_FREQUENCIES, (group,)).fetchall()}
        assert kept["sail"] == (3, 3) and kept["oslo"] == (1, 1) and kept["boat"] == (1, 1)
        conn.execute("UPDATE pgmemory.episodes SET content = 'a boat, a boat, a boat, a boat'"
                     " WHERE group_id = %s AND content = 'a boat'", (group,))
        conn.execute("DELETE FROM pgmemory.episodes WHERE group_id = %s AND content = 'sailing sailing sailing'",
                     (group,))
        kept = {term: (bound, true) for term, bound, true in conn.execute(TERM_FREQUENCIES, (group,)).fetchall()}
        assert kept["boat"] == (4, 4) and kept["sail"] == (3, 1)
        conn.execute("SELECT pgmemory.rebuild_text_stats()")
        rebuilt = {term: (bound, true) for term, bound, true in conn.execute(TERM_FREQUENCIES, (group,)).fetchall()}
        conn.rollback()
    assert all(bound == true for bound, true in rebuilt.values()) and rebuilt["sail"] == (1, 1)


def test_term_frequency_is_the_count_of_occurrences_up_to_any_bound(db_dsn):
    """A lexeme said tf times (1-40) scores as tf occurrences whatever max_tf bound the statistics
    give (tf up to that bound: ts_rank's count below 33, ts_rank_cd's above)."""
    with psycopg.connect(db_dsn) as conn:
        rows = conn.execute("""
            SELECT s.tf, b.max_tf,
                   pgmemory_internal.bm25_share('g', s.tsv, 'g', 2.0, 'zz'::tsquery, 5.0, b.max_tf),
                   2.0 * pgmemory_internal.bm25_term(s.tf, length(s.tsv), 5.0)
              FROM (SELECT n AS tf, to_tsvector('simple', repeat('zz aa ', n) || 'bb cc') AS tsv
                      FROM generate_series(1, 40) n) s
             CROSS JOIN LATERAL (VALUES (s.tf), (32), (33), (NULL)) AS b (max_tf)
             WHERE b.max_tf IS NULL OR b.max_tf >= s.tf""").fetchall()
    assert len(rows) == 40 + 32 + 33 + 40
    assert all(math.isclose(share, expected, rel_tol=1e-12) for _, _, share, expected in rows)


def bm25_reference(conn: psycopg.Connection, group: str, terms: tuple[str, ...]) -> list[tuple[uuid.UUID, float]]:
    """Okapi BM25 of every episode of the group for the given lexemes, best first; the document
    length counts distinct lexemes (the group's average, from text_stats, counts positions)."""
    docs = {r[0]: r[1] for r in conn.execute(
        "SELECT ep.id, array_agg(u.lexeme || ':' || coalesce(array_length(u.positions, 1), 1))"
        " FROM pgmemory.episodes ep, unnest(ep.tsv) u WHERE ep.group_id = %s GROUP BY ep.group_id, ep.id", (group,))}
    tf = {i: {p.split(":")[0]: int(p.split(":")[1]) for p in lexemes} for i, lexemes in docs.items()}
    avgdl = sum(sum(t.values()) for t in tf.values()) / len(tf)
    n = len(tf)

    def score(i: uuid.UUID) -> float:
        total = 0.0
        for term in terms:
            df = sum(1 for t in tf.values() if term in t)
            if term in tf[i]:
                f = tf[i][term]
                total += (math.log(1 + (n - df + 0.5) / (df + 0.5)) * f * (K1 + 1)
                          / (f + K1 * (1 - B + B * len(tf[i]) / avgdl)))
        return total
    return sorted(((i, score(i)) for i in tf if score(i) > 0), key=lambda x: (-x[1], x[0]))


def add_texts(conn: psycopg.Connection, group: str, texts: list[str]) -> None:
    for text in texts:
        conn.execute("INSERT INTO pgmemory.episodes (id, group_id, kind, content, valid_at)"
                     " VALUES (%s, %s, 'text', %s, now())", (uuid.uuid4(), group, text))
    conn.commit()


def test_scores_are_okapi_bm25_of_the_group(db_dsn, group):
    texts = ["sailing in Oslo", "sailing sailing sailing", "dinner in Oslo with Ann", "work at Acme",
             "a long story about a boat trip to Oslo and back home again"]
    with psycopg.connect(db_dsn) as conn:
        add_texts(conn, group, texts)
        add_texts(conn, f"{group}-other", ["sailing"] * 20)
        hits = conn.execute("SELECT id, score FROM pgmemory_internal.episode_text_hits(ARRAY[%s], 'sailing to Oslo', 10,"
                            " NULL, NULL)", (group,)).fetchall()
        expected = bm25_reference(conn, group, ("sail", "oslo"))
        first = conn.execute("SELECT content FROM pgmemory.episodes WHERE id = %s", (hits[0][0],)).fetchone()[0]
    assert [i for i, _ in hits] == [i for i, _ in expected]
    assert all(math.isclose(s, e, rel_tol=1e-9) for (_, s), (_, e) in zip(hits, expected))
    # The other group's twenty "sailing" rows do not make sailing common here.
    assert first == "sailing in Oslo"


def test_top_k_is_exact_whether_or_not_common_lexemes_are_read(db_dsn, group, text_path):
    # "dog" is in 261 of 291 documents (a common lexeme with a long list), "zebra" in 5 and
    # "lion" in 6. For a top 1 or 2 of "dog zebra" the zebra documents set a threshold no
    # dog-only document can reach, so dog's list is never read; with "lion", the lion documents
    # are read as well; a top 3, 10 or 40 holds too few rare documents to prune at all. Every
    # one must be the exact BM25 top k.
    texts = ([f"dog number {i} dog" if i % 2 else f"a dog called {i}" for i in range(250)]
             + ["zebra and dog", "zebra zebra dog dog dog", "a zebra", "zebra dog", "old zebra dog"]
             + [f"lion {i} dog" for i in range(6)] + [f"cat {i}" for i in range(30)])
    with psycopg.connect(db_dsn, options=text_path) as conn:
        add_texts(conn, group, texts)
        for query, lexemes, ks in (("dogs and zebras", ("dog", "zebra"), (1, 2, 3, 10, 40)),
                                   ("dogs, zebras and lions", ("dog", "zebra", "lion"), (2, 10))):
            expected = bm25_reference(conn, group, lexemes)
            for k in ks:
                hits = conn.execute("SELECT id, score FROM pgmemory_internal.episode_text_hits(ARRAY[%s], %s, %s, NULL, NULL)",
                                    (group, query, k)).fetchall()
                assert [i for i, _ in hits] == [i for i, _ in expected[:k]], (query, k)
                assert all(math.isclose(s, e, rel_tol=1e-9) for (_, s), (_, e) in zip(hits, expected)), (query, k)


ANIMALS = ([f"dog number {i} dog" if i % 2 else f"a dog called {i}" for i in range(250)]
           + ["zebra and dog", "zebra zebra dog dog dog", "a zebra", "zebra dog", "old zebra dog"]
           + [f"lion {i} dog" for i in range(6)] + [f"cat {i}" for i in range(30)])
# The last query has 13 lexemes: the commonest are searched as one unit (any of them).
ANIMAL_QUERIES = ("dogs and zebras", "dogs, zebras and lions",
                  "old zebras, lions, cats and dogs: number 1, 2, 3, 4 or 5 called, known")


def assert_exact_top_k(conn: psycopg.Connection, group: str, hits_sql: str, reference_sql: str,
                       extra_queries: tuple[str, ...] = ()) -> None:
    """For every k from 1 to 40, the pruned top k (hits_sql, args group, query, k) has the scores
    of the unpruned reference (reference_sql, args g and q) and the same rows, up to the order
    of exact ties at the k-th score."""
    for query in ANIMAL_QUERIES + extra_queries:
        expected = conn.execute(reference_sql, {"g": group, "q": query}).fetchall()
        assert expected, query
        for k in range(1, 41):
            hits = conn.execute(hits_sql, (group, query, k)).fetchall()
            assert len(hits) == min(k, len(expected)), (query, k)
            assert all(math.isclose(s, e, rel_tol=1e-9) for (_, s), (_, e) in zip(hits, expected)), (query, k)
            cut = expected[k - 1][1] if len(expected) >= k else -1
            assert {i for i, s in hits if s > cut * (1 + 1e-9)} == {i for i, s in expected if s > cut * (1 + 1e-9)}, \
                (query, k)


# Episodes of the searched group valid by 2024-06-01, scored without pruning: the reference.
EPISODE_HITS = "SELECT id, score FROM pgmemory_internal.episode_text_hits(ARRAY[%s], %s, %s, NULL, '2024-06-01')"
EPISODE_REFERENCE = """
    SELECT ep.id, sum(t.idf * pgmemory_internal.bm25_term(ts_rank_cd('{1,1,1,1}'::real[], ep.tsv, t.tq, 0),
                                                           length(ep.tsv), t.avgdl)) AS score
      FROM pgmemory.episodes ep JOIN pgmemory_internal.bm25_terms('episodes', ARRAY[%(g)s], %(q)s, 1) t ON ep.tsv @@ t.tq
     WHERE ep.group_id = %(g)s AND ep.valid_at <= '2024-06-01'
     GROUP BY ep.id ORDER BY 2 DESC, 1"""


def test_episode_top_k_is_exact_and_in_view(db_dsn, group, text_path):
    # Hidden from an as-of 2024-06-01 search: later episodes, the best zebra documents of all;
    # another group's zebras count neither in the scores nor the hits.
    insert = "INSERT INTO pgmemory.episodes (id, group_id, kind, content, valid_at) VALUES (%s, %s, 'text', %s, %s)"
    with psycopg.connect(db_dsn, options=text_path) as conn:
        for text in ANIMALS:
            conn.execute(insert, (uuid.uuid4(), group, text, utc("2024-01-01")))
        for text in ("zebra zebra zebra", "zebra zebra zebra zebra lion"):
            conn.execute(insert, (uuid.uuid4(), group, text, utc("2024-07-01")))
        conn.execute(insert, (uuid.uuid4(), f"{group}-other", "zebra zebra zebra zebra zebra", utc("2024-01-01")))
        conn.commit()
        assert_exact_top_k(conn, group, EPISODE_HITS, EPISODE_REFERENCE, ("zebra",))
        top = conn.execute(EPISODE_HITS, (group, "zebra", 10)).fetchall()
        text_of = dict(conn.execute("SELECT id, content FROM pgmemory.episodes WHERE group_id = %s", (group,)).fetchall())
    assert sorted(text_of[i] for i, _ in top) == sorted(t for t in ANIMALS if "zebra" in t)  # none hidden


# Current entities (not retired) of the searched group, scored without pruning: the reference.
ENTITY_HITS = "SELECT id, score FROM pgmemory_internal.entity_text_hits(ARRAY[%s], %s, %s, NULL, '{}')"
ENTITY_REFERENCE = """
    SELECT e.id, sum(t.idf * pgmemory_internal.bm25_term(ts_rank_cd('{1,1,1,1}'::real[], e.tsv, t.tq, 0),
                                                          length(e.tsv), t.avgdl)) AS score
      FROM pgmemory.entities e JOIN pgmemory_internal.bm25_terms('entities', ARRAY[%(g)s], %(q)s, 1) t ON e.tsv @@ t.tq
     WHERE e.group_id = %(g)s AND e.retired_at IS NULL
     GROUP BY e.id ORDER BY 2 DESC, 1"""


def test_entity_top_k_is_exact_and_in_view(db_dsn, group, text_path):
    # Hidden: retired entities (merged into others), the best zebra names of all, and another
    # group's; the label filter keeps only the entities with the label asked for.
    insert = "INSERT INTO pgmemory.entities (id, group_id, name, labels, retired_at) VALUES (%s, %s, %s, %s, %s)"
    with psycopg.connect(db_dsn, options=text_path) as conn:
        for n, name in enumerate(ANIMALS):
            conn.execute(insert, (uuid.uuid4(), group, name, ["Animal"] if n % 3 else ["Entity"], None))
        for name in ("zebra zebra zebra", "zebra zebra zebra zebra lion"):
            conn.execute(insert, (uuid.uuid4(), group, name, ["Animal"], utc("2024-01-01")))
        conn.execute(insert, (uuid.uuid4(), f"{group}-other", "zebra zebra zebra zebra zebra", ["Animal"], None))
        conn.commit()
        assert_exact_top_k(conn, group, ENTITY_HITS, ENTITY_REFERENCE, ("zebra",))
        top = conn.execute(ENTITY_HITS, (group, "zebra", 10)).fetchall()
        animals = conn.execute("SELECT id FROM pgmemory_internal.entity_text_hits(ARRAY[%s], 'lion', 40, NULL,"
                               " '{Animal}')", (group,)).fetchall()
        name_of = dict(conn.execute("SELECT id, name FROM pgmemory.entities WHERE group_id = %s", (group,)).fetchall())
    assert sorted(name_of[i] for i, _ in top) == sorted(t for t in ANIMALS if "zebra" in t)  # none retired
    assert sorted(name_of[i] for i, in animals) == sorted(t for n, t in enumerate(ANIMALS) if "lion" in t and n % 3)


FACT_HITS = ("SELECT version_id, score FROM pgmemory_internal.fact_text_hits(ARRAY[%s], %s, %s, now(), NULL, false, '{}',"
             " ARRAY[NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL]::timestamptz[])")
# Every fact in view now, scored by the same per-lexeme BM25 shares, with no pruning: the reference.
FACT_REFERENCE = """
    SELECT f.version_id, sum(t.idf * pgmemory_internal.bm25_term(ts_rank_cd('{1,1,1,1}'::real[], f.tsv, t.tq, 0),
                                                          length(f.tsv), t.avgdl)) AS score
      FROM pgmemory.facts f JOIN pgmemory_internal.bm25_terms('facts', ARRAY[%(g)s], %(q)s, 1) t ON f.tsv @@ t.tq
     WHERE f.group_id = %(g)s AND upper_inf(f.recorded) AND f.valid @> now()
     GROUP BY f.version_id ORDER BY 2 DESC, 1"""


def test_fact_top_k_is_exact_and_in_view(db_dsn, group, text_path):
    # Facts: "dog" in ~290 (with "knows", the relation, in all), "zebra" in 5 believed facts and in
    # 3 that are not in view (a superseded version, an ended one, one of another group), "lion" in 6.
    a, b = uuid.uuid4(), uuid.uuid4()
    texts = ANIMALS
    hidden = [("zebra zebra zebra", "tstzrange('2020-01-01', NULL)", "tstzrange('2021-01-01', '2022-01-01')"),
              ("zebra zebra zebra zebra", "tstzrange('2020-01-01', '2021-01-01')", "tstzrange(now(), NULL)")]
    insert = ("INSERT INTO pgmemory.facts (id, lineage, group_id, source_id, target_id, relation, fact, valid, recorded)"
              " SELECT f, f, %s, %s, %s, 'KNOWS', x, {valid}, {recorded} FROM (SELECT gen_random_uuid() AS f, x"
              " FROM unnest(%s::text[]) AS x) y")
    with psycopg.connect(db_dsn, options=text_path) as conn:
        for g in (group, f"{group}-other"):
            conn.execute("INSERT INTO pgmemory.entities (id, group_id, name) VALUES (%s, %s, 'A'), (%s, %s, 'B')",
                         (a, g, b, g))
            a, b = uuid.uuid4(), uuid.uuid4()
        ids = dict(conn.execute("SELECT name, id FROM pgmemory.entities WHERE group_id = %s", (group,)).fetchall())
        conn.execute(insert.format(valid="tstzrange('2020-01-01', NULL)", recorded="tstzrange(now(), NULL)"),
                     (group, ids["A"], ids["B"], texts))
        for text, valid, recorded in hidden:
            conn.execute(insert.format(valid=valid, recorded=recorded), (group, ids["A"], ids["B"], [text]))
        other = dict(conn.execute("SELECT name, id FROM pgmemory.entities WHERE group_id = %s", (f"{group}-other",)).fetchall())
        conn.execute(insert.format(valid="tstzrange('2020-01-01', NULL)", recorded="tstzrange(now(), NULL)"),
                     (f"{group}-other", other["A"], other["B"], ["zebra zebra zebra zebra zebra"]))
        conn.commit()
        assert_exact_top_k(conn, group, FACT_HITS, FACT_REFERENCE, ("who knows a zebra", "zebra"))
        text_of = dict(conn.execute("SELECT version_id, fact FROM pgmemory.facts WHERE group_id = %s", (group,)).fetchall())
        top = conn.execute(FACT_HITS, (group, "zebra", 10)).fetchall()
    assert sorted(text_of[i] for i, _ in top) == sorted(t for t in texts if "zebra" in t)  # none hidden


# Episodes of both searched groups, each scored with its own group's statistics: the reference.
TWO_GROUP_REFERENCE = """
    SELECT ep.id, sum(t.idf * pgmemory_internal.bm25_term(ts_rank_cd('{1,1,1,1}'::real[], ep.tsv, t.tq, 0),
                                                           length(ep.tsv), t.avgdl)) AS score
      FROM pgmemory.episodes ep
      JOIN pgmemory_internal.bm25_terms('episodes', %(g)s, %(q)s, 1) t ON t.group_id = ep.group_id AND ep.tsv @@ t.tq
     WHERE ep.group_id = ANY (%(g)s)
     GROUP BY ep.id ORDER BY 2 DESC, 1"""


def test_top_k_of_two_groups_scores_each_document_with_its_own_group(db_dsn, group, text_path):
    # The same words are common in one group and rare in the other, so a lexeme's share differs by
    # group; a query of many lexemes gives more terms (group x lexeme) than the scorer writes out.
    groups = [group, f"{group}-b"]
    with psycopg.connect(db_dsn, options=text_path) as conn:
        add_texts(conn, groups[0], ANIMALS)
        add_texts(conn, groups[1], [f"zebra lion number {i}" for i in range(40)] + ["a dog", "old cat", "dog called 2"])
        for query in ANIMAL_QUERIES:
            expected = conn.execute(TWO_GROUP_REFERENCE, {"g": groups, "q": query}).fetchall()
            for k in (1, 5, 17, 40):
                hits = conn.execute("SELECT id, score FROM pgmemory_internal.episode_text_hits(%s, %s, %s, NULL, NULL)",
                                    (groups, query, k)).fetchall()
                assert len(hits) == min(k, len(expected)), (query, k)
                assert all(math.isclose(s, e, rel_tol=1e-9) for (_, s), (_, e) in zip(hits, expected)), (query, k)
                cut = expected[k - 1][1] if len(expected) >= k else -1
                assert ({i for i, s in hits if s > cut * (1 + 1e-9)}
                        == {i for i, s in expected if s > cut * (1 + 1e-9)}), (query, k)


def test_one_pass_and_steps_return_the_same_rows_in_the_same_order(db_dsn, group):
    """Both paths give the same rows with the same scores in the same order, exact ties included
    (ANIMALS has many: "a dog called i" of equal length), for two groups at once and as of a time
    that hides the best zebra episodes, for every k."""
    groups = [group, f"{group}-b"]
    insert = "INSERT INTO pgmemory.episodes (id, group_id, kind, content, valid_at) VALUES (%s, %s, 'text', %s, %s)"
    calls = ("SELECT group_id, key, score FROM pgmemory_internal.text_top_k('episodes', %s, %s, %s, NULL, NULL,"
             " '2024-06-01', NULL, NULL, NULL, '{}')")
    with psycopg.connect(db_dsn) as conn:
        for text in ANIMALS:
            conn.execute(insert, (uuid.uuid4(), group, text, utc("2024-01-01")))
        for text in ("zebra zebra zebra", "zebra zebra zebra zebra lion"):
            conn.execute(insert, (uuid.uuid4(), group, text, utc("2024-07-01")))
        for i in range(40):
            conn.execute(insert, (uuid.uuid4(), groups[1], f"zebra lion number {i % 7}", utc("2024-01-01")))
        conn.commit()
        for query in ANIMAL_QUERIES + ("zebra", "a dog"):
            for k in range(1, 41):
                found = {}
                for path, options in PATHS.items():
                    conn.execute("SELECT set_config('pgmemory.text_probe_rows', %s, false)",
                                 (options.split("=")[1],))
                    found[path] = conn.execute(calls, (groups, query, k)).fetchall()
                assert len(found["steps"]) == k or query == "zebra", (query, k)
                assert [r[:2] for r in found["one_pass"]] == [r[:2] for r in found["steps"]], (query, k)
                assert all(math.isclose(a[2], b[2], rel_tol=1e-12)
                           for a, b in zip(found["one_pass"], found["steps"])), (query, k)


def test_top_k_is_exact_when_more_sets_are_probed_before_a_whole_unit(db_dsn, group, text_path):
    # The rarest of four lexemes is in 1,300 documents, so after the first 2 x 4 sets (which hold
    # fewer than 30 documents) the other sets of two lexemes are probed before any lexeme's
    # documents are read whole (cheaper than 1,300 rows). Exact for every k all the same.
    words = ("walker", "patrick", "seattle", "visit")
    with psycopg.connect(db_dsn, options=text_path) as conn:
        for n, word in zip((1300, 1400, 1500, 1600), words):
            conn.execute("INSERT INTO pgmemory.episodes (id, group_id, kind, content, valid_at)"
                         " SELECT gen_random_uuid(), %s, 'text', %s || ' number ' || i || repeat(' extra words', i %% 3), now()"
                         " FROM generate_series(1, %s) AS i", (group, word, n))
        combos = [" ".join(c) for r in (2, 3, 4) for c in itertools.combinations(words, r)]
        add_texts(conn, group, [f"{c} {extra}" for c in combos for extra in ("", "again", "and so on")])
        query = "when did Patrick Walker visit Seattle"
        reference = EPISODE_REFERENCE.replace(" AND ep.valid_at <= '2024-06-01'", "")
        expected = conn.execute(reference, {"g": group, "q": query}).fetchall()
        for k in (1, 5, 10, 20, 30, 33, 40, 60):
            hits = conn.execute("SELECT id, score FROM pgmemory_internal.episode_text_hits(ARRAY[%s], %s, %s, NULL, NULL)",
                                (group, query, k)).fetchall()
            assert len(hits) == k
            assert all(math.isclose(s, e, rel_tol=1e-9) for (_, s), (_, e) in zip(hits, expected)), k
            cut = expected[k - 1][1]
            assert {i for i, s in hits if s > cut * (1 + 1e-9)} == {i for i, s in expected if s > cut * (1 + 1e-9)}, k


# Per kind: insert the texts (%(g)s, %(t)s: a text[]) as documents of one group, in one statement;
# the exact top k and its unpruned reference (documents in view now, scored per lexeme).
KINDS = {
    "episodes": ("INSERT INTO pgmemory.episodes (id, group_id, kind, content, valid_at)"
                 " SELECT gen_random_uuid(), %(g)s, 'text', t, now() FROM unnest(%(t)s::text[]) AS t",
                 "SELECT id, score FROM pgmemory_internal.episode_text_hits(ARRAY[%s], %s, %s, NULL, NULL)",
                 EPISODE_REFERENCE.replace(" AND ep.valid_at <= '2024-06-01'", "")),
    "entities": ("INSERT INTO pgmemory.entities (id, group_id, name)"
                 " SELECT gen_random_uuid(), %(g)s, t FROM unnest(%(t)s::text[]) AS t",
                 ENTITY_HITS, ENTITY_REFERENCE),
    "facts": ("INSERT INTO pgmemory.facts (id, lineage, group_id, source_id, target_id, relation, fact, valid)"
              " SELECT f, f, %(g)s, (SELECT id FROM pgmemory.entities WHERE group_id = %(g)s AND name = 'A'),"
              "        (SELECT id FROM pgmemory.entities WHERE group_id = %(g)s AND name = 'B'), 'KNOWS', t,"
              "        tstzrange('2020-01-01', NULL)"
              "   FROM (SELECT gen_random_uuid() AS f, t FROM unnest(%(t)s::text[]) AS t) x",
              FACT_HITS, FACT_REFERENCE),
}
# 5,000 other documents, so that "roger" (17 documents) is nearly as rare as "pharmacist" (12):
# a document saying "roger" twice outscores one saying "pharmacist" once, one saying it once
# does not. The documents saying it twice are listed (term_stats.repeated) unless there are more
# than the cap (repeats=50), and then "roger" is read whole as before.
def roger_texts(repeats: int) -> list[str]:
    return ([f"filler number {i}" for i in range(5_000)] + [f"pharmacist {i}" for i in range(10)]
            + ["roger pharmacist", "roger roger pharmacist"] + [f"roger {i}" for i in range(12)]
            + [f"roger roger {i}" for i in range(repeats)])


def test_a_common_word_said_twice_by_few_documents_is_not_read_whole(empty_dsn):
    """The top 10 of "Roger the pharmacist" by the steps reads pharmacist's 12 documents and the 4
    listed as saying "roger" twice, not roger's 17 documents; by default, with so few documents,
    the one pass reads the 27 holding either word once (a database of its own: the plans of the shared one depend on
    the other tests' groups)."""
    from pgmemory.storage.setup import init_database

    insert, hits_sql, reference = KINDS["episodes"]
    fetched = ("SELECT idx_tup_fetch FROM pg_stat_xact_user_tables WHERE schemaname = 'pgmemory'"
               " AND relname = 'episodes'")
    with psycopg.connect(empty_dsn) as conn:
        init_database(conn, 384)
        conn.execute(insert, {"g": "g", "t": roger_texts(3)})
        conn.commit()
        conn.execute("ANALYZE pgmemory.episodes")
        conn.commit()
        read = {}
        for path in ("steps", "default"):
            if path == "steps":
                conn.execute("SET pgmemory.text_probe_rows = 0")
            else:
                conn.execute("RESET pgmemory.text_probe_rows")
            before = conn.execute(fetched).fetchone()[0]
            hits = conn.execute(hits_sql, ("g", "Roger the pharmacist", 10)).fetchall()
            read[path] = conn.execute(fetched).fetchone()[0] - before
            expected = conn.execute(reference, {"g": "g", "q": "Roger the pharmacist"}).fetchall()
            assert [i for i, _ in hits] == [i for i, _ in expected[:10]], path
    assert 12 + 4 <= read["steps"] < 12 + 17
    # By default so few documents are cheaper scored in one pass than probed: each of the 27
    # holding either word (two hold both) is read once.
    assert read["default"] == 12 + 17 - 2


@pytest.mark.parametrize("kind", ["episodes", "entities", "facts"])
def test_top_k_reads_the_documents_that_say_a_common_word_twice_by_key(db_dsn, group, kind):
    """A word whose documents mostly say it once cannot beat the k-th score of a rarer word's
    documents, but the few that say it twice can: those are read by key, not the word's whole
    posting list, and the top k stays exact (for every k, with the list capped, after one of
    the listed documents is deleted or, for a fact, closed)."""
    insert, hits_sql, reference = KINDS[kind]
    with psycopg.connect(db_dsn, options=PATHS["steps"]) as conn:
        if kind == "facts":
            conn.execute("INSERT INTO pgmemory.entities (id, group_id, name) VALUES (gen_random_uuid(), %(g)s, 'A'),"
                         " (gen_random_uuid(), %(g)s, 'B')", {"g": group})
        conn.execute(insert, {"g": group, "t": roger_texts(3)})
        conn.commit()
        conn.execute(f"ANALYZE pgmemory.{kind}")  # as autovacuum would: plans for 5,000 more rows
        conn.commit()
        listed = conn.execute("SELECT cardinality(repeated) FROM pgmemory.term_stats WHERE group_id = %s"
                              " AND kind = %s AND term = 'roger'", (group, kind)).fetchone()[0]
        assert listed == 4  # "roger roger pharmacist" and the three "roger roger i"
        query = "Roger the pharmacist"
        expected = conn.execute(reference, {"g": group, "q": query}).fetchall()
        text_of = (dict(conn.execute(f"SELECT {'version_id, fact' if kind == 'facts' else 'id, ' + ('name' if kind == 'entities' else 'content')}"
                                     f" FROM pgmemory.{kind} WHERE group_id = %s", (group,)).fetchall()))
        top10 = [text_of[i] for i, _ in expected[:10]]
        assert top10[:2] == ["roger roger pharmacist", "roger pharmacist"] and "roger roger 0" in top10
        hits = conn.execute(hits_sql, (group, query, 10)).fetchall()
        assert [i for i, _ in hits] == [i for i, _ in expected[:10]]
        for k in range(1, 31):
            hits = conn.execute(hits_sql, (group, query, k)).fetchall()
            assert len(hits) == min(k, len(expected)), k
            assert all(math.isclose(s, e, rel_tol=1e-9) for (_, s), (_, e) in zip(hits, expected)), k
            cut = expected[k - 1][1] if len(expected) >= k else -1
            assert {i for i, s in hits if s > cut * (1 + 1e-9)} == {i for i, s in expected if s > cut * (1 + 1e-9)}, k
        # A listed document gone (or a fact closed) stays listed: harmless, it is not found.
        gone = next(i for i, t in text_of.items() if t == "roger roger 0")
        if kind == "facts":
            conn.execute("UPDATE pgmemory.facts SET recorded = tstzrange(lower(recorded), now())"
                         " WHERE group_id = %s AND version_id = %s", (group, gone))
        else:
            conn.execute(f"DELETE FROM pgmemory.{kind} WHERE group_id = %s AND id = %s", (group, gone))
        assert conn.execute("SELECT cardinality(repeated) FROM pgmemory.term_stats WHERE group_id = %s"
                            " AND kind = %s AND term = 'roger'", (group, kind)).fetchone()[0] == 4
        expected = conn.execute(reference, {"g": group, "q": query}).fetchall()
        hits = conn.execute(hits_sql, (group, query, 10)).fetchall()
        assert [i for i, _ in hits] == [i for i, _ in expected[:10]] and gone not in {i for i, _ in hits}
        conn.rollback()
        if kind != "facts":  # more than the cap say it twice: unknown, the word is read whole, exact
            capped = f"{group}-capped"
            conn.execute(insert, {"g": capped, "t": roger_texts(50)})
            assert conn.execute("SELECT repeated IS NULL FROM pgmemory.term_stats WHERE group_id = %s"
                                " AND kind = %s AND term = 'roger'", (capped, kind)).fetchone()[0]
            expected = conn.execute(reference, {"g": capped, "q": query}).fetchall()
            for k in (1, 5, 10, 30):
                hits = conn.execute(hits_sql, (capped, query, k)).fetchall()
                assert [s for _, s in hits] == pytest.approx([e for _, e in expected[:k]], rel=1e-9), k


# Per lexeme of the group's episodes: the keys the statistics list as saying it twice or more.
REPEATED = "SELECT term, repeated FROM pgmemory.term_stats WHERE group_id = %s AND kind = 'episodes'"


def test_documents_saying_a_word_twice_are_listed_as_a_superset(db_dsn, group):
    """term_stats.repeated lists the episodes that say a lexeme twice: added by inserts and by
    rewrites (once each), kept after the episode is gone or says it once (a superset, like
    max_tf); rebuild_text_stats gives the exact lists."""
    with psycopg.connect(db_dsn) as conn:
        add_texts(conn, group, ["sailing in Oslo", "sailing sailing sailing", "a boat"])
        id_of = {t: str(i) for i, t in conn.execute("SELECT id, content FROM pgmemory.episodes WHERE group_id = %s",
                                                    (group,)).fetchall()}
        kept = dict(conn.execute(REPEATED, (group,)).fetchall())
        assert kept == {"sail": [id_of["sailing sailing sailing"]], "oslo": [], "boat": []}
        for text in ("a boat, a boat", "boats and boats and boats"):
            conn.execute("UPDATE pgmemory.episodes SET content = %s WHERE group_id = %s AND id = %s",
                         (text, group, id_of["a boat"]))
        conn.execute("DELETE FROM pgmemory.episodes WHERE group_id = %s AND id = %s",
                     (group, id_of["sailing sailing sailing"]))
        kept = dict(conn.execute(REPEATED, (group,)).fetchall())
        assert kept == {"sail": [id_of["sailing sailing sailing"]], "oslo": [], "boat": [id_of["a boat"]]}
        conn.execute("SELECT pgmemory.rebuild_text_stats()")
        rebuilt = dict(conn.execute(REPEATED, (group,)).fetchall())
        conn.rollback()
    assert rebuilt == {"sail": [], "oslo": [], "boat": [id_of["a boat"]]}


def test_upgrade_lists_the_documents_saying_a_word_twice(empty_dsn):
    """0460: statistics kept before the lists existed (NULL: unknown, the word read whole) are
    rebuilt by init, so the lists are known right after the upgrade."""
    from pgmemory.storage import migrate
    from pgmemory.storage.setup import init_database

    with psycopg.connect(empty_dsn) as conn:
        conn.execute("CREATE EXTENSION vector")
        migrate.apply_migrations(conn, [m for m in migrate.load_migrations() if m.version < 460])
        conn.execute("INSERT INTO pgmemory.episodes (id, group_id, kind, content, valid_at) VALUES"
                     " ('00000000-0000-0000-0000-00000000000a', 'g', 'text', 'sailing sailing', now()),"
                     " ('00000000-0000-0000-0000-00000000000b', 'g', 'text', 'sailing boat', now())")
        # what an init of that version left: statistics kept, none stale
        conn.execute("INSERT INTO pgmemory.term_stats (group_id, kind, term, docs, max_tf)"
                     " VALUES ('g', 'episodes', 'sail', 2, 2), ('g', 'episodes', 'boat', 1, 1)")
        conn.execute("DELETE FROM pgmemory.settings WHERE key = 'text_stats_stale'")
        conn.commit()
        report = init_database(conn, 384)
        conn.commit()
        assert "0460_term_repeated.sql" in report.migrations_applied
        assert dict(conn.execute(REPEATED, ("g",)).fetchall()) == {
            "sail": ["00000000-0000-0000-0000-00000000000a"], "boat": []}


# Per kind of the group: the kept lower bound of its documents' length (distinct lexemes, empty
# documents aside) and the true shortest.
SHORTEST = """
    SELECT s.min_len, (SELECT min(length(e.tsv)) FROM pgmemory.episodes e
                        WHERE e.group_id = s.group_id AND length(e.tsv) > 0)
      FROM pgmemory.text_stats s WHERE s.group_id = %s AND s.kind = 'episodes'"""


def test_shortest_length_bound_is_never_above_the_true_one(db_dsn, group):
    """text_stats.min_len (what the exact top k bounds a share by: a document's length is at least
    that) is set by inserts, lowered by a rewrite to a shorter text, kept after the shortest document
    is gone; rebuild_text_stats gives the exact value; an empty document does not count."""
    with psycopg.connect(db_dsn) as conn:
        add_texts(conn, group, ["sailing in Oslo with Ann", "a boat trip to Bergen", "the"])
        assert conn.execute(SHORTEST, (group,)).fetchone() == (3, 3)
        conn.execute("UPDATE pgmemory.episodes SET content = 'a boat' WHERE group_id = %s"
                     " AND content = 'a boat trip to Bergen'", (group,))
        assert conn.execute(SHORTEST, (group,)).fetchone() == (1, 1)
        conn.execute("DELETE FROM pgmemory.episodes WHERE group_id = %s AND content = 'a boat'", (group,))
        assert conn.execute(SHORTEST, (group,)).fetchone() == (1, 3)
        conn.execute("SELECT pgmemory.rebuild_text_stats()")
        assert conn.execute(SHORTEST, (group,)).fetchone() == (3, 3)
        conn.rollback()


def test_a_word_whose_documents_cannot_reach_the_kth_score_at_the_shortest_length_is_not_read(db_dsn, group):
    """"alpha" (30 documents) and "beta" (31) are nearly as rare; every document has two lexemes or
    more. The top 2 of "alpha beta" is the one document with both and an alpha document; a beta
    document scores idf(beta) x the BM25 factor of its length, below that k-th score at any length of
    two or more, though not at length 0: the statistics' shortest length spares reading beta's
    documents (2 probes, not 3), and every top k is exact."""
    texts = ([f"filler number {i}" for i in range(1_000)] + [f"alpha a{i}" for i in range(29)]
             + [f"beta b{i}" for i in range(30)] + ["alpha beta"])
    insert, hits_sql, reference = KINDS["episodes"]
    with psycopg.connect(db_dsn, options=PATHS["steps"]) as conn:
        conn.execute(insert, {"g": group, "t": texts})
        conn.commit()
        expected = conn.execute(reference, {"g": group, "q": "alpha beta"}).fetchall()
        for k in range(1, 41):
            hits = conn.execute(hits_sql, (group, "alpha beta", k)).fetchall()
            assert len(hits) == k
            assert all(math.isclose(s, e, rel_tol=1e-9) for (_, s), (_, e) in zip(hits, expected)), k
            cut = expected[k - 1][1]
            assert {i for i, s in hits if s > cut * (1 + 1e-9)} == {i for i, s in expected if s > cut * (1 + 1e-9)}, k
        with conn.transaction(force_rollback=True):
            conn.execute("SET LOCAL track_functions = 'pl'")
            calls = ("SELECT coalesce(sum(calls), 0) FROM pg_stat_xact_user_functions"
                     " WHERE schemaname = 'pgmemory_internal' AND funcname = 'text_scores'")
            before = conn.execute(calls).fetchone()[0]
            conn.execute(hits_sql, (group, "alpha beta", 2)).fetchall()
            probes = conn.execute(calls).fetchone()[0] - before
    assert probes == 2
