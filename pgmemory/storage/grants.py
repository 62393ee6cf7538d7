"""Which database role sees which groups (`pgmemory grant`): rows of pgmemory.role_groups, read by
row-level security (sql/catalog/tenancy.sql). Run by the owner; a role never edits its own grants."""
from __future__ import annotations

import psycopg
from psycopg import sql as pgsql

from pgmemory.errors import InvalidInput
from pgmemory.ingest.episode import validate_group_ids

KINDS = {"analyst": "pgmemory_analyst", "app": "pgmemory_app"}
PRIVILEGE_ROLES = frozenset({"pgmemory_analyst", "pgmemory_app", "pgmemory_reader"})
MAX_ROLE_NAME = 63


def check_role_name(role: object) -> str:
    """A role name: 1 to 63 characters, no NUL, not one of pgmemory's privilege roles."""
    if not isinstance(role, str) or not 0 < len(role) <= MAX_ROLE_NAME or "\x00" in role:
        raise InvalidInput(f"role must be a name of 1 to {MAX_ROLE_NAME} characters, got {role!r}")
    if role in PRIVILEGE_ROLES:
        raise InvalidInput(f"{role} carries privileges only; grant groups to a login role that is a member of it")
    return role


def grant(conn: psycopg.Connection, role: str, groups: list[str], *, kind: str = "analyst",
          create_password: str | None = None) -> list[str]:
    """Let `role` see `groups` ('*' = every group) and make it a member of the analyst (read-only)
    or app (read-write) role. With create_password, create the login role first if missing.
    Returns the role's groups afterwards. One transaction."""
    role = check_role_name(role)
    groups = ["*"] if groups == ["*"] else validate_group_ids(groups)
    if kind not in KINDS:
        raise InvalidInput(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
    with conn.transaction():
        exists = conn.execute("SELECT to_regrole(%s) IS NOT NULL", (pgsql.Identifier(role).as_string(conn),)
                              ).fetchone()[0]
        if not exists:
            if create_password is None:
                raise InvalidInput(f"role {role!r} does not exist: create it, or pass --create")
            conn.execute(pgsql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(
                pgsql.Identifier(role), pgsql.Literal(create_password)))
            # Grants are keyed by name: rows left by a dropped role of this name are not the new
            # login's (it would otherwise see that role's groups too).
            conn.execute("DELETE FROM pgmemory.role_groups WHERE role_name = %s", (role,))
        conn.execute(pgsql.SQL("GRANT {} TO {}").format(pgsql.Identifier(KINDS[kind]), pgsql.Identifier(role)))
        conn.execute("INSERT INTO pgmemory.role_groups (role_name, group_id) SELECT %s, unnest(%s::text[])"
                     " ON CONFLICT DO NOTHING", (role, groups))
        return granted(conn, role)


def revoke(conn: psycopg.Connection, role: str, groups: list[str] | None) -> list[str]:
    """Stop `role` seeing `groups` (all of its groups when None); returns what it still sees. A
    role that neither exists nor has grants is refused (a typo would otherwise report success)."""
    role = check_role_name(role)
    with conn.transaction():
        known = conn.execute("SELECT to_regrole(%s) IS NOT NULL OR EXISTS (SELECT FROM pgmemory.role_groups"
                             " WHERE role_name = %s)", (pgsql.Identifier(role).as_string(conn), role)).fetchone()[0]
        if not known:
            raise InvalidInput(f"role {role!r} does not exist and was granted no group")
        if groups is None:
            conn.execute("DELETE FROM pgmemory.role_groups WHERE role_name = %s", (role,))
        else:
            groups = ["*"] if groups == ["*"] else validate_group_ids(groups)
            conn.execute("DELETE FROM pgmemory.role_groups WHERE role_name = %s AND group_id = ANY (%s)",
                         (role, groups))
        return granted(conn, role)


def granted(conn: psycopg.Connection, role: str) -> list[str]:
    """The groups granted to `role`, sorted."""
    return [g for (g,) in conn.execute("SELECT group_id FROM pgmemory.role_groups WHERE role_name = %s"
                                       " ORDER BY group_id", (role,))]


def all_grants(conn: psycopg.Connection) -> dict[str, list[str]]:
    """Every role's groups."""
    out: dict[str, list[str]] = {}
    for role, group in conn.execute("SELECT role_name, group_id FROM pgmemory.role_groups ORDER BY 1, 2"):
        out.setdefault(role, []).append(group)
    return out
