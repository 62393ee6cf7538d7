"""Request bodies of the REST server (pydantic; unknown fields refused, flags JSON true/false only).
Times are ISO 8601 strings with a zone; they and every other value are checked again by the Memory API."""
from __future__ import annotations

import uuid
from typing import Any

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, StrictBool

from pgmemory.surfaces.wire import MAX_GROUPS, Count

MAX_BATCH = 1000

# A true/false field: JSON true or false only, as MCP's flags and the Python API (check_bool) take
# them; pydantic's lax mode would read "yes", "no", "1" or 0 as a boolean.
Flag = StrictBool


class Body(BaseModel):
    """A request body: unknown fields are an error, not ignored."""

    model_config = ConfigDict(extra="forbid")


class EpisodeIn(Body):
    """One episode. reference_time (when it was said) defaults to the server's now."""

    content: str
    kind: str = "message"
    actor: str | None = None
    reference_time: str | None = None
    source_description: str = ""
    episode_id: str | None = None
    metadata: dict[str, Any] | None = None


class EpisodesIn(Body):
    """A batch of episodes of one group: all validated before any is stored."""

    episodes: list[EpisodeIn] = Field(min_length=1, max_length=MAX_BATCH)


class MessageIn(Body):
    """One chat message (mem0's shape): role (user, assistant, ...), content, optional speaker name."""

    role: str
    content: str
    name: str | None = None


class MessagesIn(Body):
    """A message list stored as one chat episode ("Speaker: text" lines)."""

    messages: list[MessageIn] = Field(min_length=1, max_length=MAX_BATCH)
    metadata: dict[str, Any] | None = None
    reference_time: str | None = None
    source_description: str = ""
    episode_id: str | None = None


class FiltersIn(Body):
    """SearchFilters: as_of (valid time T) and known_at (transaction time T'), flags, lists,
    ranges of the four time fields, and episode metadata (JSON containment)."""

    as_of: str | None = None
    known_at: str | None = None
    include_invalidated: Flag = False
    include_superseded: Flag = False
    relation_types: list[str] = []
    labels: list[str] = []
    valid_at_from: str | None = None
    valid_at_to: str | None = None
    invalid_at_from: str | None = None
    invalid_at_to: str | None = None
    created_at_from: str | None = None
    created_at_to: str | None = None
    expired_at_from: str | None = None
    expired_at_to: str | None = None
    metadata: dict[str, Any] | None = None


class SearchIn(Body):
    """A hybrid search over the given groups with a named recipe. center_node_uuid (an entity of
    those groups): rank by graph distance from it (the node_distance reranker; recipe
    edge_node_distance needs it)."""

    query: str
    group_ids: list[str] = Field(min_length=1, max_length=MAX_GROUPS)
    limit: Count = 10
    recipe: str = "combined_hybrid_rrf"
    filters: FiltersIn | None = None
    center_node_uuid: str | None = None


class ContextIn(SearchIn):
    """The context string for a prompt: search, then the paper's template in max_chars."""

    max_chars: Count = 8000
    communities: Flag = False
    episodes: Flag = False


class FactIn(Body):
    """One fact stated directly (entities by name, in any case), under the same temporal rules."""

    source: str
    relation: str
    target: str
    fact: str
    valid_from: str | None = None
    valid_to: str | None = None
    negated: Flag = False
    functional: Flag = False
    attributes: dict[str, Any] | None = None
    reference_time: str | None = None


class Answer(BaseModel):
    """What a route answers, as declared in /openapi.json (the answer is not validated against it
    at run time; tests/test_rest.py checks that real answers are of this shape)."""

    model_config = ConfigDict(extra="forbid")


class HitOut(Answer):
    """What every hit has: ranks per method ("cosine", "fulltext", "bfs", ...), the final score
    and the reranking terms (scores) that made it."""

    id: uuid.UUID
    group_id: str
    ranks: dict[str, int]
    score: float
    scores: dict[str, float]


class FactOut(HitOut):
    """A fact version. valid_from null: unknown start (valid_from_unknown); 0001-01-01: true since
    forever; valid_to / recorded_to null: open. recorded_*: when it was believed (transaction time)."""

    version_id: int
    relation: str
    fact: str
    source_id: uuid.UUID | None
    source: str
    target_id: uuid.UUID | None
    target: str
    valid_from: AwareDatetime | None
    valid_to: AwareDatetime | None
    valid_from_unknown: bool
    recorded_from: AwareDatetime | None
    recorded_to: AwareDatetime | None
    episodes: list[uuid.UUID]
    attributes: dict[str, Any]
    distance: int | None


class EntityOut(HitOut):
    """An entity: name, summary, labels, attributes, how many episodes mention it; distance from
    the centre entity (center_node_uuid) when one is given."""

    name: str
    summary: str
    labels: list[str]
    attributes: dict[str, Any]
    mentions: int
    distance: int | None


class CommunityOut(HitOut):
    """A community of entities with its summary."""

    name: str
    summary: str


class EpisodeOut(HitOut):
    """A raw episode; neighbour_of: the hits it is next to -> how many turns away."""

    content: str
    kind: str
    actor: str | None
    valid_at: AwareDatetime | None
    recorded_at: AwareDatetime | None
    source_description: str
    neighbour_of: dict[uuid.UUID, int]


class SearchOut(Answer):
    """POST /v1/search: each kind's hits, best first."""

    facts: list[FactOut]
    entities: list[EntityOut]
    communities: list[CommunityOut]
    episodes: list[EpisodeOut]


class ContextOut(Answer):
    """POST /v1/context: the context string for a prompt."""

    context: str


class ErrorDetail(BaseModel):
    """A stable code (invalid_input, unauthorized, forbidden, not_found, ...) and one line."""

    code: str
    message: str


class ErrorOut(BaseModel):
    """Every error the REST server answers."""

    error: ErrorDetail
