"""Choose one search setting by cross-validation between benchmark conversations.

Each candidate value of one ``SearchConfig`` field is tried on every
conversation: its questions with gold evidence (adversarial ones left out, as
in the issue's goal) are searched and scored by recall@k of the gold turns,
with pgmemory's turns ranked as the harness ranks them. Then every
conversation in turn is held out: the value is chosen on the others, and the
held-out recall is reported with the recipe's own value (before) and with the
chosen one (after). A value is never chosen on the conversation it is scored on.

    python -m pgmemory.eval.crossval locomo-dev.json --field session_weight --values 0,0.5,1
"""
from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

from pgmemory.errors import InvalidInput, PgMemoryError
from pgmemory.eval.harness import load_conversations
from pgmemory.eval.ingestion import episode_map, group_id, ingest_conversation
from pgmemory.eval.metrics import DEFAULT_KS, mean, recall_at_k
from pgmemory.eval.readers import Conversation, EvalFormatError
from pgmemory.eval.retrieval import rank_turns
from pgmemory.memory import Memory, default_extractor
from pgmemory.search.config import resolve_config


async def recall_table(memory: Memory, benchmark: str, conversation: Conversation, recipe: str,
                       field: str, values: Sequence[Any], k: int) -> dict[Any, dict[str, float | None]]:
    """value -> {"all": mean recall@k, <category>: mean recall@k} over the conversation's
    non-adversarial questions with evidence (the conversation is ingested, or its group reused)."""
    await ingest_conversation(memory, benchmark, conversation, lambda: None)
    group = group_id(benchmark, conversation.conversation_id)
    turn_of = episode_map(group, conversation)
    questions = [q for q in conversation.questions if q.evidence and not q.adversarial]
    table: dict[Any, dict[str, float | None]] = {}
    for value in values:
        config = resolve_config(recipe, **{field: value})
        scores: dict[str, list[float | None]] = {}
        for q in questions:
            results = await memory.search(q.question, group_ids=[group], limit=max(DEFAULT_KS), config=config)
            recall = recall_at_k(rank_turns(results, turn_of, max(DEFAULT_KS)).ids, q.evidence, k)
            scores.setdefault("all", []).append(recall)
            scores.setdefault(q.category, []).append(recall)
        table[value] = {name: mean(values_) for name, values_ in sorted(scores.items())}
    return table


def choose(tables: Sequence[dict[Any, dict[str, float | None]]], base: Any) -> Any:
    """The value with the best mean overall recall over `tables`; ties go to `base`, then to
    the earlier value."""
    values = list(tables[0])

    def score(value: Any) -> tuple[float, bool]:
        return (mean(t[value]["all"] for t in tables) or 0.0, value == base)
    return max(values, key=lambda v: (score(v), -values.index(v)))


def folds(tables: dict[str, dict[Any, dict[str, float | None]]], base: Any) -> list[dict[str, Any]]:
    """Leave-one-conversation-out: per held-out conversation, the value chosen on the others and
    its recall before (base value) and after (chosen value), overall and per category."""
    out = []
    for held_out, table in tables.items():
        chosen = choose([t for c, t in tables.items() if c != held_out], base)
        out.append({"held_out": held_out, "chosen": chosen, "before": table[base], "after": table[chosen]})
    return out


def require_folds(conversations: Sequence[Conversation]) -> None:
    """Refuse fewer than two conversations: nothing to hold out."""
    if len(conversations) < 2:
        raise InvalidInput("cross-validation needs at least two conversations")


async def cross_validate(memory: Memory, benchmark: str, conversations: Sequence[Conversation], recipe: str,
                         field: str, values: Sequence[Any], k: int = 10) -> dict[str, Any]:
    """Recall per value and conversation, and the leave-one-out folds (at least two conversations)."""
    require_folds(conversations)
    base = getattr(resolve_config(recipe), field)
    values = list(dict.fromkeys([base, *values]))
    tables = {c.conversation_id: await recall_table(memory, benchmark, c, recipe, field, values, k)
              for c in conversations}
    return {"recipe": recipe, "field": field, "base": base, "k": k, "tables": tables, "folds": folds(tables, base)}


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f}"


def report_lines(result: dict[str, Any]) -> list[str]:
    """Markdown: recall per value and conversation, then the folds before/after."""
    k, field = result["k"], result["field"]
    lines = [f"recipe `{result['recipe']}`, {field} (recipe value {result['base']}), R@{k} of the "
             "non-adversarial questions with evidence", "",
             f"| {field} | " + " | ".join(result["tables"]) + " |", "|---|" + "---|" * len(result["tables"])]
    for value in next(iter(result["tables"].values())):
        lines.append(f"| {value} | " + " | ".join(_pct(t[value]["all"]) for t in result["tables"].values()) + " |")
    lines += ["", "| held out | chosen | before | after | multi-hop before | multi-hop after |", "|---|---|---|---|---|---|"]
    for f in result["folds"]:
        lines.append(f"| {f['held_out']} | {f['chosen']} | {_pct(f['before']['all'])} | {_pct(f['after']['all'])} | "
                     f"{_pct(f['before'].get('multi-hop'))} | {_pct(f['after'].get('multi-hop'))} |")
    return lines


def _parse_values(field: str, text: str) -> list[Any]:
    kinds = {f.name: f.type for f in fields(resolve_config(None))}
    kind = {"float": float, "int": int, "int | None": int}.get(str(kinds.get(field)))
    if kind is None:
        raise InvalidInput(f"--field must be a numeric SearchConfig field, got {field!r}")
    try:
        return [kind(v) for v in text.split(",") if v.strip()]
    except ValueError as exc:
        raise InvalidInput(f"--values: {exc}") from exc


async def _main(args: argparse.Namespace) -> None:
    values = _parse_values(args.field, args.values)
    only = tuple(i.strip() for i in (args.conversations or "").split(",") if i.strip())
    conversations = load_conversations(args.benchmark, Path(args.path), only)
    require_folds(conversations)
    async with await Memory.open(extractor=default_extractor(None)) as memory:
        result = await cross_validate(memory, args.benchmark, conversations, args.recipe, args.field, values, args.k)
    print("\n".join(report_lines(result)))


def main(argv: list[str] | None = None) -> int:
    """Command line: print the table and the folds; errors are one line."""
    parser = argparse.ArgumentParser(prog="python -m pgmemory.eval.crossval", description=__doc__.split("\n")[0])
    parser.add_argument("path", help="the benchmark file")
    parser.add_argument("--benchmark", default="locomo", choices=("locomo", "longmemeval"))
    parser.add_argument("--conversations", help="comma-separated ids (default: all)")
    parser.add_argument("--recipe", default="combined_hybrid_rrf")
    parser.add_argument("--field", required=True, help="a numeric SearchConfig field, e.g. session_weight")
    parser.add_argument("--values", required=True, help="comma-separated candidate values")
    parser.add_argument("--k", type=int, default=10, choices=DEFAULT_KS)
    args = parser.parse_args(argv)
    try:
        asyncio.run(_main(args))
    except (PgMemoryError, EvalFormatError) as exc:
        print(f"pgmemory: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
