"""Run a benchmark end to end: ingest each conversation, retrieve, answer and judge, write results.

Every conversation (LoCoMo sample, LongMemEval question) is evaluated into
``<output>/partial/<id>.json`` as soon as it is finished; a rerun with the same
settings skips those, so a crash halfway redoes only unfinished conversations.
``results.json`` and ``report.md`` are rebuilt from the partial files at the end.
"""
from __future__ import annotations

import asyncio
import json
import os
import re
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tqdm import tqdm

from pgmemory.errors import InvalidInput
from pgmemory.eval.baselines import BM25Index, DenseIndex
from pgmemory.eval.ingestion import build_marker, episode_map, group_id, ingest_conversation
from pgmemory.eval.metrics import DEFAULT_KS
from pgmemory.eval.qa import answer, judge
from pgmemory.eval.readers import (
    Conversation,
    EvalFormatError,
    Question,
    Turn,
    detect_format,
    read_locomo,
    read_longmemeval,
)
from pgmemory.eval.report import summary_lines, write_report
from pgmemory.eval.results import build_results
from pgmemory.eval.retrieval import full_transcript, ranked_turn_ids, render_turns
from pgmemory.memory import Memory, default_extractor
from pgmemory.providers.llm import LLMClient, Usage
from pgmemory.providers.tokens import count_tokens

BENCHMARKS = ("locomo", "longmemeval")
QA_SKIPPED = ("QA skipped: no LLM endpoint configured (set PGMEMORY_LLM_BASE_URL or OPENAI_API_KEY, "
              "and PGMEMORY_LLM_MODEL); running retrieval metrics only.")


@dataclass(frozen=True)
class EvalOptions:
    """What to evaluate and how."""

    benchmark: str
    path: Path
    output: Path
    only: tuple[str, ...] = ()
    recipe: str = "combined_hybrid_rrf"
    k: int = 10
    concurrency: int = 4


def load_conversations(benchmark: str, path: Path, only: Sequence[str] = ()) -> list[Conversation]:
    """Read the benchmark file (optionally only some ids); a file of the other benchmark is named."""
    if not path.is_file():
        raise InvalidInput(f"{path}: no such file")
    reader = read_locomo if benchmark == "locomo" else read_longmemeval
    try:
        conversations = reader(path)
    except EvalFormatError as exc:
        other = next(b for b in BENCHMARKS if b != benchmark)
        try:
            is_other = detect_format(path) == other
        except EvalFormatError:
            is_other = False
        if is_other:
            raise EvalFormatError(f"{path.name} is a {other} file: run `pgmemory eval {other} {path}`") from exc
        raise
    if only:
        known = {c.conversation_id for c in conversations}
        missing = [i for i in only if i not in known]
        if missing:
            what = "conversation" if benchmark == "locomo" else "question"
            raise InvalidInput(f"{path.name} has no {what} id {', '.join(missing)} "
                               f"(it has {len(known)}, e.g. {', '.join(sorted(known)[:5])})")
        conversations = [c for c in conversations if c.conversation_id in set(only)]
    return conversations


def settings(options: EvalOptions, memory: Memory, llm: LLMClient | None) -> dict[str, Any]:
    """The settings a partial result depends on; a partial made with other settings is redone."""
    return {
        "benchmark": options.benchmark,
        "file": options.path.name,
        "recipe": options.recipe,
        "k": options.k,
        "ks": list(DEFAULT_KS),
        "build": build_marker(memory),
        "llm": llm.model if llm is not None else None,
    }


def partial_path(output: Path, conversation_id: str) -> Path:
    """Where one conversation's finished result is kept."""
    return output / "partial" / (re.sub(r"[^A-Za-z0-9._-]", "_", conversation_id) + ".json")


def load_partial(path: Path, expected: dict[str, Any]) -> dict[str, Any] | None:
    """A finished conversation made with the expected settings, else None."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("settings") == expected else None


def write_json(path: Path, data: Any) -> None:
    """Write JSON atomically (temp file, then rename), so a crash never leaves half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, default=str), encoding="utf-8")
    os.replace(tmp, path)


def _size(text: str) -> dict[str, int]:
    return {"context_chars": len(text), "context_tokens": count_tokens(text)}


@dataclass
class _Run:
    """What every conversation of a run shares."""

    options: EvalOptions
    memory: Memory
    llm: LLMClient | None
    settings: dict[str, Any]


@dataclass
class _Conversation:
    """One conversation being evaluated: its group, turn lookups, baseline indexes, QA cost."""

    conversation: Conversation
    group: str
    turn_of: dict[uuid.UUID, str]
    turns: dict[str, Turn]
    indexes: dict[str, BM25Index | DenseIndex]
    transcript: str | None
    usage: Usage


async def _pgmemory(run: _Run, conv: _Conversation, question: Question) -> dict[str, Any]:
    results = await run.memory.search(question.question, group_ids=[conv.group], limit=max(DEFAULT_KS),
                                      config=run.options.recipe)
    started = time.perf_counter()
    context = await run.memory.context(question.question, group_ids=[conv.group], limit=run.options.k,
                                       config=run.options.recipe, episodes=True)
    search_ms = (time.perf_counter() - started) * 1000
    out: dict[str, Any] = {"retrieved": ranked_turn_ids(results, conv.turn_of), **_size(context),
                           "search_ms": round(search_ms, 2)}
    if run.llm is not None:
        started = time.perf_counter()
        out["answer"] = await answer(run.llm, question, context, conv.usage)
        out["latency_ms"] = round(search_ms + (time.perf_counter() - started) * 1000, 2)
    return out


def _baseline(index: BM25Index | DenseIndex, conv: _Conversation, question: Question,
              k: int) -> dict[str, Any]:
    retrieved = index.search(question.question, max(DEFAULT_KS))
    return {"retrieved": retrieved, **_size(render_turns(conv.turns[t] for t in retrieved[:k]))}


async def _full_context(llm: LLMClient, conv: _Conversation, question: Question) -> dict[str, Any]:
    transcript = conv.transcript or ""
    started = time.perf_counter()
    response = await answer(llm, question, transcript, conv.usage)
    return {**_size(transcript), "answer": response,
            "latency_ms": round((time.perf_counter() - started) * 1000, 2)}


async def evaluate_question(run: _Run, conv: _Conversation, question: Question) -> dict[str, Any]:
    """One question through pgmemory, the turn baselines and (with an LLM) full context."""
    systems = {"pgmemory": await _pgmemory(run, conv, question)}
    for name, index in conv.indexes.items():
        systems[name] = _baseline(index, conv, question, run.options.k)
    if run.llm is not None:
        systems["full_context"] = await _full_context(run.llm, conv, question)
        answered = ("pgmemory", "full_context")
        verdicts = await asyncio.gather(*(judge(run.llm, run.options.benchmark, question,
                                                systems[s]["answer"], conv.usage) for s in answered))
        for system, ok in zip(answered, verdicts):
            systems[system]["correct"] = ok
    return {
        "question_id": question.question_id,
        "conversation_id": conv.conversation.conversation_id,
        "category": question.category,
        "adversarial": question.adversarial,
        "question": question.question,
        "answer": question.answer,
        "gold": question.evidence,
        "systems": systems,
    }


async def _indexes(memory: Memory, conversation: Conversation) -> dict[str, BM25Index | DenseIndex]:
    """BM25 and dense indexes over "speaker: text" of each turn (what pgmemory's full text of an
    episode holds too); dense uses pgmemory's embedder, every text embedded once."""
    turns = [replace(t, text=f"{t.speaker}: {t.text}") for t in conversation.turns]
    texts = list(dict.fromkeys([t.text for t in turns] + [q.question for q in conversation.questions]))
    vectors = dict(zip(texts, await memory.embedder.embed(texts)))
    return {"bm25": BM25Index(turns), "dense": DenseIndex(turns, lambda batch: [vectors[t] for t in batch])}


async def evaluate_conversation(run: _Run, conversation: Conversation, ingest_bar: tqdm,
                                question_bar: tqdm) -> dict[str, Any]:
    """Ingest one conversation, evaluate its questions, save its partial result."""
    report = await ingest_conversation(run.memory, run.options.benchmark, conversation,
                                       lambda: ingest_bar.update(1))
    if report.failed:
        tqdm.write(f"warning: {report.failed} of {report.episodes} turns of {conversation.conversation_id} "
                   "failed to ingest; it is evaluated on the rest (see the ingestion table)")
    group = group_id(run.options.benchmark, conversation.conversation_id)
    conv = _Conversation(
        conversation=conversation,
        group=group,
        turn_of=episode_map(group, conversation),
        turns={t.turn_id: t for t in conversation.turns},
        indexes=await _indexes(run.memory, conversation),
        transcript=full_transcript(conversation.turns) if run.llm is not None else None,
        usage=Usage(),
    )
    rows = []
    for question in conversation.questions:
        rows.append(await evaluate_question(run, conv, question))
        question_bar.update(1)
    data = {
        "settings": run.settings,
        "conversation_id": conversation.conversation_id,
        "ingest": report.to_dict(),
        "qa_usage": {"calls": conv.usage.calls, "prompt_tokens": conv.usage.prompt_tokens,
                     "completion_tokens": conv.usage.completion_tokens},
        "rows": rows,
    }
    write_json(partial_path(run.options.output, conversation.conversation_id), data)
    return data


async def run_eval(options: EvalOptions, conversations: Sequence[Conversation], memory: Memory,
                   llm: LLMClient | None) -> dict[str, Any]:
    """Evaluate every conversation not already finished, then write results.json and report.md."""
    if llm is None:
        print(QA_SKIPPED, flush=True)
    expected = settings(options, memory, llm)
    finished: dict[str, dict[str, Any]] = {}
    for c in conversations:
        partial = load_partial(partial_path(options.output, c.conversation_id), expected)
        if partial is not None:
            finished[c.conversation_id] = partial
    pending = [c for c in conversations if c.conversation_id not in finished]
    if finished:
        print(f"resuming: {len(finished)} of {len(conversations)} conversations already evaluated "
              f"in {options.output / 'partial'}", flush=True)
    run = _Run(options, memory, llm, expected)
    gate = asyncio.Semaphore(max(1, options.concurrency))
    with tqdm(total=sum(len(c.turns) for c in pending), unit="turn", desc="ingest", position=0) as ingest_bar, \
            tqdm(total=sum(len(c.questions) for c in pending), unit="q", desc="questions",
                 position=1) as question_bar:

        async def one(conversation: Conversation) -> None:
            async with gate:
                finished[conversation.conversation_id] = await evaluate_conversation(
                    run, conversation, ingest_bar, question_bar)

        await asyncio.gather(*(one(c) for c in pending))
    ordered = [finished[c.conversation_id] for c in conversations]
    results = build_results(ordered, expected, qa_skipped=None if llm is not None else QA_SKIPPED)
    write_json(options.output / "results.json", results)
    write_report(results, options.output)
    return results


async def run_cli(options: EvalOptions) -> int:
    """The `pgmemory eval` command: read the file, open memory (and the LLM if configured), run."""
    conversations = load_conversations(options.benchmark, options.path, options.only)
    llm = LLMClient.from_env()
    async with await Memory.open(extractor=default_extractor(llm)) as memory:
        results = await run_eval(options, conversations, memory, llm)
    for line in summary_lines(results):
        print(line)
    print(f"results: {options.output / 'results.json'}; report: {options.output / 'report.md'}")
    return 0
