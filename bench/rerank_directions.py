"""Multi-hop directions of issue 13, cross-validated offline on one fetch of the candidate pools.

The dev conversations are ingested as `pgmemory eval` does (groups reused); every non-adversarial
question with evidence is sent once to the search SQL (`search_group`, the default recipe with
`candidates` 100 and the candidates' vectors; once more with `prf_weight` 0.25 for the PRF rows)
and the episodes' own vectors and speakers are read.
Each direction then reranks those pools in Python and is scored as `python -m
pgmemory.eval.crossval` scores a setting (R@k of the turns ranked as the harness ranks them; the
default recipe reproduces crossval's figures, within a question since the category members list
came: its rare-lexeme cut, 2 x `candidates` episodes, is taken on the pool of 100) with the value chosen by
leave-one-conversation-out (`pgmemory.eval.crossval.folds`). Nothing here changes the search.

    python -m bench.rerank_directions ../shared/data/locomo/locomo-dev.json

Directions (value `0` / the recipe's own value is the baseline):
- `pool`: candidates per method and list (the pool truncated to the first n of each list);
- `list_pool`: the same for list questions only (below), 30 for the others;
- `prf`, `list_prf`: lexical pseudo-relevance feedback (`prf_weight`, a second fetch of every pool
  with it on) for every question, or for list questions only;
- `rrf_k`, `cosine`, `facts`: the rank fusion's k and the cosine / fact-evidence list weights;
- `per_list_k c/t`: a k of its own for the cosine (c) and the full-text (t) list;
- `list_weights c/f`: for list questions only, cosine weight c and fact-evidence weight f;
- `list_speaker_weight`, `list_neighbour_weight`, `list_rrf_k`: that setting for list questions;
- `list_session_decay d/free`: for list questions ("What activities ...", "Which cities ...",
  "both", "in common", "how many times"), the n-th hit of one session (episodes within 30 min of
  each other) beyond `free` counts d^(n - free) of its score;
- `list_mmr l`: for list questions, the best 40 re-picked greedily by their fused score (scaled
  to the best) minus l x their largest cosine to the episodes already picked;
- `speaker_channel w`: one more list fused by RRF with weight w: the episodes spoken by the
  person the question names, nearest to the query vector first (30);
- `sentences`: the episodes ranked by their best sentence ("actor: sentence", split after . ! ?
  and before a photo's caption; `blended`: each sentence's vector blended with the turn before's
  own vector as episode vectors are), 30, either replacing the cosine list (`replace`; `sum`: ranked
  by stored cosine + best sentence) or added as one more list with RRF weight w (`add w`);
- `stripped_query a`: the cosine list from normalise(query vector + a x the vector of the query
  without its question words, "What activities does Melanie partake in?" -> "activities Melanie
  partake in"); `a` = -1 stands for the stripped query alone.
"""
from __future__ import annotations

import argparse
import asyncio
import copy
import json
import os
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from pgmemory.eval.crossval import folds, report_lines
from pgmemory.eval.harness import load_conversations
from pgmemory.eval.ingestion import episode_map, group_id, ingest_conversation
from pgmemory.eval.metrics import DEFAULT_KS, mean, recall_at_k
from pgmemory.eval.readers import Question
from pgmemory.eval.retrieval import rank_turns
from pgmemory.ingest.embed_episode import PREVIOUS_WEIGHT
from pgmemory.ingest.episode import episode_uuid
from pgmemory.memory import Memory, default_extractor
from pgmemory.search import rerank
from pgmemory.search.candidates import fetch_candidates, options
from pgmemory.search.config import SearchConfig, SearchFilters, resolve_config
from pgmemory.search.types import EpisodeHit, Hit, SearchResults

POOL = 100
WINDOW_S = 1800
QUESTION_WORDS = re.compile(r"^\s*(what|which|who|whom|whose|when|where|why|how( many| much| long| often)?)\b\s*"
                            r"((does|did|do|has|have|had|is|are|was|were|can|could|would|will)\b)?\s*", re.I)


@dataclass
class Asked:
    """One question with its fetched pool and what scoring needs."""

    conversation: str
    question: Question
    vector: np.ndarray
    stripped: np.ndarray
    pool: SearchResults
    prf_pool: SearchResults
    turn_of: dict


@dataclass
class Episodes:
    """A group's episodes: ids, speakers and own vectors (rows of a matrix); the vectors of their
    sentences ("actor: sentence") and, per sentence, the row of its episode."""

    ids: list
    actors: list[str]
    vectors: np.ndarray
    sentence_vectors: np.ndarray
    blended_sentence_vectors: np.ndarray
    sentence_owner: np.ndarray


def unit(v: np.ndarray) -> np.ndarray:
    return v / np.linalg.norm(v)


SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\s*(?=\[shares )")


def sentences(text: str, captions: bool = True) -> list[str]:
    """The sentences of a turn: split after . ! ? and (`captions`) before an attached photo's caption."""
    split = SENTENCE_END.split(text) if captions else re.split(r"(?<=[.!?])\s+(?!\[shares )", text)
    return [s for s in (x.strip() for x in split) if s] or [text]


def is_list_question(question: str) -> bool:
    """A question asking for several things: "What/Which <plural noun>", "both", "in common",
    "how many times"."""
    q = question.casefold()
    if re.search(r"\b(both|in common|how many times)\b", q):
        return True
    m = re.match(r"^(what|which)\s+(?:kinds? of |types? of |sorts? of )?(\w+)", q)
    return bool(m) and m.group(2).endswith("s") and m.group(2) not in ("is", "was", "does", "has", "this", "his")


def names(question: str, actor: str) -> bool:
    """Whether the question names the actor (whole words, any case), as rerank.named_speakers."""
    words, name = re.findall(r"\w+", question.casefold()), re.findall(r"\w+", actor.casefold())
    return bool(name) and any(words[i:i + len(name)] == name for i in range(len(words)))


async def fetch(path: Path) -> tuple[list[Asked], dict[str, Episodes], dict[str, int]]:
    """Every question's pool (one search call each), each group's episodes, its fact count."""
    asked, groups, facts = [], {}, {}
    config = resolve_config(None, candidates=POOL)
    with_prf = resolve_config(None, prf_weight=0.25)
    async with await Memory.open(extractor=default_extractor(None)) as memory:
        for c in load_conversations("locomo", path, ()):
            await ingest_conversation(memory, "locomo", c, lambda: None)
            group = group_id("locomo", c.conversation_id)
            turn_of = episode_map(group, c)
            questions = [q for q in c.questions if q.evidence and not q.adversarial]
            vectors = await memory.embedder.embed([q.question for q in questions])
            stripped = await memory.embedder.embed([QUESTION_WORDS.sub("", q.question).rstrip("?") or q.question
                                                    for q in questions])
            async with memory.pool.acquire() as conn:
                for q, v, s in zip(questions, vectors, stripped):
                    pool = await fetch_candidates(conn, [group], q.question, v,
                                                  options(config, SearchFilters(), with_embeddings=True,
                                                          query=q.question))
                    prf_pool = await fetch_candidates(conn, [group], q.question, v,
                                                      options(with_prf, SearchFilters(), with_embeddings=True,
                                                              query=q.question))
                    asked.append(Asked(c.conversation_id, q, np.array(v), np.array(s), pool, prf_pool, turn_of))
                rows = await conn.fetch("SELECT id, actor, content, embedding::text AS v FROM pgmemory.episodes "
                                        "WHERE group_id = $1 ORDER BY id", group)
                facts[c.conversation_id] = await conn.fetchval(
                    "SELECT count(*) FROM pgmemory.facts WHERE group_id = $1 AND upper_inf(recorded)", group)
            row_of = {r["id"]: i for i, r in enumerate(rows)}
            turn_rows = [row_of[episode_uuid(group, t.turn_id)] for t in c.turns]
            own = np.array(await memory.embedder.embed([f"{t.speaker}: {t.text}" for t in c.turns]))
            split = [(i, f"{t.speaker}: {x}") for i, t in enumerate(c.turns) for x in sentences(t.text)]
            plain = np.array(await memory.embedder.embed([x for _, x in split]))
            before = [i - 1 if i and c.turns[i - 1].session_id == t.session_id else None for i, t in enumerate(c.turns)]
            blended = np.array([unit(v + (PREVIOUS_WEIGHT * own[before[i]] if before[i] is not None else 0))
                                for (i, _), v in zip(split, plain)])
            groups[c.conversation_id] = Episodes([r["id"] for r in rows], [r["actor"] or "" for r in rows],
                                                 np.array([json.loads(r["v"]) for r in rows]),
                                                 plain, blended, np.array([turn_rows[i] for i, _ in split]))
    return asked, groups, facts


def truncated(hits: Sequence[Hit], n: int) -> list[Hit]:
    """Copies of the hits with only their ranks within the first n of each list (neighbours kept)."""
    out = []
    for h in hits:
        h = copy.copy(h)
        h.ranks = {m: r for m, r in h.ranks.items() if r <= n}
        if h.ranks or getattr(h, "neighbour_of", None):
            out.append(h)
    return out


def with_list(episodes: list[Hit], method: str, ids: Sequence, actors: dict) -> list[Hit]:
    """The episodes with one more ranked list `method` (new hits for episodes not in the pool)."""
    by_id = {h.id: h for h in episodes}
    for rank, eid in enumerate(ids, 1):
        if eid not in by_id:
            by_id[eid] = EpisodeHit(id=eid, group_id="", ranks={}, content="", kind="message", actor=actors[eid],
                                    valid_at=None, recorded_at=None, source_description="")
            episodes.append(by_id[eid])
        by_id[eid].ranks = {**by_id[eid].ranks, method: rank}
    return episodes


def fused_per_k(hits: list[Hit], ks: dict[str, int], k: int, weights: dict[str, float]) -> list[Hit]:
    """RRF with a k of its own per list (the others `k`)."""
    for h in hits:
        h.score = h.scores["rrf"] = sum(weights.get(m, 1.0) / (ks.get(m, k) + r) for m, r in h.ranks.items())
    return sorted(hits, key=lambda h: (-h.score, str(h.id)))


def session_decay(hits: list[Hit], decay: float, free: int) -> list[Hit]:
    """The n-th hit of one session beyond `free` counts decay^(n - free) of its score."""
    timed = sorted((h for h in hits if getattr(h, "valid_at", None)), key=lambda h: h.valid_at)
    session, s = {}, 0
    for prev, h in zip([None, *timed], timed):
        s += prev is not None and (h.valid_at - prev.valid_at).total_seconds() > WINDOW_S
        session[h.id] = s
    seen: Counter = Counter()
    for h in hits:
        seen[session.get(h.id)] += 1
        h.score *= decay ** max(0, seen[session.get(h.id)] - free)
    return sorted(hits, key=lambda h: -h.score)


def diversified(hits: list[Hit], lam: float, top: int = 40) -> list[Hit]:
    """The best `top` re-picked by score / best score - lam x largest cosine to those picked."""
    pool, rest, picked = list(hits[:top]), hits[top:], []
    best = pool[0].score if pool else 1.0
    while pool:
        def gain(h: Hit) -> float:
            return h.score / best - lam * max((float(np.dot(h.embedding, p.embedding)) for p in picked), default=0.0)
        picked.append(max(pool, key=gain))
        pool.remove(picked[-1])
    return picked + rest


Variant = dict[str, Any]  # config overrides, "pool", "session", "mmr", "speaker", "stripped"


def ranked_turns(a: Asked, group: Episodes, config: SearchConfig, v: Variant) -> list[str]:
    """The question's turns ranked as the harness ranks them, under one variant."""
    listing = is_list_question(a.question.question)
    if listing and "list_config" in v:
        config = replace(config, **v["list_config"])
    n = v.get("pool", v.get("list_pool", 30) if listing else 30)
    pool = a.prf_pool if "prf" in v and (listing or not v.get("list_only")) else a.pool
    episodes, facts = truncated(pool.episodes, n), truncated(pool.facts, n)
    actors = dict(zip(group.ids, group.actors))
    weights = {**config.fusion_weights(), "prf": v.get("prf", 0.0)}
    if listing and "list_weights" in v:
        weights.update(zip(("cosine", "facts"), v["list_weights"]))
    if "stripped" in v:
        query = a.stripped if v["stripped"] < 0 else a.vector + v["stripped"] * a.stripped
        order = np.argsort(-(group.vectors @ (query / np.linalg.norm(query))))[:30]
        for h in episodes:
            h.ranks.pop("cosine", None)
        episodes = [h for h in with_list(episodes, "cosine", [group.ids[i] for i in order], actors)
                    if h.ranks or h.neighbour_of]
    if "sentences" in v:
        mode, w = v["sentences"]
        best = np.full(len(group.ids), -1.0)
        vectors = group.blended_sentence_vectors if v.get("blended") else group.sentence_vectors
        np.maximum.at(best, group.sentence_owner, vectors @ a.vector)
        score = best + (group.vectors @ a.vector if mode == "sum" else 0)
        order = [group.ids[i] for i in np.argsort(-score)[:30]]
        if mode in ("replace", "sum"):
            for h in episodes:
                h.ranks.pop("cosine", None)
            episodes = [h for h in with_list(episodes, "cosine", order, actors) if h.ranks or h.neighbour_of]
        else:
            episodes = with_list(episodes, "sentences", order, actors)
            weights["sentences"] = w
    if v.get("speaker"):
        named = {x for x in set(group.actors) if x and names(a.question.question, x)}
        if named:
            order = [i for i in np.argsort(-(group.vectors @ a.vector)) if group.actors[i] in named][:30]
            episodes = with_list(episodes, "speaker", [group.ids[i] for i in order], actors)
        weights["speaker"] = v["speaker"]
    out = SearchResults()
    for kind, hits in (("episodes", episodes), ("facts", facts)):
        fused = (fused_per_k(hits, dict(zip(("cosine", "fulltext"), v["list_k"])), config.rrf_k, weights)
                 if "list_k" in v else rerank.rrf(hits, config.rrf_k, weights))
        fused = rerank.neighbours(fused, config.neighbour_weight) if config.neighbours else fused
        fused = rerank.named_speakers(fused, a.question.question, config.speaker_weight)
        if kind == "episodes" and listing:
            if "session" in v:
                fused = session_decay(fused, *v["session"])
            if "mmr" in v:
                fused = diversified(fused, v["mmr"])
        setattr(out, kind, fused if v.get("all_turns") else fused[:max(DEFAULT_KS)])
    return rank_turns(out, a.turn_of, 10_000 if v.get("all_turns") else max(DEFAULT_KS)).ids


def gold_positions(asked: list[Asked], groups: dict[str, Episodes], pool: int, category: str = "multi-hop",
                   variant: Variant | None = None) -> Counter:
    """Where the category's gold turns stand in the default ranking (or the variant's) of the pool
    of `pool` per list: 1-10, 11-20, 21-50, beyond 50, or in no list."""
    config, out = resolve_config(None), Counter()
    for a in asked:
        if a.question.category == category:
            ids = ranked_turns(a, groups[a.conversation], config, {**(variant or {}), "pool": pool, "all_turns": True})
            for turn in set(a.question.evidence):
                r = ids.index(turn) + 1 if turn in ids else 0
                out["in no list" if not r else "1-10" if r <= 10 else "11-20" if r <= 20
                    else "21-50" if r <= 50 else "51+"] += 1
    return out


def table(asked: list[Asked], groups: dict[str, Episodes], variants: dict[Any, Variant], k: int) -> dict:
    """conversation -> value -> {"all": R@k, <category>: R@k}, as crossval.recall_table."""
    base = resolve_config(None)
    out: dict[str, dict] = {}
    for value, v in variants.items():
        config = replace(base, **{f: x for f, x in v.items() if f in ("rrf_k", "method_weights")})
        scores: dict[str, dict[str, list]] = {}
        for a in asked:
            recall = recall_at_k(ranked_turns(a, groups[a.conversation], config, v), a.question.evidence, k)
            per = scores.setdefault(a.conversation, {})
            per.setdefault("all", []).append(recall)
            per.setdefault(a.question.category, []).append(recall)
        for conv, per in scores.items():
            out.setdefault(conv, {})[value] = {c: mean(x) for c, x in sorted(per.items())}
    return out


def weights(**changed: float) -> tuple:
    """The default recipe's method weights with some changed."""
    return tuple({**dict(resolve_config(None).method_weights), **changed}.items())


DIRECTIONS: dict[str, tuple[Any, dict[Any, Variant]]] = {
    "pool": (30, {n: {"pool": n} for n in (30, 50, 100)}),
    "list_pool": (30, {n: {"list_pool": n} for n in (30, 40, 50, 100)}),
    "prf": (0, {0: {}, **{w: {"prf": w} for w in (0.25, 0.5, 0.75, 1.0)}}),
    "list_prf": (0, {0: {}, **{w: {"prf": w, "list_only": True} for w in (0.25, 0.5, 0.75, 1.0)}}),
    "rrf_k": (10, {n: {"rrf_k": n} for n in (10, 3, 5, 20, 30, 60)}),
    "per_list_k": ("10/10", {f"{c}/{t}": {"list_k": (c, t)} for c in (10, 3, 5, 20) for t in (10, 5, 20)}),
    "list_weights": ("0.5/0.5", {f"{c}/{f}": {"list_weights": (c, f)} for c in (0.5, 0.75, 1.0, 1.5) for f in (0.5, 1.0)}),
    **{f"list_{f}": (base, {x: {"list_config": {f: x}} for x in values}) for f, base, values in (
        ("speaker_weight", 1.5, (1.5, 0.5, 1.0, 2.5, 4.0)), ("neighbour_weight", 0.5, (0.5, 0.25, 0.75, 1.0)),
        ("rrf_k", 10, (10, 5, 20, 30)))},
    "cosine": (0.5, {w: {"method_weights": weights(cosine=w)} for w in (0.5, 0.25, 0.75, 1.0)}),
    "facts": (0.5, {w: {"method_weights": weights(facts=w)} for w in (0.5, 0, 0.25, 0.75, 1.0)}),
    "list_session_decay": ("0", {"0": {}, **{f"{d}/{f}": {"session": (d, f)}
                                             for d in (0.3, 0.5, 0.7, 0.85) for f in (1, 2)}}),
    "list_mmr": (0, {0: {}, **{lam: {"mmr": lam} for lam in (0.1, 0.2, 0.3, 0.5, 0.8)}}),
    "speaker_channel": (0, {0: {}, **{w: {"speaker": w} for w in (0.1, 0.25, 0.5, 1.0)}}),
    "sentences": ("off", {"off": {}, "replace": {"sentences": ("replace", 0)}, "sum": {"sentences": ("sum", 0)},
                          **{f"add {w}": {"sentences": ("add", w)} for w in (0.25, 0.5, 1.0)},
                          "blended replace": {"sentences": ("replace", 0), "blended": True},
                          "blended sum": {"sentences": ("sum", 0), "blended": True},
                          **{f"blended add {w}": {"sentences": ("add", w), "blended": True} for w in (0.25, 0.5, 1.0)}}),
    "stripped_query": (0, {0: {}, -1: {"stripped": -1}, 0.5: {"stripped": 0.5}, 1: {"stripped": 1.0}}),
}


async def run(path: Path, only: Sequence[str], k: int) -> None:
    asked, groups, facts = await fetch(path)
    print(f"{len(asked)} questions; facts in the offline graph: {facts}; list questions: "
          f"{dict(Counter((a.question.category, is_list_question(a.question.question)) for a in asked))}"
          + "".join(f"; multi-hop gold turns in the default ranking of {n} candidates per list: "
                    f"{dict(sorted(gold_positions(asked, groups, n).items()))}" for n in (30, POOL)) + "\n")
    if "sentences" in only:
        added = {"sentences": ("add", 0.5), "blended": True}
        print(f"with the blended sentence list added (0.5): {dict(sorted(gold_positions(asked, groups, 30, variant=added).items()))}\n")
    for name in only or DIRECTIONS:
        base, variants = DIRECTIONS[name]
        tables = table(asked, groups, variants, k)
        result = {"recipe": "combined_hybrid_rrf (offline)", "field": name, "base": base, "k": k,
                  "tables": tables, "folds": folds(tables, base)}
        lines = report_lines(result)
        lines[2] += " " + " | ".join(f"{c} multi-hop" for c in tables) + " |"
        lines[3] += "---|" * len(tables)
        lines[4:4 + len(variants)] = [line + " " + " | ".join(
            f"{100 * (t[value].get('multi-hop') or 0):.1f}" for t in tables.values()) + " |"
            for line, value in zip(lines[4:4 + len(variants)], variants)]
        print("\n".join(lines) + f"\n(load 1m {os.getloadavg()[0]:.2f})\n", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("path", type=Path, help="a LoCoMo file")
    ap.add_argument("--directions", default="", help=f"comma-separated, of {', '.join(DIRECTIONS)} (default all)")
    ap.add_argument("--k", type=int, default=10, choices=DEFAULT_KS)
    args = ap.parse_args()
    asyncio.run(run(args.path, [d for d in args.directions.split(",") if d], args.k))


if __name__ == "__main__":
    main()
