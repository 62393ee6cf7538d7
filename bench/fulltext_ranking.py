"""Full-text ranking quality on LoCoMo: tsvector ts_rank_cd vs pg_textsearch BM25 vs Okapi BM25
computed from Postgres' own tsvector lexemes (what sql/fulltext/tsvector.sql does).

Each conversation's turns are stored as pgmemory episodes ("speaker: text", one group per
conversation, no extraction: full text over the raw record). Every question with evidence is
a query; the metric is recall@k of its evidence turns among the top-k episodes (k = 5, 10),
averaged over questions. Okapi BM25's (k1, b) are chosen by cross-validation between the
conversations: pick on one, report on the other (both folds printed).

    PGMEMORY_DATA_DIR=/tmp/storage-bench-pgdata python -m bench.fulltext_ranking \\
        /work/shared/data/locomo/locomo-dev.json

The pg_textsearch index is built once after the load, with no concurrent writer (its 1.0.0
hang needs concurrent inserts).
"""
from __future__ import annotations

import argparse
import math
import uuid
from collections import Counter
from itertools import product
from pathlib import Path

import psycopg

from pgmemory.eval.baselines import BM25Index
from pgmemory.eval.readers import read_locomo
from pgmemory.storage.connect import resolve_dsn
from pgmemory.storage.setup import init_database
from tests.servers import create_database, drop_database

KS = (5, 10)
K1S = (0.1, 0.2, 0.3, 0.4, 0.6, 0.9, 1.2, 1.5, 2.0)
BS = (0.1, 0.2, 0.3, 0.4, 0.6, 0.75, 0.9, 1.0)


def load(conn: psycopg.Connection, conversations) -> None:
    for conv in conversations:
        with conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO pgmemory.episodes (id, group_id, kind, content, actor, valid_at, metadata)"
                " VALUES (%s, %s, 'message', %s, %s, %s, jsonb_build_object('turn', %s::text))",
                [(uuid.uuid4(), conv.conversation_id, t.text, t.speaker, t.time, t.turn_id) for t in conv.turns])
    conn.commit()


def questions(conv):
    return [q for q in conv.questions if q.evidence and not q.adversarial]


def recall(ranked: list[str], evidence: list[str], k: int) -> float:
    return len(set(ranked[:k]) & set(evidence)) / len(set(evidence))


def sql_ranking(conn, sql: str, group: str, query: str) -> list[str]:
    return [r[0] for r in conn.execute(sql, {"g": group, "q": query}).fetchall()]


TS_RANK = ("SELECT ep.metadata->>'turn' FROM pgmemory.episodes ep, (SELECT pgmemory_internal.or_tsquery(%(q)s) tq) q"
           " WHERE ep.group_id = %(g)s AND ep.tsv @@ q.tq ORDER BY ts_rank_cd(ep.tsv, q.tq) DESC, ep.id LIMIT 10")
SHIPPED = ("SELECT ep.metadata->>'turn' FROM pgmemory_internal.episode_text_hits(ARRAY[%(g)s], %(q)s, 10, NULL, NULL) h"
           " JOIN pgmemory.episodes ep ON ep.id = h.id ORDER BY h.score DESC, h.id")
PG_TEXTSEARCH = ("SELECT ep.metadata->>'turn' FROM pgmemory.episodes ep WHERE ep.group_id = %(g)s"
                 " ORDER BY ep.search_text <@> to_bm25query(%(q)s, 'pgmemory.bench_bm25') LIMIT 10")


class LexemeBM25:
    """Okapi BM25 over the lexemes (with their position counts) of the stored tsvectors."""

    def __init__(self, conn, group: str) -> None:
        rows = conn.execute(
            "SELECT ep.metadata->>'turn', u.lexeme, coalesce(array_length(u.positions, 1), 1)"
            " FROM pgmemory.episodes ep, unnest(ep.tsv) u WHERE ep.group_id = %s", (group,)).fetchall()
        self.tf: dict[str, Counter] = {}
        for turn, lexeme, n in rows:
            self.tf.setdefault(turn, Counter())[lexeme] = n
        for (turn,) in conn.execute("SELECT metadata->>'turn' FROM pgmemory.episodes WHERE group_id = %s",
                                    (group,)).fetchall():
            self.tf.setdefault(turn, Counter())
        self.len = {t: sum(c.values()) for t, c in self.tf.items()}
        self.avgdl = sum(self.len.values()) / len(self.len)
        self.df = Counter(lex for c in self.tf.values() for lex in c)
        self.n = len(self.tf)
        self.conn = conn

    def lexemes(self, query: str) -> list[str]:
        return self.conn.execute("SELECT tsvector_to_array(to_tsvector('english', %s))", (query,)).fetchone()[0]

    def rank(self, terms: list[str], k1: float, b: float) -> list[str]:
        scores = {}
        for turn, tf in self.tf.items():
            s = 0.0
            for t in terms:
                f = tf.get(t)
                if f:
                    idf = math.log(1 + (self.n - self.df[t] + 0.5) / (self.df[t] + 0.5))
                    s += idf * f * (k1 + 1) / (f + k1 * (1 - b + b * self.len[turn] / self.avgdl))
            if s > 0:
                scores[turn] = s
        return sorted(scores, key=lambda t: (-scores[t], t))[:10]


def mean(values) -> float:
    values = list(values)
    return sum(values) / len(values) if values else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", type=Path)
    args = parser.parse_args()
    conversations = read_locomo(args.path)
    admin = resolve_dsn()
    dsn = create_database(admin)
    try:
        with psycopg.connect(dsn) as conn:
            init_database(conn, 384)
            load(conn, conversations)
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_textsearch")
            conn.execute("CREATE INDEX bench_bm25 ON pgmemory.episodes USING bm25 (search_text)"
                         " WITH (text_config = 'english')")
            conn.commit()
            per_conv = {}
            for conv in conversations:
                qs = questions(conv)
                g = conv.conversation_id
                lex = LexemeBM25(conn, g)
                py = BM25Index(conv.turns)
                terms = [lex.lexemes(q.question) for q in qs]
                systems = {
                    "ts_rank_cd": [sql_ranking(conn, TS_RANK, g, q.question) for q in qs],
                    "pg_textsearch": [sql_ranking(conn, PG_TEXTSEARCH, g, q.question) for q in qs],
                    "shipped (tsvector BM25)": [sql_ranking(conn, SHIPPED, g, q.question) for q in qs],
                    "python_bm25(1.2,0.75)": [py.search(q.question, 10) for q in qs],
                }
                grid = {(k1, b): [lex.rank(t, k1, b) for t in terms] for k1, b in product(K1S, BS)}
                per_conv[g] = (qs, systems, grid)
        scores = {}
        for g, (qs, systems, grid) in per_conv.items():
            def score(rankings):
                return {k: mean(recall(r, q.evidence, k) for r, q in zip(rankings, qs)) for k in KS}
            scores[g] = ({name: score(r) for name, r in systems.items()},
                         {p: score(r) for p, r in grid.items()})
            print(f"\n{g}: {len(qs)} questions with evidence, {len(grid[(1.2, 0.75)])} ranked")
            for name, s in scores[g][0].items():
                print(f"  {name:<24} R@5 {s[5]:.3f}  R@10 {s[10]:.3f}")
            for p in ((1.2, 0.75), (0.3, 0.1)):
                s = scores[g][1][p]
                print(f"  {f'tsvector_bm25{p}':<24} R@5 {s[5]:.3f}  R@10 {s[10]:.3f}")
        groups = list(scores)
        print("\ncross-validation of (k1, b) for tsvector BM25 (chosen by R@10 on one, reported on the other):")
        for train, test in ((groups[0], groups[1]), (groups[1], groups[0])):
            best = max(scores[train][1], key=lambda p: (scores[train][1][p][10], scores[train][1][p][5]))
            s_tr, s_te = scores[train][1][best], scores[test][1][best]
            base = scores[test][0]
            print(f"  fold train={train} test={test}: k1={best[0]} b={best[1]} train R@10 {s_tr[10]:.3f}; "
                  f"test R@5 {s_te[5]:.3f} R@10 {s_te[10]:.3f} (ts_rank_cd {base['ts_rank_cd'][5]:.3f}/"
                  f"{base['ts_rank_cd'][10]:.3f}, pg_textsearch {base['pg_textsearch'][5]:.3f}/"
                  f"{base['pg_textsearch'][10]:.3f})")
        pooled = {p: mean(scores[g][1][p][10] for g in groups) for p in scores[groups[0]][1]}
        best = max(pooled, key=pooled.get)
        print(f"  final constants (best mean R@10 over both): k1={best[0]} b={best[1]} ({pooled[best]:.3f}); "
              f"shipped k1=0.3 b=0.1: {pooled[(0.3, 0.1)]:.3f}; classic 1.2/0.75: {pooled[(1.2, 0.75)]:.3f}")
    finally:
        drop_database(admin, dsn)


if __name__ == "__main__":
    main()
