"""Local embedding cost (issue 15): query embedding, ingestion and search with the local model.

Every figure is measured in the same run for the baseline (the local embedder as it was before
issue 15: sentence-transformers, torch's default thread count, one encode at a time, no cache)
and for the current LocalEmbedder on ONNX Runtime and on torch; ratios are vs the baseline.

    python -m bench.embed                  # everything (~5 minutes on 2 cores)
    python -m bench.embed --queries 50 --locomo-turns 60 --long-turns 20   # quicker

Phases: (1) query embedding one at a time, quiet, then with two CPU-bound background processes
this script starts (and stops); (2) ingestion per episode (wall time of add_episode, offline
extractor) for LoCoMo chat turns and for ~1,100-character turns made by concatenating LoCoMo
turns, with the hash embedder as the floor (database + extractor only); (3) user-seen search
(Memory.search wall time, query embedding included, cache off) over one LoCoMo conversation.
The machine may be shared: the 1-minute load average is printed at the start of every phase.
The LongMemEval oracle file is not on this machine: its ingestion time is ESTIMATED as 2,176 x the
median per-episode time of the ~1,100-character turns; `python -m bench.longmemeval_size` measures
it end to end on a synthetic set of the oracle's size and shape.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from bench.ingest import create_database, drop_database, machine
from bench.stats import percentile
from pgmemory import Memory
from pgmemory.eval.readers import Conversation, read_locomo
from pgmemory.memory import default_extractor
from pgmemory.providers.embedder import LOCAL_DIM, LOCAL_MODEL_NAME, Embedder, HashEmbedder, LocalEmbedder
from pgmemory.providers.local_model import model_dir
from pgmemory.storage.connect import resolve_dsn

RESULTS = Path(__file__).parent / "results"
LOCOMO = Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo" / "locomo-dev.json"
LONGMEMEVAL_ORACLE_TURNS = 2176
LONG_TURN_CHARS = 1100
TARGETS = {"query_p50_quiet_ms": 10.0, "query_p50_loaded_over_quiet": 3.0, "locomo_turn_median_ms": 30.0,
           "long_turn_median_ms": 120.0, "longmemeval_minutes": 10.0, "search_p95_ms": 50.0}


class BaselineEmbedder:
    """The local embedder before issue 15: sentence-transformers with torch's default threads,
    one encode at a time under a lock, in asyncio.to_thread, nothing cached."""

    dim = LOCAL_DIM
    name = f"local:{LOCAL_MODEL_NAME}"

    def __init__(self, torch_threads: int) -> None:
        from sentence_transformers import SentenceTransformer

        self.torch_threads = torch_threads
        self.model = SentenceTransformer(str(model_dir()), device="cpu")
        self.lock = threading.Lock()

    async def embed(self, texts: list[str]) -> list[list[float]]:
        return await asyncio.to_thread(self._encode, list(texts))

    def _encode(self, texts: list[str]) -> list[list[float]]:
        with self.lock:
            return self.model.encode(texts, batch_size=64, normalize_embeddings=True,
                                     show_progress_bar=False).tolist()


def set_torch_threads(name: str, default_threads: int, embedder: Embedder) -> None:
    """torch's thread count is process-wide: give each variant its own before it is timed."""
    import torch

    if name == "baseline":
        torch.set_num_threads(default_threads)
    elif name == "torch":
        torch.set_num_threads(embedder.threads)


def load() -> float:
    return round(os.getloadavg()[0], 2)


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def stats_ms(samples: list[tuple[float, float]]) -> dict[str, float]:
    """Wall p50 / p95 / max and this process's CPU time p50 (all its threads), in milliseconds.

    The CPU figure is what the call cost this process, nearly independent of how busy the
    machine is (it leaves out the Postgres server's own CPU)."""
    ms = [w * 1000 for w, _ in samples]
    cpu = [c * 1000 for _, c in samples]
    return {"n": len(ms), "p50": round(percentile(ms, 50), 2), "p95": round(percentile(ms, 95), 2),
            "max": round(max(ms), 2), "cpu_p50": round(percentile(cpu, 50), 2)}


class Clock:
    """Wall and process CPU time of one timed block."""

    def __enter__(self) -> "Clock":
        self.wall, self.cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.sample = (time.perf_counter() - self.wall, time.process_time() - self.cpu)


def long_turns(conv: Conversation, n: int) -> list[tuple[str, str]]:
    """(speaker, ~1,100-character text) made by concatenating consecutive turns, cut at a word."""
    out, buf, speaker = [], [], None
    for turn in conv.turns:
        speaker = speaker or turn.speaker
        buf.append(turn.text)
        text = " ".join(buf)
        if len(text) >= LONG_TURN_CHARS:
            out.append((speaker, text[:LONG_TURN_CHARS].rsplit(" ", 1)[0]))
            buf, speaker = [], None
            if len(out) == n:
                break
    return out


class BusyCPU:
    """Two CPU-bound background processes, started and stopped by this benchmark."""

    def __enter__(self) -> "BusyCPU":
        self.procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
        time.sleep(0.5)
        return self

    def __exit__(self, *exc: object) -> None:
        for p in self.procs:
            p.kill()
            p.wait()


async def time_queries(embedder: Embedder, queries: list[str]) -> list[tuple[float, float]]:
    """(wall, CPU) seconds per query, embedded one at a time (after 5 warm-up calls)."""
    for q in queries[:5]:
        await embedder.embed([f"warm up {q}"])
    times = []
    for q in queries:
        with Clock() as c:
            await embedder.embed([q])
        times.append(c.sample)
    return times


async def time_ingest(memory: Memory, group: str, turns: list[tuple[str, str]]) -> list[tuple[float, float]]:
    """(wall, CPU) seconds per add_episode, one episode after the other into one fresh group."""
    times = []
    base = datetime(2023, 5, 1, tzinfo=timezone.utc).timestamp()
    for i, (speaker, text) in enumerate(turns):
        with Clock() as c:
            result = await memory.add_episode(group, text, actor=speaker,
                                              reference_time=datetime.fromtimestamp(base + 60 * i, timezone.utc))
        times.append(c.sample)
        assert result.status == "done"
    return times


async def time_search(memory: Memory, group: str, questions: list[str]) -> list[tuple[float, float]]:
    """(wall, CPU) seconds per Memory.search (query embedding included), after 5 warm-up searches."""
    for q in questions[:5]:
        await memory.search(f"warm up {q}", group_ids=[group])
    times = []
    for q in questions:
        with Clock() as c:
            await memory.search(q, group_ids=[group])
        times.append(c.sample)
    return times


def make(name: str, default_threads: int, cache: bool) -> Embedder:
    """A fresh embedder of one variant (the local ones with or without their LRU)."""
    if name == "baseline":
        return BaselineEmbedder(default_threads)
    if name == "hash":
        return HashEmbedder()
    return LocalEmbedder(runtime=name, cache_entries=4096 if cache else 0)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    default_threads = torch.get_num_threads()
    conv = read_locomo(args.locomo)[0]
    queries = [q.question for q in conv.questions][: args.queries]
    chat = [(t.speaker, t.text) for t in conv.turns][: args.locomo_turns]
    longs = long_turns(read_locomo(args.locomo)[-1], args.long_turns)
    variants = args.variants
    out: dict[str, Any] = {"default_torch_threads": default_threads, "phases": {}}
    admin = resolve_dsn()
    out["machine"] = machine(admin)
    db_name, dsn = create_database(admin, "embed")
    hash_db, hash_dsn = create_database(admin, "embed_hash")
    try:
        # warm every variant once (model load, ONNX export if the cache is cold) outside the timings
        for name in variants:
            e = make(name, default_threads, cache=False)
            set_torch_threads(name, default_threads, e)
            await e.embed(["warm up"])

        for label, busy in (("query_quiet", False), ("query_loaded", True)):
            log(f"{label}: load {load()}")
            phase: dict[str, Any] = {"load_1m_start": load()}
            ctx = BusyCPU() if busy else None
            try:
                if ctx:
                    ctx.__enter__()
                for name in variants:
                    e = make(name, default_threads, cache=False)
                    set_torch_threads(name, default_threads, e)
                    phase[name] = stats_ms(await time_queries(e, queries))
                    log(f"  {name}: {phase[name]}")
                cached = make("onnx" if "onnx" in variants else variants[-1], default_threads, cache=True)
                await cached.embed([queries[0]])
                phase["cache_hit"] = stats_ms(await time_queries(cached, [queries[0]] * len(queries)))
            finally:
                if ctx:
                    ctx.__exit__(None, None, None)
            phase["load_1m_end"] = load()
            out["phases"][label] = phase

        extractor = default_extractor()
        for label, turns in (("ingest_locomo_turns", chat), ("ingest_1100_char_turns", longs)):
            log(f"{label}: load {load()}")
            phase = {"load_1m_start": load(), "turns": len(turns),
                     "mean_chars": round(sum(len(t) for _, t in turns) / max(len(turns), 1))}
            for name in ["hash", *variants]:
                e = make(name, default_threads, cache=True)
                set_torch_threads(name, default_threads, e)
                sample = turns[: args.baseline_turns] if name == "baseline" else turns
                target = hash_dsn if name == "hash" else dsn  # a database keeps to one embedder
                async with await Memory.open(target, embedder=e, extractor=extractor) as memory:
                    phase[name] = stats_ms(await time_ingest(memory, f"{label}-{name}-{uuid.uuid4().hex[:6]}",
                                                             sample))
                log(f"  {name}: {phase[name]}")
            phase["load_1m_end"] = load()
            out["phases"][label] = phase

        log(f"search: ingesting {len(conv.turns)} LoCoMo turns; load {load()}")
        group = f"search-{uuid.uuid4().hex[:6]}"
        async with await Memory.open(dsn, embedder=make(variants[-1] if "onnx" not in variants else "onnx",
                                                        default_threads, True), extractor=extractor) as memory:
            await time_ingest(memory, group, [(t.speaker, t.text) for t in conv.turns])
        phase = {"load_1m_start": load(), "episodes": len(conv.turns), "queries": len(conv.questions)}
        for name in variants:
            e = make(name, default_threads, cache=False)
            set_torch_threads(name, default_threads, e)
            async with await Memory.open(dsn, embedder=e, extractor=extractor) as memory:
                phase[name] = stats_ms(await time_search(memory, group, [q.question for q in conv.questions]))
            log(f"  {name}: {phase[name]}")
        phase["load_1m_end"] = load()
        out["phases"]["search_locomo"] = phase
    finally:
        if not args.keep:
            drop_database(admin, db_name)
            drop_database(admin, hash_db)
    return out


def report(out: dict[str, Any], variants: list[str]) -> str:
    """The figures as a plain table, with ratios vs the baseline and the issue's targets."""
    lines = [f"machine: {out['machine']['nproc']} cores, {out['machine']['cpu']}, commit {out['machine']['commit']}, "
             f"torch default threads {out['default_torch_threads']}",
             "query_quiet = no load added by this benchmark (the machine's own load average is shown); "
             "query_loaded = plus two CPU-bound processes; ratios > 1 mean cheaper than the baseline"]
    for phase, data in out["phases"].items():
        lines.append(f"\n{phase}  (load average 1m: start {data['load_1m_start']}, end {data['load_1m_end']})")
        base = data.get("baseline")
        for name in ["hash", *variants, "cache_hit"]:
            if name not in data:
                continue
            s = data[name]
            ratio = (f"  baseline/this: wall p50 x{base['p50'] / s['p50']:.2f}, cpu p50 x{base['cpu_p50'] / s['cpu_p50']:.2f}"
                     if base and name != "baseline" and s["p50"] > 0 and s["cpu_p50"] > 0 else "")
            lines.append(f"  {name:9s} n={s['n']:4d}  p50 {s['p50']:8.2f} ms  p95 {s['p95']:8.2f} ms"
                         f"  cpu p50 {s['cpu_p50']:8.2f} ms{ratio}")
    p = out["phases"]
    best = "onnx" if "onnx" in variants else variants[-1]
    quiet, loaded = p["query_quiet"][best]["p50"], p["query_loaded"][best]["p50"]
    long_med = p["ingest_1100_char_turns"][best]["p50"]
    lme = LONGMEMEVAL_ORACLE_TURNS * long_med / 1000 / 60
    lme_base = LONGMEMEVAL_ORACLE_TURNS * p["ingest_1100_char_turns"]["baseline"]["p50"] / 1000 / 60 \
        if "baseline" in p["ingest_1100_char_turns"] else None
    out["derived"] = {"runtime": best, "query_loaded_over_quiet": round(loaded / quiet, 2),
                      "longmemeval_minutes_estimated": round(lme, 1),
                      "longmemeval_minutes_estimated_baseline": round(lme_base, 1) if lme_base else None}
    lines.append(f"\n{best}: query p50 quiet {quiet:.2f} ms (target <= {TARGETS['query_p50_quiet_ms']}), "
                 f"loaded/quiet {loaded / quiet:.2f} (target <= {TARGETS['query_p50_loaded_over_quiet']})")
    lines.append(f"{best}: LoCoMo turn median {p['ingest_locomo_turns'][best]['p50']:.1f} ms "
                 f"(target <= {TARGETS['locomo_turn_median_ms']}), 1,100-char turn median {long_med:.1f} ms "
                 f"(target <= {TARGETS['long_turn_median_ms']})")
    lines.append(f"{best}: LongMemEval oracle ({LONGMEMEVAL_ORACLE_TURNS} turns) ESTIMATED {lme:.1f} min "
                 f"(target <= {TARGETS['longmemeval_minutes']}; baseline estimate "
                 f"{lme_base and round(lme_base, 1)} min) from the 1,100-char median, not measured "
                 "(python -m bench.longmemeval_size measures it)")
    lines.append(f"{best}: search p95 {p['search_locomo'][best]['p95']:.1f} ms (target <= {TARGETS['search_p95_ms']})")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="local embedding cost benchmark (issue 15)")
    ap.add_argument("--queries", type=int, default=150, help="LoCoMo questions embedded one at a time")
    ap.add_argument("--locomo-turns", type=int, default=150, help="LoCoMo turns ingested per variant")
    ap.add_argument("--long-turns", type=int, default=40, help="~1,100-character turns ingested per variant")
    ap.add_argument("--baseline-turns", type=int, default=40, help="turns the (slow) baseline ingests per phase")
    ap.add_argument("--variants", default="baseline,torch,onnx", help="comma list of baseline, torch, onnx")
    ap.add_argument("--locomo", type=Path, default=LOCOMO)
    ap.add_argument("--keep", action="store_true", help="keep the benchmark database")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    args.variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    out = asyncio.run(run(args))
    text = report(out, args.variants)
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"embed-{datetime.now(timezone.utc):%Y%m%dT%H%M%SZ}.json"
    path.write_text(json.dumps(out, indent=2))
    print(f"\nresults: {path}")


if __name__ == "__main__":
    main()
