"""The eval harness end to end on a real Postgres (hash embedder, offline extractor): retrieval
metrics, resume, QA with a scripted LLM, bad input."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from pgmemory.errors import InvalidInput
from pgmemory.eval import harness
from pgmemory.eval.harness import QA_SKIPPED, EvalOptions, load_conversations, run_eval
from pgmemory.eval.ingestion import episode_map, group_id
from pgmemory.eval.metrics import DEFAULT_KS, mean, percentile, recall_at_k
from pgmemory.eval.readers import normalize_dia_id
from pgmemory.eval.report import plot_latency
from pgmemory.eval.retrieval import full_transcript, rank_turns
from pgmemory.providers.embed_cache import EmbeddingCache, embed_reusing
from pgmemory.providers.llm import LLMClient
from pgmemory.search.types import EpisodeHit, FactHit, SearchResults
from pgmemory.surfaces.cli import main
from tests.fake_openai import FakeOpenAI, Reply
from tests.support import utc

LOCOMO_DEV = Path("/work/shared/data/locomo/locomo-dev.json")
IRREGULAR = Path(__file__).parent / "data" / "locomo_irregular_evidence.json"


def short_locomo(tmp_path: Path) -> Path:
    """conv-30's first two sessions with the questions whose evidence lies in them (unique sample id)."""
    conv30 = next(c for c in json.loads(LOCOMO_DEV.read_text()) if c["sample_id"] == "conv-30")
    conversation = {key: conv30["conversation"][key] for key in (
        "speaker_a", "speaker_b", "session_1_date_time", "session_1", "session_2_date_time", "session_2")}
    turns = {t["dia_id"] for s in ("session_1", "session_2") for t in conversation[s]}
    qa = [q for q in conv30["qa"]
          if q["evidence"] and all(normalize_dia_id(e) in turns for e in q["evidence"])]
    item = {"sample_id": f"conv-30-short-{uuid.uuid4().hex[:8]}", "conversation": conversation, "qa": qa}
    path = tmp_path / "locomo-short.json"
    path.write_text(json.dumps([item]), encoding="utf-8")
    return path


def irregular_copy(tmp_path: Path) -> Path:
    """The hand-made irregular-evidence file with sample ids no other test uses."""
    data = json.loads(IRREGULAR.read_text())
    suffix = uuid.uuid4().hex[:8]
    for item in data:
        item["sample_id"] += f"-{suffix}"
    path = tmp_path / "irregular.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def options(path: Path, output: Path, benchmark: str = "locomo", **kw) -> EvalOptions:
    return EvalOptions(benchmark=benchmark, path=path, output=output, **kw)


def check_recomputed(results: dict, system: str) -> None:
    """Every recall@k, context size and accuracy equals a recomputation from the per-question rows."""
    rows = [r for r in results["questions"] if system in r["systems"]]
    summary = results["systems"][system]
    groups = [("overall", rows)] + [
        (c, [r for r in rows if r["category"] == c]) for c in {r["category"] for r in rows}]
    answerable = [r for r in rows if not r["adversarial"]]
    assert ("non_adversarial" in summary) == (0 < len(answerable) < len(rows))
    if "non_adversarial" in summary:
        groups.append(("non_adversarial", answerable))
    for name, members in groups:
        stats = summary[name] if name in ("overall", "non_adversarial") else summary["by_category"][name]
        assert stats["n"] == len(members)
        if system != "full_context":
            for k in DEFAULT_KS:
                expected = mean(recall_at_k(r["systems"][system]["retrieved"], r["gold"], k) for r in members)
                assert stats[f"recall@{k}"] == pytest.approx(expected)
        assert stats["context_tokens"] == pytest.approx(
            mean(r["systems"][system]["context_tokens"] for r in members))
        if "accuracy" in stats:
            flags = [r["systems"][system]["correct"] for r in members]
            assert stats["accuracy"] == pytest.approx(sum(flags) / len(flags))
            latencies = [r["systems"][system]["latency_ms"] for r in members]
            assert stats["latency_p95_ms"] == pytest.approx(percentile(latencies, 95))


async def test_retrieval_eval_on_one_short_conversation(memory, tmp_path, capsys):
    path = short_locomo(tmp_path)
    out = tmp_path / "out"
    conversations = load_conversations("locomo", path)
    (conv,) = conversations
    results = await run_eval(options(path, out), conversations, memory, None)

    assert QA_SKIPPED in capsys.readouterr().out
    assert json.loads((out / "results.json").read_text()) == json.loads(json.dumps(results))
    assert results["qa"]["enabled"] is False and results["qa"]["skipped_reason"] == QA_SKIPPED
    assert set(results["systems"]) == {"pgmemory", "bm25", "dense"}
    categories = {q.category for q in conv.questions}
    for system in ("pgmemory", "bm25", "dense"):
        summary = results["systems"][system]
        assert set(summary["by_category"]) == categories
        assert {"n", "n_with_gold", "recall@5", "recall@10", "recall@20", "context_chars",
                "context_tokens"} <= set(summary["overall"])
        assert "accuracy" not in summary["overall"]
        check_recomputed(results, system)
    assert results["systems"]["pgmemory"]["overall"]["search_p95_ms"] > 0
    assert results["systems"]["pgmemory"]["overall"]["recall@20"] > 0.5
    assert len(results["questions"]) == len(conv.questions) == 22
    turn_ids = {t.turn_id for t in conv.turns}
    for row in results["questions"]:
        assert set(row["systems"]["pgmemory"]["retrieved"]) <= turn_ids
        assert len(row["systems"]["bm25"]["retrieved"]) <= max(DEFAULT_KS)
    assert results["conversations"][conv.conversation_id]["ingest"]["episodes"] == 44
    report = (out / "report.md").read_text()
    assert "recall@k per category" in report and QA_SKIPPED in report
    assert "| non-adversarial | " in report
    for name in ("recall_by_category.png", "latency.png", f"partial/{conv.conversation_id}.json"):
        assert (out / name).stat().st_size > 0

    async with memory.pool.acquire() as conn:
        rows = await conn.fetch("SELECT id, actor, valid_at, status FROM pgmemory.episodes WHERE group_id = $1",
                                group_id("locomo", conv.conversation_id))
    first = {r["id"]: r for r in rows}[next(iter(episode_map(group_id("locomo", conv.conversation_id), conv)))]
    assert len(rows) == 44 and {r["status"] for r in rows} == {"done"}
    assert first["actor"] == conv.turns[0].speaker == "Gina" and first["valid_at"] == utc("2023-01-20T16:04")


async def test_same_run_resumes_another_run_is_refused_and_force_replaces(memory, tmp_path, monkeypatch):
    path = irregular_copy(tmp_path)
    out = tmp_path / "out"
    conversations = load_conversations("locomo", path)
    first = await run_eval(options(path, out), conversations, memory, None)

    async def must_not_run(*args, **kwargs):
        raise AssertionError("a finished conversation was evaluated again")
    with monkeypatch.context() as m:
        m.setattr(harness, "evaluate_conversation", must_not_run)
        again = await run_eval(options(path, out), conversations, memory, None)
    assert again == first

    def snapshot(directory: Path) -> dict:
        return {p: p.read_bytes() for p in directory.rglob("*") if p.is_file()}
    before = snapshot(out)
    for other in (options(path, out, k=5), options(path, out, recipe="edge_hybrid_rrf")):
        with pytest.raises(InvalidInput, match=r"already holds a run of recipe combined_hybrid_rrf with k=10 "
                                               r"on irregular\.json \(sha256 [0-9a-f]{16}\.\.\.\) "
                                               r"\(2 conversations.*--force"):
            await run_eval(other, conversations, memory, None)
    # Another file of the same name is another run: refused, not resumed.
    changed = tmp_path / "elsewhere" / path.name
    changed.parent.mkdir()
    data = json.loads(path.read_text())
    data[0]["conversation"]["session_1"][0]["text"] += " Changed."
    changed.write_text(json.dumps(data))
    with pytest.raises(InvalidInput, match=r"already holds a run .* on irregular\.json"):
        await run_eval(options(changed, out), load_conversations("locomo", changed), memory, None)
    assert snapshot(out) == before

    other_k = await run_eval(options(path, tmp_path / "out-k5", k=5), conversations, memory, None)
    ingest = other_k["conversations"][conversations[0].conversation_id]["ingest"]
    assert ingest["reused"] is True and ingest["episodes"] == 10
    assert other_k["settings"]["k"] == 5
    for system in ("pgmemory", "bm25", "dense"):
        assert other_k["systems"][system]["overall"]["recall@20"] == first["systems"][system]["overall"]["recall@20"]

    forced = await run_eval(options(path, out, k=5, force=True), conversations, memory, None)
    assert forced == json.loads((out / "results.json").read_text()) and forced["settings"]["k"] == 5
    assert json.loads((out / "run.json").read_text())["settings"]["k"] == 5
    partials = list((out / "partial").glob("*.json"))
    assert len(partials) == 2 and all(json.loads(p.read_text())["settings"]["k"] == 5 for p in partials)


async def test_output_with_foreign_files_is_refused_and_force_keeps_them(memory, tmp_path):
    path = irregular_copy(tmp_path)
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("my notes")
    conversations = load_conversations("locomo", path)
    with pytest.raises(InvalidInput, match="mine already holds files of another run"):
        await run_eval(options(path, out), conversations, memory, None)
    assert [p.name for p in out.iterdir()] == ["notes.txt"]
    (tmp_path / "afile").write_text("x")
    with pytest.raises(InvalidInput, match="is a file, not a directory"):
        await run_eval(options(path, tmp_path / "afile", force=True), conversations, memory, None)
    await run_eval(options(path, out, force=True), conversations, memory, None)
    assert (out / "notes.txt").read_text() == "my notes" and (out / "results.json").exists()


async def test_facts_only_recipe_ranks_the_facts_source_turns(memory, tmp_path):
    path = short_locomo(tmp_path)
    out = tmp_path / "out"
    conversations = load_conversations("locomo", path)
    results = await run_eval(options(path, out, recipe="edge_hybrid_rrf"), conversations, memory, None)
    group = group_id("locomo", conversations[0].conversation_id)
    async with memory.pool.acquire() as conn:
        sources = await conn.fetch(
            "SELECT DISTINCT fe.episode_id FROM pgmemory.fact_episodes fe JOIN pgmemory.facts f"
            " ON f.id = fe.fact_id AND f.group_id = fe.group_id WHERE fe.group_id = $1", group)
    turn_of = episode_map(group, conversations[0])
    source_turns = {turn_of[r["episode_id"]] for r in sources}
    assert source_turns, "the offline extractor found facts in these two sessions"
    ranked = [r["systems"]["pgmemory"] for r in results["questions"]]
    assert all(set(r["retrieved"]) <= source_turns and r["from_episodes"] == 0 for r in ranked)
    assert any(r["retrieved"] for r in ranked)
    assert all(r["from_facts"] == len(r["retrieved"]) <= max(DEFAULT_KS) for r in ranked)
    for system in ("pgmemory", "bm25", "dense"):
        summary = results["systems"][system]
        for stats in (summary["overall"], *summary["by_category"].values()):
            for k in DEFAULT_KS:
                assert stats[f"recall@{k}"] is None or 0.0 <= stats[f"recall@{k}"] <= 1.0
        check_recomputed(results, system)
    overall = results["systems"]["pgmemory"]["overall"]
    assert overall["turns_from_episodes"] == 0 and overall["turns_from_facts"] == overall["turns_ranked"] > 0
    async with memory.pool.acquire() as conn:
        facts = await conn.fetchval("SELECT count(*) FROM pgmemory.facts WHERE group_id = $1"
                                    " AND upper_inf(recorded)", group)
    assert results["conversations"][conversations[0].conversation_id]["facts"] == facts > 0
    report = (out / "report.md").read_text()
    assert "returns facts only" in report and "source episodes of its fact hits (pgmemory.fact_episodes)" in report
    assert "0.0 from episode hits" in report


async def test_searches_run_one_at_a_time_after_all_ingestion(memory, tmp_path, monkeypatch):
    path = irregular_copy(tmp_path)
    conversations = load_conversations("locomo", path)
    events: list[str] = []
    in_flight = 0
    real_ingest, real_search = harness.ingest_conversation, memory.search

    async def ingest(*args, **kwargs):
        events.append("ingest start")
        report = await real_ingest(*args, **kwargs)
        events.append("ingest end")
        return report

    async def search(*args, **kwargs):
        nonlocal in_flight
        in_flight += 1
        events.append(f"search {in_flight}")
        try:
            return await real_search(*args, **kwargs)
        finally:
            in_flight -= 1
    monkeypatch.setattr(harness, "ingest_conversation", ingest)
    monkeypatch.setattr(memory, "search", search)
    results = await run_eval(options(path, tmp_path / "out", concurrency=2), conversations, memory, None)

    assert events[:2] == ["ingest start", "ingest start"], "ingestion itself runs concurrently"
    assert events[2:4] == ["ingest end", "ingest end"]
    assert set(events[4:]) == {"search 1"}
    questions = sum(len(c.questions) for c in conversations)
    # per question one timed Memory.search and one inside Memory.context, per conversation one warm-up
    assert len(events[4:]) == 2 * questions + len(conversations)
    assert results["machine"] == {"cores": [os.cpu_count()], "search_concurrency": 1, "ingest_concurrency": 2}
    for row in results["questions"]:
        assert row["systems"]["pgmemory"]["search_ms"] > 0 and row["systems"]["pgmemory"]["context_ms"] > 0
    labels = plot_latency(results, tmp_path / "latency.png")
    searches = [r["systems"]["pgmemory"]["search_ms"] for r in results["questions"]]
    assert labels[:2] == [f"p50 {percentile(searches, 50):,.1f} ms", f"p95 {percentile(searches, 95):,.1f} ms"]
    report = (tmp_path / "out" / "report.md").read_text()
    assert f"{os.cpu_count()} CPU cores; searches one at a time (concurrency 1), after ingestion " \
           "(up to 2 conversations at once) had finished" in report


class _CachingEmbedder:
    """The test's embedder behind an LRU, as the local and remote embedders are; records the texts
    it computes (cache misses)."""

    def __init__(self, inner) -> None:
        self.inner, self.cache, self.computed = inner, EmbeddingCache(), []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    async def embed(self, texts: list[str]) -> list[list[float]]:
        async def compute(missing: list[str]) -> list[list[float]]:
            self.computed.extend(missing)
            return await self.inner.embed(missing)
        return await embed_reusing(list(texts), self.cache, compute)


async def test_each_timed_search_embeds_its_query_as_a_user_search_does(memory, tmp_path, monkeypatch):
    # The dense baseline and the warm-up embed the questions first; a timed search served from
    # the embedder's cache would report search latency without the query embedding.
    path = short_locomo(tmp_path)
    conversations = load_conversations("locomo", path)
    embedder = _CachingEmbedder(memory.embedder)
    monkeypatch.setattr(memory, "embedder", embedder)
    searches: list[tuple[str, bool]] = []
    real_search = memory.search

    async def search(query, *args, **kwargs):
        before = len(embedder.computed)
        found = await real_search(query, *args, **kwargs)
        searches.append((query, query in embedder.computed[before:]))
        return found
    monkeypatch.setattr(memory, "search", search)
    await run_eval(options(path, tmp_path / "out"), conversations, memory, None)

    questions = [q.question for q in conversations[0].questions]
    assert len(searches) == 1 + 2 * len(questions)  # the warm-up; per question the timed one and context's
    timed = searches[1::2]
    assert [q for q, _ in timed] == questions
    first_asked = [computed for i, (q, computed) in enumerate(timed) if q not in questions[:i]]
    assert first_asked and all(first_asked), "a timed search found its query's vector in the cache"


async def test_irregular_evidence_is_read_counted_and_reported(memory, tmp_path):
    path = irregular_copy(tmp_path)
    conversations = load_conversations("locomo", path)
    results = await run_eval(options(path, tmp_path / "out"), conversations, memory, None)
    evidence = results["evidence"]
    assert {k: evidence[k] for k in ("as_is", "normalised", "skipped", "questions_without_evidence")} == {
        "as_is": 5, "normalised": 7, "skipped": 2, "questions_without_evidence": 2}
    assert [(n["raw"], n["kept"]) for n in evidence["notes"]] == [
        ("D8:6; D9:17", ["D8:6", "D9:17"]), ("D9:1 D4:4 D4:6", ["D9:1", "D4:4", "D4:6"]),
        ("D:11:26", ["D11:26"]), ("D30:05", ["D30:5"]), ("D", []), ("D8:99", [])]
    assert results["systems"]["pgmemory"]["overall"]["n"] == 10
    assert results["systems"]["pgmemory"]["overall"]["n_with_gold"] == 8
    report = (tmp_path / "out" / "report.md").read_text()
    assert ("5 evidence entries read as they stood, 7 ids recovered from irregular entries (normalised), "
            "2 tokens skipped") in report
    assert "| `D9:1 D4:4 D4:6` | D9:1, D4:4, D4:6 | – |" in report
    assert "| `D8:99` | – | `D8:99` (no such turn) |" in report


async def test_a_turn_with_nothing_to_ingest_is_skipped_and_reported(memory, tmp_path):
    """An empty turn (no text, no caption) does not stop the run: it is skipped, and results.json
    and the report name it."""
    path = irregular_copy(tmp_path)
    data = json.loads(path.read_text())
    data[0]["conversation"]["session_1"].append({"speaker": "Maya", "dia_id": "D1:99", "text": " "})
    path.write_text(json.dumps(data), encoding="utf-8")
    conversations = load_conversations("locomo", path)
    results = await run_eval(options(path, tmp_path / "out"), conversations, memory, None)
    assert results["evidence"]["turns_skipped"] == [{
        "conversation_id": data[0]["sample_id"], "turn": "session_1 turn 3 (D1:99)",
        "reason": "'text' is empty and the turn has no 'blip_caption'"}]
    assert results["systems"]["pgmemory"]["overall"]["n"] == 10
    report = (tmp_path / "out" / "report.md").read_text()
    assert "1 turns held nothing to ingest and were skipped" in report
    assert "| session_1 turn 3 (D1:99) | 'text' is empty and the turn has no 'blip_caption' |" in report


def test_cli_reads_every_conversation_into_a_fresh_run_directory(db_dsn, tmp_path):
    env = {**os.environ, "PGMEMORY_DSN": db_dsn, "PGMEMORY_EMBEDDER": "hash",
           "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    for name in ("PGMEMORY_LLM_BASE_URL", "PGMEMORY_LLM_API_KEY", "OPENAI_API_KEY"):
        env.pop(name, None)

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "pgmemory.surfaces.cli", "eval", "locomo", str(IRREGULAR),
                               *args], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    first = cli()
    assert first.returncode == 0, first.stderr
    assert "%|" not in first.stderr  # off a terminal: no progress bar redrawn into the log (text mode reads \r as \n)
    (run_dir,) = (tmp_path / "eval-runs").iterdir()
    assert re.fullmatch(r"locomo-combined_hybrid_rrf-\d{8}T\d{6}Z", run_dir.name)
    results = json.loads((run_dir / "results.json").read_text())
    assert list(results["conversations"]) == ["conv-irregular", "conv-clean"]
    assert f"run directory: eval-runs/{run_dir.name}" in first.stdout
    refused = cli("--output", str(run_dir), "--recipe", "episode_hybrid_rrf")
    assert refused.returncode == 2 and "already holds a run of recipe combined_hybrid_rrf" in refused.stderr
    assert refused.stderr.startswith("pgmemory: error: ") and refused.stderr.count("\n") == 1
    assert json.loads((run_dir / "results.json").read_text()) == results


def scripted_model(body: dict) -> Reply:
    """Answers "PGM" from a pgmemory context and "FULL" from the transcript; the judge accepts
    PGM on ordinary questions and FULL on adversarial ones."""
    prompt = body["messages"][0]["content"]
    if prompt.startswith("You answer a question"):
        return Reply({"answer": "PGM" if "<FACTS>" in prompt else "FULL"})
    response = prompt.rsplit("Model Response: ", 1)[-1] if "Model Response: " in prompt \
        else prompt.rsplit("Generated answer: ", 1)[-1]
    if "unanswerable" in prompt:
        return Reply({"answer": "yes" if response.startswith("FULL") else "no"})
    return Reply({"explanation": "scripted", "label": "CORRECT" if response.startswith("PGM") else "WRONG"})


async def test_qa_accuracy_with_scripted_llm(memory, tmp_path, fake_openai: FakeOpenAI):
    fake_openai.responder = scripted_model
    llm = LLMClient(base_url=fake_openai.base_url, api_key="test", model="fake", max_retries=0)
    path = short_locomo(tmp_path)
    conversations = load_conversations("locomo", path)
    results = await run_eval(options(path, tmp_path / "out"), conversations, memory, llm)
    await llm.aclose()

    questions = conversations[0].questions
    adversarial = sum(q.adversarial for q in questions)
    assert results["qa"]["enabled"] is True and results["qa"]["llm_usage"]["calls"] == 4 * len(questions)
    pgm, full = results["systems"]["pgmemory"], results["systems"]["full_context"]
    assert pgm["overall"]["accuracy"] == pytest.approx(1 - adversarial / len(questions))
    assert full["overall"]["accuracy"] == pytest.approx(adversarial / len(questions))
    assert pgm["by_category"]["adversarial"]["accuracy"] == 0.0
    assert full["by_category"]["adversarial"]["accuracy"] == 1.0
    assert pgm["by_category"]["single-hop"]["accuracy"] == 1.0
    assert full["overall"]["context_tokens"] > pgm["overall"]["context_tokens"]
    assert "recall@10" not in full["overall"]
    for system in ("pgmemory", "full_context"):
        assert results["systems"][system]["overall"]["latency_p50_ms"] > 0
        check_recomputed(results, system)
    report = (tmp_path / "out" / "report.md").read_text()
    assert "full context accuracy %" in report
    prompts = [r.body["messages"][0]["content"] for r in fake_openai.requests]
    assert any("Marley flooring" in p and "CORRECT or WRONG" in p for p in prompts)
    assert any("## Session 1 (2023-01-20 16:04 UTC)" in p for p in prompts)


def longmemeval_file(tmp_path: Path) -> Path:
    item = {
        "question_id": f"lme-{uuid.uuid4().hex[:8]}",
        "question_type": "single-session-user",
        "question": "Which city have I moved to?",
        "answer": "Denver",
        "question_date": "2023/06/01 (Thu) 10:00",
        "haystack_session_ids": ["s2", "s1"],
        "haystack_dates": ["2023/05/20 (Sat) 09:00", "2023/05/01 (Mon) 08:30"],
        "haystack_sessions": [
            [{"role": "user", "content": "I moved to Denver last month.", "has_answer": True},
             {"role": "assistant", "content": "Congratulations on the move!"}],
            [{"role": "user", "content": "Can you recommend a pasta recipe?"},
             {"role": "assistant", "content": "Try spaghetti aglio e olio."}],
        ],
        "answer_session_ids": ["s2"],
    }
    path = tmp_path / "longmemeval.json"
    path.write_text(json.dumps([item]), encoding="utf-8")
    return path


async def test_longmemeval_roles_dates_and_recall(memory, tmp_path):
    path = longmemeval_file(tmp_path)
    conversations = load_conversations("longmemeval", path)
    results = await run_eval(options(path, tmp_path / "out", "longmemeval"), conversations, memory, None)
    assert results["questions"][0]["gold"] == ["s2:0"]
    transcript = full_transcript(conversations[0].turns)
    assert transcript.startswith("## Session 1 (2023-05-01 08:30 UTC)\nuser: Can you recommend")
    assert "s2" not in transcript
    for system in ("pgmemory", "bm25", "dense"):
        assert results["systems"][system]["by_category"]["single-session-user"]["recall@5"] == 1.0
    async with memory.pool.acquire() as conn:
        rows = await conn.fetch("SELECT actor, content, valid_at FROM pgmemory.episodes WHERE group_id = $1"
                                " ORDER BY valid_at, content",
                                group_id("longmemeval", conversations[0].conversation_id))
    assert [(r["actor"], r["valid_at"].day) for r in rows] == [
        ("user", 1), ("assistant", 1), ("assistant", 20), ("user", 20)]


def test_rank_turns_episodes_first_then_fact_provenance():
    ids = {name: uuid.uuid4() for name in ("a", "b", "c", "d", "e")}
    turn_of = {v: k.upper() for k, v in ids.items()}

    def episode(name):
        return EpisodeHit(id=ids[name], group_id="g", ranks={})

    def fact(*names):
        return FactHit(id=uuid.uuid4(), group_id="g", ranks={}, episodes=[ids[n] for n in names])
    stray = FactHit(id=uuid.uuid4(), group_id="g", ranks={}, episodes=[uuid.uuid4()])
    results = SearchResults(episodes=[episode("a"), episode("c")],
                            facts=[fact("b", "a"), stray, fact("c", "d", "e")])
    ranked = rank_turns(results, turn_of, 20)
    assert (ranked.ids, ranked.from_episodes, ranked.from_facts) == (["A", "C", "B", "D", "E"], 2, 3)
    assert rank_turns(results, turn_of, 4).ids == ["A", "C", "B", "D"]
    facts_only = rank_turns(SearchResults(facts=[fact("d", "b"), fact("b"), fact("a")]), turn_of, 20)
    assert (facts_only.ids, facts_only.from_episodes, facts_only.from_facts) == (["D", "B", "A"], 0, 3)
    assert rank_turns(SearchResults(facts=[fact("d")]), {}, 20).ids == []


@pytest.mark.parametrize("benchmark, content, message", [
    ("locomo", [{"sample_id": "x", "conversation": {"session_1_date_time": "1:56 pm on 8 May, 2023",
                                                    "session_1": [{"speaker": "A", "dia_id": "D1:1"}]},
                 "qa": []}], "session_1 turn 0: missing 'text'"),
    ("locomo", [{"question_id": "q", "haystack_sessions": []}], "is a longmemeval file"),
    ("longmemeval", {"not": "a list"}, "top level must be a list"),
    ("locomo", [], "bad.json: no conversations to evaluate"),
    ("locomo", [{"sample_id": "x", "conversation": {"session_1_date_time": "1:56 pm on 8 May, 2023",
                                                    "session_1": [{"speaker": "A", "dia_id": "D1:1", "text": "hi"}]},
                 "qa": []}], "bad.json: no questions to evaluate"),
])
def test_bad_input_is_one_line_and_non_zero(tmp_path, capsys, benchmark, content, message):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(content), encoding="utf-8")
    assert main(["eval", benchmark, str(path), "--output", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and err.startswith("pgmemory: error: ") and "\n" not in err
    assert not (tmp_path / "out").exists()


async def test_group_is_reused_only_when_built_by_the_same_ingestion_code(memory, tmp_path, monkeypatch):
    from pgmemory.eval import ingestion

    (conversation, _) = load_conversations("locomo", irregular_copy(tmp_path))
    first = await ingestion.ingest_conversation(memory, "locomo", conversation, lambda: None)
    again = await ingestion.ingest_conversation(memory, "locomo", conversation, lambda: None)
    assert (first.reused, again.reused) == (False, True)
    assert len(ingestion.ingestion_fingerprint()) == 10
    monkeypatch.setattr(ingestion, "ingestion_fingerprint", lambda: "0123456789")
    changed = await ingestion.ingest_conversation(memory, "locomo", conversation, lambda: None)
    assert changed.reused is False and changed.episodes == 10 and changed.failed == 0
    assert "code 0123456789]" in ingestion.build_marker(memory)


async def test_group_is_reused_only_for_the_same_turns(memory, tmp_path):
    """Same ids and count, other words: the group holds another file's turns and is rebuilt, so
    pgmemory is never scored on text the baselines do not see."""
    from dataclasses import replace as changed_copy

    from pgmemory.eval import ingestion

    (conversation, _) = load_conversations("locomo", irregular_copy(tmp_path))
    first = await ingestion.ingest_conversation(memory, "locomo", conversation, lambda: None)
    turns = [changed_copy(t, text=f"filler number {i}") for i, t in enumerate(conversation.turns)]
    other = changed_copy(conversation, turns=turns)
    rebuilt = await ingestion.ingest_conversation(memory, "locomo", other, lambda: None)
    assert (first.reused, rebuilt.reused) == (False, False)
    async with memory.pool.acquire() as conn:
        texts = {r[0] for r in await conn.fetch("SELECT content FROM pgmemory.episodes WHERE group_id = $1",
                                                group_id("locomo", conversation.conversation_id))}
    assert texts == {t.text for t in turns}
    again = await ingestion.ingest_conversation(memory, "locomo", other, lambda: None)
    assert again.reused is True


def test_a_run_that_cannot_start_says_why_before_ingesting(tmp_path, capsys, monkeypatch):
    """An --output that cannot be a directory, and a cross-encoder recipe with no provider, are
    refused in one line before anything is ingested or written."""
    path = irregular_copy(tmp_path)
    (tmp_path / "afile").write_text("")
    assert main(["eval", "locomo", str(path), "--output", str(tmp_path / "afile" / "sub")]) == 2
    err = capsys.readouterr().err.strip()
    assert "cannot create the directory" in err and "\n" not in err and "database" not in err
    for name in ("PGMEMORY_CROSS_ENCODER", "PGMEMORY_LLM_BASE_URL", "OPENAI_API_KEY", "PGMEMORY_LLM_MODEL"):
        monkeypatch.delenv(name, raising=False)
    assert main(["eval", "locomo", str(path), "--recipe", "combined_cross_encoder",
                 "--output", str(tmp_path / "ce")]) == 2
    err = capsys.readouterr().err.strip()
    assert "cross-encoder" in err and "before ingesting" in err and "\n" not in err
    assert not (tmp_path / "ce").exists()


def test_runs_started_in_the_same_second_get_their_own_directories(tmp_path, monkeypatch):
    from datetime import datetime, timezone

    monkeypatch.chdir(tmp_path)
    now = datetime(2026, 12, 3, 7, 0, 0, tzinfo=timezone.utc)
    first, second = (harness.default_output("locomo", "combined_hybrid_rrf", now) for _ in range(2))
    assert first != second and first.is_dir() and second.is_dir()
    assert second.name == first.name + "-2"
