"""CLI start-up: `import pgmemory` and the parser load no driver, LLM client or model runtime;
`pgmemory search` with PGMEMORY_URL goes through a running REST server and opens no database."""
from __future__ import annotations

import json
import os
import subprocess
import sys

HEAVY = ("openai", "asyncpg", "psycopg", "numpy", "torch", "onnxruntime", "fastapi", "mcp", "httpx")


def loaded_after(code: str, env: dict[str, str] | None = None) -> list[str]:
    probe = f"{code}\nimport sys, json\nprint(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120,
                         env=env or dict(os.environ))
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_import_and_help_load_nothing_heavy():
    assert loaded_after("import pgmemory; pgmemory.InvalidInput") == []
    assert loaded_after("from pgmemory.surfaces.cli import build_parser\nbuild_parser().format_help()") == []


def test_public_names_still_import_on_use():
    assert "asyncpg" in loaded_after("import pgmemory; pgmemory.Memory; pgmemory.SyncMemory")


def test_search_through_a_server_opens_no_database(monkeypatch):
    """A fake server answering /v1/search; the DSN points nowhere, so a database access would fail."""
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer

    seen = {}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - http.server's name
            seen["path"], seen["auth"] = self.path, self.headers.get("Authorization")
            seen["body"] = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            body = json.dumps({"facts": [{"id": "f1", "group_id": "g", "ranks": {}, "score": 0.5,
                                          "fact": "Zoe works for Globex.", "valid_from": "2024-01-01T00:00:00+00:00",
                                          "recorded_from": "2024-01-02T00:00:00+00:00"}],
                               "entities": [], "communities": [], "episodes": []}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        env = {**os.environ, "PGMEMORY_URL": f"http://127.0.0.1:{server.server_port}", "PGMEMORY_API_KEY": "pgm_k",
               "PGMEMORY_DSN": "postgresql://nobody@127.0.0.1:1/none"}
        code = ("from pgmemory.surfaces.cli import main\n"
                "rc = main(['search', 'where does Zoe work', '--group', 'g', '--as-of', '2024-06-01'])\n"
                "assert rc == 0")
        out = subprocess.run([sys.executable, "-c", code + "\nimport sys, json\nprint(json.dumps(sorted(m for m in "
                              f"{HEAVY!r} if m in sys.modules)))"], capture_output=True, text=True, timeout=120, env=env)
        assert out.returncode == 0, out.stderr
        assert "Zoe works for Globex." in out.stdout and "2024-01-01" in out.stdout
        assert json.loads(out.stdout.strip().splitlines()[-1]) == []
        assert seen["path"] == "/v1/search" and seen["auth"] == "Bearer pgm_k"
        assert seen["body"]["group_ids"] == ["g"] and seen["body"]["filters"]["as_of"].startswith("2024-06-01")
    finally:
        server.shutdown()


def test_commands_that_embed_nothing_load_no_model(empty_dsn):
    """delete-episode and erase-group open the memory with the local embedder configured, yet
    neither the model nor its runtime is loaded. (init itself prepares the model on purpose — it
    exports the ONNX graph so no query waits for it — so it runs in a process of its own first.)"""
    env = {**os.environ, "PGMEMORY_DSN": empty_dsn, "PGMEMORY_EMBEDDER": "local"}
    loaded_after("from pgmemory.surfaces.cli import main\nassert main(['init']) == 0\n", env)
    code = ("from pgmemory.surfaces.cli import main\n"
            "assert main(['erase-group', 'nobody']) == 0\n"
            "assert main(['delete-episode', 'e1', '--group', 'nobody']) == 2\n")
    loaded = loaded_after(code, env)
    assert not {"torch", "onnxruntime"} & set(loaded), loaded
