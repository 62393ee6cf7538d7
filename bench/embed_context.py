"""Ingestion embedding cost of the turns before (issues 13, 15): an episode's vector computed from
its own "actor: content" (the baseline), from session 5's text of the turns before (each cut to
400 characters) on the lines above it (--previous: counts), and as ingestion computes it now
(episode_vector: the own text's vector blended with the turn before's, which the embedder's cache
serves because the turns are embedded in order), all measured in this run, one episode at a time,
with the local embedder.

    python -m bench.embed_context ../shared/data/locomo/locomo-dev.json --turns 200 --previous 1,2,3

Per episode: the median and p95 milliseconds of one episode's embedding, and the ratio to the
baseline; the 1-minute load average before each phase (the machine may be shared). No database:
this is the embedder's share of ingestion, which is what the turns before add to.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import time

from bench.stats import percentile
from pgmemory.eval.readers import read_locomo
from pgmemory.extract.types import EpisodeInput
from pgmemory.ingest.embed_episode import episode_vector
from pgmemory.providers.embedder import LocalEmbedder


def turns(path: str, n: int) -> list[tuple[EpisodeInput, list[EpisodeInput]]]:
    """The first n turns of the file's conversations, each with the turns before it."""
    out = []
    for conv in read_locomo(path):
        inputs = [EpisodeInput(t.text, "message", t.time, t.speaker) for t in conv.turns]
        out += [(ep, inputs[max(0, i - 4):i]) for i, ep in enumerate(inputs)]
    return out[:n]


async def timed(embedder: LocalEmbedder, texts: list[str]) -> list[float]:
    """Milliseconds of one embed call per text, in order."""
    samples = []
    for text in texts:
        started = time.perf_counter()
        await embedder.embed([text])
        samples.append((time.perf_counter() - started) * 1000)
    return samples


def concatenated(ep: EpisodeInput, previous: list[EpisodeInput], n: int) -> str:
    """Session 5's text: up to n messages before (same session, 30 minutes), each cut to 400
    characters, on the lines above the episode's own "actor: content"."""
    lines: list[str] = []
    for p in reversed(previous[-n:]):
        if (ep.reference_time - p.reference_time).total_seconds() > 1800:
            break
        lines.insert(0, f"{p.actor}: {p.content}"[:400])
    return "\n".join([*lines, f"{ep.actor}: {ep.content}"])


async def timed_blend(items: list[tuple[EpisodeInput, list[EpisodeInput]]]) -> list[float]:
    """Milliseconds of episode_vector per episode, in order, the turn before served by the cache."""
    embedder = LocalEmbedder()
    await embedder.embed(["warm up"])
    samples = []
    for ep, previous in items:
        started = time.perf_counter()
        await episode_vector(embedder, ep, previous)
        samples.append((time.perf_counter() - started) * 1000)
    return samples


async def main(args: argparse.Namespace) -> None:
    items = turns(args.path, args.turns)
    own = [f"{ep.actor}: {ep.content}" for ep, _ in items]
    phases = [("own text (baseline)", own)]
    for n in args.previous:
        phases.append((f"{n} turn(s) before, text", [concatenated(ep, prev, n) for ep, prev in items]))
    embedder = LocalEmbedder(cache_entries=0)  # every text computed: no cache hit flatters either phase
    await timed(embedder, own[:10])  # warm-up: model load, first calls
    print(f"{len(items)} LoCoMo turns, one embed call each, local embedder, {os.cpu_count()} cores")
    figures = {}
    for name, texts in phases:
        print(f"  load {os.getloadavg()[0]:.1f}: {name}: mean {sum(map(len, texts)) / len(texts):.0f} chars")
        figures[name] = await timed(embedder, texts)
    print(f"  load {os.getloadavg()[0]:.1f}: blend (episode_vector, the turn before from the cache)")
    figures["blend (shipped)"] = await timed_blend(items)
    base = percentile(figures["own text (baseline)"], 50)
    for name, ms in figures.items():
        p50, p95 = percentile(ms, 50), percentile(ms, 95)
        print(f"{name:24s} p50 {p50:6.2f} ms  p95 {p95:6.2f} ms  ratio p50 {p50 / base:.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench.embed_context", description=__doc__.split("\n")[0])
    parser.add_argument("path", help="a LoCoMo file")
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--previous", type=lambda v: [int(x) for x in v.split(",")], default=[1],
                        help="comma-separated counts of turns before, as session 5's text, to measure; default 1")
    asyncio.run(main(parser.parse_args()))
