"""Ingestion per episode with the local (ONNX) embedder and the offline extractor: a baseline
revision against the current tree, one process per run, alternating baseline / current.

The baseline is `git archive`d into a temporary directory; each run imports pgmemory from its own
tree (and bench.embed's helpers, which both have), ingests ~1,100-character turns and LoCoMo chat
turns into a fresh group of a fresh database, and prints wall p50/p95 and CPU p50 per episode.

    PGMEMORY_DATA_DIR=/tmp/pgm-embed python -m bench.embed_ab --baseline HEAD~1 --rounds 2
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOCOMO = ROOT.parent / "shared" / "data" / "locomo" / "locomo-dev.json"

# Run in each tree (cwd and sys.path[0] = that tree): one fresh database, both turn kinds.
CHILD = """
import asyncio, json, os, sys, uuid
from bench.embed import long_turns, make, stats_ms, time_ingest
from bench.ingest import create_database, drop_database
from pgmemory import Memory
from pgmemory.eval.readers import read_locomo
from pgmemory.memory import default_extractor
from pgmemory.storage.connect import resolve_dsn

async def main(path, n_long, n_chat):
    admin = resolve_dsn()
    db, dsn = create_database(admin, "embed_ab")
    try:
        convs = read_locomo(path)
        longs = long_turns(convs[-1], n_long)
        chat = [(t.speaker, t.text) for t in convs[0].turns][:n_chat]
        embedder = make("onnx", 0, cache=True)
        await embedder.embed(["warm up"])
        out = {"load_start": round(os.getloadavg()[0], 2)}
        async with await Memory.open(dsn, embedder=embedder, extractor=default_extractor()) as memory:
            await time_ingest(memory, "warm-" + uuid.uuid4().hex[:6], chat[:5])
            out["long"] = stats_ms(await time_ingest(memory, "long-" + uuid.uuid4().hex[:6], longs))
            out["chat"] = stats_ms(await time_ingest(memory, "chat-" + uuid.uuid4().hex[:6], chat))
        out["load_end"] = round(os.getloadavg()[0], 2)
        print(json.dumps(out))
    finally:
        drop_database(admin, db)

asyncio.run(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))
"""


def run(tree: Path, args: argparse.Namespace) -> dict:
    """One child run in `tree`; its JSON line."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run([sys.executable, "-c", CHILD, str(args.locomo), str(args.long_turns), str(args.chat_turns)],
                          cwd=tree, env=env, check=True, capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", default="HEAD~1", help="git revision of the baseline tree")
    ap.add_argument("--rounds", type=int, default=2, help="baseline / current pairs")
    ap.add_argument("--long-turns", type=int, default=40)
    ap.add_argument("--chat-turns", type=int, default=80)
    ap.add_argument("--locomo", type=Path, default=LOCOMO)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="pgm-embed-ab-") as tmp:
        archive = subprocess.run(["git", "archive", args.baseline], cwd=ROOT, check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        for n in range(args.rounds):
            for label, tree in (("baseline", Path(tmp)), ("current", ROOT)):
                r = run(tree, args)
                print(f"round {n + 1} {label:8s} 1,100-char turns p50 {r['long']['p50']:7.1f} p95 {r['long']['p95']:7.1f}"
                      f" cpu {r['long']['cpu_p50']:6.1f} ms | LoCoMo turns p50 {r['chat']['p50']:6.1f} p95 "
                      f"{r['chat']['p95']:6.1f} cpu {r['chat']['cpu_p50']:5.1f} ms | load {r['load_start']}-{r['load_end']}",
                      flush=True)


if __name__ == "__main__":
    main()
