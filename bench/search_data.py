"""Synthetic bi-temporal graphs for the search-latency benchmark, bulk-loaded with binary COPY.

Per group: people, companies, cities, hobbies, schools and clubs (names from bench/search_vocab.py),
facts "<Person> works for <Company>" etc. with valid and recorded ranges (a few percent corrected:
a closed recorded range plus a newer version; some with ended valid ranges; some with an unknown
start), episodes of four facts each plus one per correction, provenance, mentions, communities,
and 384-d unit embeddings clustered around topic centroids.
"""
from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Self

import numpy as np
import psycopg
from pgvector.psycopg import register_vector
from psycopg.types.range import Range

from bench import search_vocab as V

DIM = 384
TOPICS = 64
NOISE = 0.05  # per-dimension sd: cosine to the topic centroid is about 0.7
EPOCH_FROM = datetime(2015, 1, 1, tzinfo=UTC).timestamp()
EPOCH_TO = datetime(2025, 6, 1, tzinfo=UTC).timestamp()
DAY = 86400.0
CORRECTED = 0.03
ENDED = 0.06
UNKNOWN_START = 0.02
FACTS_PER_EPISODE = 4
CHUNK = 20000

COLUMNS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "entities": (("id", "group_id", "name", "labels", "summary", "created_at", "updated_at"),
                 ("uuid", "text", "text", "text[]", "text", "timestamptz", "timestamptz")),
    "entity_name_vectors": (("group_id", "entity_id", "name_embedding"), ("text", "uuid", "vector")),
    "episodes": (("id", "group_id", "kind", "content", "actor", "source_description", "valid_at",
                  "recorded_at", "status", "embedding"),
                 ("uuid", "text", "text", "text", "text", "text", "timestamptz", "timestamptz", "text",
                  "vector")),
    "facts": (("id", "group_id", "source_id", "target_id", "relation", "fact", "embedding", "valid",
               "recorded", "lineage"),
              ("uuid", "text", "uuid", "uuid", "text", "text", "vector", "tstzrange", "tstzrange", "uuid")),
    "fact_episodes": (("fact_id", "episode_id", "group_id", "created_at"),
                      ("uuid", "uuid", "text", "timestamptz")),
    "episode_mentions": (("episode_id", "entity_id", "group_id"), ("uuid", "uuid", "text")),
    "communities": (("id", "group_id", "name", "summary", "name_embedding", "created_at", "updated_at"),
                    ("uuid", "text", "text", "text", "vector", "timestamptz", "timestamptz")),
}
# Load order when triggers fire (vertices before the edges that join them).
TABLE_ORDER = ("entities", "entity_name_vectors", "episodes", "facts", "fact_episodes", "episode_mentions", "communities")


@dataclass
class GroupVocab:
    """The entities of one group, by kind: names, ids and topics (queries and BFS seeds use them)."""

    group_id: str
    names: dict[str, list[str]] = field(default_factory=dict)
    ids: dict[str, list[uuid.UUID]] = field(default_factory=dict)
    topics: dict[str, np.ndarray] = field(default_factory=dict)


def centroids(seed: int = 7) -> np.ndarray:
    """TOPICS unit vectors in DIM dimensions."""
    c = np.random.default_rng(seed).standard_normal((TOPICS, DIM)).astype(np.float32)
    return c / np.linalg.norm(c, axis=1, keepdims=True)


def near(rng: np.random.Generator, cents: np.ndarray, topics: np.ndarray, noise: float = NOISE) -> np.ndarray:
    """Unit vectors scattered around the given topics' centroids."""
    v = cents[topics] + rng.standard_normal((len(topics), DIM)).astype(np.float32) * noise
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def _ts(epoch: float) -> datetime:
    return datetime.fromtimestamp(float(epoch), tz=UTC)


def _uuids(rng: np.random.Generator, n: int) -> list[uuid.UUID]:
    raw = rng.bytes(16 * n)
    return [uuid.UUID(bytes=raw[i * 16:(i + 1) * 16], version=4) for i in range(n)]


def pool_sizes(n_rows: int) -> dict[str, int]:
    """How many entities of each kind a group with n_rows fact versions has."""
    return {"person": max(8, n_rows // 8), "company": min(900, max(3, n_rows // 40)),
            "city": min(len(V.CITIES), max(5, n_rows // 60)), "hobby": min(len(V.HOBBIES), max(5, n_rows // 50)),
            "school": min(len(V.SCHOOLS), max(2, n_rows // 200)), "club": min(len(V.CLUBS), max(2, n_rows // 150))}


def _person_name(i: int) -> str:
    nf, nl = len(V.FIRST), len(V.LAST)
    base = f"{V.FIRST[i % nf]} {V.LAST[(i // nf) % nl]}"
    extra = i // (nf * nl)
    if not extra:
        return base
    first, last = base.split(" ", 1)
    return f"{first} {chr(64 + extra % 26 or 26)}. {last}" + (f" {extra // 26 + 1}" if extra >= 26 else "")


def _names(kind: str, n: int, rng: np.random.Generator) -> list[str]:
    if kind == "person":
        start = int(rng.integers(0, len(V.FIRST) * len(V.LAST)))
        return [_person_name(start + i) for i in range(n)]
    if kind == "company":
        every = [f"{h} {t}" for h in V.COMPANY_HEAD for t in V.COMPANY_TAIL]
        pick = rng.permutation(len(every))[:n]
        return [every[i] for i in pick]
    source = {"city": V.CITIES, "hobby": V.HOBBIES, "school": V.SCHOOLS, "club": V.CLUBS}[kind]
    return [source[i] for i in rng.permutation(len(source))[:n]]


class Generator:
    """Yields (table, row) for one group at a time; rows are tuples in COLUMNS order."""

    def __init__(self, seed: int = 1) -> None:
        self.rng = np.random.default_rng(seed)
        self.cents = centroids()
        self.now = datetime.now(UTC).timestamp()
        names = list(V.RELATIONS)
        weights = np.array([V.RELATIONS[r][2] for r in names])
        self.relations = names
        self.rel_p = weights / weights.sum()
        self.counts: dict[str, int] = {t: 0 for t in COLUMNS}

    def group(self, group_id: str, n_rows: int) -> tuple[GroupVocab, Iterator[tuple[str, tuple]]]:
        """The vocabulary of a new group and an iterator over all its rows (entities first)."""
        vocab = GroupVocab(group_id)
        for kind, n in pool_sizes(n_rows).items():
            vocab.names[kind] = _names(kind, n, self.rng)
            vocab.ids[kind] = _uuids(self.rng, n)
            vocab.topics[kind] = self.rng.integers(0, TOPICS, n)
        return vocab, self._rows(vocab, n_rows)

    def _rows(self, vocab: GroupVocab, n_rows: int) -> Iterator[tuple[str, tuple]]:
        yield from self._entities(vocab)
        n_ids = max(1, round(n_rows / (1 + CORRECTED)))
        n_corr = n_rows - n_ids
        corrected = np.zeros(n_ids, dtype=bool)
        corrected[self.rng.choice(n_ids, size=min(n_corr, n_ids), replace=False)] = True
        for start in range(0, n_ids, CHUNK):
            yield from self._facts(vocab, corrected[start:start + CHUNK])
        yield from self._communities(vocab, n_rows)

    def _entities(self, vocab: GroupVocab) -> Iterator[tuple[str, tuple]]:
        rng = self.rng
        for kind, names in vocab.names.items():
            embs = near(rng, self.cents, vocab.topics[kind])
            created = rng.uniform(EPOCH_FROM, EPOCH_TO, len(names))
            label = V.KIND_LABEL[kind]
            for i, name in enumerate(names):
                if kind == "person":
                    summary = (f"{name} is a {V.ROLES[int(rng.integers(len(V.ROLES)))]} "
                               f"from {V.CITIES[int(rng.integers(len(V.CITIES)))]}")
                else:
                    summary = f"{name}, a {label.lower()} mentioned in conversations"
                ts = _ts(created[i])
                self.counts["entities"] += 1
                yield "entities", (vocab.ids[kind][i], vocab.group_id, name, ["Entity", label], summary, ts, ts)
                self.counts["entity_name_vectors"] += 1
                yield "entity_name_vectors", (vocab.group_id, vocab.ids[kind][i], embs[i])

    def _sentence(self, rel: str, s: str, t: str) -> str:
        rng = self.rng
        templates = V.RELATIONS[rel][3]
        return templates[int(rng.integers(len(templates)))].format(
            s=s, t=t, role=V.ROLES[int(rng.integers(len(V.ROLES)))], year=int(rng.integers(2005, 2025)),
            month=V.MONTHS[int(rng.integers(12))], place=V.PLACES[int(rng.integers(len(V.PLACES)))],
            field=V.FIELDS[int(rng.integers(len(V.FIELDS)))])

    def _pick(self, vocab: GroupVocab, kind: str, skewed: bool) -> int:
        n = len(vocab.names[kind])
        u = self.rng.random()
        return min(n - 1, int(n * u ** 1.6)) if skewed else int(u * n)

    def _edge(self, vocab: GroupVocab, rel: str) -> tuple[str, int, str, int]:
        src_kind, tgt_kind = V.RELATIONS[rel][0], V.RELATIONS[rel][1]
        s = self._pick(vocab, src_kind, src_kind == "person")
        t = self._pick(vocab, tgt_kind, True)
        if src_kind == tgt_kind and s == t:
            t = (t + 1) % len(vocab.names[tgt_kind])
        return src_kind, s, tgt_kind, t

    def _facts(self, vocab: GroupVocab, corrected: np.ndarray) -> Iterator[tuple[str, tuple]]:
        rng, g = self.rng, vocab.group_id
        m = len(corrected)
        rels = rng.choice(len(self.relations), size=m, p=self.rel_p)
        fact_ids = _uuids(rng, m)
        v0 = rng.uniform(EPOCH_FROM, EPOCH_TO, m)
        unknown = rng.random(m) < UNKNOWN_START
        ended = rng.random(m) < ENDED
        v1 = np.minimum(v0 + rng.uniform(30, 900, m) * DAY, self.now - DAY)
        r0 = np.minimum(v0 + rng.uniform(0, 30, m) * DAY, self.now - 3 * DAY)
        r1 = np.minimum(r0 + rng.uniform(1, 200, m) * DAY, self.now - 2 * DAY)
        edges = [self._edge(vocab, self.relations[k]) for k in rels]
        topics = np.array([vocab.topics[tk][t] if rng.random() < 0.7 else vocab.topics[sk][s]
                           for sk, s, tk, t in edges])
        embs = near(rng, self.cents, topics)
        n_ep = (m + FACTS_PER_EPISODE - 1) // FACTS_PER_EPISODE
        ep_ids = _uuids(rng, n_ep)
        ep_text: list[list[str]] = [[] for _ in range(n_ep)]
        ep_emb = np.zeros((n_ep, DIM), dtype=np.float32)
        ep_valid = np.full(n_ep, EPOCH_FROM)
        ep_rec = np.full(n_ep, EPOCH_FROM)
        ep_entities: list[set[uuid.UUID]] = [set() for _ in range(n_ep)]
        for j in range(m):
            rel = self.relations[rels[j]]
            sk, s, tk, t = edges[j]
            sid, tid = vocab.ids[sk][s], vocab.ids[tk][t]
            text = self._sentence(rel, vocab.names[sk][s], vocab.names[tk][t])
            lower = None if unknown[j] else _ts(v0[j])
            upper = _ts(v1[j]) if ended[j] else None
            valid = Range(lower, upper, "[)")
            e = j // FACTS_PER_EPISODE
            ep_text[e].append(text)
            ep_emb[e] += embs[j]
            ep_valid[e] = max(ep_valid[e], v0[j])
            ep_rec[e] = max(ep_rec[e], r0[j])
            ep_entities[e].update((sid, tid))
            if corrected[j]:
                yield "facts", (fact_ids[j], g, sid, tid, rel, text, embs[j], valid,
                                Range(_ts(r0[j]), _ts(r1[j]), "[)"), fact_ids[j])
                sk2, s2, tk2, t2 = self._edge(vocab, rel)
                sid2, tid2 = vocab.ids[sk2][s2], vocab.ids[tk2][t2]
                text2 = self._sentence(rel, vocab.names[sk2][s2], vocab.names[tk2][t2])
                emb2 = near(rng, self.cents, np.array([vocab.topics[tk2][t2]]))[0]
                yield "facts", (fact_ids[j], g, sid2, tid2, rel, text2, emb2, valid,
                                Range(_ts(r1[j]), None, "[)"), fact_ids[j])
                corr_ep = _uuids(rng, 1)[0]
                when = _ts(r1[j])
                yield "episodes", (corr_ep, g, "message", f"Correction: {text2}.", "Maya", "bench correction",
                                   when, when, "done", emb2)
                yield "fact_episodes", (fact_ids[j], corr_ep, g, when)
                for ent in {sid2, tid2}:
                    yield "episode_mentions", (corr_ep, ent, g)
                self.counts["facts"] += 2
                self.counts["episodes"] += 1
                self.counts["fact_episodes"] += 1
                self.counts["episode_mentions"] += len({sid2, tid2})
            else:
                yield "facts", (fact_ids[j], g, sid, tid, rel, text, embs[j], valid,
                                Range(_ts(r0[j]), None, "[)"), fact_ids[j])
                self.counts["facts"] += 1
        norms = np.linalg.norm(ep_emb, axis=1, keepdims=True)
        ep_emb = ep_emb / np.where(norms == 0, 1, norms)
        for e in range(n_ep):
            actor = V.SPEAKERS[int(rng.integers(len(V.SPEAKERS)))]
            content = f"{actor}: " + ". ".join(ep_text[e]) + "."
            yield "episodes", (ep_ids[e], g, "message", content, actor, "bench chat", _ts(ep_valid[e]),
                               _ts(ep_rec[e]), "done", ep_emb[e])
            self.counts["episodes"] += 1
            for ent in ep_entities[e]:
                yield "episode_mentions", (ep_ids[e], ent, g)
                self.counts["episode_mentions"] += 1
        for j in range(m):
            e = j // FACTS_PER_EPISODE
            yield "fact_episodes", (fact_ids[j], ep_ids[e], g, _ts(ep_rec[e]))
            self.counts["fact_episodes"] += 1

    def _communities(self, vocab: GroupVocab, n_rows: int) -> Iterator[tuple[str, tuple]]:
        rng = self.rng
        n = max(1, min(2 * TOPICS, n_rows // 500))
        topics = rng.integers(0, TOPICS, n)
        embs = near(rng, self.cents, topics, noise=NOISE / 2)
        for i, cid in enumerate(_uuids(rng, n)):
            hobby = vocab.names["hobby"][int(rng.integers(len(vocab.names["hobby"])))]
            city = vocab.names["city"][int(rng.integers(len(vocab.names["city"])))]
            name = f"{city} {hobby} crowd"
            summary = f"People in {city} who meet for {hobby}, and the companies and clubs around them."
            ts = _ts(rng.uniform(EPOCH_FROM, EPOCH_TO))
            self.counts["communities"] += 1
            yield "communities", (cid, vocab.group_id, name, summary, embs[i], ts, ts)


def _copy_sql(table: str) -> str:
    cols = ", ".join(COLUMNS[table][0])
    return f"COPY pgmemory.{table} ({cols}) FROM STDIN (FORMAT BINARY)"


class StreamingLoader:
    """One connection and one open binary COPY per table, rows written as generated.
    The load sessions run with session_replication_role = replica: no triggers (AGE mirror,
    entity versioning) and no FK checks fire; the generator keeps references valid."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.stack = contextlib.ExitStack()
        self.copies: dict[str, Any] = {}
        self.conns: list[psycopg.Connection] = []
        self.seconds: dict[str, float] = {t: 0.0 for t in COLUMNS}

    def __enter__(self) -> Self:
        for table in COLUMNS:
            conn = self.stack.enter_context(psycopg.connect(self.dsn))
            register_vector(conn)
            conn.execute("SET session_replication_role = replica")
            conn.execute("SET synchronous_commit = off")
            self.conns.append(conn)
            cur = self.stack.enter_context(conn.cursor())
            copy = self.stack.enter_context(cur.copy(_copy_sql(table)))
            copy.set_types(list(COLUMNS[table][1]))
            self.copies[table] = copy
        return self

    def write(self, table: str, row: tuple) -> None:
        """Send one row to its table's COPY."""
        self.copies[table].write_row(row)

    def __exit__(self, *exc: object) -> None:
        self.stack.close()


def load_triggered(conn: psycopg.Connection, rows: list[tuple[str, tuple]]) -> dict[str, float]:
    """COPY buffered rows table by table on one connection with every trigger firing; seconds per table."""
    register_vector(conn)
    out: dict[str, float] = {}
    for table in TABLE_ORDER:
        started = time.perf_counter()
        with conn.cursor() as cur, cur.copy(_copy_sql(table)) as copy:
            copy.set_types(list(COLUMNS[table][1]))
            for t, row in rows:
                if t == table:
                    copy.write_row(row)
        out[table] = round(time.perf_counter() - started, 2)
    conn.commit()
    return out


SECONDARY_INDEXES = """
SELECT c.relname, i.indexrelid::regclass::text, pg_get_indexdef(i.indexrelid), am.amname
  FROM pg_index i
  JOIN pg_class c ON c.oid = i.indrelid
  JOIN pg_namespace n ON n.oid = c.relnamespace
  JOIN pg_class ic ON ic.oid = i.indexrelid
  JOIN pg_am am ON am.oid = ic.relam
 WHERE n.nspname = 'pgmemory' AND c.relname = ANY (%s)
   AND NOT EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conindid = i.indexrelid)
"""
AM_ORDER = {"btree": 0, "gist": 1, "gin": 2, "bm25": 3, "hnsw": 4}


def drop_secondary_indexes(conn: psycopg.Connection) -> list[tuple[str, str, str, str]]:
    """Drop the non-constraint indexes of the loaded tables; return (table, name, definition, am)."""
    found = conn.execute(SECONDARY_INDEXES, (list(COLUMNS),)).fetchall()
    for _, name, _, _ in found:
        conn.execute(f"DROP INDEX {name}")
    conn.commit()
    return sorted(found, key=lambda r: (AM_ORDER.get(r[3], 9), r[0], r[1]))


def build_indexes(conn: psycopg.Connection, indexes: list[tuple[str, str, str, str]],
                  log: Any = print) -> list[dict[str, Any]]:
    """Re-create dropped indexes one by one (big maintenance_work_mem, parallel workers); time each."""
    conn.execute("SET maintenance_work_mem = '4GB'")
    conn.execute("SET max_parallel_maintenance_workers = 2")
    out = []
    for table, name, definition, am in indexes:
        started = time.perf_counter()
        conn.execute(definition)
        conn.commit()
        seconds = round(time.perf_counter() - started, 2)
        out.append({"table": table, "index": name, "method": am, "seconds": seconds})
        log(f"    index {name:<40} {am:<6} {seconds:8.2f} s")
    return out
