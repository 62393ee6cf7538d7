"""`pgmemory reembed`: stored vectors recomputed with the current code, in batches, resumable, per group."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from pgmemory.errors import InvalidInput
from pgmemory.ingest import embed_episode
from tests.test_cli import run_cli

T0 = datetime(2023, 5, 1, 10, 0, tzinfo=timezone.utc)
# Two sessions (a day apart) of a chat: each turn's vector includes the turn before it, within a session.
TURNS = [("Bob", "How did the kids like the dinosaur museum?", 0), ("Ann", "They were stoked, a great day.", 0),
         ("Bob", "Shall we cook pasta tonight?", 0), ("Ann", "Sure, I will bring wine from Lyon.", 0),
         ("Bob", "Did you fix the car?", 1), ("Ann", "Yes, it runs again. I work at Acme now.", 1),
         ("Bob", "Any plans for the holidays?", 1)]
VECTORS = {"episodes": "SELECT id::text, embedding::text FROM pgmemory.episodes WHERE group_id = $1",
           "entities": "SELECT entity_id::text, name_embedding::text FROM pgmemory.entity_name_vectors WHERE group_id = $1",
           "facts": "SELECT version_id::text, embedding::text FROM pgmemory.facts WHERE group_id = $1",
           "fact_claims": "SELECT seq::text, embedding::text FROM pgmemory.fact_claims WHERE group_id = $1"}
SPOIL = {"episodes": "UPDATE pgmemory.episodes SET embedding = $2::text::vector WHERE group_id = $1",
         "entities": "UPDATE pgmemory.entity_name_vectors SET name_embedding = $2::text::vector WHERE group_id = $1",
         "facts": "UPDATE pgmemory.facts SET embedding = $2::text::vector WHERE group_id = $1",
         "fact_claims": "UPDATE pgmemory.fact_claims SET embedding = $2::text::vector WHERE group_id = $1"}


async def ingest(memory, group):
    await memory.add_episodes([{"group_id": group, "content": text, "actor": who, "episode_id": f"t{i}",
                                "reference_time": T0 + timedelta(days=day)} for i, (who, text, day) in enumerate(TURNS)])


async def vectors(memory, group, kind) -> dict[str, list[float]]:
    return {k: [float(x) for x in v.strip("[]").split(",")] for k, v in await memory.pool.fetch(VECTORS[kind], group)}


async def spoil(memory, group, kinds=tuple(VECTORS)):
    """Stored vectors as an older code would have left them (here: all the same vector)."""
    old = "[" + ",".join(["1"] + ["0"] * (memory.embedder.dim - 1)) + "]"
    for kind in kinds:
        await memory.pool.execute(SPOIL[kind], group, old)


def same(a: dict[str, list[float]], b: dict[str, list[float]]) -> bool:
    return a.keys() == b.keys() and all(x == pytest.approx(b[k], abs=1e-6) for k, x in a.items())


async def test_reembed_restores_what_ingestion_stores_now_across_batches(memory, group):
    await ingest(memory, group)
    fresh = {kind: await vectors(memory, group, kind) for kind in VECTORS}
    assert len(fresh["episodes"]) == len(TURNS) and fresh["entities"] and fresh["facts"] and fresh["fact_claims"]
    await spoil(memory, group)
    assert not same(await vectors(memory, group, "episodes"), fresh["episodes"])
    seen = []
    results = await memory.reembed(group, batch=2, on_progress=seen.append)  # the turn before crosses batches
    for kind in VECTORS:
        assert same(await vectors(memory, group, kind), fresh[kind]), kind
    assert {r.kind: r.rows for r in results}["episodes"] == len(TURNS)
    assert [p.rows_done for p in seen if p.kind == "episodes"] == [2, 4, 6, 7]
    assert seen[-1].state == "finished" and str(seen[-1]).startswith(f"reembed fact_claims of {group!r}")
    # nothing left to do with the same code and embedder; restart does it all again
    again = await memory.reembed(group)
    assert all(r.current and r.rows == 0 for r in again)
    redo = await memory.reembed(group, kinds=["episodes"], restart=True)
    assert [(r.kind, r.rows, r.current) for r in redo] == [("episodes", len(TURNS), False)]


async def test_an_already_current_walk_counts_the_rows_there_are(memory, group):
    """A finished walk reports "already current" with the group's rows: after an episode was
    erased it printed "7/6 rows" (the rows of the earlier run over the rows left)."""
    await ingest(memory, group)
    await memory.reembed(group, kinds=["episodes"])
    await memory.delete_episode(group, "t6", erase=True)
    seen = []
    [result] = await memory.reembed(group, kinds=["episodes"], on_progress=seen.append)
    assert result.current and [(p.rows_done, p.rows_total, p.state) for p in seen] == [
        (len(TURNS) - 1, len(TURNS) - 1, "current")]


async def test_an_interrupted_run_resumes_after_its_last_batch(memory, group):
    await ingest(memory, group)
    fresh = await vectors(memory, group, "episodes")
    await spoil(memory, group, ["episodes"])

    def stop_after_two_batches(progress):
        if progress.rows_done == 4:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        await memory.reembed(group, kinds=["episodes"], batch=2, on_progress=stop_after_two_batches)
    half = await vectors(memory, group, "episodes")
    assert sum(same({k: v}, {k: fresh[k]}) for k, v in half.items()) == 4  # two batches committed
    resumed = await memory.reembed(group, kinds=["episodes"], batch=2)
    assert [(r.resumed, r.rows) for r in resumed] == [(True, len(TURNS) - 4)]
    assert same(await vectors(memory, group, "episodes"), fresh)


async def test_a_changed_recipe_is_redone(memory, group, monkeypatch):
    await ingest(memory, group)
    await memory.reembed(group, kinds=["episodes"])
    before = await vectors(memory, group, "episodes")
    monkeypatch.setattr(embed_episode, "PREVIOUS_TURNS", 0)  # the code now embeds the own text only
    out = await memory.reembed(group, kinds=["episodes"])
    assert [(r.current, r.rows) for r in out] == [(False, len(TURNS))]
    own = await vectors(memory, group, "episodes")
    assert not same(own, before)
    # every episode's vector is now its own text's alone
    expected = [memory.embedder.embed_one(f"{who}: {text}") for who, text, _ in TURNS]
    assert all(any(v == pytest.approx(e, abs=1e-6) for e in expected) for v in own.values())


async def test_reembed_stays_in_its_group_and_refuses_bad_input(memory, group):
    other = group + "-other"
    await ingest(memory, group)
    await ingest(memory, other)
    fresh = await vectors(memory, group, "entities")
    await spoil(memory, group)
    await spoil(memory, other)
    spoiled_other = {kind: await vectors(memory, other, kind) for kind in VECTORS}
    await memory.reembed(group, kinds=["entities"])
    assert same(await vectors(memory, group, "entities"), fresh)
    for kind in VECTORS:
        assert same(await vectors(memory, other, kind), spoiled_other[kind])
    for bad, message in (({"group_id": "no-such-group"}, "has no episodes or entities"),
                         ({"group_id": group, "kinds": ["vectors"]}, "kind must be one of episodes, entities, facts"),
                         ({"group_id": group, "batch": 0}, "batch must be an integer between 1 and")):
        with pytest.raises(InvalidInput, match=message):
            await memory.reembed(**bad)
    assert await memory.pool.fetchval("SELECT count(*) FROM pgmemory.reembed_progress WHERE group_id = $1",
                                      "no-such-group") == 0
    await memory.erase_group(group)
    assert await memory.pool.fetchval("SELECT count(*) FROM pgmemory.reembed_progress WHERE group_id = $1", group) == 0


async def test_reembed_command_prints_progress_and_one_line_errors(memory, group, db_dsn):
    await ingest(memory, group)
    done = run_cli("reembed", "--group", group, "--kind", "episodes", "--batch", "3", dsn=db_dsn)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [f"reembed episodes of {group!r}: {n}/{len(TURNS)} rows, {state}"
                                        for n, state in ((3, "running"), (6, "running"), (7, "done"))] + [
        f"re-embedded {len(TURNS)} rows in 1 group(s) (0 of 1 walks were already current)"]
    again = run_cli("reembed", "--group", group, "--kind", "episodes", dsn=db_dsn)
    assert f"reembed episodes of {group!r}: {len(TURNS)}/{len(TURNS)} rows, already current" in again.stdout
    missing = run_cli("reembed", "--group", "nobody-here", dsn=db_dsn)
    assert missing.returncode == 2 and "group 'nobody-here' has no episodes or entities" in missing.stderr
    assert "Traceback" not in missing.stderr and len(missing.stderr.strip().splitlines()) == 1


async def test_reembed_leaves_a_retracted_turn_out_of_the_next_ones_vector(memory, group):
    """A retracted episode is history, not a turn before: after a reembed, the turn after it has the
    vector it would have had if the retracted one had never been said (as ingestion reads turns)."""
    from pgmemory.ingest.episode import episode_uuid

    await ingest(memory, group)
    without = f"{group}-without"
    await memory.add_episodes([{"group_id": without, "content": text, "actor": who, "episode_id": f"t{i}",
                                "reference_time": T0 + timedelta(days=day)}
                               for i, (who, text, day) in enumerate(TURNS) if i != 2])
    await memory.delete_episode(group, "t2")
    await memory.reembed(group, kinds=["episodes"], batch=2, restart=True)
    ours, theirs = await vectors(memory, group, "episodes"), await vectors(memory, without, "episodes")
    assert ours[str(episode_uuid(group, "t3"))] == pytest.approx(theirs[str(episode_uuid(without, "t3"))], abs=1e-6)
