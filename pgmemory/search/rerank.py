"""ρ: rerankers. RRF fuses the methods' ranks; the others reorder the fused list."""
from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import TypeVar

from pgmemory.search.types import EntityHit, EpisodeHit, FactHit, Hit

H = TypeVar("H", bound=Hit)


def rrf(hits: Sequence[H], k: int = 60, weights: Mapping[str, float] | None = None) -> list[H]:
    """Reciprocal Rank Fusion: score = Σ w(method) / (k + rank) over the methods that found the hit
    (every weight 1 unless given)."""
    weights = weights or {}
    for h in hits:
        h.scores["rrf"] = sum(weights.get(m, 1.0) / (k + r) for m, r in h.ranks.items())
        h.score = h.scores["rrf"]
    return sorted(hits, key=lambda h: (-h.score, str(h.id)))


def session_proximity(hits: Sequence[H], weight: float, window_s: float, k: int = 60) -> list[H]:
    """Episodes of the strongest sessions first: episode hits whose times lie within `window_s`
    of the next form a session, sessions are ranked by their hits' summed scores, and each hit
    gains weight / (k + its session's rank), an RRF term like a method's. Evidence often sits in
    the session of the best hits; other kinds of hits are returned unchanged."""
    timed = sorted((h for h in hits if isinstance(h, EpisodeHit) and h.valid_at is not None),
                   key=lambda h: h.valid_at)
    if weight <= 0 or not timed:
        return list(hits)
    sessions: list[list[H]] = [[timed[0]]]
    for prev, h in zip(timed, timed[1:]):
        if (h.valid_at - prev.valid_at).total_seconds() > window_s:
            sessions.append([])
        sessions[-1].append(h)
    ranked = sorted(sessions, key=lambda members: -sum(m.score for m in members))
    for rank, members in enumerate(ranked, start=1):
        for h in members:
            h.scores["session"] = weight / (k + rank)
            h.score += h.scores["session"]
    return sorted(hits, key=lambda h: (-h.score, str(h.id)))


def neighbours(hits: Sequence[H], weight: float) -> list[H]:
    """Turns next to a hit: an episode d turns from hits (EpisodeHit.neighbour_of) gains
    weight x the best of (hit's fused score / d), so the turns around the evidence found rank
    near it; other hits are returned unchanged."""
    score = {h.id: h.score for h in hits}
    for h in hits:
        near = [score[i] / d for i, d in getattr(h, "neighbour_of", {}).items() if i in score]
        if near and weight > 0:
            h.scores["neighbour"] = weight * max(near)
            h.score += h.scores["neighbour"]
    return sorted(hits, key=lambda h: (-h.score, str(h.id)))


def casefolded_words(text: str) -> tuple[str, ...]:
    """The words a name is matched by (named_speakers): runs of \\w in the casefolded text. The
    query's are sent to the database too, which bounds the speaker factor with them ("fuse")."""
    return tuple(re.findall(r"\w+", text.casefold()))


def named_speakers(hits: Sequence[H], query: str, weight: float) -> list[H]:
    """Episodes spoken by someone the query names first: an episode whose actor appears in the
    query as whole words (any case) counts (1 + weight) times its score. Naming both speakers
    of a conversation lifts both alike; other hits are returned unchanged."""
    words = casefolded_words(query)
    named: dict[str, bool] = {}
    for h in hits:
        actor = getattr(h, "actor", None)
        if not actor or weight <= 0:
            continue
        if actor not in named:
            name = casefolded_words(actor)
            named[actor] = bool(name) and any(words[i:i + len(name)] == name for i in range(len(words)))
        if named[actor]:
            h.scores["speaker"] = weight * h.score
            h.score += h.scores["speaker"]
    return sorted(hits, key=lambda h: (-h.score, str(h.id)))


def _norm(a: Sequence[float]) -> float:
    return math.sqrt(sum(x * x for x in a))


def _dot(a: Sequence[float], b: Sequence[float]) -> float:
    return sum(x * y for x, y in zip(a, b))


def _cos(a: Sequence[float], b: Sequence[float]) -> float:
    na, nb = _norm(a), _norm(b)
    return _dot(a, b) / (na * nb) if na and nb else 0.0


def mmr(hits: Sequence[H], query: Sequence[float], lam: float = 0.5, limit: int | None = None) -> list[H]:
    """Maximal Marginal Relevance: greedily pick λ·sim(query, d) − (1−λ)·max sim(d, picked) (the
    earlier hit on a tie). Each vector's norm is computed once and each candidate's redundancy (its
    highest similarity to a picked hit) is updated with each new pick only: n x limit similarities,
    not n x limit² / 2 (the same values as _cos, so the same picks and scores)."""
    pool = [h for h in hits if h.embedding is not None]
    position = {id(h): i for i, h in enumerate(hits)}
    norm = {id(h): _norm(h.embedding) for h in pool}
    query_norm = _norm(query)

    def similarity(a: Sequence[float], na: float, b: Sequence[float], nb: float) -> float:
        return _dot(a, b) / (na * nb) if na and nb else 0.0

    relevance = {id(h): similarity(query, query_norm, h.embedding, norm[id(h)]) for h in pool}
    redundancy: dict[int, float] = {}  # highest similarity to a picked hit; none before the first pick
    picked: list[H] = []
    while pool and (limit is None or len(picked) < limit):
        def gain(h: H) -> float:
            return lam * relevance[id(h)] - (1 - lam) * redundancy.get(id(h), 0.0)
        best = max(pool, key=lambda h: (gain(h), -position[id(h)]))
        best.scores["mmr"] = gain(best)
        best.score = best.scores["mmr"]
        picked.append(best)
        pool.remove(best)
        if limit is not None and len(picked) == limit:
            break
        for h in pool:
            s = similarity(h.embedding, norm[id(h)], best.embedding, norm[id(best)])
            redundancy[id(h)] = max(redundancy[id(h)], s) if id(h) in redundancy else s
    return picked


def episode_mentions(hits: Sequence[H]) -> list[H]:
    """More often mentioned first (entities: episodes mentioning them; facts: source episodes);
    ties keep the fused order."""
    def count(h: Hit) -> int:
        if isinstance(h, EntityHit):
            return h.mentions
        if isinstance(h, FactHit):
            return len(h.episodes)
        return 0
    ranked = sorted(enumerate(hits), key=lambda p: (-count(p[1]), p[0]))
    for _, h in ranked:
        h.scores["episode_mentions"] = float(count(h))
    return [h for _, h in ranked]


def node_distance(hits: Sequence[H]) -> list[H]:
    """Closer to the centre entity first (unreachable last); ties keep the fused order."""
    def dist(h: Hit) -> float:
        d = getattr(h, "distance", None)
        return math.inf if d is None else float(d)
    ranked = sorted(enumerate(hits), key=lambda p: (dist(p[1]), p[0]))
    for _, h in ranked:
        h.scores["node_distance"] = 1.0 / (1.0 + dist(h))
    return [h for _, h in ranked]


def described_first(hits: Sequence[H]) -> list[H]:
    """Entities with a summary before those without (e.g. a speaker no fact is about): a bare
    name carries no evidence, so it never outranks a described entity. Order kept otherwise."""
    ranked = sorted(enumerate(hits), key=lambda p: (isinstance(p[1], EntityHit) and not p[1].summary, p[0]))
    return [h for _, h in ranked]
