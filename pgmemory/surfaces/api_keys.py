"""API keys of the servers: created once (the secret is shown then and never stored: only its
SHA-256), mapped to the groups they may read or write ('*': every group), revocable.

A key reads as `pgm_<32 hex id>_<secret>`. Lookups are cached for CACHE_SECONDS, so a revoked
key stops working within that time on a running server.
"""
from __future__ import annotations

import hashlib
import secrets
import time
import uuid
from dataclasses import dataclass

import asyncpg

from pgmemory.errors import InvalidInput, SetupError
from pgmemory.ingest.episode import ALL_GROUPS, validate_group_id
from pgmemory.storage.request_groups import REQUEST_GROUPS

PREFIX = "pgm_"
CACHE_SECONDS = 10.0


@dataclass(frozen=True)
class ApiKey:
    """What a key may do."""

    id: uuid.UUID
    name: str
    read_groups: tuple[str, ...]
    write_groups: tuple[str, ...]

    def can_write(self, group: str) -> bool:
        """May this key add to, change or delete from `group`?"""
        return ALL_GROUPS in self.write_groups or group in self.write_groups

    def can_read(self, group: str) -> bool:
        """May this key read `group`? (Writing implies reading.)"""
        return self.can_write(group) or ALL_GROUPS in self.read_groups or group in self.read_groups

    def readable_groups(self) -> tuple[str, ...] | None:
        """The groups this key may read (None: every group)."""
        if ALL_GROUPS in self.read_groups or ALL_GROUPS in self.write_groups:
            return None
        return tuple(sorted(set(self.read_groups) | set(self.write_groups)))


def _hash(secret: str) -> bytes:
    return hashlib.sha256(secret.encode()).digest()


def _groups(values: list[str] | tuple[str, ...], what: str) -> list[str]:
    return [g if g == ALL_GROUPS else validate_group_id(g, what) for g in values]


async def create_key(pool: asyncpg.Pool, name: str, *, read: list[str], write: list[str]) -> tuple[ApiKey, str]:
    """A new key and its secret (shown once: only its hash is stored)."""
    if not isinstance(name, str) or not name.strip() or len(name) > 200:
        raise InvalidInput("a key needs a name of 1 to 200 characters")
    read_groups, write_groups = _groups(read, "--read"), _groups(write, "--write")
    if not read_groups and not write_groups:
        raise InvalidInput("a key needs at least one group to read (--read G) or write (--write G)")
    key_id, secret = uuid.uuid4(), secrets.token_urlsafe(32)
    token = f"{PREFIX}{key_id.hex}_{secret}"
    async with pool.acquire() as conn:
        await _require_table(conn)
        await conn.execute("INSERT INTO pgmemory.api_keys (id, name, secret_hash, read_groups, write_groups)"
                           " VALUES ($1, $2, $3, $4, $5)", key_id, name.strip(), _hash(token), read_groups,
                           write_groups)
    return ApiKey(key_id, name.strip(), tuple(read_groups), tuple(write_groups)), token


async def list_keys(pool: asyncpg.Pool) -> list[dict]:
    """Every key (never its secret): id, name, groups, created, revoked."""
    async with pool.acquire() as conn:
        await _require_table(conn)
        rows = await conn.fetch("SELECT id, name, read_groups, write_groups, created_at, revoked_at"
                                " FROM pgmemory.api_keys ORDER BY created_at")
    return [dict(r) for r in rows]


async def revoke_key(pool: asyncpg.Pool, key_id: str) -> None:
    """Revoke a key by id (running servers stop accepting it within CACHE_SECONDS)."""
    try:
        kid = uuid.UUID(key_id)
    except (ValueError, AttributeError, TypeError):
        raise InvalidInput(f"{key_id!r:.60} is not a key id (see `pgmemory keys list`)") from None
    async with pool.acquire() as conn:
        await _require_table(conn)
        done = await conn.fetchval("UPDATE pgmemory.api_keys SET revoked_at = now()"
                                   " WHERE id = $1 AND revoked_at IS NULL RETURNING id", kid)
    if done is None:
        raise InvalidInput(f"no active key {kid}")


async def _require_table(conn: asyncpg.Connection) -> None:
    if not await conn.fetchval("SELECT to_regclass('pgmemory.api_keys') IS NOT NULL"):
        raise SetupError("this database has no API key table yet: run `pgmemory init`")


async def active_key_count(pool: asyncpg.Pool) -> int:
    """How many keys are not revoked (a server with none answers every request with 401)."""
    async with pool.acquire() as conn:
        await _require_table(conn)
        return await conn.fetchval("SELECT count(*) FROM pgmemory.api_keys WHERE revoked_at IS NULL")


class KeyStore:
    """Looks keys up by their secret's hash, with a short in-process cache."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool
        self._cache: dict[bytes, tuple[float, ApiKey | None]] = {}

    async def lookup(self, token: str) -> ApiKey | None:
        """The active key for this secret, or None."""
        if not token.startswith(PREFIX) or len(token) > 200:
            return None
        digest = _hash(token)
        now = time.monotonic()
        hit = self._cache.get(digest)
        if hit is not None and now - hit[0] < CACHE_SECONDS:
            return hit[1]
        outside = REQUEST_GROUPS.set(None)  # keys are read before, and never under, a request's narrowing
        try:
            row = await self.pool.fetchrow("SELECT id, name, read_groups, write_groups FROM pgmemory.api_keys"
                                           " WHERE secret_hash = $1 AND revoked_at IS NULL", digest)
        finally:
            REQUEST_GROUPS.reset(outside)
        key = ApiKey(row["id"], row["name"], tuple(row["read_groups"]), tuple(row["write_groups"])) if row else None
        if len(self._cache) > 10_000:
            self._cache.clear()
        self._cache[digest] = (now, key)
        return key
