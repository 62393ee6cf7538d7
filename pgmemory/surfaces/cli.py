"""The `pgmemory` command line: init, doctor, demo, ingest, worker, search, sql, dsn, listen, psql, grant, retry,
delete-episode, communities, reembed, erase-group, serve (REST), mcp, keys, eval."""
from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable
from typing import Any

from pgmemory.errors import InvalidInput, PgMemoryError, error_line

# Each command imports what it needs when it runs: start-up stays fast (--help loads no driver).


def _cmd_init(args: argparse.Namespace) -> int:
    from pgmemory.config import Settings
    from pgmemory.providers.embedder import embedder_from_env
    from pgmemory.storage.connect import connect, describe_target, resolve_dsn
    from pgmemory.storage.setup import init_database
    from pgmemory.validate import check_int

    embedder = embedder_from_env()
    dim = embedder.dim if args.dim is None else check_int(args.dim, "--dim", 1, MAX_INDEXED_DIM)
    dsn = resolve_dsn()
    with connect(dsn) as conn:
        report = init_database(conn, dim, embedder=embedder.name if dim == embedder.dim else None,
                               text_search=args.text_search,
                               graph_mirror=None if args.graph_mirror is None else args.graph_mirror == "on")
    print(f"pgmemory initialised on {describe_target(dsn)} (PostgreSQL {report.server_version})")
    print(f"  graph traversal: {'Apache AGE' if report.graph_mode == 'age' else 'recursive SQL (no AGE)'}")
    print(f"  full text:       {'BM25 (pg_textsearch, opt-in)' if report.text_search == 'pg_textsearch' else 'BM25 over tsvector'}")
    print(f"  embedding dim:   {report.embedding_dim}")
    applied = ", ".join(report.migrations_applied) or "none (up to date)"
    print(f"  migrations:      {applied}")
    settings = Settings.from_env()
    if settings.dsn is None:  # the embedded server: Memory runs as its restricted app login
        from pgmemory.storage.app_login import APP_LOGIN, SECRET_FILE, ensure_app_login

        with connect(dsn) as conn:
            ensure_app_login(conn, settings.data_dir)
        print(f"  app login:       {APP_LOGIN} (row-level security; password in {settings.data_dir / SECRET_FILE})")
    prepare = getattr(embedder, "prepare", None)  # the local model: export its ONNX graph now, once
    if prepare is not None:
        print(f"  local embedder:  {prepare()}")
    return 0


def _cmd_doctor(args: argparse.Namespace) -> int:
    from pgmemory.config import Settings
    from pgmemory.storage.connect import connect, describe_target, resolve_dsn
    from pgmemory.storage.doctor import healthy, run_checks

    dsn = resolve_dsn()
    with connect(dsn) as conn:
        checks = run_checks(conn, embedded=Settings.from_env().dsn is None)
    print(f"pgmemory doctor: {describe_target(dsn)}")
    marks = {"ok": "ok  ", "warn": "WARN", "fail": "FAIL"}
    for c in checks:
        print(f"  [{marks[c.status]}] {c.name:<26} {c.detail}")
        if c.fix:
            print(f"         fix: {c.fix}")
    ok = healthy(checks)
    print("healthy" if ok else "problems found")
    return 0 if ok else 1


def _cmd_demo(args: argparse.Namespace) -> int:
    """init, doctor, then the demo's round trip (pgmemory/demo.py)."""
    from pgmemory.demo import run_demo

    args.dim, args.text_search, args.graph_mirror = None, None, None
    if _cmd_init(args) != 0 or _cmd_doctor(args) != 0:
        return 1
    return run_demo()


def _cmd_ingest(args: argparse.Namespace) -> int:
    from pgmemory.surfaces.ingest_file import ingest_file

    return asyncio.run(ingest_file(args.file, concurrency=args.concurrency))


def _cmd_worker(args: argparse.Namespace) -> int:
    from pgmemory.surfaces.worker_cli import run_worker

    return asyncio.run(run_worker(concurrency=args.concurrency, drain=args.drain, lease_seconds=args.lease_seconds,
                                  poll_seconds=args.poll_seconds, grace_seconds=args.grace_seconds))


def _cmd_search(args: argparse.Namespace) -> int:
    from pgmemory.surfaces.search_cli import search_command

    return asyncio.run(search_command(
        args.query, args.group, limit=args.limit, recipe=args.recipe, as_of=args.as_of,
        known_at=args.known_at, include_invalidated=args.include_invalidated, as_json=args.json))


def _cmd_sql(args: argparse.Namespace) -> int:
    from pgmemory.surfaces.sql_cli import sql_command

    return sql_command(args.query, groups=args.group, fmt=args.format, max_rows=args.max_rows,
                       timeout_s=args.timeout, explain=args.explain)


def _cmd_grant(args: argparse.Namespace) -> int:
    from pgmemory.storage import grants
    from pgmemory.storage.connect import connect, resolve_dsn

    if args.list and (args.role or args.groups or args.revoke or args.app or args.create):
        raise InvalidInput("--list lists every grant: give it no role, group, --revoke, --app or --create")
    with connect(resolve_dsn()) as conn:
        if args.list:
            for role, groups in grants.all_grants(conn).items():
                print(f"{role}: {', '.join(groups)}")
            return 0
        if not args.role or (not args.groups and not args.revoke):
            raise InvalidInput("give a role and at least one group (or --revoke, or --list)")
        if args.revoke:
            left = grants.revoke(conn, args.role, args.groups or None)
        else:
            password = _read_password(args.role) if args.create else None
            left = grants.grant(conn, args.role, args.groups, kind="app" if args.app else "analyst",
                                create_password=password)
    print(f"{args.role} sees: {', '.join(left) if left else 'no group'}")
    return 0


def _read_password(role: str) -> str:
    """The new login's password: typed at a terminal, else the first line of standard input."""
    if sys.stdin.isatty():
        import getpass

        password = getpass.getpass(f"password for new role {role}: ")
    else:
        password = sys.stdin.readline().rstrip("\n")
    if not password:
        raise InvalidInput("the new role needs a non-empty password")
    return password


def _cmd_dsn(args: argparse.Namespace) -> int:
    from pgmemory.storage.connect import resolve_dsn

    if args.user and not args.tcp:
        raise InvalidInput("--user names the login of the TCP connection string: use it with --tcp")
    if args.tcp:
        from pgmemory.storage.listen import tcp_dsn

        settings = _embedded_only("dsn --tcp")
        resolve_dsn(settings)  # started, listening as asked
        print(tcp_dsn(settings.data_dir, args.user or "postgres"))
        return 0
    print(resolve_dsn())
    return 0


def _embedded_only(what: str):
    from pgmemory.config import Settings

    settings = Settings.from_env()
    if settings.dsn:
        raise InvalidInput(f"`pgmemory {what}` is for the embedded server; PGMEMORY_DSN points at another "
                           "server: configure listening there (listen_addresses, pg_hba.conf)")
    from pgmemory.storage.embedded import check_data_dir

    check_data_dir(settings.data_dir)
    return settings


def _cmd_listen(args: argparse.Namespace) -> int:
    from pgmemory.storage.embedded import start
    from pgmemory.storage.listen import record

    settings = _embedded_only("listen")
    if args.off:
        record(settings.data_dir, None, None)
        start(settings.data_dir)  # applies the recorded request
        print(f"the embedded server in {settings.data_dir} listens on its Unix socket only")
        return 0
    record(settings.data_dir, args.host, args.port)
    start(settings.data_dir)
    print(f"the embedded server in {settings.data_dir} listens on {args.host}:{args.port} "
          "(password authentication; `pgmemory grant ROLE GROUP --create` makes a login)")
    return 0


def _cmd_psql(args: argparse.Namespace) -> int:
    import os
    import subprocess

    import psycopg

    from pgmemory.storage.connect import resolve_dsn
    from pgmemory.storage.embedded import bundled_binary

    dsn = resolve_dsn()
    # The DSN goes in libpq's environment variables, so what the user gives psql (a database,
    # -d, -U, -h: another login or database) wins, as psql's own arguments win over its
    # environment; a positional DSN made psql ignore them and connect as the DSN's login.
    params = psycopg.conninfo.conninfo_to_dict(dsn)
    if set(params) <= set(LIBPQ_ENV):
        env = {**os.environ, **{LIBPQ_ENV[k]: str(v) for k, v in params.items()}}
        return subprocess.run([str(bundled_binary("psql")), *args.psql_args], env=env).returncode
    return subprocess.run([str(bundled_binary("psql")), dsn, *args.psql_args]).returncode


# libpq's connection parameters and the environment variables that set them.
LIBPQ_ENV = {"host": "PGHOST", "hostaddr": "PGHOSTADDR", "port": "PGPORT", "dbname": "PGDATABASE", "user": "PGUSER",
             "password": "PGPASSWORD", "passfile": "PGPASSFILE", "options": "PGOPTIONS",
             "application_name": "PGAPPNAME", "sslmode": "PGSSLMODE", "sslrootcert": "PGSSLROOTCERT",
             "sslcert": "PGSSLCERT", "sslkey": "PGSSLKEY", "connect_timeout": "PGCONNECT_TIMEOUT",
             "target_session_attrs": "PGTARGETSESSIONATTRS"}


def _cmd_retry(args: argparse.Namespace) -> int:
    from pgmemory.surfaces.ingest_file import retry

    return asyncio.run(retry(args.group))


def _cmd_delete_episode(args: argparse.Namespace) -> int:
    from pgmemory.memory import Memory

    async def run() -> int:
        async with await Memory.open() as memory:
            out = await memory.delete_episode(args.group, args.episode_id, erase=args.erase)
        print(f"{'erased' if out.erased else 'deleted'} episode {args.episode_id}: "
              f"{out.facts_retracted} facts retracted, {out.facts_changed} changed, "
              + (f"{out.facts_removed} removed, {out.entities_removed} entities removed" if out.erased else
                 f"{out.facts_removed} withdrawn with {out.entities_removed} retired entities (history kept)"))
        return 0
    return asyncio.run(run())


def _cmd_erase_group(args: argparse.Namespace) -> int:
    from pgmemory.memory import Memory

    # At a terminal, the group id typed again (REST asks for ?confirm=<group id>); scripts and
    # pipes run as before, and --yes skips the question.
    if not args.yes and sys.stdin.isatty():
        typed = input(f"erase group {args.group!r} and everything derived from it? this cannot be undone;"
                      " type the group id to confirm: ")
        if typed != args.group:
            print(f"not erased: {typed!r} is not {args.group!r}", file=sys.stderr)
            return 1

    async def run() -> int:
        async with await Memory.open() as memory:
            n = await memory.erase_group(args.group)
        print(f"erased group {args.group!r}: {n} episodes and everything derived from them")
        return 0
    return asyncio.run(run())


def _cmd_reembed(args: argparse.Namespace) -> int:
    from pgmemory.ingest.reembed import KINDS
    from pgmemory.memory import Memory

    kinds = list(KINDS) if args.kind == "all" else [args.kind]

    async def run() -> int:
        async with await Memory.open() as memory:
            results = await memory.reembed(args.group, kinds=kinds, batch=args.batch, restart=args.restart,
                                           on_progress=lambda p: print(p, flush=True))
        rows = sum(r.rows for r in results)
        print(f"re-embedded {rows} rows in {len({r.group_id for r in results})} group(s)"
              f" ({sum(r.current for r in results)} of {len(results)} walks were already current)")
        return 0
    return asyncio.run(run())


def _cmd_communities(args: argparse.Namespace) -> int:
    from pgmemory.ingest.episode import validate_group_id
    from pgmemory.ingest.reembed import groups_to_walk
    from pgmemory.memory import Memory
    from pgmemory.surfaces.ingest_file import refresh_groups

    group = None if args.group is None else validate_group_id(args.group, "--group")

    async def run() -> int:
        async with await Memory.open() as memory:
            # A group named that holds nothing is refused (as by reembed), not reported as 0 communities.
            if group:
                groups = set(await groups_to_walk(memory.pool, group))
            else:
                groups = {r[0] for r in await memory.pool.fetch("SELECT DISTINCT group_id FROM pgmemory.entities")}
                if not groups:
                    print("communities: no group has entities yet, nothing to detect")
                    return 0
            failed = await refresh_groups(memory, groups, rebuild=args.action == "rebuild", force=True)
        return 1 if failed else 0
    return asyncio.run(run())


def _cmd_eval(args: argparse.Namespace) -> int:
    from pathlib import Path

    from pgmemory.eval.harness import EvalOptions, default_output, run_cli
    from pgmemory.eval.readers import EvalFormatError
    from pgmemory.providers.llm import ProviderError

    only = tuple(i.strip() for i in (args.only or "").split(",") if i.strip())
    output = Path(args.output) if args.output else default_output(args.benchmark, args.recipe)
    options = EvalOptions(benchmark=args.benchmark, path=Path(args.path), output=output, only=only,
                          recipe=args.recipe, k=args.k, concurrency=args.concurrency, force=args.force)
    try:
        return asyncio.run(run_cli(options))
    except EvalFormatError as exc:
        print(f"pgmemory: error: {exc}", file=sys.stderr)
        return 2
    except ProviderError as exc:
        print(f"pgmemory: error: {exc}; finished conversations are kept in {output}/partial, "
              f"run the same command with --output {output} to resume", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"pgmemory: interrupted; finished conversations are kept in {output}/partial, "
              f"run the same command with --output {output} to resume", file=sys.stderr)
        return 130
    finally:
        if not args.output and output.is_dir() and not any(output.iterdir()):
            output.rmdir()  # the fresh run directory of a run refused before it wrote anything


def _server_options() -> dict:
    """Memory.open options of the servers: the embedder built now, so a misconfigured one
    (PGMEMORY_EMBEDDER and its variables) is one error line before the server starts."""
    from pgmemory.providers.embedder import embedder_from_env

    return {"embedder": embedder_from_env()}


def _cmd_serve(args: argparse.Namespace) -> int:
    from pgmemory.surfaces.rest import serve

    if args.no_auth:
        print("pgmemory: warning: serving WITHOUT API keys: every group is open to any caller", file=sys.stderr)
    return serve(host=args.host, port=args.port, auth=not args.no_auth, worker_concurrency=args.workers,
                 max_body_bytes=args.max_body_bytes, cors_origins=args.cors_origin or (),
                 open_options=_server_options())


def _cmd_mcp(args: argparse.Namespace) -> int:
    from pgmemory.surfaces.mcp_server import run

    if args.no_auth and args.transport == "http":
        print("pgmemory: warning: MCP over HTTP WITHOUT API keys: every group is open to any caller",
              file=sys.stderr)
    return run(transport=args.transport, host=args.host, port=args.port, default_group=args.group,
               auth=not args.no_auth, worker_concurrency=args.workers, open_options=_server_options())


def _cmd_keys(args: argparse.Namespace) -> int:
    from pgmemory.storage.connect import create_pool, resolve_dsn
    from pgmemory.surfaces import api_keys

    async def run() -> int:
        pool = await create_pool(resolve_dsn(), max_size=1)
        try:
            if args.action == "create":
                key, token = await api_keys.create_key(pool, args.name, read=args.read or [],
                                                       write=args.write or [])
                print(f"created key {key.id} ({key.name}); read: {', '.join(key.read_groups) or '-'}; "
                      f"write: {', '.join(key.write_groups) or '-'}")
                print(f"secret (shown once, store it now): {token}")
            elif args.action == "list":
                keys = await api_keys.list_keys(pool)
                if not keys:  # (none made, or a login that may not read them: an app or analyst login)
                    print("no API keys visible to this login (`pgmemory keys create` as the database owner makes one)",
                          file=sys.stderr)
                for k in keys:
                    state = f"revoked {k['revoked_at']:%Y-%m-%d}" if k["revoked_at"] else "active"
                    print(f"{k['id']}  {k['name']:<20}  {state:<18}  read: {', '.join(k['read_groups']) or '-'};"
                          f" write: {', '.join(k['write_groups']) or '-'}")
            else:
                await api_keys.revoke_key(pool, args.key_id)
                print(f"revoked key {args.key_id}")
        finally:
            await pool.close()
        return 0
    return asyncio.run(run())


# What an interrupted (Ctrl-C) command left, and how to go on: each command's work is committed in
# steps (an episode, a batch), so a step in flight is given back and a re-run picks up from there.
RESUME_INIT = "the schema is set up in one transaction (all or nothing): run `pgmemory init` again to finish"
RESUME_INGEST = ("episodes stored so far are kept; run the same command again: those done are skipped, "
                 "the rest ingested")
RESUME_RETRY = "unfinished episodes went back to pending: run `pgmemory retry` (or the worker) to go on"
RESUME_REEMBED = "committed batches are kept: run the same command again to resume where it stopped"
RESUME_SAME = "nothing half-written was kept: run the same command again"

MAX_INDEXED_DIM = 2000  # pgvector's HNSW index takes vectors of at most 2000 dimensions


def _bounded(high: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer between 1 and {high}, got {text!r}") from None
        if not 1 <= value <= high:
            raise argparse.ArgumentTypeError(f"must be between 1 and {high}, got {value}")
        return value
    return parse


def _zero_or(high: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        if text.strip() == "0":
            return 0
        try:
            return _bounded(high)(text)
        except argparse.ArgumentTypeError:
            raise argparse.ArgumentTypeError(f"must be an integer between 0 and {high}, got {text!r}") from None
    return parse


def _seconds(low: float, high: float) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a number of seconds, got {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be between {low:g} and {high:g}, got {text}")
        return value
    return parse


def _add_eval(sub: argparse._SubParsersAction) -> None:
    from pgmemory.search.config import MAX_LIMIT, RECIPES

    p = sub.add_parser("eval", help="evaluate retrieval (and QA, with an LLM) on LoCoMo or LongMemEval")
    benchmarks = p.add_subparsers(dest="benchmark", required=True)
    for name, flag, what in (("locomo", "--conversations", "LoCoMo sample ids, e.g. conv-26,conv-30"),
                             ("longmemeval", "--questions", "LongMemEval question ids")):
        b = benchmarks.add_parser(name, help=f"run on a {name} JSON file")
        b.add_argument("path", help=f"the benchmark file in the official {name} JSON format")
        b.add_argument(flag, dest="only", metavar="IDS", help=f"only these, comma-separated: {what} (default: all)")
        b.add_argument("--output", help="run directory (default: a new eval-runs/<benchmark>-<recipe>-<UTC time>); "
                                         "a directory of the same run is resumed, of another run refused")
        b.add_argument("--force", action="store_true",
                       help="replace the results of another run in --output")
        b.add_argument("--recipe", default="combined_hybrid_rrf", choices=sorted(RECIPES),
                       help="search recipe (default combined_hybrid_rrf)")
        b.add_argument("--k", type=_bounded(MAX_LIMIT), default=10,
                       help="results per kind in the QA context (default 10); "
                            "recall is always reported at 5, 10 and 20")
        b.add_argument("--concurrency", type=_bounded(64), default=4,
                       help="conversations ingested (and questions answered by the LLM) at once (default 4); "
                            "searches always run one at a time")
        b.set_defaults(func=_cmd_eval)


class _Parser(argparse.ArgumentParser):
    """argparse without prefix matching: `--e` is not taken for `--erase` (nor `--y` for `--yes`);
    a flag is spelled out or refused. Subcommands' parsers are of this class too."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    parser = _Parser(prog="pgmemory", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("init", help="create extensions, schema, graph; fix the embedding dimension")
    p.add_argument("--dim", type=int, help="embedding dimension, 1 to 2000 (HNSW's limit; "
                                           "default: the configured embedder's)")
    p.add_argument("--text-search", choices=("tsvector", "pg_textsearch"),
                   help="full-text engine: tsvector (default; BM25 in SQL) or pg_textsearch (opt-in, "
                        "refused for versions known to hang; default: PGMEMORY_TEXT_SEARCH or the database's)")
    p.add_argument("--graph-mirror", choices=("on", "off"),
                   help="keep the Apache AGE graph mirror for Cypher users (default: PGMEMORY_GRAPH_MIRROR, "
                        "else the database's earlier choice, else on when AGE is available)")
    p.set_defaults(func=_cmd_init, on_interrupt=RESUME_INIT)
    p = sub.add_parser("doctor", help="check the server and schema; exit non-zero on problems")
    p.set_defaults(func=_cmd_doctor)
    p = sub.add_parser("demo", help="init, doctor and a bi-temporal round trip on the configured database")
    p.set_defaults(func=_cmd_demo)
    p = sub.add_parser("ingest", help="ingest a JSON Lines file of episodes (one object per line)")
    p.add_argument("file", help="path to a .jsonl file, or - for standard input")
    p.add_argument("--concurrency", type=_bounded(64), default=4, help="groups ingested in parallel (default 4)")
    p.set_defaults(func=_cmd_ingest, on_interrupt=RESUME_INGEST)
    p = sub.add_parser("worker", help="process queued episodes (pgmemory.enqueue_episode) until stopped")
    p.add_argument("--concurrency", type=_bounded(64), default=1,
                   help="episodes processed at once, never two of one group (default 1)")
    p.add_argument("--drain", action="store_true", help="exit once no episode is ready")
    p.add_argument("--lease-seconds", type=_seconds(1, 86400), default=300.0,
                   help="lease on the episode being processed, renewed every third (default 300)")
    p.add_argument("--poll-seconds", type=_seconds(0.05, 3600), default=5.0,
                   help="check the queue at least this often without a notification (default 5)")
    p.add_argument("--grace-seconds", type=_seconds(0, 86400), default=30.0,
                   help="on SIGTERM, time to finish current episodes before giving them back (default 30)")
    p.set_defaults(func=_cmd_worker, on_interrupt=RESUME_RETRY)
    p = sub.add_parser("search", help="hybrid search over facts, entities, communities and episodes")
    p.add_argument("query")
    p.add_argument("--group", required=True, help="group id to search")
    p.add_argument("--limit", type=int, default=10, help="results per kind (default 10)")
    p.add_argument("--recipe", default="combined_hybrid_rrf", help="search recipe (default combined_hybrid_rrf)")
    p.add_argument("--as-of", help="valid time T (ISO 8601, e.g. 2022-01-01 or 2022-01-01T09:00+02:00; "
                   "a date or time without a zone is read as UTC): what was true then")
    p.add_argument("--known-at", help="transaction time T' (ISO 8601; without a zone read as UTC): "
                   "as believed then")
    p.add_argument("--include-invalidated", action="store_true", help="also facts that have ended")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=_cmd_search)
    p = sub.add_parser("sql", help="analyst SQL over the analyst views, with FOR SYSTEM_TIME / FOR VALID_TIME "
                                   "clauses (read-only; see docs/sql.md)")
    p.add_argument("query", help="one SELECT over the analyst views, or - to read it from standard input")
    p.add_argument("--group", action="append", help="only this group (repeatable); narrows, never widens, "
                                                    "what the database lets this login see")
    p.add_argument("--format", choices=("table", "csv", "json"), default="table", help="output (default table)")
    p.add_argument("--max-rows", type=_bounded(100_000), default=1000, help="row cap (default 1000)")
    p.add_argument("--timeout", type=_seconds(0.001, 3600), default=30.0,
                   help="statement timeout in seconds (default 30)")
    p.add_argument("--explain", action="store_true", help="print the rewritten SQL instead of running it")
    p.set_defaults(func=_cmd_sql)
    p = sub.add_parser("dsn", help="print the connection string (PGMEMORY_DSN or the embedded server's)")
    p.set_defaults(func=_cmd_dsn)
    p.add_argument("--tcp", action="store_true", help="the TCP address of the embedded server (see listen)")
    p.add_argument("--user", help="the login to put in the --tcp connection string (default postgres)")
    p = sub.add_parser("listen", help="let the embedded server accept TCP connections (password auth), "
                                      "e.g. for BI tools; --off to stop")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=55432, help="TCP port (default 55432)")
    p.add_argument("--off", action="store_true", help="back to the Unix socket only")
    p.set_defaults(func=_cmd_listen)
    p = sub.add_parser("psql", help="open the bundled psql on the database (extra arguments go to psql)")
    p.add_argument("psql_args", nargs=argparse.REMAINDER, help="arguments for psql, e.g. -c 'SELECT 1'")
    p.set_defaults(func=_cmd_psql)
    p = sub.add_parser("grant", help="let a database role see groups (row-level security; see docs/sql.md)")
    p.add_argument("role", nargs="?", help="a login role (created with --create)")
    p.add_argument("groups", nargs="*", help="group ids, or * for every group")
    p.add_argument("--app", action="store_true", help="read-write (member of pgmemory_app); default read-only "
                                                      "(member of pgmemory_analyst)")
    p.add_argument("--create", action="store_true", help="create the login role if missing (password from the "
                                                          "terminal or the first line of standard input)")
    p.add_argument("--revoke", action="store_true", help="stop the role seeing these groups (all, if none given)")
    p.add_argument("--list", action="store_true", help="print every role's groups")
    p.set_defaults(func=_cmd_grant)
    p = sub.add_parser("retry", help="re-run failed or unfinished episodes")
    p.add_argument("--group", help="only this group")
    p.set_defaults(func=_cmd_retry, on_interrupt=RESUME_RETRY)
    p = sub.add_parser("delete-episode", help="delete one episode: belief becomes as if it was never ingested")
    p.add_argument("episode_id")
    p.add_argument("--group", required=True, help="the episode's group (another group's episode is not found)")
    p.add_argument("--erase", action="store_true",
                   help="also rewrite history so its text is nowhere (privacy; logged without content)")
    p.set_defaults(func=_cmd_delete_episode)
    p = sub.add_parser("communities", help="detect communities afresh (rebuild) or refresh the marked ones")
    p.add_argument("action", choices=("rebuild", "refresh"),
                   help="rebuild: full detection, then names and summaries; refresh: re-detect only past the "
                        "drift threshold, then summarise every community changed since its last summary")
    p.add_argument("--group", help="only this group (default: every group)")
    p.set_defaults(func=_cmd_communities, on_interrupt=RESUME_SAME)
    p = sub.add_parser("reembed", help="recompute stored vectors with the current code and embedder "
                                       "(batches, one transaction each, resumable)")
    p.add_argument("--group", help="only this group (default: every group)")
    p.add_argument("--kind", choices=("episodes", "entities", "facts", "all"), default="all",
                   help="which vectors: episode texts, entity names, fact sentences (and their claims); default all")
    p.add_argument("--batch", type=int, default=256, help="rows per batch and transaction (default 256)")
    p.add_argument("--restart", action="store_true",
                   help="start over even where a run with the same recipe finished or was interrupted")
    p.set_defaults(func=_cmd_reembed, on_interrupt=RESUME_REEMBED)
    p = sub.add_parser("erase-group", help="erase everything of one group (at a terminal: type the group id to confirm)")
    p.add_argument("group")
    p.add_argument("--yes", action="store_true", help="do not ask for the group id at a terminal")
    p.set_defaults(func=_cmd_erase_group)
    p = sub.add_parser("serve", help="run the REST server (OpenAPI at /docs) with an in-process queue worker")
    p.add_argument("--host", default="127.0.0.1", help="interface to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=_bounded(65535), default=8080, help="port (default 8080)")
    p.add_argument("--workers", type=_zero_or(64), default=1,
                   help="queued episodes processed at once in this process (default 1; 0: leave them to "
                        "`pgmemory worker`)")
    p.add_argument("--max-body-bytes", type=_bounded(100_000_000), default=1_000_000,
                   help="largest request body accepted (default 1000000; larger is a 413)")
    p.add_argument("--cors-origin", action="append", metavar="ORIGIN",
                   help="allow browser calls from this origin (repeatable; default: CORS off)")
    p.add_argument("--no-auth", action="store_true",
                   help="serve without API keys (every group open): only on a trusted loopback")
    p.set_defaults(func=_cmd_serve)
    p = sub.add_parser("mcp", help="run the MCP server (Graphiti's tools plus as-of search) on stdio or HTTP")
    p.add_argument("--transport", choices=("stdio", "http"), default="stdio",
                   help="stdio (default; launched by a local agent) or http (streamable HTTP at /mcp)")
    p.add_argument("--group", help="default group of tools called without one")
    p.add_argument("--host", default="127.0.0.1", help="http: interface to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=_bounded(65535), default=8000, help="http: port (default 8000)")
    p.add_argument("--workers", type=_zero_or(64), default=1,
                   help="queued episodes processed at once in this process (default 1; 0: none)")
    p.add_argument("--no-auth", action="store_true", help="http: serve without API keys (trusted loopback only)")
    p.set_defaults(func=_cmd_mcp)
    p = sub.add_parser("keys", help="API keys of the servers: create, list, revoke")
    keys = p.add_subparsers(dest="action", required=True)
    k = keys.add_parser("create", help="create a key (its secret is printed once)")
    k.add_argument("name", help="who or what the key is for")
    k.add_argument("--read", action="append", metavar="GROUP", help="a group it may read (repeatable; * = all)")
    k.add_argument("--write", action="append", metavar="GROUP",
                   help="a group it may read and write (repeatable; * = all)")
    keys.add_parser("list", help="list keys (never their secrets)")
    k = keys.add_parser("revoke", help="revoke a key by id")
    k.add_argument("key_id")
    p.set_defaults(func=_cmd_keys)
    _add_eval(sub)
    return parser


def _provider_errors() -> tuple[type[BaseException], ...]:
    """The failures of the model providers (LLM, embedder, local model): not PgMemoryError, yet
    the user's to fix (configuration, an endpoint down). Only modules already loaded can have
    raised them, so none is imported here."""
    found = []
    for module, name in (("pgmemory.providers.llm", "ProviderError"), ("pgmemory.providers.local_model",
                                                                       "LocalModelError")):
        if module in sys.modules:
            found.append(getattr(sys.modules[module], name))
    return tuple(found)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script: errors print one clear line, no traceback."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["psql"]:  # everything after `psql` is psql's own (argparse would read its flags)
        args = argparse.Namespace(func=_cmd_psql, psql_args=argv[1:])
    else:
        args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except KeyboardInterrupt:  # Ctrl-C: one line saying what was kept and how to go on, not a traceback
        hint = getattr(args, "on_interrupt", None)
        print("\n" * sys.stderr.isatty() + f"pgmemory: interrupted{'; ' + hint if hint else ''}", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (`pgmemory search ... | head`): not an error
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit's flush
        return 0
    except PgMemoryError as exc:
        print(f"pgmemory: error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:
        from pgmemory.storage.connect import connection_lost, lost_connection_error

        if getattr(exc, "sqlstate", None) == "42501":  # a login's missing right: one line, no traceback
            message = str(exc).splitlines()[0]
            if "pgmemory grant" not in message:  # (lock_group's "not among its groups" names its fix)
                if "may only read" not in message:
                    message += ": this login may only read; writing needs a read-write login"
                message += " (`pgmemory grant ROLE GROUP... --app` makes one)"
            print(f"pgmemory: error: {message}", file=sys.stderr)
            return 2
        if isinstance(exc, _provider_errors()):  # a bad PGMEMORY_EMBEDDER, an LLM or embedder that failed
            print(f"pgmemory: error: {error_line(exc)}",
                  file=sys.stderr)
            return 2
        lost = connection_lost(exc)
        if lost is None:
            raise
        print(f"pgmemory: error: {lost_connection_error(lost)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
