"""Metric arithmetic for retrieval and QA evaluation: recall@k, accuracy, percentiles.

Questions without gold evidence have no recall (``None``); they are counted
but left out of recall averages rather than scored as 0 or 1.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

DEFAULT_KS: tuple[int, ...] = (5, 10, 20)


@dataclass(frozen=True)
class EvalRow:
    """One evaluated question: what was retrieved, what was gold, and optional QA/latency."""

    question_id: str
    category: str
    retrieved: list[str]
    gold: list[str]
    correct: bool | None = None
    latency_ms: float | None = None


def recall_at_k(retrieved: Sequence[str], gold: Sequence[str], k: int) -> float | None:
    """Fraction of distinct gold ids among the first k distinct retrieved ids; None if no gold."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    wanted = set(gold)
    if not wanted:
        return None
    top = list(dict.fromkeys(retrieved))[:k]
    return len(wanted.intersection(top)) / len(wanted)


def mean(values: Iterable[float | None]) -> float | None:
    """Mean of the non-None values; None when there are none, so empty groups stay visible."""
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else None


def accuracy(flags: Iterable[bool | None]) -> float | None:
    """Share of True among judged answers (None = not judged); None when nothing was judged."""
    return mean(None if f is None else float(f) for f in flags)


def percentile(values: Iterable[float], q: float) -> float:
    """q-th percentile (0-100) by linear interpolation between closest ranks.

    The rank is ``q/100 * (n-1)`` over the sorted values, the same rule as
    numpy's default ("linear"): p50 of [1, 2, 3, 4] is 2.5.
    """
    data = sorted(values)
    if not data:
        raise ValueError("percentile of an empty sequence")
    if not 0 <= q <= 100:
        raise ValueError(f"q must be within 0..100, got {q}")
    rank = q / 100 * (len(data) - 1)
    lo, hi = math.floor(rank), math.ceil(rank)
    return data[lo] + (data[hi] - data[lo]) * (rank - lo)


def _group(rows: Sequence[EvalRow], ks: Sequence[int]) -> dict[str, float | int | None]:
    out: dict[str, float | int | None] = {
        "n": len(rows),
        "n_with_gold": sum(1 for r in rows if set(r.gold)),
    }
    for k in ks:
        out[f"recall@{k}"] = mean(recall_at_k(r.retrieved, r.gold, k) for r in rows)
    judged = [r.correct for r in rows if r.correct is not None]
    out["n_judged"] = len(judged)
    out["accuracy"] = accuracy(judged)
    latencies = [r.latency_ms for r in rows if r.latency_ms is not None]
    out["latency_p50_ms"] = percentile(latencies, 50) if latencies else None
    out["latency_p95_ms"] = percentile(latencies, 95) if latencies else None
    return out


def summarize(rows: Sequence[EvalRow], ks: Sequence[int] = DEFAULT_KS) -> dict[str, object]:
    """Aggregate rows overall and per category into one report dict.

    Shape: ``{"overall": {...}, "by_category": {category: {...}}}`` where each
    group holds ``n``, ``n_with_gold``, ``recall@k`` for each k, ``n_judged``,
    ``accuracy``, ``latency_p50_ms`` and ``latency_p95_ms``.  Averages that
    have no inputs are None.
    """
    categories: dict[str, list[EvalRow]] = {}
    for row in rows:
        categories.setdefault(row.category, []).append(row)
    return {
        "overall": _group(rows, ks),
        "by_category": {c: _group(group, ks) for c, group in sorted(categories.items())},
    }
