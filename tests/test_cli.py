"""The CLI's ingest, search and maintenance commands, run as a user would."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import psycopg

from pgmemory.ingest.episode import episode_uuid


def run_cli(*args: str, dsn: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PGMEMORY_DSN": dsn, "PGMEMORY_EMBEDDER": "hash"}
    env.pop("PGMEMORY_LLM_BASE_URL", None)
    env.pop("OPENAI_API_KEY", None)
    done = subprocess.run([sys.executable, "-m", "pgmemory.surfaces.cli", *args],
                          input=None if stdin is None else stdin.encode(), capture_output=True, env=env, timeout=120)
    # Decoded here, not with text=True, whose newline translation would turn a progress bar's
    # carriage returns into newlines (so a check for "\r" could never fail).
    return subprocess.CompletedProcess(done.args, done.returncode, done.stdout.decode(), done.stderr.decode())


def write_jsonl(path, group, lines):
    path.write_text("\n".join(json.dumps({"group_id": group, **line}) for line in lines) + "\n")


def test_ingest_search_delete_erase(db_dsn, group, tmp_path):
    data = tmp_path / "episodes.jsonl"
    write_jsonl(data, group, [
        {"content": "I work at Acme Corp.", "actor": "Zoe", "reference_time": "2023-01-01T00:00:00Z",
         "episode_id": "z1"},
        {"content": "I left Acme Corp and now work at Globex.", "actor": "Zoe",
         "reference_time": "2024-01-01T00:00:00Z", "episode_id": "z2"},
    ])
    result = run_cli("ingest", str(data), dsn=db_dsn)
    assert result.returncode == 0, result.stderr
    assert "2 ingested, 0 already present, 0 failed" in result.stdout
    assert "\r" not in result.stderr + result.stdout and "\x1b" not in result.stderr  # no progress bar in logs
    # The run ends with the community upkeep: Zoe and Globex (Acme has ended) form one community.
    assert "communities: 1 of 1 groups detected afresh, 1 summaries written; 0 LLM calls" in result.stdout
    with psycopg.connect(db_dsn) as conn:
        summaries = [r[0] for r in conn.execute("SELECT summary FROM pgmemory.communities WHERE group_id = %s",
                                                (group,))]
    assert summaries == ["Zoe works for Globex."]
    rebuilt = run_cli("communities", "rebuild", "--group", group, dsn=db_dsn)
    assert rebuilt.returncode == 0, rebuilt.stderr
    # The same graph: the same community, kept with its summary.
    assert "communities: 1 of 1 groups detected afresh, 0 summaries written" in rebuilt.stdout
    again = run_cli("ingest", str(data), dsn=db_dsn)
    assert "0 ingested, 2 already present" in again.stdout

    table = run_cli("search", "where does Zoe work", "--group", group, dsn=db_dsn)
    assert table.returncode == 0, table.stderr
    assert "Zoe works for Globex." in table.stdout and "FACTS" in table.stdout
    past = run_cli("search", "where does Zoe work", "--group", group, "--as-of", "2023-06-01T00:00:00Z",
                   "--json", dsn=db_dsn)
    payload = json.loads(past.stdout)
    assert set(payload) == {"facts", "entities", "communities", "episodes"}
    assert [f["target"] for f in payload["facts"] if f["relation"] == "WORKS_FOR"] == ["Acme Corp"]
    # A bare date is read as UTC: the same answer as the explicit zone, and the table says UTC.
    bare = run_cli("search", "where does Zoe work", "--group", group, "--as-of", "2023-06-01", dsn=db_dsn)
    assert bare.returncode == 0, bare.stderr
    assert "Zoe works for Acme Corp." in bare.stdout and "Globex" not in bare.stdout
    assert "dates UTC" in bare.stdout

    z2 = str(episode_uuid(group, "z2"))
    attacker = run_cli("delete-episode", z2, "--group", "attacker", dsn=db_dsn)
    assert attacker.returncode == 2 and "does not exist in group 'attacker'" in attacker.stderr
    assert "Traceback" not in attacker.stderr
    deleted = run_cli("delete-episode", z2, "--group", group, dsn=db_dsn)
    assert deleted.returncode == 0 and "deleted episode" in deleted.stdout
    # As if z2 had never been ingested: Zoe works for Acme again.
    table = run_cli("search", "where does Zoe work", "--group", group, "--json", dsn=db_dsn)
    assert [f["target"] for f in json.loads(table.stdout)["facts"] if f["relation"] == "WORKS_FOR"] == ["Acme Corp"]
    erased = run_cli("erase-group", group, dsn=db_dsn)
    assert "1 episodes" in erased.stdout


def test_ingest_names_the_bad_line_and_writes_nothing(db_dsn, group, tmp_path):
    data = tmp_path / "bad.jsonl"
    data.write_text(json.dumps({"group_id": group, "content": "I live in Oslo.", "actor": "Kim",
                                "reference_time": "2024-01-01T00:00:00Z"}) + "\n{broken\n")
    result = run_cli("ingest", str(data), dsn=db_dsn)
    assert result.returncode == 2
    assert "line 2: not valid JSON" in result.stderr and "Traceback" not in result.stderr
    naive = tmp_path / "naive.jsonl"
    write_jsonl(naive, group, [{"content": "I live in Oslo.", "reference_time": "2024-01-01T00:00:00"}])
    result = run_cli("ingest", str(naive), dsn=db_dsn)
    assert result.returncode == 2 and "line 1: reference_time" in result.stderr
    search = run_cli("search", "Oslo", "--group", group, "--json", dsn=db_dsn)
    assert json.loads(search.stdout)["episodes"] == []


def test_search_bad_input_is_one_line(db_dsn):
    result = run_cli("search", "   ", "--group", "g", dsn=db_dsn)
    assert result.returncode == 2 and "search query is empty" in result.stderr
    result = run_cli("search", "x", "--group", "g", "--as-of", "last tuesday", dsn=db_dsn)
    assert result.returncode == 2 and "--as-of 'last tuesday' is not an ISO 8601 date" in result.stderr
    assert "Traceback" not in result.stderr
    helped = run_cli("search", "--help", dsn=db_dsn)
    assert "without a zone is read as UTC" in " ".join(helped.stdout.split())
    result = run_cli("search", "x", "--group", "g", "--recipe", "nope", dsn=db_dsn)
    assert result.returncode == 2 and "unknown search recipe 'nope'" in result.stderr


def test_a_misconfigured_embedder_is_one_line(db_dsn):
    """README's embedder variables, set wrong: the CLI names the missing one in one line (exit 2),
    the servers before they start; it printed EmbeddingError's traceback (serve: uvicorn's, exit 3)."""
    env = {**os.environ, "PGMEMORY_DSN": db_dsn, "PGMEMORY_EMBEDDER": "openai", "PGMEMORY_EMBED_API_KEY": "k"}
    for drop in ("PGMEMORY_EMBED_DIM", "PGMEMORY_EMBED_BASE_URL", "OPENAI_API_KEY"):
        env.pop(drop, None)
    for extra, named in (({}, "needs PGMEMORY_EMBED_DIM"), ({"PGMEMORY_EMBED_CACHE": "lots"}, "PGMEMORY_EMBED_CACHE")):
        for args in (("search", "x", "--group", "g"), ("worker", "--drain"), ("serve", "--port", "1"),
                     ("mcp", "--workers", "0")):
            result = subprocess.run([sys.executable, "-m", "pgmemory.surfaces.cli", *args], capture_output=True,
                                    text=True, env={**env, **extra}, timeout=120)
            assert result.returncode == 2 and named in result.stderr, (args, result.stderr)
            assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr


def test_retry_with_nothing_to_do(db_dsn, group, tmp_path):
    data = tmp_path / "episodes.jsonl"
    write_jsonl(data, group, [{"content": "I work at Acme Corp.", "actor": "Zoe",
                               "reference_time": "2023-01-01T00:00:00Z"}])
    assert run_cli("ingest", str(data), dsn=db_dsn).returncode == 0
    result = run_cli("retry", "--group", group, dsn=db_dsn)
    assert result.returncode == 0 and "0 ingested" in result.stdout


def test_retry_and_communities_refuse_a_group_with_no_episodes(db_dsn):
    """As reembed does: a mistyped group is one line and exit 2, not a silent "0 ingested"."""
    for args in (("retry",), ("communities", "refresh"), ("communities", "rebuild")):
        result = run_cli(*args, "--group", "no-such-group", dsn=db_dsn)
        assert result.returncode == 2, (args, result.stdout, result.stderr)
        assert result.stderr == "pgmemory: error: group 'no-such-group' has no episodes or entities\n", args
        assert "ingested" not in result.stdout and "communities:" not in result.stdout


def test_cli_reads_bare_dates_as_utc_with_the_llm_extractor(db_dsn, group, tmp_path, fake_openai):
    """Issue 18.8 in the LLM mode: episodes extracted through the (fake) LLM by `pgmemory ingest`,
    then asked with bare --as-of / --known-at dates, read as UTC."""
    from bench.scripted_llm import ScriptedModel

    fake_openai.responder = ScriptedModel()
    data = tmp_path / "episodes.jsonl"
    write_jsonl(data, group, [
        {"content": "I work at Acme Corp.", "actor": "Zoe", "reference_time": "2023-01-01T00:00:00Z"},
        {"content": "I left Acme Corp and now work at Globex.", "actor": "Zoe",
         "reference_time": "2024-01-01T00:00:00Z"}])
    env = {**os.environ, "PGMEMORY_DSN": db_dsn, "PGMEMORY_EMBEDDER": "hash",
           "PGMEMORY_LLM_BASE_URL": fake_openai.base_url, "PGMEMORY_LLM_API_KEY": "test",
           "PGMEMORY_LLM_MODEL": "fake"}

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "pgmemory.surfaces.cli", *args], capture_output=True,
                              text=True, env=env, timeout=120)
    assert cli("ingest", str(data)).returncode == 0
    assert any(r.path.endswith("/chat/completions") for r in fake_openai.requests)  # the LLM extracted
    query = ("search", "where does Zoe work", "--group", group, "--json")

    def employers(*args):
        out = cli(*query, *args)
        assert out.returncode == 0, out.stderr
        return [f["target"] for f in json.loads(out.stdout)["facts"] if f["relation"] == "WORKS_FOR"]
    assert employers() == ["Globex"]
    assert employers("--as-of", "2023-06-01") == employers("--as-of", "2023-06-01T00:00:00Z") == ["Acme Corp"]
    assert employers("--as-of", "2023-12-31T23:00") == ["Acme Corp"]  # 23:00 UTC, not local time
    assert employers("--known-at", "2000-01-01") == []  # nothing was known yet
    assert "UTC" in cli("search", "--help").stdout


def test_communities_bad_group_is_one_line(capsys):
    from pgmemory.surfaces.cli import main

    assert main(["communities", "rebuild", "--group", ""]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--group must be a non-empty string" in err


def test_search_json_prints_episodes_with_their_neighbours(db_dsn, group, tmp_path):
    """--json prints what a search found, episodes pulled in as a hit's neighbours included (their
    neighbour_of is keyed by the hit's id)."""
    data = tmp_path / "chat.jsonl"
    write_jsonl(data, group, [
        {"content": text, "actor": actor, "reference_time": f"2024-01-01T10:0{i}:00Z"}
        for i, (actor, text) in enumerate([("Kim", "I moved to Oslo last spring."), ("Lee", "How is the weather there?"),
                                           ("Kim", "Cold, but I love the fjords."), ("Lee", "I should visit.")])])
    assert run_cli("ingest", str(data), dsn=db_dsn).returncode == 0
    search = run_cli("search", "Oslo", "--group", group, "--json", dsn=db_dsn)
    assert search.returncode == 0, search.stderr
    episodes = json.loads(search.stdout)["episodes"]
    assert any(e["neighbour_of"] for e in episodes)
    assert all(isinstance(k, str) for e in episodes for k in e["neighbour_of"])


def test_erase_group_at_a_terminal_asks_for_the_group_id(db_dsn, group, monkeypatch, capsys):
    """At a terminal the group id is typed again (as REST's ?confirm=); a wrong answer erases
    nothing and exits 1; --yes and scripts (no terminal) do not ask."""
    from pgmemory.surfaces import cli

    with psycopg.connect(db_dsn, autocommit=True) as conn:
        conn.execute("SELECT pgmemory.enqueue_episode(%s, 'I live in Oslo.', p_reference_time => now())", (group,))
    monkeypatch.setenv("PGMEMORY_DSN", db_dsn)
    monkeypatch.setenv("PGMEMORY_EMBEDDER", "hash")
    monkeypatch.setattr("sys.stdin.isatty", lambda: True)
    answers = iter([group + "x", group])
    monkeypatch.setattr("builtins.input", lambda prompt: next(answers))

    def episodes() -> int:
        with psycopg.connect(db_dsn) as conn:
            return conn.execute("SELECT count(*) FROM pgmemory.episodes WHERE group_id = %s", (group,)).fetchone()[0]

    assert cli.main(["erase-group", group]) == 1
    assert "not erased" in capsys.readouterr().err and episodes() == 1
    assert cli.main(["erase-group", group]) == 0
    assert episodes() == 0
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        conn.execute("SELECT pgmemory.enqueue_episode(%s, 'I live in Oslo.', p_reference_time => now())", (group,))
    assert cli.main(["erase-group", group, "--yes"]) == 0  # (no answer left: asking would fail)
    assert episodes() == 0


def test_psql_connects_where_its_own_arguments_say(db_dsn):
    """`pgmemory psql` opens psql on pgmemory's database unless psql is told another one: a
    database (-d) given to psql wins, as with psql itself (the DSN as psql's first argument made
    it ignore -d and connect where, and as whom, pgmemory does)."""
    own = run_cli("psql", "-Atc", "SELECT current_database()", dsn=db_dsn)
    assert own.returncode == 0, own.stderr
    assert own.stdout.strip() == psycopg.conninfo.conninfo_to_dict(db_dsn)["dbname"]
    other = run_cli("psql", "-d", "postgres", "-Atc", "SELECT current_database()", dsn=db_dsn)
    assert (other.returncode, other.stdout.strip()) == (0, "postgres"), other.stderr


def test_communities_say_when_the_llm_failed_their_summaries(db_dsn, group, fake_openai):
    """Counts that add up: summaries the LLM failed are counted and named on stderr (exit 1), not
    reported as a clean "0 summaries written"; an empty selection says so instead of nothing."""
    from tests.communities_support import plant_graph
    from tests.fake_openai import Status

    with psycopg.connect(db_dsn) as conn:
        plant_graph(conn, group, blocks=2, size=6, p_in=0.9, p_out=0.0, seed=3)
    fake_openai.responder = lambda body: Status(503, "overloaded")
    env = {**os.environ, "PGMEMORY_DSN": db_dsn, "PGMEMORY_EMBEDDER": "hash", "PGMEMORY_LLM_BASE_URL": fake_openai.base_url,
           "PGMEMORY_LLM_API_KEY": "test", "PGMEMORY_LLM_MODEL": "fake"}
    done = subprocess.run([sys.executable, "-m", "pgmemory.surfaces.cli", "communities", "rebuild", "--group", group],
                          capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 1, done.stderr
    assert "communities: 1 of 1 groups detected afresh, 0 summaries written, 2 failed;" in done.stdout
    assert "Traceback" not in done.stderr and "503" in done.stderr and done.stderr.count("\n") == 1


def test_communities_of_a_database_without_groups_say_so(empty_dsn):
    from pgmemory.storage.setup import init_database
    from tests.conftest import DIM

    with psycopg.connect(empty_dsn) as conn:
        init_database(conn, DIM)
    for action in ("rebuild", "refresh"):
        done = run_cli("communities", action, dsn=empty_dsn)
        assert done.returncode == 0, done.stderr
        assert done.stdout == "communities: no group has entities yet, nothing to detect\n"
