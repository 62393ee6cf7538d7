"""Write-path benchmark (issue 9): LLM waits outside transactions; the queue worker.

    python -m bench.write_path latency [--latency 0.5] [--groups 4] [--per-group 4] [--pool 4] [--baseline main]
    python -m bench.write_path workers [--episodes 400] [--groups 8]
    python -m bench.write_path claim [--backlogs 1000,10000,100000] [--groups 4] [--baseline main]

latency: a scripted LLM (bench/scripted_llm.py) answering after --latency seconds, groups x
per-group episodes (bench/synthetic.py chats) all submitted at once with add_episode, on a
pool of --pool connections. Run twice in the same invocation, each in its own subprocess and
fresh database: this checkout ("after") and the code of git ref --baseline exported with
`git archive` ("before"). Printed per run: wall time, LLM calls per episode, `idle in
transaction` backend-seconds (pg_stat_activity sampled every 20 ms, also only at moments
when an LLM request is in flight), the most connections in use, duplicate entities and facts.

workers: the offline extractor; --episodes (over --groups groups) enqueued with
pgmemory.enqueue_episode, then drained by 1 `pgmemory worker` process, and in a fresh
database by 2 worker processes, alternated --rounds times each (1, 2, 2, 1, ...) so both see
the same load; episodes per second for each, the load, and one worker's start-up time on an
empty queue (included in each wall time).

claim: the cost of taking the next episode off the queue as the backlog grows. Pending
episodes (over --groups groups, one group busy with a live lease) are inserted up to each
backlog size, then pgmemory_internal.claim_episode runs --claims times, each in a transaction
rolled back (the queue is left as it was): median and p95 ms per claim and per backlog size,
for this checkout and for the code of git ref --baseline, each in its own fresh database.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg

ROOT = Path(__file__).resolve().parents[1]


def admin_dsn() -> str:
    from pgmemory.storage.connect import resolve_dsn

    return resolve_dsn()


def fresh_database(admin: str) -> tuple[str, str]:
    """Create an empty database; return (name, URL DSN)."""
    name = f"bench_wp_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(psycopg.sql.SQL("CREATE DATABASE {}").format(psycopg.sql.Identifier(name)))
    info = psycopg.conninfo.conninfo_to_dict(admin)
    info["dbname"] = name
    host = info.get("host", "")
    dsn = (f"postgresql://{info.get('user', 'postgres')}@/{name}?host={host}&port={info.get('port', 5432)}"
           if host.startswith("/") else psycopg.conninfo.make_conninfo(**info))
    return name, dsn


def drop_database(admin: str, name: str) -> None:
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(psycopg.sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(psycopg.sql.Identifier(name)))


async def sample_activity(dsn: str, fake, stop: asyncio.Event, out: dict[str, float]) -> None:
    """Every 20 ms: backends of this database idle in a transaction, and connections in use."""
    import asyncpg

    conn = await asyncpg.connect(dsn)
    interval = 0.02
    try:
        while not stop.is_set():
            idle, busy, queries = await conn.fetchrow(
                "SELECT count(*) FILTER (WHERE state = 'idle in transaction'),"
                " count(*) FILTER (WHERE state <> 'idle'),"
                " array_agg(left(query, 60)) FILTER (WHERE state = 'idle in transaction')"
                " FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
                " AND backend_type = 'client backend'")
            for q in queries or []:
                out["idle_queries"][q] = out["idle_queries"].get(q, 0) + 1
            out["idle_in_tx_s"] += idle * interval
            if fake._in_flight > 0:
                out["idle_in_tx_during_llm_s"] += idle * interval
            out["max_busy_connections"] = max(out["max_busy_connections"], busy)
            out["samples"] += 1
            await asyncio.sleep(interval)
    finally:
        await conn.close()


async def latency_phase(args: argparse.Namespace) -> dict[str, Any]:
    """One run with whatever pgmemory this interpreter imports (see main)."""
    from bench.scripted_llm import ScriptedModel
    from bench.synthetic import generate
    from pgmemory import Memory
    from pgmemory.extract.llm import LLMExtractor
    from pgmemory.providers.embedder import HashEmbedder
    from pgmemory.providers.llm import LLMClient
    from tests import fake_openai

    model = ScriptedModel()

    def slow_model(body: dict[str, Any]):
        time.sleep(args.latency)
        return model(body)

    fake_openai._Handler.disable_nagle_algorithm = True
    fake = fake_openai.FakeOpenAI(responder=slow_model).start()
    admin = admin_dsn()
    name, dsn = fresh_database(admin)
    episodes = [ep for g in range(args.groups)
                for ep in generate(args.per_group, seed=args.seed + g, group_id=f"wp-{g}")]
    client = LLMClient(base_url=fake.base_url, api_key="bench", model="scripted", max_retries=0,
                       max_concurrency=64)
    memory = await Memory.open(dsn, embedder=HashEmbedder(), extractor=LLMExtractor(client), pool_size=args.pool)
    activity = {"idle_in_tx_s": 0.0, "idle_in_tx_during_llm_s": 0.0, "max_busy_connections": 0, "samples": 0,
                "idle_queries": {}}
    stop = asyncio.Event()
    sampler = asyncio.create_task(sample_activity(dsn, fake, stop, activity))
    started = time.perf_counter()
    try:
        results = await asyncio.gather(*(memory.add_episode(**ep) for ep in episodes), return_exceptions=True)
        wall = time.perf_counter() - started
        stop.set()
        await sampler
        async with memory.pool.acquire() as conn:
            dup_entities = await conn.fetchval(
                "SELECT count(*) - count(DISTINCT (group_id, lower(name))) FROM pgmemory.entities")
            dup_facts = await conn.fetchval(
                "SELECT count(*) - count(DISTINCT (group_id, source_id, target_id, relation, fact))"
                " FROM pgmemory.facts WHERE upper_inf(recorded)")
            done = await conn.fetchval("SELECT count(*) FROM pgmemory.episodes WHERE status = 'done'")
    finally:
        await memory.close()
        fake.stop()
        drop_database(admin, name)
    ok = [r for r in results if not isinstance(r, BaseException)]
    return {
        "episodes": len(episodes), "done": done, "failed": len(results) - len(ok),
        "errors": sorted({f"{type(r).__name__}: {r}"[:200] for r in results if isinstance(r, BaseException)})[:3],
        "wall_s": round(wall, 2), "pool": args.pool, "latency_s": args.latency,
        "llm_calls_per_episode": round(sum(r.llm_calls for r in ok) / max(1, len(ok)), 2),
        "decide_rounds_max": max((getattr(r, "decide_rounds", 1) for r in ok), default=0),
        "idle_in_tx_backend_s": round(activity["idle_in_tx_s"], 2),
        "idle_in_tx_during_llm_backend_s": round(activity["idle_in_tx_during_llm_s"], 2),
        "max_busy_connections": activity["max_busy_connections"],
        "idle_in_tx_last_queries": activity["idle_queries"],
        "duplicate_entities": dup_entities, "duplicate_facts": dup_facts,
    }


def run_in(root: Path, argv: list[str]) -> dict[str, Any]:
    """Run one phase in a subprocess whose `pgmemory` is the one under root; its last stdout line is JSON."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    proc = subprocess.run([sys.executable, "-m", "bench.write_path", *argv], cwd=root, env=env,
                          capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        raise SystemExit(f"phase failed in {root}:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def export_ref(ref: str, into: Path) -> Path:
    """The tree of git ref `ref` (with this benchmark file copied in) under `into`."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    shutil.copy(Path(__file__), into / "bench" / "write_path.py")
    return into


def latency(args: argparse.Namespace) -> None:
    phase = ["latency-phase", "--latency", str(args.latency), "--groups", str(args.groups),
             "--per-group", str(args.per_group), "--pool", str(args.pool), "--seed", str(args.seed)]
    with tempfile.TemporaryDirectory(prefix="pgmemory-baseline-") as tmp:
        before = run_in(export_ref(args.baseline, Path(tmp)), phase)
    after = run_in(ROOT, phase)
    print(f"{args.groups} groups x {args.per_group} episodes submitted at once, LLM latency {args.latency} s, "
          f"pool {args.pool}")
    for label, r in ((f"before ({args.baseline})", before), ("after (this checkout)", after)):
        print(f"  {label:<24} wall {r['wall_s']:>6.2f} s  done {r['done']}/{r['episodes']}  failed {r['failed']}"
              f"  LLM calls/ep {r['llm_calls_per_episode']}  idle-in-tx {r['idle_in_tx_backend_s']} s"
              f" (during LLM waits {r['idle_in_tx_during_llm_backend_s']} s)"
              f"  connections in use max {r['max_busy_connections']}"
              f"  duplicates {r['duplicate_entities']} entities / {r['duplicate_facts']} facts")
        for error in r["errors"]:
            print(f"      error: {error}")
    print(f"  speed-up (before wall / after wall): {before['wall_s'] / after['wall_s']:.2f}x")
    print(json.dumps({"before": before, "after": after}))


def workers(args: argparse.Namespace) -> None:
    """1 vs 2 worker processes draining the same queue, alternated (1, 2, 2, 1, ...) so both see the
    same load; each run also times one worker start-up on an empty queue (what wall includes)."""
    from bench.synthetic import generate

    per_group = max(1, args.episodes // args.groups)
    episodes = [ep for g in range(args.groups) for ep in generate(per_group, seed=args.seed + g, group_id=f"wk-{g}")]
    admin = admin_dsn()
    env = {**os.environ, "PGMEMORY_EMBEDDER": "hash", "PYTHONPATH": str(ROOT)}
    for key in ("PGMEMORY_LLM_BASE_URL", "PGMEMORY_LLM_API_KEY", "OPENAI_API_KEY"):
        env.pop(key, None)
    order = [1, 2, 2, 1] * max(1, args.rounds // 2) if args.rounds > 1 else [1, 2]
    runs: list[tuple[int, dict[str, Any]]] = []
    for count in order:
        name, dsn = fresh_database(admin)
        worker = [sys.executable, "-m", "pgmemory.surfaces.cli", "worker", "--drain", "--concurrency",
                  str(args.concurrency)]
        try:
            subprocess.run([sys.executable, "-m", "pgmemory.surfaces.cli", "init", "--dim", "384"], check=True,
                           env={**env, "PGMEMORY_DSN": dsn}, cwd=ROOT, capture_output=True)
            with psycopg.connect(dsn, autocommit=True) as conn:
                for ep in episodes:
                    conn.execute("SELECT pgmemory.enqueue_episode(%s, %s, %s, %s, %s, %s, %s)",
                                 (ep["group_id"], ep["content"], ep["kind"], ep["actor"], ep["reference_time"],
                                  ep["source_description"], ep["episode_id"]))
            load = os.getloadavg()[0]
            started = time.perf_counter()
            procs = [subprocess.Popen(worker, env={**env, "PGMEMORY_DSN": dsn}, cwd=ROOT, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True) for _ in range(count)]
            outs = [p.communicate(timeout=1800) for p in procs]
            wall = time.perf_counter() - started
            started = time.perf_counter()
            subprocess.run(worker, env={**env, "PGMEMORY_DSN": dsn}, cwd=ROOT, capture_output=True, check=True)
            startup = time.perf_counter() - started
            with psycopg.connect(dsn) as conn:
                done, twice = conn.execute("SELECT count(*) FILTER (WHERE status = 'done'),"
                                           " count(*) FILTER (WHERE attempts > 1) FROM pgmemory.episodes").fetchone()
            if any(p.returncode for p in procs):
                print(f"worker failed: {[o[1][-500:] for o in outs]}")
            runs.append((count, {"wall_s": round(wall, 2), "startup_s": round(startup, 2), "done": done,
                                 "processed_twice": twice, "episodes_per_s": round(done / wall, 1),
                                 "loadavg_1m": round(load, 2)}))
        finally:
            drop_database(admin, name)
    print(f"offline extractor, {len(episodes)} episodes over {args.groups} groups, worker --concurrency "
          f"{args.concurrency}; runs alternated {order} (wall includes each worker's start-up)")
    for count, f in runs:
        print(f"  {count} worker(s): {f['wall_s']} s, {f['done']} done, {f['episodes_per_s']} episodes/s,"
              f" processed twice {f['processed_twice']}, one start-up on an empty queue {f['startup_s']} s,"
              f" load {f['loadavg_1m']}")
    median = {c: statistics.median(f["episodes_per_s"] for n, f in runs if n == c) for c in (1, 2)}
    print(f"  2 vs 1 workers (median episodes/s {median[2]:.1f} vs {median[1]:.1f}): {median[2] / median[1]:.2f}x")
    print(json.dumps({"runs": [{"workers": c, **f} for c, f in runs], "median_episodes_per_s": median}))


def claim_phase(args: argparse.Namespace) -> dict[str, Any]:
    """Time claim_episode at each backlog size (in this checkout's pgmemory; see the module doc)."""
    from pgmemory.storage.setup import init_database

    admin = admin_dsn()
    name, dsn = fresh_database(admin)
    sizes = [int(x) for x in args.backlogs.split(",")]
    out: dict[str, Any] = {"backlogs": {}}
    try:
        with psycopg.connect(dsn) as conn:
            init_database(conn, 384)
            # One group is busy: its earliest episode is leased for an hour (claims must skip it).
            conn.execute("INSERT INTO pgmemory.episodes (id, group_id, kind, content, valid_at, status, lease_owner,"
                         " lease_until) VALUES (gen_random_uuid(), 'claim-busy', 'text', 'busy', now(), 'processing',"
                         " 'bench', now() + interval '1 hour')")
            conn.commit()
            stored = 0
            for size in sizes:
                conn.execute("INSERT INTO pgmemory.episodes (id, group_id, kind, content, valid_at)"
                             " SELECT gen_random_uuid(), 'claim-' || (i %% %s), 'text', 'episode ' || i,"
                             "        now() - make_interval(secs => i)"
                             "   FROM generate_series(%s::integer, %s::integer) i", (args.groups, stored + 1, size))
                conn.commit()
                stored = size
                conn.execute("ANALYZE pgmemory.episodes")
                conn.commit()
                times = []
                for _ in range(args.claims + 1):  # the first plans the function's statements: not counted
                    started = time.perf_counter()
                    row = conn.execute("SELECT * FROM pgmemory_internal.claim_episode('bench-claimer', '1 minute')"
                                       ).fetchone()
                    times.append((time.perf_counter() - started) * 1000)
                    conn.rollback()
                    assert row is not None and row[0] != "claim-busy", row
                times = sorted(times[1:])
                out["backlogs"][size] = {"median_ms": round(statistics.median(times), 3),
                                         "p95_ms": round(times[int(0.95 * (len(times) - 1))], 3),
                                         "loadavg_1m": round(os.getloadavg()[0], 2)}
    finally:
        drop_database(admin, name)
    return out


def claim(args: argparse.Namespace) -> None:
    phase = ["claim-phase", "--backlogs", args.backlogs, "--groups", str(args.groups), "--claims", str(args.claims)]
    with tempfile.TemporaryDirectory(prefix="pgmemory-baseline-") as tmp:
        before = run_in(export_ref(args.baseline, Path(tmp)), phase)
    after = run_in(ROOT, phase)
    print(f"claim_episode per backlog of pending episodes ({args.groups} groups + 1 busy group), "
          f"{args.claims} claims each, rolled back")
    for size in after["backlogs"]:
        b, a = before["backlogs"][size], after["backlogs"][size]
        print(f"  backlog {int(size):>7}: before ({args.baseline}) median {b['median_ms']:.2f} ms p95 {b['p95_ms']:.2f}"
              f" (load {b['loadavg_1m']})  after median {a['median_ms']:.2f} ms p95 {a['p95_ms']:.2f}"
              f" (load {a['loadavg_1m']})  before/after x{b['median_ms'] / a['median_ms']:.1f}")
    print(json.dumps({"before": before, "after": after}))


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    for name in ("latency", "latency-phase"):
        q = sub.add_parser(name)
        q.add_argument("--latency", type=float, default=0.5)
        q.add_argument("--groups", type=int, default=4)
        q.add_argument("--per-group", type=int, default=4)
        q.add_argument("--pool", type=int, default=4)
        q.add_argument("--seed", type=int, default=7)
        q.add_argument("--baseline", default="main")
    q = sub.add_parser("workers")
    q.add_argument("--episodes", type=int, default=400)
    q.add_argument("--groups", type=int, default=8)
    q.add_argument("--concurrency", type=int, default=2)
    q.add_argument("--seed", type=int, default=7)
    q.add_argument("--rounds", type=int, default=2, help="runs of each worker count (alternated)")
    for name in ("claim", "claim-phase"):
        q = sub.add_parser(name)
        q.add_argument("--backlogs", default="1000,10000,100000", help="backlog sizes, comma-separated")
        q.add_argument("--groups", type=int, default=4)
        q.add_argument("--claims", type=int, default=30)
        q.add_argument("--baseline", default="main")
    args = p.parse_args(argv)
    if args.command == "claim":
        claim(args)
    elif args.command == "claim-phase":
        print(json.dumps(claim_phase(args)))
    elif args.command == "latency":
        latency(args)
    elif args.command == "latency-phase":
        print(json.dumps(asyncio.run(latency_phase(args))))
    else:
        workers(args)


if __name__ == "__main__":
    main()
