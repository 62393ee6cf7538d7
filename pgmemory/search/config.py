"""Search knobs: which kinds and methods, how to rerank, filters, and named recipes."""
from __future__ import annotations

import uuid
from dataclasses import dataclass, fields, replace
from datetime import datetime
from typing import Any

from pgmemory.errors import InvalidInput

KINDS = ("facts", "entities", "communities", "episodes")
METHODS = ("cosine", "fulltext", "bfs")
RERANKERS = ("rrf", "mmr", "episode_mentions", "node_distance", "cross_encoder")
MAX_QUERY_CHARS = 4000
MAX_LIMIT = 100


@dataclass(frozen=True)
class SearchConfig:
    """How to search: kinds and candidate methods (φ), the reranker (ρ) and its parameters."""

    kinds: tuple[str, ...] = KINDS
    methods: tuple[str, ...] = ("cosine", "fulltext")
    reranker: str = "rrf"
    candidates: int = 30  # per method and kind, before reranking
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
    bfs_depth: int = 2
    bfs_recent_episodes: int = 3  # BFS seeds when none given: entities of the group's latest episodes
    bfs_max_entities: int = 2000  # stop the walk once this many (nearest) entities are reached
    bfs_seeds: tuple[uuid.UUID, ...] = ()
    center: uuid.UUID | None = None  # the node_distance reranker's centre entity

    def validate(self) -> "SearchConfig":
        """Refuse unknown names and out-of-range numbers with a message naming them."""
        for name, allowed, values in (("kind", KINDS, self.kinds), ("method", METHODS, self.methods)):
            bad = [v for v in values if v not in allowed]
            if bad or not values:
                raise InvalidInput(f"unknown search {name} {bad or values!r}: use {', '.join(allowed)}")
        if self.reranker not in RERANKERS:
            raise InvalidInput(f"unknown reranker {self.reranker!r}: use one of {', '.join(RERANKERS)}")
        if self.reranker == "node_distance" and self.center is None:
            raise InvalidInput("the node_distance reranker needs a centre entity (config.center)")
        if not 1 <= self.candidates <= 1000:
            raise InvalidInput(f"candidates must be between 1 and 1000, got {self.candidates}")
        if not 1 <= self.rrf_k <= 1000:
            raise InvalidInput(f"rrf_k must be between 1 and 1000, got {self.rrf_k}")
        bad = [m for m, w in self.method_weights if m not in (*METHODS, "facts") or not 0 <= w <= 10]
        if bad:
            raise InvalidInput(f"method_weights: unknown method or weight outside 0..10 for {bad}")
        if not 0.0 <= self.session_weight <= 10.0:
            raise InvalidInput(f"session_weight must be between 0 and 10, got {self.session_weight}")
        if not 0 <= self.session_window_s <= 31 * 86400:
            raise InvalidInput(f"session_window_s must be between 0 and {31 * 86400} (31 days), "
                               f"got {self.session_window_s}")
        if not 0.0 <= self.mmr_lambda <= 1.0:
            raise InvalidInput(f"mmr_lambda must be between 0 and 1, got {self.mmr_lambda}")
        if not 1 <= self.bfs_max_entities <= 100_000:
            raise InvalidInput(f"bfs_max_entities must be between 1 and 100000, got {self.bfs_max_entities}")
        if not 1 <= self.bfs_depth <= 5:
            raise InvalidInput(f"bfs_depth must be between 1 and 5, got {self.bfs_depth}")
        return self


RECIPES: dict[str, SearchConfig] = {
    "combined_hybrid_rrf": SearchConfig(),
    "combined_hybrid_bfs_rrf": SearchConfig(methods=METHODS),
    # Session proximity on; the weight chosen by cross-validation between LoCoMo conv-26 and
    # conv-30 (pgmemory/eval/README.md has both folds).
    "combined_hybrid_session_rrf": SearchConfig(session_weight=1.0),
    "combined_cross_encoder": SearchConfig(methods=METHODS, reranker="cross_encoder"),
    "edge_hybrid_rrf": SearchConfig(kinds=("facts",)),
    "edge_hybrid_mmr": SearchConfig(kinds=("facts",), reranker="mmr"),
    "edge_node_distance": SearchConfig(kinds=("facts",), methods=METHODS, reranker="node_distance"),
    "edge_episode_mentions": SearchConfig(kinds=("facts",), reranker="episode_mentions"),
    "node_hybrid_rrf": SearchConfig(kinds=("entities",)),
    "node_episode_mentions": SearchConfig(kinds=("entities",), reranker="episode_mentions"),
    "community_hybrid_rrf": SearchConfig(kinds=("communities",)),
    "episode_hybrid_rrf": SearchConfig(kinds=("episodes",)),
}


def resolve_config(config: SearchConfig | str | None, **overrides: Any) -> SearchConfig:
    """A recipe name or config object (default: combined_hybrid_rrf), with overrides, validated."""
    if config is None:
        config = RECIPES["combined_hybrid_rrf"]
    elif isinstance(config, str):
        if config not in RECIPES:
            raise InvalidInput(f"unknown search recipe {config!r}: use one of {', '.join(sorted(RECIPES))}")
        config = RECIPES[config]
    overrides = {k: v for k, v in overrides.items() if v is not None}
    return replace(config, **overrides).validate()


def _aware(value: datetime | None, name: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, datetime):
        raise InvalidInput(f"filter {name} must be a datetime, got {type(value).__name__}")
    if value.tzinfo is None or value.tzinfo.utcoffset(value) is None:
        raise InvalidInput(f"filter {name} {value.isoformat()} has no time zone: pass an aware datetime")
    return value.isoformat()


@dataclass(frozen=True)
class SearchFilters:
    """Which results are in view. as_of is a point of valid time (T), known_at of transaction
    time (T'): every result is then consistent with what was believed at T' about T.
    Invalidated (ended) and superseded (corrected) facts are excluded unless asked for."""

    as_of: datetime | None = None
    known_at: datetime | None = None
    include_invalidated: bool = False
    include_superseded: bool = False
    relation_types: tuple[str, ...] = ()
    labels: tuple[str, ...] = ()
    valid_at_from: datetime | None = None
    valid_at_to: datetime | None = None
    invalid_at_from: datetime | None = None
    invalid_at_to: datetime | None = None
    created_at_from: datetime | None = None
    created_at_to: datetime | None = None
    expired_at_from: datetime | None = None
    expired_at_to: datetime | None = None

    def to_options(self) -> dict[str, Any]:
        """The filters as search_candidates options (values only; never SQL text)."""
        out: dict[str, Any] = {
            "include_invalidated": bool(self.include_invalidated),
            "include_superseded": bool(self.include_superseded),
            "relation_types": [_text(r, "relation_types") for r in self.relation_types],
            "labels": [_text(label, "labels") for label in self.labels],
        }
        for f in fields(self):
            if f.type in ("datetime | None",):
                out[f.name] = _aware(getattr(self, f.name), f.name)
        return out


def _text(value: Any, name: str) -> str:
    if not isinstance(value, str) or not value or len(value) > 200:
        raise InvalidInput(f"filter {name} values must be non-empty strings of at most 200 characters")
    return value
