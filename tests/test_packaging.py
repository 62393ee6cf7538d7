"""A non-editable install works: the wheel carries sql/ and migrations/, so `init`, `ingest` and
`search` run from a fresh virtualenv (no network: dependencies are reused from this one)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SOURCES = ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "pgmemory", "sql", "migrations")


def run(*cmd, **kwargs) -> subprocess.CompletedProcess:
    result = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=300, **kwargs)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    return result


def test_wheel_installed_in_a_fresh_venv_inits_ingests_and_searches(empty_dsn, tmp_path):
    source = tmp_path / "src"  # a copy, so the build leaves nothing in the repository
    for name in SOURCES:
        path = REPO / name
        if path.is_dir():
            shutil.copytree(path, source / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(path, source / name)
    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
        "-w", tmp_path / "dist", source)
    wheel = next((tmp_path / "dist").glob("pgmemory-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    shipped = {n for n in names if n.startswith(("pgmemory/_sql/", "pgmemory/_migrations/"))}
    expected = {f"pgmemory/_sql/{p.relative_to(REPO / 'sql')}" for p in (REPO / "sql").rglob("*.sql")}
    expected |= {f"pgmemory/_migrations/{p.name}" for p in (REPO / "migrations").glob("*.sql")}
    assert shipped == expected
    assert not any(n.startswith(("tests/", "bench/", "sql/", "migrations/")) for n in names)
    # the noun hierarchy a list question's category members come from, with WordNet's license
    assert {"pgmemory/data/wordnet_nouns.tsv.gz", "pgmemory/data/WORDNET-LICENSE"} <= set(names)

    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", "--without-pip", venv)
    python = venv / "bin" / "python"
    run(sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "--no-index", wheel)
    site = Path(run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").stdout.strip())
    # Dependencies come from this environment (appended to sys.path; its .pth files, among them
    # an editable pgmemory, are not processed), so the installed pgmemory is the one imported.
    deps = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (site / "_deps.pth").write_text("\n".join(sorted(deps)) + "\n")
    env = {**os.environ, "PGMEMORY_DSN": empty_dsn, "PGMEMORY_EMBEDDER": "hash", "PYTHONPATH": ""}
    env.pop("PGMEMORY_LLM_BASE_URL", None)
    work = tmp_path / "elsewhere"
    work.mkdir()
    where = run(python, "-c", "import pgmemory.storage.migrate as m; print(m.SQL_DIR)", cwd=work, env=env)
    assert where.stdout.strip() == str(site / "pgmemory" / "_sql")

    cli = venv / "bin" / "pgmemory"
    assert "migrations:      0001_schema.sql" in run(cli, "init", cwd=work, env=env).stdout
    episodes = work / "episodes.jsonl"
    episodes.write_text("".join(json.dumps({"group_id": "wheel", "content": text, "actor": "Ada",
                                            "reference_time": "2024-01-01T00:00:00Z", "episode_id": f"w{i}"}) + "\n"
                                for i, text in enumerate(["I work at Acme Corp.", "Lisbon in May was lovely."])))
    run(cli, "ingest", episodes, cwd=work, env=env)
    found = json.loads(run(cli, "search", "where does Ada work", "--group", "wheel", "--json",
                           cwd=work, env=env).stdout)
    assert [f["fact"] for f in found["facts"]] == ["Ada works for Acme Corp."]
    found = json.loads(run(cli, "search", "Which cities has Ada seen?", "--group", "wheel", "--json",
                           cwd=work, env=env).stdout)
    assert [e["ranks"].get("members") for e in found["episodes"] if "Lisbon" in e["content"]] == [1]
