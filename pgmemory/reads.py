"""Read the stored graph directly (no search): episodes, entities, the facts of an entity and
every version of a fact. Each query is filtered by group, so another group's id is not found."""
from __future__ import annotations

import uuid
from datetime import datetime

import asyncpg

from pgmemory.ingest.episode import said_time
from pgmemory.records import EntityRecord, EpisodeRecord, FactVersion

EPISODE_STATUSES = ("pending", "processing", "done", "failed")

_EPISODE_COLUMNS = ("id, group_id, content, kind, actor, source_description, valid_at AS reference_time,"
                    " reference_offset, recorded_at, status, attempts, error, metadata")


def _episode(row: asyncpg.Record) -> EpisodeRecord:
    """An episode row as a record, its reference time in the speaker's UTC offset (as it was given)."""
    values = {k: v for k, v in row.items() if k not in ("seq", "reference_offset")}
    values["reference_time"] = said_time(row["reference_time"], row["reference_offset"])
    return EpisodeRecord(**values)

_ENTITY_COLUMNS = "id, group_id, name, labels, summary, attributes, created_at, updated_at"

# One fact version with its endpoints' names; an 'infinity' end reads as None (open). Its episodes:
# those it cited when last believed (the believed version: the current ones; a retracted episode
# is cited only by versions superseded before or by its retract).
_FACT_SELECT = """
SELECT f.id, f.version_id, f.group_id, f.source_id, s.name AS source, f.relation, f.target_id,
       t.name AS target, f.fact, lower(f.valid) AS valid_from,
       CASE WHEN upper_inf(f.valid) OR upper(f.valid) = 'infinity' THEN NULL ELSE upper(f.valid) END AS valid_to,
       lower_inf(f.valid) AS valid_from_unknown, lower(f.recorded) AS recorded_from,
       upper(f.recorded) AS recorded_to, f.attributes,
       ARRAY(SELECT fe.episode_id FROM pgmemory.fact_episodes fe
              WHERE fe.group_id = f.group_id AND fe.fact_id = f.id
                AND fe.created_at < coalesce(upper(f.recorded), 'infinity')
                AND (fe.retracted_at IS NULL OR fe.retracted_at >= coalesce(upper(f.recorded), 'infinity'))
              ORDER BY fe.created_at) AS episodes
"""


def _fact(row: asyncpg.Record) -> FactVersion:
    return FactVersion(**dict(row))


async def get_episode(conn: asyncpg.Connection, group_id: str, episode_id: uuid.UUID) -> EpisodeRecord | None:
    """One episode of the group, or None (also for one retracted: it is history, not current)."""
    row = await conn.fetchrow(f"SELECT {_EPISODE_COLUMNS} FROM pgmemory.episodes"
                              " WHERE group_id = $1 AND id = $2 AND retracted_at IS NULL", group_id, episode_id)
    return _episode(row) if row else None


async def get_episodes(conn: asyncpg.Connection, group_id: str, *, last_n: int, before: datetime | None,
                       status: str | None, before_id: uuid.UUID | None = None) -> list[EpisodeRecord] | None:
    """The group's latest `last_n` episodes in (reference time, arrival) order, returned oldest first:
    those before `before` (a time), or, with `before_id`, before that episode's place in that order
    (its reference time, or `before` when given, then arrival): a cursor that pages through episodes
    sharing a reference time. None when `before_id` is not an episode of the group."""
    if before_id is not None:
        anchor = await conn.fetchrow("SELECT valid_at, seq FROM pgmemory.episodes"
                                     " WHERE group_id = $1 AND id = $2 AND retracted_at IS NULL", group_id, before_id)
        if anchor is None:
            return None
        before, seq = before or anchor["valid_at"], anchor["seq"]
    else:
        seq = None
    rows = await conn.fetch(
        f"SELECT * FROM (SELECT {_EPISODE_COLUMNS}, seq FROM pgmemory.episodes"
        " WHERE group_id = $1 AND retracted_at IS NULL"
        " AND ($2::timestamptz IS NULL OR valid_at < $2 OR (valid_at = $2 AND seq < $5::bigint))"
        " AND ($3::text IS NULL OR status = $3)"
        " ORDER BY valid_at DESC, seq DESC LIMIT $4) e ORDER BY reference_time, seq",
        group_id, before, status, last_n, seq)
    return [_episode(r) for r in rows]


async def get_entity(conn: asyncpg.Connection, group_id: str, entity_id: uuid.UUID) -> EntityRecord | None:
    """One entity of the group as it is now, or None (also for an entity retired by the retract of
    the episodes that introduced it: it is no longer believed)."""
    row = await conn.fetchrow(f"SELECT {_ENTITY_COLUMNS} FROM pgmemory.entities"
                              " WHERE group_id = $1 AND id = $2 AND retired_at IS NULL", group_id, entity_id)
    return EntityRecord(**dict(row)) if row else None


async def list_entities(conn: asyncpg.Connection, group_id: str, *, limit: int, offset: int,
                        label: str | None, name: str | None) -> list[EntityRecord]:
    """The group's entities by name (then id): a page of `limit` after `offset`, optionally only
    those with a label or whose name contains `name` (case-insensitive). Retired entities (every
    episode that introduced them was retracted) are not listed: they are no longer believed."""
    rows = await conn.fetch(
        f"SELECT {_ENTITY_COLUMNS} FROM pgmemory.entities WHERE group_id = $1 AND retired_at IS NULL"
        " AND ($2::text IS NULL OR $2 = ANY (labels))"
        " AND ($3::text IS NULL OR strpos(lower(name), lower($3)) > 0)"
        " ORDER BY lower(name), id LIMIT $4 OFFSET $5",
        group_id, label, name, limit, offset)
    return [EntityRecord(**dict(r)) for r in rows]


async def entity_facts(conn: asyncpg.Connection, group_id: str, entity_id: uuid.UUID, *,
                       history: bool) -> list[FactVersion]:
    """The facts the entity is an endpoint of: the believed versions (ended facts included, as
    they are part of what is known), or with `history` every version, oldest belief first."""
    rows = await conn.fetch(
        _FACT_SELECT + """
  FROM pgmemory.facts f
  JOIN pgmemory.entities s ON s.group_id = f.group_id AND s.id = f.source_id
  JOIN pgmemory.entities t ON t.group_id = f.group_id AND t.id = f.target_id
 WHERE f.group_id = $1 AND (f.source_id = $2 OR f.target_id = $2) AND ($3 OR upper_inf(f.recorded))
 ORDER BY f.id, lower(f.recorded), f.version_id""", group_id, entity_id, history)
    return [_fact(r) for r in rows]


async def fact_history(conn: asyncpg.Connection, group_id: str, fact_id: uuid.UUID) -> list[FactVersion]:
    """Every version of one fact of the group (what pgmemory.fact_history returns), oldest belief
    first. The table is read here, not the function: Citus refused the join of the inlined
    function with the entities as a complex join."""
    rows = await conn.fetch(
        _FACT_SELECT + """
  FROM pgmemory.facts f
  JOIN pgmemory.entities s ON s.group_id = f.group_id AND s.id = f.source_id
  JOIN pgmemory.entities t ON t.group_id = f.group_id AND t.id = f.target_id
 WHERE f.group_id = $1 AND f.id = $2
 ORDER BY lower(f.recorded), f.version_id""", group_id, fact_id)
    return [_fact(r) for r in rows]


def current_version(versions: list[FactVersion]) -> FactVersion | None:
    """The believed version among a fact's versions, if it is still believed."""
    return next((v for v in versions if v.believed), None)

