"""LongMemEval oracle, size only (issue 15): a synthetic set shaped like the oracle file (500
questions, 2,176 turns of ~1,100 characters, ~25 entity names per turn) ingested end to end as
`pgmemory eval longmemeval` ingests it, with the local embedder and the offline extractor; prints
the wall time against the 10-minute target. Nothing is downloaded: the text is built from the
LoCoMo dev file on this machine.

    PGMEMORY_DATA_DIR=/tmp/pgm-lme python -m bench.longmemeval_size          # the full size, once
    python -m bench.longmemeval_size --questions 50 --turns 218               # a tenth

Shape: each question is its own group (`eval-longmemeval-<id>`), its turns alternate user /
assistant in sessions of two turns on successive days, ingested by `pgmemory.eval.ingestion.
ingest_conversation` (`--concurrency` questions at once, 4 as in the harness; communities refreshed
per group, as the harness does). A turn is ~600 characters of consecutive LoCoMo turns followed by
sentences that name entities (LoCoMo's capitalised words paired into names, 60% new, 40% said
before in the same question) up to ~1,100 characters. The offline extractor's entity count per
turn is printed (the shape check). A fresh database on the configured server, dropped at the end.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import random
import re
import statistics
import sys
import time
from datetime import timedelta
from pathlib import Path

from bench.ingest import create_database, drop_database, machine
from pgmemory import Memory
from pgmemory.eval.ingestion import ingest_conversation
from pgmemory.eval.readers import Conversation, Turn, read_locomo
from pgmemory.extract.rules import RuleExtractor
from pgmemory.extract.types import EpisodeInput
from pgmemory.providers.embedder import LocalEmbedder
from pgmemory.providers.llm import Usage
from pgmemory.storage.connect import resolve_dsn

LOCOMO = Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo" / "locomo-dev.json"
ORACLE_QUESTIONS, ORACLE_TURNS, TURN_CHARS, NAMES_PER_TURN = 500, 2176, 1100, 25
TARGET_MINUTES = 10.0
_WORD = re.compile(r"\b[A-Z][a-z]{2,}\b")
_TEMPLATES = ["You might also look at {}.", "{} came up as well.", "Worth a visit: {}.", "I heard about {} too.",
              "Have you tried {}?", "Others mention {}."]


def load() -> float:
    return round(os.getloadavg()[0], 2)


def build(locomo: Path, questions: int, turns: int, seed: int) -> list[Conversation]:
    """`questions` conversations holding `turns` turns in all (LongMemEval-shaped, see the module doc)."""
    rng = random.Random(seed)
    convs = read_locomo(locomo)
    texts = [t.text for c in convs for t in c.turns]
    words = sorted({w for t in texts for w in _WORD.findall(t)})
    start = convs[0].turns[0].time
    out = []
    at = 0
    for q in range(questions):
        n = turns // questions + (1 if q < turns % questions else 0)
        said: list[str] = []
        conv = Conversation(f"synthetic-{q:03d}")
        for i in range(n):
            body = []
            while sum(map(len, body)) < TURN_CHARS // 2 + 50:
                body.append(texts[at % len(texts)])
                at += 1
            text = " ".join(body)[: TURN_CHARS // 2 + 50].rsplit(" ", 1)[0]
            names = []
            for _ in range(NAMES_PER_TURN):
                name = rng.choice(said) if said and rng.random() < 0.4 else f"{rng.choice(words)} {rng.choice(words)}"
                names.append(name)
                said.append(name)
            while names and len(text) < TURN_CHARS:
                take, names = names[:3], names[3:]
                text += " " + rng.choice(_TEMPLATES).format(", ".join(take[:-1]) + " and " + take[-1]
                                                            if len(take) > 1 else take[0])
            conv.turns.append(Turn(f"s{i // 2}:{i % 2}", "user" if i % 2 == 0 else "assistant", text,
                                   start + timedelta(days=q + i // 2), f"s{i // 2}"))
        out.append(conv)
    return out


async def shape(conversations: list[Conversation], sample: int) -> tuple[float, float]:
    """Mean characters and mean offline-extracted entities per turn over the first `sample` turns."""
    turns = [t for c in conversations for t in c.turns][:sample]
    extractor = RuleExtractor()
    counts = [len((await extractor.extract(EpisodeInput(t.text, "message", t.time, t.speaker), [], Usage())).entities)
              for t in turns]
    return statistics.mean(len(t.text) for t in turns), statistics.mean(counts)


async def run(args: argparse.Namespace) -> None:
    conversations = build(args.locomo, args.questions, args.turns, args.seed)
    chars, names = await shape(conversations, 200)
    total = sum(len(c.turns) for c in conversations)
    print(f"{len(conversations)} questions, {total} turns, mean {chars:.0f} characters and {names:.1f} offline-"
          f"extracted entities per turn (first 200)", flush=True)
    admin = resolve_dsn()
    info = machine(admin)
    print(f"machine: {info['nproc']} cores, {info['cpu']}, commit {info['commit']}", flush=True)
    db, dsn = create_database(admin, "lme_size")
    try:
        embedder = LocalEmbedder()
        await embedder.embed(["warm up"])  # model load (and ONNX export when the cache is cold) not timed
        async with await Memory.open(dsn, embedder=embedder, extractor=RuleExtractor()) as memory:
            gate = asyncio.Semaphore(args.concurrency)
            done = 0
            load_start, started = load(), time.perf_counter()

            async def one(conversation: Conversation) -> None:
                nonlocal done
                async with gate:
                    report = await ingest_conversation(memory, "longmemeval", conversation, lambda: None)
                    assert report.failed == 0, f"{conversation.conversation_id}: {report.failed} failed"
                done += 1
                if done % args.every == 0:
                    print(f"  {done}/{len(conversations)} questions, {time.perf_counter() - started:.0f} s, "
                          f"load {load()}", flush=True)

            await asyncio.gather(*(one(c) for c in conversations))
            wall = time.perf_counter() - started
        print(f"\ningested {total} turns in {wall / 60:.2f} min ({wall:.0f} s, {total / wall:.1f} turns/s, "
              f"{1000 * wall / total:.0f} ms per turn wall at concurrency {args.concurrency}); "
              f"load average 1m {load_start} at start, {load()} at end")
        scaled = wall * ORACLE_TURNS / total / 60
        print(f"LongMemEval oracle size ({ORACLE_TURNS} turns): {scaled:.2f} min"
              f"{' (scaled from this run)' if total != ORACLE_TURNS else ''} (target <= {TARGET_MINUTES} min)")
    finally:
        drop_database(admin, db)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.longmemeval_size", description=__doc__.split("\n")[0])
    ap.add_argument("--questions", type=int, default=ORACLE_QUESTIONS)
    ap.add_argument("--turns", type=int, default=ORACLE_TURNS)
    ap.add_argument("--concurrency", type=int, default=4, help="questions ingested at once (the harness's default)")
    ap.add_argument("--every", type=int, default=50, help="print a progress line every N questions")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--locomo", type=Path, default=LOCOMO)
    args = ap.parse_args(argv)
    if args.turns < args.questions or args.questions < 1:
        sys.exit("--turns must be >= --questions >= 1")
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
