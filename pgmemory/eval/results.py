"""Aggregate per-question rows into results.json: per system, overall and per category.

Systems: ``pgmemory`` (retrieval and QA), ``bm25`` and ``dense`` over turns
(retrieval), ``full_context`` (QA only).  Retrieval groups hold ``recall@k``
for k in 5/10/20, the mean context size (chars, tokens) of what k results put
in front of a model and, for pgmemory, the search and context latency (one
query at a time, query embedding included) and where its ranked turns came
from; QA groups hold ``accuracy`` with ``latency_p50_ms`` / ``latency_p95_ms``
(search + answer).  ``non_adversarial`` (when some questions are adversarial)
is the overall group without them, the figure the retrieval goal is set on.
The document also counts the gold evidence ids read as
they stood, normalised and skipped, and names the machine latency came from.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pgmemory.eval.metrics import DEFAULT_KS, EvalRow, mean, percentile, summarize
from pgmemory.eval.retrieval import ranking_note
from pgmemory.providers.tokens import tokenizer_name

RETRIEVAL_SYSTEMS = ("pgmemory", "bm25", "dense")
QA_SYSTEMS = ("pgmemory", "full_context")
_RETRIEVAL_KEYS = ("n_with_gold", *(f"recall@{k}" for k in DEFAULT_KS))
_QA_KEYS = ("n_judged", "accuracy", "latency_p50_ms", "latency_p95_ms")


def system_rows(rows: Sequence[dict[str, Any]], system: str) -> list[EvalRow]:
    """The EvalRows of one system (questions the system did not run are left out)."""
    out = []
    for row in rows:
        result = row["systems"].get(system)
        if result is not None:
            out.append(EvalRow(row["question_id"], row["category"], result.get("retrieved", []),
                               row["gold"], result.get("correct"), result.get("latency_ms")))
    return out


def _extras(results: list[dict[str, Any]]) -> dict[str, float | None]:
    out: dict[str, float | None] = {
        "context_chars": mean(r.get("context_chars") for r in results),
        "context_tokens": mean(r.get("context_tokens") for r in results),
    }
    for name in ("search", "context"):
        times = [r[f"{name}_ms"] for r in results if r.get(f"{name}_ms") is not None]
        if times:
            out[f"{name}_p50_ms"] = percentile(times, 50)
            out[f"{name}_p95_ms"] = percentile(times, 95)
    if any("from_facts" in r for r in results):
        out["turns_ranked"] = mean(len(r["retrieved"]) for r in results)
        out["turns_from_episodes"] = mean(r["from_episodes"] for r in results)
        out["turns_from_facts"] = mean(r["from_facts"] for r in results)
        out["fact_hits"] = mean(r["facts"] for r in results)
    return out


def summarize_system(rows: Sequence[dict[str, Any]], system: str) -> dict[str, Any]:
    """metrics.summarize for one system, keeping the keys that apply, plus context size and search latency."""
    keep = ("n",) + (_RETRIEVAL_KEYS if system in RETRIEVAL_SYSTEMS else ()) + \
        (_QA_KEYS if system in QA_SYSTEMS else ())
    summary = summarize(system_rows(rows, system), DEFAULT_KS)
    mine = [r for r in rows if system in r["systems"]]

    def group(stats: dict[str, Any], members: list[dict[str, Any]]) -> dict[str, Any]:
        picked = {key: stats[key] for key in keep}
        if system in QA_SYSTEMS and not picked["n_judged"]:
            picked = {key: value for key, value in picked.items() if key not in _QA_KEYS}
        return {**picked, **_extras([m["systems"][system] for m in members])}

    by_category = {
        category: group(stats, [r for r in mine if r["category"] == category])
        for category, stats in summary["by_category"].items()
    }
    out = {"overall": group(summary["overall"], mine), "by_category": by_category}
    answerable = [r for r in mine if not r["adversarial"]]
    if answerable and len(answerable) < len(mine):
        stats = summarize(system_rows(answerable, system), DEFAULT_KS)["overall"]
        out["non_adversarial"] = group(stats, answerable)
    return out


_EVIDENCE_COUNTS = ("as_is", "normalised", "skipped", "questions_without_evidence")


def evidence_summary(partials: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Gold evidence over all conversations: ids read as is, normalised, skipped, questions left
    without evidence, every irregular entry and every turn skipped (nothing to ingest), with its
    conversation."""
    out: dict[str, Any] = {key: sum(p["evidence"][key] for p in partials) for key in _EVIDENCE_COUNTS}
    out["notes"] = [{"conversation_id": p["conversation_id"], **n} for p in partials for n in p["evidence"]["notes"]]
    out["turns_skipped"] = [{"conversation_id": p["conversation_id"], **t}
                            for p in partials for t in p.get("turns_skipped", [])]
    return out


def build_results(partials: Sequence[dict[str, Any]], settings: dict[str, Any], qa_skipped: str | None,
                  ingest_concurrency: int, kinds: Sequence[str]) -> dict[str, Any]:
    """The results.json document from the finished conversations' partial results; `kinds` are
    the result kinds of the recipe (they decide how pgmemory's ranked turns were formed)."""
    rows = [row for p in partials for row in p["rows"]]
    present = [s for s in (*RETRIEVAL_SYSTEMS, "full_context") if any(s in r["systems"] for r in rows)]
    usage = {key: sum(p["qa_usage"][key] for p in partials)
             for key in ("calls", "prompt_tokens", "completion_tokens")}
    cores = sorted({p["machine"]["cores"] for p in partials if p["machine"]["cores"] is not None})
    return {
        "settings": {**settings, "tokenizer": tokenizer_name()},
        "machine": {"cores": cores, "search_concurrency": 1, "ingest_concurrency": ingest_concurrency},
        "ranked_turns": ranking_note(settings["recipe"], kinds),
        "evidence": evidence_summary(partials),
        "qa": {"enabled": qa_skipped is None, "skipped_reason": qa_skipped, "llm_usage": usage},
        "conversations": {p["conversation_id"]: {"questions": len(p["rows"]), "ingest": p["ingest"],
                                                 "facts": p["facts"]} for p in partials},
        "systems": {s: summarize_system(rows, s) for s in present},
        "questions": rows,
    }
