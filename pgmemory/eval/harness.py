"""Run a benchmark end to end: ingest each conversation, retrieve, answer and judge, write results.

A run owns one output directory, named in ``run.json`` by its settings and
conversations; another run never writes over it (``--force`` replaces it).
First every pending conversation is ingested (``concurrency`` at once); then
the conversations are evaluated one after another, their questions searched
one at a time with nothing else running, so search latency is what one user
sees (query embedding included), not a figure taken under ingestion load.
Every conversation is saved to ``<output>/partial/<id>.json`` as soon as it is
finished; rerunning the same run skips those, so a crash halfway redoes only
unfinished conversations. ``results.json`` and ``report.md`` are rebuilt from
the partial files at the end.
"""
from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pgmemory.errors import InvalidInput
from pgmemory.eval.baselines import BM25Index, DenseIndex
from pgmemory.eval.ingestion import IngestReport, build_marker, episode_map, group_id, ingest_conversation
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
from pgmemory.eval.retrieval import full_transcript, rank_turns, render_turns
from pgmemory.memory import Memory, default_extractor
from pgmemory.progress import Progress
from pgmemory.search.config import resolve_config
from pgmemory.validate import check_input_file
from pgmemory.providers.embed_cache import EmbeddingCache
from pgmemory.providers.embedder import available_cores
from pgmemory.providers.reranker import cross_encoder_from_env
from pgmemory.providers.llm import LLMClient, Usage
from pgmemory.providers.tokens import count_tokens

BENCHMARKS = ("locomo", "longmemeval")
HARNESS_VERSION = 2  # bump when a partial result's content changes, so older partials are redone
RUN_FILE = "run.json"
OWNED_FILES = (RUN_FILE, "results.json", "report.md", "recall_by_category.png", "latency.png")
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
    force: bool = False


def default_output(benchmark: str, recipe: str, now: datetime | None = None) -> Path:
    """A fresh run directory: ``eval-runs/<benchmark>-<recipe>-<UTC timestamp>``, with ``-2``,
    ``-3``, ... when a run started in the same second already took that name."""
    stamp = (now or datetime.now(timezone.utc)).strftime("%Y%m%dT%H%M%SZ")
    base = Path("eval-runs") / f"{benchmark}-{recipe}-{stamp}"
    for n in range(1, 1000):
        path = base if n == 1 else base.with_name(f"{base.name}-{n}")
        try:
            path.mkdir(parents=True)  # taken atomically: two runs never share a directory
            return path
        except FileExistsError:
            continue
        except OSError as exc:
            raise InvalidInput(f"cannot create the run directory {path}: {exc.strerror}") from exc
    raise InvalidInput(f"{base}: too many runs started in the same second; pass --output")


def load_conversations(benchmark: str, path: Path, only: Sequence[str] = ()) -> list[Conversation]:
    """Read the benchmark file (optionally only some ids); a file of the other benchmark is named."""
    check_input_file(str(path))
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
    if not conversations:
        raise InvalidInput(f"{path.name}: no conversations to evaluate")
    if not any(c.questions for c in conversations):
        raise InvalidInput(f"{path.name}: no questions to evaluate")
    return conversations


def file_digest(path: Path) -> str:
    """A short hash of a benchmark file's bytes: a run is of one file, not of one file name."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()[:16]


def settings(options: EvalOptions, memory: Memory, llm: LLMClient | None) -> dict[str, Any]:
    """The settings a partial result depends on; a partial made with other settings is redone."""
    return {
        "benchmark": options.benchmark,
        "file": options.path.name,
        "file_sha256": file_digest(options.path),
        "recipe": options.recipe,
        "k": options.k,
        "ks": list(DEFAULT_KS),
        "build": build_marker(memory),
        "llm": llm.model if llm is not None else None,
        "harness": HARNESS_VERSION,
    }


def _describe(manifest: Any) -> str:
    try:
        s = manifest["settings"]
        return (f"a run of recipe {s['recipe']} with k={s['k']} on {s['file']}"
                f"{' (sha256 ' + s['file_sha256'] + '...)' if s.get('file_sha256') else ''} "
                f"({len(manifest['conversations'])} conversations, {s['build'].strip('[]')})")
    except (TypeError, KeyError, AttributeError):
        return "files of another run"


def claim_output(output: Path, manifest: dict[str, Any], force: bool) -> None:
    """Make `output` this run's directory: resume the same run, refuse another one's (or any
    other non-empty directory) unless `force`, which removes only the files a run writes."""
    if output.exists() and not output.is_dir():
        raise InvalidInput(f"--output {output} is a file, not a directory")
    try:
        output.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InvalidInput(f"--output {output}: cannot create the directory ({exc.strerror})") from exc
    if output.is_dir() and any(output.iterdir()):
        try:
            existing = json.loads((output / RUN_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            existing = None
        if existing == manifest:
            return
        if not force:
            raise InvalidInput(f"{output} already holds {_describe(existing)}; choose another --output "
                               "(or leave it out for a fresh run directory), or pass --force to replace it")
        for name in OWNED_FILES:
            (output / name).unlink(missing_ok=True)
        for path in (output / "partial").glob("*.json"):
            path.unlink()
    write_json(output / RUN_FILE, manifest)


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


def machine() -> dict[str, Any]:
    """Where latency was measured: CPU cores and how many searches ran at once (always one)."""
    return {"cores": available_cores(), "search_concurrency": 1}


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
    """Search and context for one question, each timed as a user sees it: query embedding included."""
    started = time.perf_counter()
    results = await run.memory.search(question.question, group_ids=[conv.group], limit=max(DEFAULT_KS),
                                      config=run.options.recipe)
    search_ms = (time.perf_counter() - started) * 1000
    _forget(run.memory, [question.question])  # the context call embeds its query too, as a user's does
    started = time.perf_counter()
    context = await run.memory.context(question.question, group_ids=[conv.group], limit=run.options.k,
                                       config=run.options.recipe, episodes=True)
    context_ms = (time.perf_counter() - started) * 1000
    ranked = rank_turns(results, conv.turn_of, max(DEFAULT_KS))
    return {"retrieved": ranked.ids, "from_episodes": ranked.from_episodes, "from_facts": ranked.from_facts,
            "facts": len(results.facts), "context": context, **_size(context),
            "search_ms": round(search_ms, 2), "context_ms": round(context_ms, 2)}


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


async def retrieve_question(run: _Run, conv: _Conversation, question: Question) -> dict[str, Any]:
    """One question through pgmemory and the turn baselines (no LLM): its row, before QA."""
    systems = {"pgmemory": await _pgmemory(run, conv, question)}
    for name, index in conv.indexes.items():
        systems[name] = _baseline(index, conv, question, run.options.k)
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


async def answer_question(run: _Run, conv: _Conversation, question: Question, row: dict[str, Any]) -> None:
    """With an LLM: answer from pgmemory's context and from the full transcript, judge both."""
    assert run.llm is not None
    pgm = row["systems"]["pgmemory"]
    started = time.perf_counter()
    pgm["answer"] = await answer(run.llm, question, pgm["context"], conv.usage)
    pgm["latency_ms"] = round(pgm["search_ms"] + (time.perf_counter() - started) * 1000, 2)
    row["systems"]["full_context"] = await _full_context(run.llm, conv, question)
    answered = ("pgmemory", "full_context")
    verdicts = await asyncio.gather(*(judge(run.llm, run.options.benchmark, question,
                                            row["systems"][s]["answer"], conv.usage) for s in answered))
    for system, ok in zip(answered, verdicts):
        row["systems"][system]["correct"] = ok


def _forget(memory: Memory, texts: Sequence[str]) -> None:
    """Drop texts from the embedder's cache (when it has one): the dense baseline and the warm-up
    embed the questions first, and a timed search must embed its query as a user's does."""
    cache = getattr(memory.embedder, "cache", None)
    if isinstance(cache, EmbeddingCache):
        cache.discard(texts)


async def _indexes(memory: Memory, conversation: Conversation) -> dict[str, BM25Index | DenseIndex]:
    """BM25 and dense indexes over "speaker: text" of each turn (what pgmemory's full text of an
    episode holds too); dense uses pgmemory's embedder, every text embedded once."""
    turns = [replace(t, text=f"{t.speaker}: {t.text}") for t in conversation.turns]
    questions = [q.question for q in conversation.questions]
    texts = list(dict.fromkeys([t.text for t in turns] + questions))
    vectors = dict(zip(texts, await memory.embedder.embed(texts)))
    _forget(memory, questions)
    return {"bm25": BM25Index(turns), "dense": DenseIndex(turns, lambda batch: [vectors[t] for t in batch])}


async def evaluate_conversation(run: _Run, conversation: Conversation, report: IngestReport,
                                question_bar: Progress) -> dict[str, Any]:
    """Evaluate an ingested conversation's questions, one search at a time, then (with an LLM)
    answer and judge them concurrently; save its partial result."""
    if report.failed:
        question_bar.write(f"warning: {report.failed} of {report.episodes} turns of {conversation.conversation_id} "
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
    if conversation.questions:  # one untimed query: the first search of a group warms its caches
        await run.memory.search(conversation.questions[0].question, group_ids=[group], limit=max(DEFAULT_KS),
                                config=run.options.recipe)
        _forget(run.memory, [conversation.questions[0].question])
    rows = []
    for question in conversation.questions:
        rows.append(await retrieve_question(run, conv, question))
        question_bar.update(1)
    if run.llm is not None:
        gate = asyncio.Semaphore(max(1, run.options.concurrency))

        async def qa(question: Question, row: dict[str, Any]) -> None:
            async with gate:
                await answer_question(run, conv, question, row)
        await asyncio.gather(*(qa(q, r) for q, r in zip(conversation.questions, rows)))
    for row in rows:
        del row["systems"]["pgmemory"]["context"]
    data = {
        "settings": run.settings,
        "conversation_id": conversation.conversation_id,
        "machine": machine(),
        "ingest": report.to_dict(),
        "evidence": {**conversation.evidence_counts(),
                     "notes": [n.to_dict() for n in conversation.evidence_notes]},
        "turns_skipped": conversation.skipped_turns,
        "facts": await _fact_count(run.memory, group),
        "qa_usage": {"calls": conv.usage.calls, "prompt_tokens": conv.usage.prompt_tokens,
                     "completion_tokens": conv.usage.completion_tokens},
        "rows": rows,
    }
    write_json(partial_path(run.options.output, conversation.conversation_id), data)
    return data


async def _fact_count(memory: Memory, group: str) -> int:
    """Facts currently believed in a group: what a facts-only recipe can point from."""
    async with memory.pool.acquire() as conn:
        return await conn.fetchval("SELECT count(*) FROM pgmemory.facts WHERE group_id = $1"
                                   " AND upper_inf(recorded)", group)


async def _ingest_all(run: _Run, pending: Sequence[Conversation]) -> dict[str, IngestReport]:
    """Ingest (or reuse) every pending conversation, `concurrency` at once."""
    gate = asyncio.Semaphore(max(1, run.options.concurrency))
    reports: dict[str, IngestReport] = {}
    with Progress(total=sum(len(c.turns) for c in pending), unit="turn", desc="ingest") as bar:
        async def one(conversation: Conversation) -> None:
            async with gate:
                reports[conversation.conversation_id] = await ingest_conversation(
                    run.memory, run.options.benchmark, conversation, lambda: bar.update(1))
        await asyncio.gather(*(one(c) for c in pending))
    return reports


async def run_eval(options: EvalOptions, conversations: Sequence[Conversation], memory: Memory,
                   llm: LLMClient | None) -> dict[str, Any]:
    """Claim the output directory, ingest what is pending, evaluate it conversation by
    conversation, then write results.json and report.md."""
    expected = settings(options, memory, llm)
    claim_output(options.output, {"settings": expected,
                                  "conversations": [c.conversation_id for c in conversations]}, options.force)
    print(f"run directory: {options.output}", flush=True)
    if llm is None:
        print(QA_SKIPPED, flush=True)
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
    reports = await _ingest_all(run, pending)
    with Progress(total=sum(len(c.questions) for c in pending), unit="q", desc="questions") as question_bar:
        for conversation in pending:
            finished[conversation.conversation_id] = await evaluate_conversation(
                run, conversation, reports[conversation.conversation_id], question_bar)
    ordered = [finished[c.conversation_id] for c in conversations]
    results = build_results(ordered, expected, qa_skipped=None if llm is not None else QA_SKIPPED,
                            ingest_concurrency=options.concurrency,
                            kinds=resolve_config(options.recipe).kinds)
    write_json(options.output / "results.json", results)
    write_report(results, options.output)
    return results


async def run_cli(options: EvalOptions) -> int:
    """The `pgmemory eval` command: read the file, open memory (and the LLM if configured), run."""
    conversations = load_conversations(options.benchmark, options.path, options.only)
    llm = LLMClient.from_env()
    if resolve_config(options.recipe).reranker == "cross_encoder" and cross_encoder_from_env() is None:
        raise InvalidInput(f"recipe {options.recipe} reranks with a cross-encoder: configure an LLM endpoint "
                           "(PGMEMORY_LLM_BASE_URL) or a local model (PGMEMORY_CROSS_ENCODER) before ingesting")
    async with await Memory.open(extractor=default_extractor(llm)) as memory:
        results = await run_eval(options, conversations, memory, llm)
    for line in summary_lines(results):
        print(line)
    print(f"results: {options.output / 'results.json'}; report: {options.output / 'report.md'}")
    return 0
