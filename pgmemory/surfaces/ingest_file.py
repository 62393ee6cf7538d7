"""`pgmemory ingest FILE`, `pgmemory retry` and `pgmemory communities rebuild|refresh`: bulk work with
progress (a bar on a terminal, plain lines in logs: pgmemory/progress.py) and a summary; ingest runs end with
the community upkeep of the groups they touched."""
from __future__ import annotations

import codecs
import json
import sys
from collections import Counter
from typing import Any

from pgmemory.errors import InvalidInput, WorkerUnreachable, error_line
from pgmemory.ingest.pipeline import EpisodeResult, IngestError, NotAttempted
from pgmemory.ingest.reembed import groups_to_walk
from pgmemory.memory import Memory, validate_batch
from pgmemory.progress import Progress
from pgmemory.validate import read_input_file


def read_jsonl(path: str) -> tuple[list[dict[str, Any]], list[int]]:
    """Episodes of a UTF-8 JSON Lines file (a leading BOM is accepted, blank lines skipped) and
    the line number of each; a bad line (invalid UTF-8 or JSON, not an object) is named by its number."""
    data = sys.stdin.buffer.read() if path == "-" else read_input_file(path)
    if data.startswith(codecs.BOM_UTF8):
        data = data[len(codecs.BOM_UTF8):]
    items, numbers = [], []
    for n, raw in enumerate(data.split(b"\n"), start=1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidInput(f"{path}: line {n}: not valid UTF-8 (byte {exc.start + 1})") from None
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except (json.JSONDecodeError, RecursionError) as exc:
            raise InvalidInput(f"{path}: line {n}: not valid JSON: {str(exc)[:200]}") from None
        if not isinstance(item, dict):
            raise InvalidInput(f"{path}: line {n}: expected a JSON object")
        items.append(item)
        numbers.append(n)
    return items, numbers


SHOWN_FAILURES = 20  # failed episodes listed one per line (then how many more)


def _report(results: list[EpisodeResult | IngestError], lines: list[int] | None = None) -> int:
    """Print the run's summary and each failed episode with its reason (`lines`: the input line
    of each result, named in front of it); 1 when any episode failed or was not attempted."""
    errors = [r for r in results if isinstance(r, IngestError)]
    untried = [r for r in errors if isinstance(r.cause, NotAttempted)]
    failed = [r for r in errors if not isinstance(r.cause, NotAttempted)]
    unreachable = [r for r in failed if isinstance(r.cause, WorkerUnreachable)]
    done = [r for r in results if isinstance(r, EpisodeResult)]
    status = Counter(r.status for r in done)
    calls = sum(r.llm_calls for r in done) + sum(r.usage.calls for r in failed)  # (failed calls are billed too)
    tokens = sum(r.prompt_tokens + r.completion_tokens for r in done) + sum(r.usage.total_tokens for r in failed)
    facts = sum(len(r.facts_created) for r in done)
    entities = sum(len(r.entities_created) for r in done)
    busy = f", {status['busy']} being processed by another worker" if status["busy"] else ""
    not_sent = f", {len(untried)} not attempted" if untried else ""
    print(f"{status['done']} ingested, {status['skipped']} already present, {len(failed)} failed{not_sent}{busy}; "
          f"{entities} entities and {facts} facts created; {calls} LLM calls, {tokens} tokens")
    if lines is None:
        for err in failed[:10]:
            print(f"  failed: {err}", file=sys.stderr)
    else:
        listed = [(n, r) for n, r in zip(lines, results) if isinstance(r, IngestError)
                  and not isinstance(r.cause, NotAttempted)]
        for n, err in listed[:SHOWN_FAILURES]:
            print(f"  line {n}: {error_line(err)}", file=sys.stderr)
        if len(listed) > SHOWN_FAILURES:
            print(f"  ... and {len(listed) - SHOWN_FAILURES} more failed", file=sys.stderr)
    if unreachable:
        nodes = ", ".join(sorted({r.cause.node for r in unreachable}))
        print(f"  {len(unreachable)} episodes wait for Citus worker(s) {nodes}, unreachable: once back, run the "
              "same command again (episodes already done are skipped)", file=sys.stderr)
    if untried:
        print(f"  {len(untried)} episodes not attempted: the provider refused the configuration (the API key, "
              "the model or the endpoint); fix it and run the same command again", file=sys.stderr)
    elif len(failed) > len(unreachable):
        print("  run `pgmemory retry` to try the failed episodes again", file=sys.stderr)
    return 1 if errors else 0


async def ingest_file(path: str, *, concurrency: int = 4) -> int:
    """Validate the whole file first (nothing written if a line is bad), then ingest it. A file with
    no episode (empty, or blank lines only) says so, without opening the database."""
    items, numbers = read_jsonl(path)
    if not items:
        print(f"pgmemory: {'standard input' if path == '-' else path} holds no episode: nothing to ingest",
              file=sys.stderr)
        return 0
    try:
        validate_batch(items, positions=numbers, unit="line")
    except InvalidInput as exc:
        raise InvalidInput(f"{path}: {exc}") from None
    async with await Memory.open() as memory:
        with Progress(total=len(items), unit="ep", desc="ingest") as bar:
            results = await memory.add_episodes(items, concurrency=concurrency,
                                                on_done=lambda _: bar.update(1))
        rc = _report(results, numbers)
        await refresh_groups(memory, {r.group_id for r in results if isinstance(r, EpisodeResult)})
    return rc


async def retry(group_id: str | None) -> int:
    """Re-run failed and pending episodes with a progress bar. A group named that holds nothing is
    refused (like `pgmemory reembed`), not reported as "0 ingested": a mistyped group says so."""
    async with await Memory.open() as memory:
        if group_id is not None:
            await groups_to_walk(memory.pool, group_id)
        with Progress(unit="ep", desc="retry") as bar:
            results = await memory.retry(group_id, on_done=lambda _: bar.update(1))
        rc = _report(results)
        await refresh_groups(memory, {r.group_id for r in results if isinstance(r, EpisodeResult)})
    return rc


async def refresh_groups(memory: Memory, groups: set[str], *, rebuild: bool = False, force: bool = False) -> int:
    """Community upkeep at the end of a run (or a forced rebuild), with one summary line (and one
    on stderr when the LLM failed on some summaries: they stay marked for the next refresh).
    Returns the number of summaries that failed."""
    if not groups:
        return 0
    detected = refreshed = calls = failed = 0
    errors = []
    # Counted in summaries, not groups: one large group's LLM summaries take minutes.
    with Progress(unit="summaries", desc="communities") as bar:
        for group in sorted(groups):
            out = await (memory.build_communities(group, on_summary=bar.update) if rebuild
                         else memory.refresh_communities(group, force=force, on_summary=bar.update))
            detected += out.detection is not None
            refreshed += out.refreshed
            calls += out.usage.calls
            failed += out.failed
            if out.error:
                errors.append(f"{group}: {out.error}")
    print(f"communities: {detected} of {len(groups)} groups detected afresh, {refreshed} summaries written"
          f"{f', {failed} failed' if failed else ''}; {calls} LLM calls")
    if failed:
        print(f"  summaries failed (left marked; `pgmemory communities refresh` writes them): {errors[-1]}",
              file=sys.stderr)
    return failed
