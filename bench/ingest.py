"""Ingestion benchmark: DB-side time per episode, its growth with graph size, LLM calls and tokens.

Ingests N synthetic chat episodes (bench/synthetic.py, one group) into a FRESH database on the
server pgmemory resolves to (the embedded Postgres unless PGMEMORY_DSN is set), with the offline
RuleExtractor and/or the LLMExtractor talking through the real openai client to an in-process
FakeOpenAI whose responder is a zero-latency scripted model (bench/scripted_llm.py).

    python -m bench.ingest --episodes 1000 --mode both

DB-side time is the pipeline's own EpisodeResult.db_seconds (LLM, extraction and embedding time
excluded). As a cross-check the benchmark also reports wall time per episode minus the time spent
in extractor and embedder calls (exact only with one group), which includes COMMIT and pool waits.
On a shared machine wall times follow the load: each bucket also reports the CPU time the
database's backends spent per episode (from /proc/<pid>/schedstat, when the server runs on this
host) and the 1-minute load average, and two counts of work that do not follow the load: WAL
bytes and shared-buffer gets (reads + hits) per episode. `--baseline REF` first runs the same
benchmark on the code of git ref REF (exported, this file copied in, its own fresh database) and
prints both side by side.

    python -m bench.ingest --episodes 2000 --mode offline --baseline main
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import subprocess
import sys
import time
import uuid
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import shutil
import tempfile

import psycopg

from bench.stats import slope_per_1000, summary
from bench.synthetic import generate
from bench.timing import Stopwatch, TimedEmbedder, TimedExtractor
from pgmemory import Memory
from pgmemory.ingest.pipeline import EpisodeResult, IngestError
from pgmemory.providers.embedder import Embedder, HashEmbedder
from pgmemory.storage.connect import resolve_dsn

RESULTS = Path(__file__).parent / "results"
GRAPHITI = {  # quoted from the issue, not measured here
    "db_median_ms_at_1k": 143.0,
    "db_marginal_ms_at_10k": 231.0,
    "llm_calls_per_message_episode": 3.7,
    "source": "graphiti-core 0.31 + Kuzu, as quoted in the pgmemory issue (not measured here)",
}
TARGET = {"db_median_ms_at_10k": 10.0, "llm_calls_per_episode": 2.0}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line."""
    p = argparse.ArgumentParser(description="pgmemory ingestion benchmark")
    p.add_argument("--episodes", type=int, default=1000, help="episodes to ingest (default 1000)")
    p.add_argument("--mode", choices=("offline", "llm", "both"), default="both")
    p.add_argument("--embedder", choices=("hash", "local"), default="hash",
                   help="hash (fast, lexical) or local (all-MiniLM-L6-v2); embedding time is excluded "
                        "from DB-side time either way")
    p.add_argument("--concurrency", type=int, default=4,
                   help="add_episodes concurrency and LLM client concurrency; episodes of one group are "
                        "serialised by design, so this only matters with --groups > 1")
    p.add_argument("--groups", type=int, default=1, help="split the episodes over this many groups")
    p.add_argument("--bucket", type=int, default=1000, help="episodes per reporting bucket")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--keep", action="store_true", help="keep the benchmark database(s)")
    p.add_argument("--out", type=Path, default=RESULTS, help="directory for the JSON results")
    p.add_argument("--baseline", default=None,
                   help="git ref to run first, in the same invocation, for a before/after comparison")
    return p.parse_args(argv)


def create_database(admin_dsn: str, mode: str) -> tuple[str, str]:
    """A fresh empty database on the admin DSN's server: (name, URL DSN)."""
    from tests.servers import with_database

    name = f"bench_ingest_{mode}_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(psycopg.sql.SQL("CREATE DATABASE {}").format(psycopg.sql.Identifier(name)))
    return name, with_database(admin_dsn, name)


def drop_database(admin_dsn: str, name: str) -> None:
    """Drop a benchmark database, closing its connections."""
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(psycopg.sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
            psycopg.sql.Identifier(name)))


def machine(admin_dsn: str) -> dict[str, Any]:
    """nproc, CPU model, PG version, Python, pgmemory commit."""
    with psycopg.connect(admin_dsn) as conn:
        pg = conn.execute("SELECT version()").fetchone()[0]
        settings = dict(conn.execute(
            "SELECT name, setting || coalesce(unit, '') FROM pg_settings WHERE name IN"
            " ('shared_buffers', 'synchronous_commit', 'fsync', 'work_mem')").fetchall())
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor()) if Path("/proc/cpuinfo").exists() else ""
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                cwd=Path(__file__).parent, check=False).stdout.strip()
    except OSError:
        commit = ""
    return {"nproc": len(os.sched_getaffinity(0)), "cpu": cpu, "pg_version": pg, "pg_settings": settings,
            "python": platform.python_version(), "commit": commit,
            "loadavg_1m_at_start": round(os.getloadavg()[0], 2)}


def make_embedder(kind: str) -> Embedder:
    """The hash embedder or the local MiniLM model."""
    if kind == "local":
        from pgmemory.providers.embedder import LocalEmbedder

        return LocalEmbedder()
    return HashEmbedder()


def split_groups(episodes: list[dict[str, Any]], groups: int) -> list[dict[str, Any]]:
    """Deal the episodes round-robin over ``groups`` group ids (one group keeps them as they are)."""
    if groups <= 1:
        return episodes
    return [{**ep, "group_id": f"{ep['group_id']}-{i % groups}"} for i, ep in enumerate(episodes)]


async def graph_size(memory: Memory) -> dict[str, int]:
    """Entities, fact versions, believed facts, open believed facts, episodes."""
    queries = {
        "episodes": "SELECT count(*) FROM pgmemory.episodes",
        "episodes_done": "SELECT count(*) FROM pgmemory.episodes WHERE status = 'done'",
        "entities": "SELECT count(*) FROM pgmemory.entities",
        "entity_versions": "SELECT count(*) FROM pgmemory.entity_versions",
        "fact_versions": "SELECT count(*) FROM pgmemory.facts",
        "facts_believed": "SELECT count(*) FROM pgmemory.facts WHERE upper_inf(recorded)",
        "facts_believed_open": "SELECT count(*) FROM pgmemory.facts WHERE upper_inf(recorded) AND upper_inf(valid)",
        "distinct_facts": "SELECT count(DISTINCT id) FROM pgmemory.facts",
    }
    async with memory.pool.acquire() as conn:
        return {k: await conn.fetchval(q) for k, q in queries.items()}


async def backend_cpu(memory: Memory) -> dict[int, float] | None:
    """CPU seconds used so far by each backend connected to the benchmark database (None when the
    server's processes are not readable from here, e.g. a remote server)."""
    async with memory.pool.acquire() as conn:
        pids = [r[0] for r in await conn.fetch(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database()")]
    out = {}
    for pid in pids:
        try:
            out[pid] = int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1e9
        except (OSError, ValueError, IndexError):
            return None
    return out


async def work_counters(memory: Memory) -> tuple[int, int]:
    """(WAL bytes written by the server so far, shared-buffer reads and hits of the benchmark
    database): work counts that, unlike times, do not follow the machine's load."""
    async with memory.pool.acquire() as conn:
        row = await conn.fetchrow(
            "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint AS wal,"
            " (SELECT blks_hit + blks_read FROM pg_stat_database WHERE datname = current_database()) AS gets")
    return int(row["wal"]), int(row["gets"] or 0)


class Run:
    """One mode's ingestion: per-episode records and per-bucket summaries."""

    def __init__(self, memory: Memory, watch: Stopwatch, fake: Any | None) -> None:
        self.memory = memory
        self.watch = watch
        self.fake = fake
        self.records: list[dict[str, float]] = []
        self.failures: list[str] = []
        self.buckets: list[dict[str, Any]] = []
        self._last = (0.0, 0.0)

    def on_done(self, result: EpisodeResult | IngestError) -> None:
        """Record one finished episode: DB time, wall minus extractor/embedder time, LLM usage."""
        now, outside = time.perf_counter(), self.watch.total
        wall, other = now - self._last[0], outside - self._last[1]
        self._last = (now, outside)
        if isinstance(result, IngestError):
            self.failures.append(str(result))
            return
        self.records.append({
            "db_ms": result.db_seconds * 1000,
            # (None on a baseline revision older than EpisodeResult.store_seconds)
            "store_ms": getattr(result, "store_seconds", None) and result.store_seconds * 1000,
            "wall_minus_llm_ms": (wall - other) * 1000,
            "llm_calls": result.llm_calls, "prompt_tokens": result.prompt_tokens,
            "completion_tokens": result.completion_tokens, "facts_created": len(result.facts_created),
            "facts_duplicate": result.facts_duplicate, "facts_invalidated": result.facts_invalidated,
            "entities_created": len(result.entities_created), "skipped": result.status == "skipped"})

    async def bucket(self, number: int, batch: list[dict[str, Any]], concurrency: int) -> dict[str, Any]:
        """Ingest one bucket of episodes and summarise it."""
        first, first_rec = len(self.records) + len(self.failures), len(self.records)
        cpu_before = await backend_cpu(self.memory)
        wal_before, gets_before = await work_counters(self.memory)
        started = time.perf_counter()
        self._last = (started, self.watch.total)
        await self.memory.add_episodes(batch, concurrency=concurrency, on_done=self.on_done)
        elapsed = time.perf_counter() - started
        cpu_after = await backend_cpu(self.memory)
        wal_after, gets_after = await work_counters(self.memory)
        cpu_ms = None
        if cpu_before is not None and cpu_after is not None:
            cpu_ms = round(sum(v - cpu_before.get(pid, 0.0) for pid, v in cpu_after.items()) * 1000 / len(batch), 2)
        recs = self.records[first_rec:]
        calls: Counter[str] = Counter()
        if self.fake is not None:
            from bench.scripted_llm import kind_of

            calls = Counter(kind_of(r.body) for r in self.fake.requests if isinstance(r.body, dict))
            self.fake.requests.clear()
        graph = await graph_size(self.memory)
        out = {
            "bucket": number, "from": first + 1, "to": first + len(batch), "episodes": len(batch),
            "db_ms": summary([r["db_ms"] for r in recs]),
            "wall_minus_llm_ms": summary([r["wall_minus_llm_ms"] for r in recs]),
            "episodes_per_s": round(len(batch) / elapsed, 1),
            "backend_cpu_ms_per_episode": cpu_ms, "loadavg_1m": round(os.getloadavg()[0], 2),
            "wal_kb_per_episode": round((wal_after - wal_before) / 1024 / len(batch), 1),
            "buffer_gets_per_episode": round((gets_after - gets_before) / len(batch)),
            "llm_calls": dict(calls), "entities_after": graph["entities"],
            "fact_versions_after": graph["fact_versions"],
            "facts_created": sum(r["facts_created"] for r in recs),
            "facts_duplicate": sum(r["facts_duplicate"] for r in recs),
            "facts_invalidated": sum(r["facts_invalidated"] for r in recs),
        }
        self.buckets.append(out)
        return out


def print_bucket(b: dict[str, Any], llm: bool) -> None:
    """One line per bucket."""
    calls = ""
    if llm:
        split = b["llm_calls"]
        calls = (f"  llm/ep {sum(split.values()) / b['episodes']:.2f}"
                 f" (x {split.get('extraction', 0) / b['episodes']:.2f}"
                 f" r {split.get('resolution', 0) / b['episodes']:.2f}"
                 f" j {split.get('judgement', 0) / b['episodes']:.2f})")
    print(f"  {b['from']:>6}-{b['to']:<6} db median {b['db_ms']['median']:6.2f} ms  p95 {b['db_ms']['p95']:6.2f} ms"
          f"  | wall-llm median {b['wall_minus_llm_ms']['median']:6.2f} p95 {b['wall_minus_llm_ms']['p95']:6.2f}"
          f"  | backend CPU/ep {b.get('backend_cpu_ms_per_episode')} ms | load {b.get('loadavg_1m')}"
          f"  | WAL/ep {b.get('wal_kb_per_episode')} kB, buffer gets/ep {b.get('buffer_gets_per_episode')}"
          f"  | {b['episodes_per_s']:6.1f} ep/s  | entities {b['entities_after']:>5} fact versions "
          f"{b['fact_versions_after']:>6}{calls}", flush=True)


async def run_mode(mode: str, episodes: list[dict[str, Any]], args: argparse.Namespace, admin_dsn: str,
                   info: dict[str, Any]) -> dict[str, Any]:
    """Ingest every episode with one extractor into a fresh database; return the result document."""
    name, dsn = create_database(admin_dsn, mode)
    watch = Stopwatch()
    fake = None
    if mode == "llm":
        from bench.scripted_llm import ScriptedModel
        from pgmemory.extract.llm import LLMExtractor
        from pgmemory.providers.llm import LLMClient
        from tests import fake_openai

        # Replies go out as two writes (headers, body); without TCP_NODELAY each one waits ~40 ms
        # for a delayed ACK, which would make the "zero-latency" model cost 40 ms per call.
        fake_openai._Handler.disable_nagle_algorithm = True
        fake = fake_openai.FakeOpenAI(responder=ScriptedModel()).start()
        client = LLMClient(base_url=fake.base_url, api_key="bench", model="scripted-zero-latency",
                           max_retries=0, max_concurrency=max(1, args.concurrency))
        extractor: Any = LLMExtractor(client)
    else:
        from pgmemory.extract.rules import RuleExtractor

        extractor = RuleExtractor()
    print(f"\n== mode {mode}: {len(episodes)} episodes, {args.groups} group(s), database {name}", flush=True)
    memory = await Memory.open(dsn, embedder=TimedEmbedder(make_embedder(args.embedder), watch),
                               extractor=TimedExtractor(extractor, watch), pool_size=max(2, args.concurrency + 1))
    run = Run(memory, watch, fake)
    started = time.perf_counter()
    try:
        for number, at in enumerate(range(0, len(episodes), args.bucket), start=1):
            print_bucket(await run.bucket(number, episodes[at:at + args.bucket], args.concurrency), fake is not None)
        elapsed = time.perf_counter() - started
        graph = await graph_size(memory)
    finally:
        await memory.close()
        if fake is not None:
            fake.stop()
        if not args.keep:
            drop_database(admin_dsn, name)
    return document(mode, run, graph, elapsed, args, info, dsn if args.keep else None)


def document(mode: str, run: Run, graph: dict[str, int], elapsed: float, args: argparse.Namespace,
             info: dict[str, Any], kept_dsn: str | None) -> dict[str, Any]:
    """The JSON result of one mode."""
    recs = run.records
    n = max(1, len(recs))
    split: Counter[str] = Counter()
    for b in run.buckets:
        split.update(b["llm_calls"])
    db = summary([r["db_ms"] for r in recs])
    first, last = run.buckets[0]["db_ms"]["median"], run.buckets[-1]["db_ms"]["median"]
    return {
        "benchmark": "ingest", "mode": mode, "episodes": len(recs), "failures": run.failures[:20],
        "failed": len(run.failures), "groups": args.groups, "concurrency": args.concurrency,
        "embedder": args.embedder, "seed": args.seed, "bucket_size": args.bucket,
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "machine": info,
        "loadavg_1m_at_end": round(os.getloadavg()[0], 2), "wall_seconds": round(elapsed, 1),
        "episodes_per_s": round(len(recs) / elapsed, 1),
        "db_ms": db, **({"db_with_store_ms": summary([r["db_ms"] + r["store_ms"] for r in recs])}
                      if recs and all(r["store_ms"] is not None for r in recs) else {}),
        "wall_minus_llm_ms": summary([r["wall_minus_llm_ms"] for r in recs]),
        "growth": {"first_bucket_median_ms": first, "last_bucket_median_ms": last,
                   "last_over_first": round(last / first, 2) if first else None,
                   "db_ms_slope_per_1000_episodes": slope_per_1000([r["db_ms"] for r in recs])},
        "llm": {"calls_per_episode": round(sum(r["llm_calls"] for r in recs) / n, 3),
                "split_per_episode": {k: round(v / n, 3) for k, v in sorted(split.items())},
                "prompt_tokens_per_episode": round(sum(r["prompt_tokens"] for r in recs) / n, 1),
                "completion_tokens_per_episode": round(sum(r["completion_tokens"] for r in recs) / n, 1),
                "tokens_note": "synthetic: counted by the scripted model with pgmemory.providers.tokens over "
                               "message texts + response schema (prompt) and the reply (completion)"}
        if mode == "llm" else None,
        "facts": {k: sum(r[k] for r in recs) for k in ("facts_created", "facts_duplicate", "facts_invalidated",
                                                        "entities_created")},
        "graph": graph, "buckets": run.buckets, "kept_dsn": kept_dsn,
        "reference_quoted": GRAPHITI, "target": TARGET,
    }


def print_summary(doc: dict[str, Any]) -> None:
    """The headline figures of one mode, with the quoted graphiti-core figures for scale."""
    db, growth, g = doc["db_ms"], doc["growth"], doc["graph"]
    print(f"-- {doc['mode']}: {doc['episodes']} episodes in {doc['wall_seconds']} s "
          f"({doc['episodes_per_s']} ep/s), {doc['failed']} failed; load average (1 min) at end "
          f"{doc['loadavg_1m_at_end']}")
    print(f"   DB-side per episode (EpisodeResult.db_seconds): median {db['median']} ms, p95 {db['p95']} ms, "
          f"mean {db['mean']} ms, max {db['max']} ms")
    if "db_with_store_ms" in doc:  # (a baseline of an older revision has no store_seconds)
        stored = doc["db_with_store_ms"]
        print(f"   with the raw episode INSERT (EpisodeResult.store_seconds, its own transaction before "
              f"extraction): median {stored['median']} ms, p95 {stored['p95']} ms, mean {stored['mean']} ms")
    cross = doc["wall_minus_llm_ms"]
    print(f"   cross-check wall minus extractor/LLM/embedder time: median {cross['median']} ms, p95 {cross['p95']} ms"
          f" (includes COMMIT, pool and Python orchestration)")
    print(f"   growth: first bucket median {growth['first_bucket_median_ms']} ms -> last "
          f"{growth['last_bucket_median_ms']} ms (x{growth['last_over_first']}); least-squares slope "
          f"{growth['db_ms_slope_per_1000_episodes']} ms per 1000 episodes")
    target = "meets" if db["median"] <= TARGET["db_median_ms_at_10k"] else "MISSES"
    print(f"   target DB-side median <= {TARGET['db_median_ms_at_10k']} ms: {target}")
    print(f"   quoted graphiti-core 0.31 + Kuzu (not measured here): 143 ms median at 1k -> "
          f"{GRAPHITI['db_median_ms_at_1k'] / max(growth['first_bucket_median_ms'], 1e-9):.0f}x ours (first bucket); "
          f"marginal 231 ms -> {GRAPHITI['db_marginal_ms_at_10k'] / max(growth['last_bucket_median_ms'], 1e-9):.0f}x "
          f"ours (last bucket)")
    if doc["llm"]:
        llm = doc["llm"]
        split = ", ".join(f"{k} {v}" for k, v in llm["split_per_episode"].items())
        verdict = "meets" if llm["calls_per_episode"] <= TARGET["llm_calls_per_episode"] else "MISSES"
        fewer = GRAPHITI["llm_calls_per_message_episode"] / max(llm["calls_per_episode"], 1e-9)
        print(f"   LLM calls per episode: {llm['calls_per_episode']} ({split}); target <= 2.0: {verdict}; "
              f"quoted graphiti-core 0.31: 3.7 (x{fewer:.1f} ours)")
        print(f"   tokens per episode: prompt {llm['prompt_tokens_per_episode']}, completion "
              f"{llm['completion_tokens_per_episode']} ({llm['tokens_note']})")
    f = doc["facts"]
    print(f"   writes: {f['entities_created']} entities created, {f['facts_created']} facts created, "
          f"{f['facts_duplicate']} duplicates, {f['facts_invalidated']} invalidations")
    print(f"   final graph: {g['entities']} entities ({g['entity_versions']} prior entity versions), "
          f"{g['fact_versions']} fact versions of {g['distinct_facts']} facts, {g['facts_believed']} believed "
          f"({g['facts_believed_open']} with open valid time), {g['episodes']} episodes ({g['episodes_done']} done)")


def run_baseline(args: argparse.Namespace, argv: list[str]) -> dict[str, dict[str, Any]]:
    """Run this benchmark on the code of git ref args.baseline (exported with this file copied in)
    in a subprocess; returns its result documents by mode."""
    root = Path(__file__).resolve().parent.parent
    with tempfile.TemporaryDirectory(prefix="pgmemory-baseline-") as tmp:
        tree = Path(tmp) / "tree"
        tree.mkdir()
        archive = subprocess.run(["git", "-C", str(root), "archive", args.baseline], check=True,
                                 capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
        shutil.copy(Path(__file__), tree / "bench" / "ingest.py")
        out = Path(tmp) / "results"
        rest = [a for i, a in enumerate(argv) if a != "--baseline" and (i == 0 or argv[i - 1] != "--baseline")
                and not a.startswith("--baseline=")]
        print(f"== baseline {args.baseline} (exported), same options", flush=True)
        subprocess.run([sys.executable, "-m", "bench.ingest", *rest, "--out", str(out)], cwd=tree,
                       env={**os.environ, "PYTHONPATH": str(tree)}, check=True)
        return {p.name.split("-")[1]: json.loads(p.read_text()) for p in out.glob("ingest-*.json")}


def print_comparison(ref: str, before: dict[str, Any], after: dict[str, Any]) -> None:
    """Per-bucket medians and backend CPU of the baseline and this checkout, side by side."""
    print(f"-- {after['mode']}: before ({ref}) vs after (this checkout), per bucket:")
    print("   episodes        db median ms  before -> after | backend CPU ms/ep before -> after | load before, after"
          " | WAL kB/ep | buffer gets/ep")
    for b, a in zip(before["buckets"], after["buckets"]):
        print(f"   {a['from']:>6}-{a['to']:<6} {b['db_ms']['median']:>8.2f} -> {a['db_ms']['median']:<8.2f}"
              f"          | {b.get('backend_cpu_ms_per_episode')} -> {a.get('backend_cpu_ms_per_episode')}"
              f"                 | {b.get('loadavg_1m')}, {a.get('loadavg_1m')}"
              f" | {b.get('wal_kb_per_episode')} -> {a.get('wal_kb_per_episode')}"
              f" | {b.get('buffer_gets_per_episode')} -> {a.get('buffer_gets_per_episode')}")
    print(f"   all: db median {before['db_ms']['median']} -> {after['db_ms']['median']} ms, "
          f"{before['episodes_per_s']} -> {after['episodes_per_s']} ep/s")


async def main_async(args: argparse.Namespace, argv: list[str] | None = None) -> None:
    """Run the requested modes and write bench/results/ingest-<mode>-<N>.json for each."""
    baseline = run_baseline(args, list(sys.argv[1:] if argv is None else argv)) if args.baseline else {}
    admin_dsn = await asyncio.to_thread(resolve_dsn)
    info = machine(admin_dsn)
    print(f"machine: nproc {info['nproc']}, {info['cpu']}; {info['pg_version'].split(' on ')[0]}; "
          f"Python {info['python']}; pgmemory {info['commit']}; PG {info['pg_settings']}; "
          f"load average (1 min) {info['loadavg_1m_at_start']}")
    print(f"embedder: {args.embedder} (embedding time is excluded from DB-side time either way); "
          f"db_seconds excludes extraction, LLM and embedding time")
    episodes = split_groups(generate(args.episodes, seed=args.seed), args.groups)
    modes = ("offline", "llm") if args.mode == "both" else (args.mode,)
    args.out.mkdir(parents=True, exist_ok=True)
    for mode in modes:
        doc = await run_mode(mode, episodes, args, admin_dsn, info)
        print_summary(doc)
        if mode in baseline:
            print_comparison(args.baseline, baseline[mode], doc)
        path = args.out / f"ingest-{mode}-{args.episodes}.json"
        path.write_text(json.dumps(doc, indent=1, default=str) + "\n")
        print(f"   wrote {path}", flush=True)


def main(argv: list[str] | None = None) -> None:
    """Entry point: python -m bench.ingest [options]."""
    args = parse_args(argv)
    if args.episodes < 1 or args.bucket < 1:
        sys.exit("--episodes and --bucket must be >= 1")
    asyncio.run(main_async(args, argv))


if __name__ == "__main__":
    main()
