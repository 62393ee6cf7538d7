"""The CLI as a careless user meets it: Ctrl-C in the middle of long work, a bad setting in the
environment, odd files. Each is one error line (no traceback) and a re-run that goes on."""
from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

import psycopg

from tests.test_cli import run_cli, write_jsonl


def cli_env(dsn: str, **extra: str) -> dict[str, str]:
    env = {**os.environ, "PGMEMORY_DSN": dsn, "PGMEMORY_EMBEDDER": "hash", **extra}
    for name in ("PGMEMORY_LLM_BASE_URL", "OPENAI_API_KEY", "PGMEMORY_URL"):
        env.pop(name, None)
    return env


def done_count(dsn: str, groups: list[str]) -> int:
    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT count(*) FROM pgmemory.episodes WHERE group_id = ANY(%s) AND status = 'done'",
                            (groups,)).fetchone()[0]


def test_ctrl_c_in_ingest_is_one_line_and_the_rerun_finishes(db_dsn, group, tmp_path):
    """SIGINT while `pgmemory ingest` works: exit 130 with one line saying how to go on (no
    traceback), nothing lost; the same command again ingests the rest, each episode once."""
    groups = [f"{group}-a", f"{group}-b"]
    data = tmp_path / "many.jsonl"
    data.write_text("".join(json.dumps({"group_id": groups[i % 2], "content": f"I work at Company{i}.",
                                        "actor": "Zoe", "reference_time": f"2023-01-01T00:{i // 60 % 60:02d}:{i % 60:02d}Z",
                                        "episode_id": f"e{i}"}) + "\n" for i in range(600)))
    # Ctrl-C as at a terminal: a shell starts background jobs (CI's, `nohup ... &`) with SIGINT
    # ignored, which their children inherit and Python then leaves ignored.
    proc = subprocess.Popen([sys.executable, "-m", "pgmemory.surfaces.cli", "ingest", str(data)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env(db_dsn),
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 120
    while done_count(db_dsn, groups) < 5 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, (out, err)
    assert "Traceback" not in err and err.strip().count("\n") == 0, err
    assert "interrupted" in err and "run the same command again" in err
    assert 5 <= done_count(db_dsn, groups) < 600
    again = run_cli("ingest", str(data), dsn=db_dsn)
    assert again.returncode == 0, again.stderr
    # (an apply the server was finishing as the client went away may still commit: hence no exact split)
    summary = re.match(r"(\d+) ingested, (\d+) already present, 0 failed;", again.stdout)
    assert summary and int(summary[1]) > 0 and int(summary[1]) + int(summary[2]) == 600, again.stdout
    with psycopg.connect(db_dsn) as conn:
        assert conn.execute("SELECT count(*), count(*) FILTER (WHERE status = 'done') FROM pgmemory.episodes"
                            " WHERE group_id = ANY(%s)", (groups,)).fetchone() == (600, 600)


def test_a_bad_embedder_setting_is_one_line(db_dsn):
    """PGMEMORY_EMBEDDER / PGMEMORY_EMBED_DIM with a bad value: the error names the variable,
    exit 2, no traceback (the providers' errors are not PgMemoryError)."""
    for name, value in (("PGMEMORY_EMBEDDER", "nope"), ("PGMEMORY_EMBED_DIM", "abc")):
        out = subprocess.run([sys.executable, "-m", "pgmemory.surfaces.cli", "search", "x", "--group", "g"],
                             capture_output=True, text=True, env=cli_env(db_dsn, **{name: value}), timeout=120)
        assert out.returncode == 2, out.stderr
        assert out.stderr.startswith(f"pgmemory: error: {name} must be") and out.stderr.count("\n") == 1, out.stderr


def test_a_data_dir_that_is_not_one_is_refused_untouched(tmp_path):
    """PGMEMORY_DATA_DIR set to the wrong place (a file, a folder of the user's files): one line
    naming it, and the folder is left as it was (pgserver, run as root, used to give it to its own
    user before initdb refused it)."""
    folder = tmp_path / "my-notes"
    folder.mkdir()
    (folder / "todo.txt").write_text("buy milk\n")
    before = folder.stat()
    env = {k: v for k, v in cli_env("").items() if k != "PGMEMORY_DSN"}
    for data_dir, problem in ((folder, "holds other files and no PostgreSQL data"),
                              (folder / "todo.txt", "is not a directory"),
                              (folder / "todo.txt" / "pg", "cannot create")):
        for command in (("doctor",), ("listen", "--port", "55999")):
            out = subprocess.run([sys.executable, "-m", "pgmemory.surfaces.cli", *command], capture_output=True,
                                 text=True, env={**env, "PGMEMORY_DATA_DIR": str(data_dir)}, timeout=120)
            assert out.returncode == 2, (command, out.stderr)
            assert out.stderr.count("\n") == 1 and problem in out.stderr and "PGMEMORY_DATA_DIR" in out.stderr, \
                (command, out.stderr)
    after = folder.stat()
    assert (after.st_uid, after.st_gid, after.st_mode) == (before.st_uid, before.st_gid, before.st_mode)
    assert sorted(p.name for p in folder.iterdir()) == ["todo.txt"]
    assert (folder / "todo.txt").read_text() == "buy milk\n"


def test_ingest_reads_a_pipe_and_names_a_directory(db_dsn, group, tmp_path):
    """`pgmemory ingest <(zcat episodes.jsonl.gz)` hands ingest a pipe: it is read like a file
    (it was refused as "no such file"); a directory is named as one."""
    import threading

    fifo = tmp_path / "episodes.pipe"
    os.mkfifo(fifo)
    line = json.dumps({"group_id": group, "content": "I live in Oslo.", "actor": "Kim",
                       "reference_time": "2024-01-01T00:00:00Z"}) + "\n"
    writer = threading.Thread(target=lambda: fifo.write_text(line), daemon=True)
    writer.start()
    piped = run_cli("ingest", str(fifo), dsn=db_dsn)
    writer.join(timeout=10)
    assert piped.returncode == 0, piped.stderr
    assert piped.stdout.startswith("1 ingested, 0 already present, 0 failed")
    folder = run_cli("ingest", str(tmp_path), dsn=db_dsn)
    assert folder.returncode == 2 and folder.stderr == f"pgmemory: error: {tmp_path}: is a directory, not a file\n"


def test_a_file_with_no_episode_says_so_without_a_database(tmp_path):
    """An empty file (or blank lines only: a generator that produced nothing, a wrong path to a
    truncated export) printed "0 ingested, ..." after starting the database; it says the file
    holds no episode, connecting nowhere (the DSN points at no server), and exits 0."""
    for name, text in (("empty.jsonl", ""), ("blank.jsonl", "\n  \n\n")):
        (tmp_path / name).write_text(text)
        result = run_cli("ingest", str(tmp_path / name), dsn="postgresql://postgres@127.0.0.1:1/none")
        assert (result.returncode, result.stdout) == (0, ""), result.stderr
        assert result.stderr == f"pgmemory: {tmp_path / name} holds no episode: nothing to ingest\n"


def test_a_bad_pgmemory_url_is_one_line():
    """PGMEMORY_URL that is no http(s) address, or a web server that is not pgmemory's: one line
    naming PGMEMORY_URL, exit 2 (a malformed one raised ValueError from urllib, a 200 page of HTML
    a JSONDecodeError)."""
    from http.server import BaseHTTPRequestHandler, HTTPServer
    import threading

    class NotPgmemory(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - http.server's name
            body = b"<html>welcome to nginx</html>"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), NotPgmemory)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        for url, problem in (("notaurl", "is not the address of a pgmemory server"),
                             ("  ", "is not the address of a pgmemory server"),
                             ("http://[::1", "is not the address of a pgmemory server"),
                             ("http://127.0.0.1:port", "is not the address of a pgmemory server"),
                             (f"http://127.0.0.1:{server.server_port}", "something other than a pgmemory search result")):
            env = {**cli_env("postgresql://nobody@127.0.0.1:1/none"), "PGMEMORY_URL": url}
            out = subprocess.run([sys.executable, "-m", "pgmemory.surfaces.cli", "search", "x", "--group", "g"],
                                 capture_output=True, text=True, env=env, timeout=120)
            assert out.returncode == 2, (url, out.stderr)
            assert out.stderr.count("\n") == 1 and problem in out.stderr and "PGMEMORY_URL" in out.stderr, \
                (url, out.stderr)
    finally:
        server.shutdown()


def test_ingest_off_a_terminal_reports_progress_in_plain_lines(db_dsn, group, tmp_path, monkeypatch, capsys):
    """A long `pgmemory ingest` into a log (no terminal) says how far it got every
    PLAIN_EVERY_S seconds, in plain lines; it said nothing until the end."""
    from pgmemory import progress
    from pgmemory.surfaces import cli

    data = tmp_path / "episodes.jsonl"
    write_jsonl(data, group, [{"content": f"I work at Company{i}.", "actor": "Zoe",
                               "reference_time": f"2023-01-0{i + 1}T00:00:00Z"} for i in range(3)])
    monkeypatch.setenv("PGMEMORY_DSN", db_dsn)
    monkeypatch.setenv("PGMEMORY_EMBEDDER", "hash")
    monkeypatch.delenv("PGMEMORY_LLM_BASE_URL", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setattr(progress, "PLAIN_EVERY_S", 0.0)  # (a line for every episode)
    assert cli.main(["ingest", str(data)]) == 0
    err = capsys.readouterr().err
    assert [line.split(" (")[0] for line in err.splitlines() if line.startswith("ingest:")] == \
        ["ingest: 1/3 ep", "ingest: 2/3 ep", "ingest: 3/3 ep"]
    assert "\r" not in err and "\x1b" not in err


def test_communities_off_a_terminal_report_progress_per_summary(db_dsn, group, monkeypatch, capsys):
    """`pgmemory communities rebuild` counted groups: one large group's summaries (minutes with an
    LLM) showed nothing until the end. It counts summaries, in plain lines off a terminal."""
    from pgmemory import progress
    from pgmemory.surfaces import cli
    from tests.communities_support import plant_graph

    with psycopg.connect(db_dsn) as conn:
        plant_graph(conn, group, blocks=3, size=6, p_in=0.9, p_out=0.0, seed=4)
    monkeypatch.setenv("PGMEMORY_DSN", db_dsn)
    monkeypatch.setenv("PGMEMORY_EMBEDDER", "hash")
    monkeypatch.delenv("PGMEMORY_LLM_BASE_URL", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setattr(progress, "PLAIN_EVERY_S", 0.0)  # (a line for every summary)
    assert cli.main(["communities", "rebuild", "--group", group]) == 0
    out, err = capsys.readouterr()
    assert [line.split(" (")[0] for line in err.splitlines() if line.startswith("communities:")] == \
        ["communities: 1 summaries", "communities: 2 summaries", "communities: 3 summaries"]
    assert "3 summaries written" in out


def test_a_sub_millisecond_timeout_keeps_its_guard(db_dsn, monkeypatch):
    """PGMEMORY_STATEMENT_TIMEOUT=0.0004 (allowed: above 0) became statement_timeout 0ms, which
    Postgres reads as no timeout at all: a stuck statement would then wait for ever."""
    from pgmemory.storage.connect import connect

    monkeypatch.setenv("PGMEMORY_STATEMENT_TIMEOUT", "0.0004")
    monkeypatch.setenv("PGMEMORY_LOCK_TIMEOUT", "0.0004")
    with connect(db_dsn) as conn:
        assert conn.execute("SELECT current_setting('statement_timeout'), current_setting('lock_timeout')"
                            ).fetchone() == ("1ms", "1ms")


def test_workers_zero_is_said_to_be_allowed():
    """`serve --workers -1` said "between 1 and 64" though 0 is allowed (and documented)."""
    out = subprocess.run([sys.executable, "-m", "pgmemory.surfaces.cli", "serve", "--workers", "-1"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "--workers: must be an integer between 0 and 64, got '-1'" in out.stderr


def test_a_command_whose_pool_meets_no_server_says_it_cannot_connect():
    """`keys list` connects through a pool, which opens its first connection on first use: a
    server that is not running is "cannot connect", not "lost the connection" (nothing was lost)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # a port nothing listens on once the socket is closed
    result = run_cli("keys", "list", dsn=f"postgresql://postgres@127.0.0.1:{port}/pgmemory")
    [line] = result.stderr.splitlines()
    assert result.returncode == 2 and "cannot connect to Postgres" in line and "lost" not in line, result.stderr


def test_flags_that_would_be_ignored_are_refused():
    """A flag the command would silently ignore is a one-line error naming it, before any
    connection: `dsn --user` without `--tcp` (the DSN printed would not be that login's), and
    `grant --list` with a role or --revoke (nothing would be revoked)."""
    for args, named in ((("dsn", "--user", "bob"), "--tcp"), (("grant", "--list", "bob", "g1"), "--list"),
                        (("grant", "--list", "--revoke"), "--revoke")):
        result = run_cli(*args, dsn="postgresql://postgres@127.0.0.1:1/none")
        [line] = result.stderr.splitlines()
        assert result.returncode == 2 and line.startswith("pgmemory: error: ") and named in line, (args, result.stderr)


def test_keys_list_with_no_key_to_show_says_so(empty_dsn):
    """`keys list` where this login sees no key (none made yet; an app or analyst login sees none)
    says so instead of printing nothing; then it lists the key made."""
    from pgmemory.storage.setup import init_database
    from tests.conftest import DIM

    with psycopg.connect(empty_dsn) as conn:
        init_database(conn, DIM)
    none = run_cli("keys", "list", dsn=empty_dsn)
    assert none.returncode == 0 and none.stdout == "" and "no API keys visible to this login" in none.stderr
    assert run_cli("keys", "create", "ci", "--read", "g1", dsn=empty_dsn).returncode == 0
    listed = run_cli("keys", "list", dsn=empty_dsn)
    assert " ci " in listed.stdout and "no API keys" not in listed.stderr, listed


def test_shortened_flags_are_refused_not_guessed():
    """argparse took any unambiguous prefix of a flag: `delete-episode ... --e` erased the episode's
    text for ever, `erase-group g --y` skipped the confirmation. A flag is spelled out or refused,
    before any connection."""
    for args, said in ((("delete-episode", "ep-1", "--group", "g", "--e"), "unrecognized arguments: --e"),
                       (("erase-group", "g", "--y"), "unrecognized arguments: --y"),
                       (("search", "where", "--grou", "g"), "the following arguments are required: --group")):
        result = run_cli(*args, dsn="postgresql://postgres@127.0.0.1:1/none")
        assert result.returncode == 2 and said in result.stderr and "connect" not in result.stderr, (args, result.stderr)


async def test_an_app_login_writing_a_group_not_its_own_is_told_so(db_dsn, group, tmp_path):
    """An app login (read-write) ingesting a group it was not granted got row-level security's
    "new row violates ... policy for table episodes" and the hint "this login may only read",
    which sent its owner to grant a read-write login it already had. It is told the group is not
    among its groups."""
    import uuid

    from pgmemory import Memory
    from pgmemory.providers.embedder import HashEmbedder
    from pgmemory.storage import grants

    await (await Memory.open(db_dsn, embedder=HashEmbedder())).close()  # (the owner records the embedder)
    role = f"own_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        grants.grant(conn, role, [f"{group}-mine"], kind="app", create_password="pw")
    info = psycopg.conninfo.conninfo_to_dict(db_dsn)
    login = f"postgresql://{role}:pw@/{info['dbname']}?host={info['host']}&port={info.get('port', 5432)}"
    data = tmp_path / "episodes.jsonl"
    write_jsonl(data, group, [{"content": "I live in Oslo.", "actor": "Kim", "reference_time": "2024-01-01T00:00:00Z"}])
    result = run_cli("ingest", str(data), dsn=login)
    [line] = result.stderr.splitlines()
    assert result.returncode == 2 and f"may not write group {group} (not among its groups" in line, result.stderr
    assert "may only read" not in line
