"""`pgmemory ingest FILE` and `pgmemory retry`: bulk ingestion with a progress bar and a summary."""
from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from tqdm import tqdm

from pgmemory.errors import InvalidInput
from pgmemory.ingest.pipeline import EpisodeResult, IngestError
from pgmemory.memory import Memory, validate_batch


def read_jsonl(path: str) -> list[dict[str, Any]]:
    """Episodes of a JSON Lines file (blank lines skipped); a bad line is named by its number."""
    stream = sys.stdin if path == "-" else None
    if stream is None and not Path(path).is_file():
        raise InvalidInput(f"{path}: no such file")
    lines = (stream or open(path, encoding="utf-8")).read().splitlines()
    out = []
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InvalidInput(f"{path} line {n}: not valid JSON: {exc}") from None
        if not isinstance(item, dict):
            raise InvalidInput(f"{path} line {n}: expected a JSON object")
        out.append(item)
    return out


def _report(results: list[EpisodeResult | IngestError]) -> int:
    failed = [r for r in results if isinstance(r, IngestError)]
    done = [r for r in results if isinstance(r, EpisodeResult)]
    status = Counter(r.status for r in done)
    calls = sum(r.llm_calls for r in done)
    tokens = sum(r.prompt_tokens + r.completion_tokens for r in done)
    facts = sum(len(r.facts_created) for r in done)
    entities = sum(len(r.entities_created) for r in done)
    busy = f", {status['busy']} being processed by another worker" if status["busy"] else ""
    print(f"{status['done']} ingested, {status['skipped']} already present, {len(failed)} failed{busy}; "
          f"{entities} entities and {facts} facts created; {calls} LLM calls, {tokens} tokens")
    for err in failed[:10]:
        print(f"  failed: {err}", file=sys.stderr)
    if failed:
        print("  run `pgmemory retry` to try the failed episodes again", file=sys.stderr)
    return 1 if failed else 0


async def ingest_file(path: str, *, concurrency: int = 4) -> int:
    """Validate the whole file first (nothing written if a line is bad), then ingest it."""
    items = read_jsonl(path)
    try:
        validate_batch(items)
    except InvalidInput as exc:
        raise InvalidInput(f"{path}: {exc} (counting non-blank lines)") from None
    async with await Memory.open() as memory:
        with tqdm(total=len(items), unit="ep", desc="ingest") as bar:
            results = await memory.add_episodes(items, concurrency=concurrency,
                                                on_done=lambda _: bar.update(1))
    return _report(results)


async def retry(group_id: str | None) -> int:
    """Re-run failed and pending episodes with a progress bar."""
    async with await Memory.open() as memory:
        with tqdm(unit="ep", desc="retry") as bar:
            results = await memory.retry(group_id, on_done=lambda _: bar.update(1))
    return _report(results)
