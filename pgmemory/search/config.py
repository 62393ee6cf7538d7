"""Search knobs: which kinds and methods, how to rerank, filters, and named recipes."""
from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, fields, replace
from datetime import datetime
from typing import Any

from pgmemory.errors import InvalidInput
from pgmemory.validate import (check_bool, check_int, check_list, check_metadata, check_number, check_text,
                               check_time, check_uuid, check_uuids)

KINDS = ("facts", "entities", "communities", "episodes")
METHODS = ("cosine", "fulltext", "bfs")
RERANKERS = ("rrf", "mmr", "episode_mentions", "node_distance", "cross_encoder")
MAX_QUERY_CHARS = 4000
MAX_LIMIT = 100
MAX_SEEDS = 1000
DEFAULT_CANDIDATES = 30  # per method and kind, when neither the caller nor the recipe sets the pool


@dataclass(frozen=True)
class SearchConfig:
    """How to search: kinds and candidate methods (φ), the reranker (ρ) and its parameters."""

    kinds: tuple[str, ...] = KINDS
    methods: tuple[str, ...] = ("cosine", "fulltext")
    reranker: str = "rrf"
    # Per method and kind, before reranking (at least the search's limit); None: twice the limit (pool()).
    candidates: int | None = DEFAULT_CANDIDATES
    # RRF: a small k and lexical evidence first; cosine, BFS and the facts an episode supports
    # count half (on LoCoMo dev this ranks evidence turns best; bench/README.md has the figures).
    rrf_k: int = 10
    method_weights: tuple[tuple[str, float], ...] = (
        ("fulltext", 1.0), ("cosine", 0.5), ("bfs", 0.5), ("facts", 0.5))
    mmr_lambda: float = 0.5
    # Session proximity (episodes): hits within session_window_s of each other form a session;
    # each gains session_weight / (rrf_k + the session's rank by summed score). 0 = off.
    session_weight: float = 0.0
    session_window_s: int = 1800
    # Neighbouring turns: the neighbour_span episodes just before and after (same group, within
    # session_window_s) each of the best `neighbours` episode candidates join the candidates; one
    # d turns away gains neighbour_weight x the hit's fused score / d (the best over its hits).
    # 0 = off.
    neighbours: int = 0
    neighbour_weight: float = 0.5
    neighbour_span: int = 1
    # Named speakers: an episode whose actor the query names (the whole name, any case) counts
    # (1 + speaker_weight) times its score; a question about a person is mostly answered by what
    # that person said. 0 = off.
    speaker_weight: float = 0.0
    # Lexical pseudo-relevance feedback (episodes): the prf_terms lexemes of the best prf_docs
    # full-text hits of episodes with the highest summed idf (not in the query, in two or more)
    # are one more full-text query; its list (method "prf") is fused with prf_weight. 0 = off.
    prf_weight: float = 0.0
    prf_docs: int = 5
    prf_terms: int = 10
    # Category members (episodes): a list question's category ("Which cities ...") -> the rare
    # lexemes of the nouns below it in WordNet (pgmemory/search/categories.py) are one more
    # full-text query; its list (method "members") is fused with members_weight. 0 = off.
    members_weight: float = 0.0
    bfs_depth: int = 2
    bfs_recent_episodes: int = 3  # BFS seeds when none given: entities of the group's latest episodes
    bfs_max_entities: int = 2000  # stop the walk once this many (nearest) entities are reached
    bfs_seeds: tuple[uuid.UUID, ...] = ()
    center: uuid.UUID | None = None  # the node_distance reranker's centre entity

    def validate(self) -> "SearchConfig":
        """Refuse unknown names, wrong types and out-of-range numbers with a message naming them;
        returns the config with seeds and centre as UUIDs."""
        for name, allowed in (("kinds", KINDS), ("methods", METHODS)):
            values = check_list(getattr(self, name), name)
            bad = [v for v in values if v not in allowed]
            if bad or not values:
                raise InvalidInput(f"unknown search {name[:-1]} {bad or list(values)!r:.80}: "
                                   f"use {', '.join(allowed)}")
        if self.reranker not in RERANKERS:
            raise InvalidInput(f"unknown reranker {self.reranker!r:.40}: use one of {', '.join(RERANKERS)}")
        if self.candidates is not None:
            check_int(self.candidates, "candidates", 1, 1000)
        check_int(self.rrf_k, "rrf_k", 1, 1000)
        weights = check_list(self.method_weights, "method_weights")
        if not all(isinstance(p, (tuple, list)) and len(p) == 2 for p in weights):
            raise InvalidInput("method_weights must be a list of (method, weight) pairs")
        bad = [m for m, _ in weights if m not in (*METHODS, "facts")]
        if bad:
            raise InvalidInput(f"method_weights: unknown method(s) {bad!r:.80}")
        for m, w in weights:
            check_number(w, f"method_weights[{m}]", 0, 10)
        check_number(self.session_weight, "session_weight", 0, 10)
        check_int(self.session_window_s, "session_window_s", 0, 31 * 86400)
        check_int(self.neighbours, "neighbours", 0, 100)
        check_number(self.neighbour_weight, "neighbour_weight", 0, 10)
        check_int(self.neighbour_span, "neighbour_span", 1, 10)
        check_number(self.speaker_weight, "speaker_weight", 0, 10)
        check_number(self.prf_weight, "prf_weight", 0, 10)
        check_int(self.prf_docs, "prf_docs", 1, 100)
        check_int(self.prf_terms, "prf_terms", 1, 50)
        check_number(self.members_weight, "members_weight", 0, 10)
        check_number(self.mmr_lambda, "mmr_lambda", 0, 1)
        check_int(self.bfs_max_entities, "bfs_max_entities", 1, 100_000)
        check_int(self.bfs_depth, "bfs_depth", 1, 5)
        check_int(self.bfs_recent_episodes, "bfs_recent_episodes", 1, 100)
        seeds = check_uuids(self.bfs_seeds, "bfs_seeds")
        if len(seeds) > MAX_SEEDS:
            raise InvalidInput(f"bfs_seeds has {len(seeds)} ids; the limit is {MAX_SEEDS}")
        center = None if self.center is None else check_uuid(self.center, "center")
        if self.reranker == "node_distance" and center is None:
            raise InvalidInput("the node_distance reranker needs a centre entity (config.center)")
        return replace(self, kinds=tuple(self.kinds), methods=tuple(self.methods), bfs_seeds=seeds,
                       center=center)

    def fusion_weights(self) -> dict[str, float]:
        """RRF weight of every ranked list: the methods', the feedback list's and the members list's."""
        return {**dict(self.method_weights), "prf": self.prf_weight, "members": self.members_weight}

    def pool(self, limit: int | None) -> int:
        """Candidates per method and kind for a search of `limit` results: `candidates`, or when
        that is None twice the limit (Graphiti's edge_search rule); DEFAULT_CANDIDATES when no
        limit is known. Never fewer than the limit: a kind could not fill a limit above its pool."""
        if self.candidates is not None:
            return self.candidates if limit is None else max(self.candidates, limit)
        return DEFAULT_CANDIDATES if limit is None else 2 * limit


RECIPES: dict[str, SearchConfig] = {
    # The default: the turns next to the best 20 episode candidates join them at half their hit's
    # score (count and weight cross-validated between LoCoMo conv-26 and conv-30, +4.6 and +6.1
    # points R@10 held out; pgmemory/eval/README.md); episodes spoken by a person the question
    # names count 2.5 times (speaker_weight 1.5, cross-validated the same way: +2.0 and +1.5);
    # lexical pseudo-relevance feedback (prf_weight) is off: on the blended episode vectors its
    # held-out folds do not gain and it adds ~11 ms p50 (pgmemory/eval/README.md); ask for it with
    # prf_weight=0.25. A list question's category members count 1.5 (members_weight,
    # cross-validated the same way: both held-out folds gain, multi-hop most).
    "combined_hybrid_rrf": SearchConfig(neighbours=20, neighbour_weight=0.5, speaker_weight=1.5,
                                        members_weight=1.5),
    "combined_hybrid_bfs_rrf": SearchConfig(methods=METHODS),
    # Session proximity on; the weight chosen by cross-validation between LoCoMo conv-26 and
    # conv-30 (pgmemory/eval/README.md has both folds).
    "combined_hybrid_session_rrf": SearchConfig(session_weight=1.0),
    "combined_cross_encoder": SearchConfig(methods=METHODS, reranker="cross_encoder"),
    # Facts only: each method's pool is twice the limit, the rule of Graphiti's own edge_search
    # (`edge_fulltext_search(..., 2 * limit)`, `edge_similarity_search(..., 2 * limit, ...)`).
    # At limit 10 that is 20 instead of 30: 99.5% of the top-10 facts of the 100k bench's queries
    # and all of the 1M bench's are the same, LoCoMo dev recall unchanged, server CPU per call
    # x0.91-0.94 (bench/README.md, issue 17, session 8). A caller's explicit `candidates` wins.
    "edge_hybrid_rrf": SearchConfig(kinds=("facts",), candidates=None),
    "edge_hybrid_mmr": SearchConfig(kinds=("facts",), reranker="mmr"),
    "edge_node_distance": SearchConfig(kinds=("facts",), methods=METHODS, reranker="node_distance"),
    "edge_episode_mentions": SearchConfig(kinds=("facts",), reranker="episode_mentions"),
    "node_hybrid_rrf": SearchConfig(kinds=("entities",)),
    "node_episode_mentions": SearchConfig(kinds=("entities",), reranker="episode_mentions"),
    "community_hybrid_rrf": SearchConfig(kinds=("communities",)),
    "episode_hybrid_rrf": SearchConfig(kinds=("episodes",)),
}


def resolve_config(config: SearchConfig | str | None, **overrides: Any) -> SearchConfig:
    """A recipe name or config object (default: combined_hybrid_rrf), with overrides, validated.
    A recipe asked by name without overrides is validated once and reused (every search asks;
    validating costs ~50 us): reused only while RECIPES still holds the same object."""
    overrides = {k: v for k, v in overrides.items() if v is not None}
    name = "combined_hybrid_rrf" if config is None else config
    if isinstance(name, str):
        if name not in RECIPES:
            raise InvalidInput(f"unknown search recipe {name!r:.60}: use one of {', '.join(sorted(RECIPES))}")
        config = RECIPES[name]
        if not overrides:
            source, validated = _VALIDATED.get(name, (None, None))
            if source is not config:
                validated = config.validate()
                _VALIDATED[name] = (config, validated)
            return validated
    if not isinstance(config, SearchConfig):
        raise InvalidInput(f"config must be a recipe name or a SearchConfig, got {type(config).__name__}")
    return replace(config, **overrides).validate()


_VALIDATED: dict[str, tuple[SearchConfig, SearchConfig]] = {}  # recipe name -> (RECIPES' object, validated)


@dataclass(frozen=True)
class SearchFilters:
    """Which results are in view. as_of is a point of valid time (T), known_at of transaction
    time (T'): every result is then consistent with what was believed at T' about T.
    Invalidated (ended) and superseded (corrected) facts are excluded unless asked for."""

    as_of: datetime | None = None
    known_at: datetime | None = None
    include_invalidated: bool = False
    include_superseded: bool = False
    relation_types: tuple[str, ...] = ()  # read as add_fact stores them: "works for" is WORKS_FOR
    labels: tuple[str, ...] = ()
    valid_at_from: datetime | None = None
    valid_at_to: datetime | None = None
    invalid_at_from: datetime | None = None
    invalid_at_to: datetime | None = None
    created_at_from: datetime | None = None
    created_at_to: datetime | None = None
    expired_at_from: datetime | None = None
    expired_at_to: datetime | None = None
    # Episode metadata the results must match (JSON containment): episodes by their own, facts by
    # an episode they came from, entities by an episode mentioning them; communities never match.
    metadata: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        """Refuse wrong types at construction: a str for a list, a non-bool flag, a naive time."""
        if self.metadata is not None:
            object.__setattr__(self, "metadata", check_metadata(self.metadata, "metadata filter") or None)
        check_bool(self.include_invalidated, "include_invalidated")
        check_bool(self.include_superseded, "include_superseded")
        for name in ("relation_types", "labels"):
            values = check_list(getattr(self, name), name)
            if len(values) > 100:
                raise InvalidInput(f"{name} has {len(values)} items; the limit is 100")
            for v in values:
                check_text(v, f"{name} values", max_chars=200)
            if name == "relation_types":
                values = tuple(relation_type(v) for v in values)
            object.__setattr__(self, name, values)
        for f in fields(self):
            if f.type == "datetime | None" and getattr(self, f.name) is not None:
                check_time(getattr(self, f.name), f.name)

    def to_options(self) -> dict[str, Any]:
        """The filters as search_candidates options (values only; never SQL text); a time bound
        not set is left out (the database reads a missing key as null)."""
        out: dict[str, Any] = {
            "include_invalidated": self.include_invalidated,
            "include_superseded": self.include_superseded,
            "relation_types": list(self.relation_types),
            "labels": list(self.labels),
        }
        if self.metadata:
            out["metadata"] = self.metadata
        for name in _TIME_FIELDS:
            value = getattr(self, name)
            if value is not None:
                out[name] = value.isoformat()
        return out


def relation_type(name: str) -> str:
    """A relation type as pgmemory.add_fact stores it (sql/50_fact_api.sql): spaces trimmed, runs of
    other characters than ASCII letters and digits one '_', upper case ("works for" -> WORKS_FOR)."""
    return _NOT_ALNUM.sub("_", name.strip(" ")).upper()


_NOT_ALNUM = re.compile(r"[^A-Za-z0-9]+")
_TIME_FIELDS = tuple(f.name for f in fields(SearchFilters) if f.type == "datetime | None")


NO_FILTERS = SearchFilters()  # no filter: the default view (frozen, so one shared instance)
