"""The app login of the embedded server: Memory (and the servers built on it) run as this
restricted role, subject to row-level security, while init and migrations run as the owner.

Created by the owner when missing: a LOGIN role, member of pgmemory_app, granted every group
('*'; a connection narrows itself per transaction through pgmemory.groups, sql/catalog/tenancy.sql).
Its password lives in the data directory (mode 0600) and is set again on every call, so a
recreated role or a restored data directory keep matching. Against a server given by
PGMEMORY_DSN nothing is created: that DSN is used as is (`pgmemory doctor` says how to make a login).
"""
from __future__ import annotations

import os
import secrets
from pathlib import Path
from urllib.parse import quote, urlsplit, urlunsplit

import psycopg
from psycopg import sql as pgsql

from pgmemory.storage import grants, migrate

APP_LOGIN = "pgmemory_app_login"
SECRET_FILE = "app_login.secret"


def login_password(data_dir: Path) -> tuple[str, bool]:
    """The app login's password, kept in the data directory (created, mode 0600, when missing),
    and whether it was just created."""
    path = Path(data_dir) / SECRET_FILE
    created = False
    if not path.exists():
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:  # another process made it first
            pass
        else:
            with os.fdopen(fd, "w") as f:
                f.write(secrets.token_urlsafe(24))
            created = True
    return path.read_text().strip(), created


def ensure_app_login(conn: psycopg.Connection, data_dir: Path) -> str:
    """As the owner, after init: create the app login if missing (or give it a new password file's
    password); returns its password. One transaction under the schema lock, so processes opening
    at once do not update the role concurrently; once set up, it only reads."""
    password, new_password = login_password(data_dir)
    with conn.transaction():
        migrate.lock(conn)
        ready = conn.execute(
            "SELECT CASE WHEN to_regrole(%s) IS NULL THEN false ELSE pg_has_role(%s, 'pgmemory_app', 'MEMBER')"
            "   AND EXISTS (SELECT FROM pgmemory.role_groups WHERE role_name = %s AND group_id = '*') END",
            (APP_LOGIN, APP_LOGIN, APP_LOGIN)).fetchone()[0]
        if not ready:
            grants.grant(conn, APP_LOGIN, ["*"], kind="app", create_password=password)
        if new_password or not ready:
            conn.execute(pgsql.SQL("ALTER ROLE {} LOGIN PASSWORD {}").format(
                pgsql.Identifier(APP_LOGIN), pgsql.Literal(password)))
    return password


def login_dsn(dsn: str, user: str, password: str) -> str:
    """A URI DSN with another user and password (host, port, database and options kept)."""
    parts = urlsplit(dsn)
    host = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit((parts.scheme, f"{quote(user, safe='')}:{quote(password, safe='')}@{host}",
                       parts.path, parts.query, parts.fragment))


def app_dsn(owner_dsn: str, data_dir: Path) -> str:
    """The app login's DSN on the embedded server whose owner DSN is `owner_dsn` (login ensured)."""
    from pgmemory.storage.connect import connect

    with connect(owner_dsn) as conn:
        password = ensure_app_login(conn, data_dir)
    return login_dsn(owner_dsn, APP_LOGIN, password)
