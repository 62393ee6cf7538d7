"""Communities: full detection time, dynamic update cost per episode, LLM calls per episode.

Into a FRESH database on the server pgmemory resolves to (PGMEMORY_DSN or the embedded one):

1. Detection. For each size (default 10k and 100k facts) one group gets a planted-partition
   graph written by SQL (entities = facts / 5, blocks of 50, 90% of the facts inside a block).
   Timed, server-side (EXPLAIN ANALYZE execution time): reading the graph
   (pgmemory_internal.community_graph: the baseline, the least any detection must do), the first
   pgmemory.detect_communities (every community new, AGE mirror writes included when AGE is
   there), and a second one on the same graph (every community kept). NMI against the blocks.
2. Dynamic update. On the largest group, `--updates` times: a new entity with 5 facts into one
   block and 1 outside is written (untimed), then pgmemory_internal.update_communities (what
   apply_episode runs per episode) is timed server-side. Baseline: the DB-side time per episode
   of step 3's offline ingest (EpisodeResult.db_seconds), same run.
3. LLM calls per episode. `--episodes` synthetic chat episodes (bench/synthetic.py) through the
   LLM extractor against the in-process scripted model (bench/scripted_llm.py), in runs of
   `--run` episodes, each run ending with the community upkeep (add_episodes(communities=True)):
   (episode calls + community summary calls) / episodes. The same episodes offline give step 2's
   baseline.
4. Replacement. On the largest group, a detection at resolution 0.5, then the default one, timed:
   most communities end (with their memberships and mirror edges) and new ones are written.

    python -m bench.communities                      # 10k and 100k facts, 200 updates, 500 episodes
    python -m bench.communities --sizes 10000 --episodes 200
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
import time
from pathlib import Path
from typing import Any

import psycopg

from bench.ingest import create_database, drop_database
from bench.stats import summary
from bench.synthetic import generate
from pgmemory import Memory
from pgmemory.providers.embedder import HashEmbedder
from pgmemory.storage.connect import resolve_dsn
from tests.communities_support import nmi as planted_nmi

BLOCK = 50
TARGETS = {"detect_s_at_100k": 2.0, "update_ms_median": 1.0, "llm_calls_per_episode": 2.0}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="10000,100000", help="facts per group, comma-separated")
    p.add_argument("--updates", type=int, default=200, help="dynamic updates timed (default 200)")
    p.add_argument("--episodes", type=int, default=500, help="episodes for the LLM-call count (default 500)")
    p.add_argument("--run", type=int, default=50, help="episodes per ingest run (default 50)")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--baseline", help="a commit whose detect_communities is timed first on the same graphs")
    return p.parse_args(argv)


def load() -> float:
    return round(os.getloadavg()[0], 2)


def server_ms(conn: psycopg.Connection, sql: str, params: tuple) -> float:
    """Execution time (ms) of one statement as the server measures it."""
    plan = conn.execute("EXPLAIN (ANALYZE, TIMING OFF, FORMAT JSON) " + sql, params).fetchone()[0]
    return float(plan[0]["Execution Time"])


def plant(conn: psycopg.Connection, group: str, facts: int, seed: int) -> tuple[int, int]:
    """A planted-partition graph of `facts` facts; returns (entities, blocks)."""
    entities = max(BLOCK * 2, facts // 5)
    blocks = entities // BLOCK
    conn.execute("SELECT setseed(%s)", (seed / 1000,))
    conn.execute("INSERT INTO pgmemory.entities (id, group_id, name)"
                 " SELECT md5(%s || i)::uuid, %s, 'Entity ' || i FROM generate_series(0, %s - 1) i",
                 (group, group, entities))
    # 90% inside a block, 10% anywhere; no self-loops.
    conn.execute(
        "INSERT INTO pgmemory.facts (id, lineage, group_id, source_id, target_id, relation, fact, valid)"
        " SELECT f, f, %(g)s, md5(%(g)s || a)::uuid, md5(%(g)s || b)::uuid, 'KNOWS',"
        "        'Entity ' || a || ' knows Entity ' || b || '.', tstzrange('2020-01-01', NULL)"
        "   FROM (SELECT gen_random_uuid() AS f, a,"
        "                CASE WHEN random() < 0.9 THEN (a / %(k)s) * %(k)s + (a %% %(k)s + 1 + floor(random() * (%(k)s - 1))::int) %% %(k)s"
        "                     ELSE (a + 1 + floor(random() * (%(n)s - 1))::int) %% %(n)s END AS b"
        "           FROM (SELECT floor(random() * %(n)s)::int AS a FROM generate_series(1, %(m)s)) x) y",
        {"g": group, "k": BLOCK, "n": entities, "m": facts})
    conn.commit()
    conn.execute("ANALYZE pgmemory.facts")
    conn.execute("ANALYZE pgmemory.entities")
    conn.commit()
    return entities, blocks


def nmi(conn: psycopg.Connection, group: str, entities: int) -> float:
    """NMI of the group's current communities against the planted blocks (by entity name)."""
    found = dict(conn.execute(
        "SELECT e.name, m.community_id FROM pgmemory.community_members m JOIN pgmemory.entities e"
        " ON e.id = m.entity_id WHERE m.group_id = %s AND m.ended_at IS NULL", (group,)).fetchall())
    return round(planted_nmi({f"Entity {i}": i // BLOCK for i in range(entities)}, found), 3)


def backend_cpu_s(conn: psycopg.Connection) -> float | None:
    """CPU seconds the connection's server process has used (a local server only): less
    sensitive than wall time to the other processes of a shared machine."""
    try:
        fields = Path(f"/proc/{conn.info.backend_pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def install_baseline(conn: psycopg.Connection, commit: str) -> None:
    """That commit's pgmemory.detect_communities as bench_baseline.detect_communities."""
    text = subprocess.run(["git", "show", f"{commit}:sql/57_communities.sql"], capture_output=True, text=True,
                          check=True, cwd=Path(__file__).parent).stdout
    start = text.index("CREATE OR REPLACE FUNCTION pgmemory.detect_communities(")
    end = text.index("\nEND\n$$;", start) + len("\nEND\n$$;")
    function = text[start:end].replace("pgmemory.detect_communities(", "bench_baseline.detect_communities(", 1)
    # Internal helpers moved to pgmemory_internal (migration 0210): an older body calls them there.
    for helper in ("community_graph(", "setting("):
        function = function.replace("pgmemory." + helper, "pgmemory_internal." + helper)
    conn.execute("CREATE SCHEMA IF NOT EXISTS bench_baseline")
    conn.execute(function)
    conn.commit()


def timed_detection(conn: psycopg.Connection, function: str, group: str) -> tuple[dict, float, float | None]:
    """One detection: (its counts, wall ms, server CPU ms), committed."""
    cpu = backend_cpu_s(conn)
    started = time.perf_counter()
    out = conn.execute(f"SELECT {function}(%s)", (group,)).fetchone()[0]  # function: a fixed name
    conn.commit()
    wall = (time.perf_counter() - started) * 1000
    after = backend_cpu_s(conn)
    return out, wall, None if cpu is None or after is None else (after - cpu) * 1000


def detection(dsn: str, sizes: list[int], seed: int, baseline: str | None = None) -> tuple[str, int]:
    """Step 1; returns the largest group and its entity count. With `baseline` (a commit), that
    commit's detection runs first on the same graph, same run, and its communities are then
    replaced by the current one's."""
    print("== detection (server-side ms; AGE mirror included when the database uses AGE)")
    last = ("", 0)
    with psycopg.connect(dsn) as conn:
        graph_mode = conn.execute("SELECT pgmemory_internal.setting('graph_mode') #>> '{}'").fetchone()[0]
        print(f"graph mode: {graph_mode}")
        if baseline:
            install_baseline(conn, baseline)
        for facts in sizes:
            group = f"bench-communities-{facts}"
            entities, blocks = plant(conn, group, facts, seed)
            read = server_ms(conn, "SELECT count(*) FROM pgmemory_internal.community_graph(%s)", (group,))
            if baseline:
                base_out, base_wall, base_cpu = timed_detection(conn, "bench_baseline.detect_communities", group)
                base_nmi = nmi(conn, group, entities)
                # Back to no communities, so both detections write the same.
                conn.execute("DELETE FROM pgmemory.community_members WHERE group_id = %s", (group,))
                conn.execute("DELETE FROM pgmemory.communities WHERE group_id = %s", (group,))
                conn.commit()
            out, first, cpu = timed_detection(conn, "pgmemory.detect_communities", group)
            quality = nmi(conn, group, entities)
            if baseline:
                print(f"{facts:>7} facts: baseline {baseline} detection {base_wall:.0f} ms wall, "
                      f"{base_cpu if base_cpu is None else round(base_cpu)} ms server CPU, NMI {base_nmi}, "
                      f"{base_out['communities']} communities; current {first:.0f} ms wall, "
                      f"{cpu if cpu is None else round(cpu)} ms server CPU, NMI {quality}, {out['communities']}"
                      f" communities: x{base_wall / first:.2f} wall"
                      + (f", x{base_cpu / cpu:.2f} CPU" if base_cpu and cpu else "") + f"; load {load()}", flush=True)
            again_started = time.perf_counter()
            again = conn.execute("SELECT pgmemory.detect_communities(%s)", (group,)).fetchone()[0]
            conn.commit()
            second = (time.perf_counter() - again_started) * 1000
            print(f"{facts:>7} facts, {entities} entities, {blocks} planted blocks: graph read {read:.0f} ms; "
                  f"detection {first:.0f} ms, server CPU {cpu if cpu is None else round(cpu)} ms "
                  f"(x{first / read:.1f} the read; {out['communities']} communities, "
                  f"{out['iterations']} iterations, {out['merge_rounds']} merge rounds, NMI {quality}; "
                  f"inside: {out['ms']}; moves per iteration {out['moves']}; nodes per level {out.get('levels')}); "
                  f"again on the same graph {second:.0f} ms ({again['kept']} kept); load {load()}", flush=True)
            last = (group, entities)
    return last


def replacement(dsn: str, group: str) -> None:
    """Step 4: a detection that replaces most communities of the group (after one at resolution
    0.5), wall and server CPU; last, so that its ended versions do not weigh on the other steps."""
    with psycopg.connect(dsn) as conn:
        conn.execute("SELECT pgmemory.detect_communities(%s, 30, 0.5)", (group,))
        conn.commit()
        out, wall, cpu = timed_detection(conn, "pgmemory.detect_communities", group)
    print(f"== replacing detection on {group}: {out['ended']} communities ended, {out['created']} created, "
          f"{out['kept']} kept: {wall:.0f} ms wall, server CPU {cpu if cpu is None else round(cpu)} ms "
          f"(inside: {out['ms']}); load {load()}", flush=True)


def updates(dsn: str, group: str, entities: int, count: int, seed: int) -> list[float]:
    """Step 2: server-side ms of pgmemory_internal.update_communities for `count` new entities."""
    rng = random.Random(seed)
    times = []
    with psycopg.connect(dsn) as conn:
        for i in range(count):
            block = rng.randrange(entities // BLOCK)
            inside = [block * BLOCK + j for j in rng.sample(range(BLOCK), 5)]
            outside = [rng.randrange(entities)]
            new = conn.execute("INSERT INTO pgmemory.entities (id, group_id, name) VALUES (gen_random_uuid(), %s, %s)"
                               " RETURNING id", (group, f"Newcomer {i}")).fetchone()[0]
            ids = [r[0] for r in conn.execute("SELECT id FROM pgmemory.entities WHERE group_id = %s AND name = ANY (%s)",
                                               (group, [f"Entity {n}" for n in inside + outside])).fetchall()]
            conn.execute("INSERT INTO pgmemory.facts (id, lineage, group_id, source_id, target_id, relation, fact, valid)"
                         " SELECT f, f, %s, %s, t, 'KNOWS', 'A newcomer knows someone.', tstzrange('2020-01-01', NULL)"
                         "   FROM (SELECT gen_random_uuid() AS f, t FROM unnest(%s::uuid[]) t) x", (group, new, ids))
            # As apply_episode calls it for an episode that ended no fact (p_ended empty; one that
            # ended some also checks their endpoints for departures, community_departures).
            times.append(server_ms(conn, "SELECT pgmemory_internal.update_communities(%s, %s::uuid[], %s::uuid[],"
                                         " %s::uuid[], '{}')",
                                   (group, [new, *ids[:2]], [new], [new, *ids])))
            conn.commit()
    return times


async def ingest(dsn: str, mode: str, episodes: list[dict[str, Any]], run: int) -> dict[str, Any]:
    """Step 3 (and the offline baseline): runs of `run` episodes, each ending with the upkeep."""
    fake = None
    if mode == "llm":
        from bench.scripted_llm import ScriptedModel
        from pgmemory.extract.llm import LLMExtractor
        from pgmemory.providers.llm import LLMClient
        from tests import fake_openai

        fake_openai._Handler.disable_nagle_algorithm = True
        model = ScriptedModel()
        fake = fake_openai.FakeOpenAI(responder=model).start()
        extractor: Any = LLMExtractor(LLMClient(base_url=fake.base_url, api_key="bench",
                                                model="scripted-zero-latency", max_retries=0))
    else:
        from pgmemory.extract.rules import RuleExtractor

        extractor = RuleExtractor()
    group = f"bench-communities-chat-{mode}"
    batch = [{**ep, "group_id": group} for ep in episodes]
    memory = await Memory.open(dsn, embedder=HashEmbedder(), extractor=extractor)
    try:
        done = []
        for at in range(0, len(batch), run):
            results = await memory.add_episodes(batch[at:at + run], concurrency=1, communities=True)
            done += [r for r in results if getattr(r, "status", "") == "done"]
        async with memory.pool.acquire() as conn:
            state = await conn.fetchrow("SELECT * FROM pgmemory.community_state WHERE group_id = $1", group)
            current = await conn.fetchval("SELECT count(*) FROM pgmemory.communities"
                                          " WHERE group_id = $1 AND ended_at IS NULL", group)
    finally:
        await memory.close()
        if fake is not None:
            fake.stop()
    return {"episodes": len(done), "episode_calls": sum(r.llm_calls for r in done),
            "community_calls": state["llm_calls"] if state else 0, "communities": current,
            "db_ms": [r.db_seconds * 1000 for r in done]}


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    admin = resolve_dsn()
    name, dsn = create_database(admin, "communities")
    print(f"database {name}; load average (1 min) at start {load()}")
    try:
        asyncio.run(_init(dsn))
        group, entities = detection(dsn, sizes, args.seed, args.baseline)
        episodes = generate(args.episodes, seed=args.seed)
        offline = asyncio.run(ingest(dsn, "offline", episodes, args.run))
        timed = updates(dsn, group, entities, args.updates, args.seed)
        base, upd = summary(offline["db_ms"]), summary(timed)
        print(f"== dynamic update (pgmemory_internal.update_communities, server-side) on the {sizes[-1]}-fact group: "
              f"median {upd['median']} ms, p95 {upd['p95']} ms over {len(timed)} new entities; baseline: "
              f"a whole offline episode's DB time median {base['median']} ms, p95 {base['p95']} ms "
              f"(update = {upd['median'] / base['median']:.1%} of it); load {load()}")
        llm = asyncio.run(ingest(dsn, "llm", episodes, args.run))
        per = (llm["episode_calls"] + llm["community_calls"]) / max(1, llm["episodes"])
        print(f"== LLM calls per episode ({llm['episodes']} episodes in runs of {args.run}, scripted model): "
              f"{llm['episode_calls']} extraction/resolution/judgement + {llm['community_calls']} community summary "
              f"calls ({llm['communities']} communities) = {per:.2f} per episode "
              f"(without summaries {llm['episode_calls'] / max(1, llm['episodes']):.2f}); load {load()}")
        replacement(dsn, group)
        print("targets: " + json.dumps(TARGETS))
    finally:
        drop_database(admin, name)


async def _init(dsn: str) -> None:
    memory = await Memory.open(dsn, embedder=HashEmbedder())
    await memory.close()


if __name__ == "__main__":
    main()
