"""Exceptions pgmemory raises: each names the problem and, where there is one, the fix."""

from __future__ import annotations

from collections.abc import Iterator


def exception_chain(exc: BaseException) -> Iterator[BaseException]:
    """`exc`, then its causes and contexts and the members of exception groups, each once."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        yield e
        todo.extend([e.__cause__, e.__context__, *getattr(e, "exceptions", ())])


def error_line(exc: BaseException) -> str:
    """The first line of an error's message, or its type's name when it has none."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


class PgMemoryError(Exception):
    """Base class of every error pgmemory raises on purpose."""


class DatabaseUnavailable(PgMemoryError):
    """The configured Postgres did not answer, or refused the connection."""


class WorkerUnreachable(DatabaseUnavailable):
    """A Citus worker holding a group's shards did not answer the coordinator: that group's calls
    fail until it is back, the other groups' go on (`node` is its host:port)."""

    def __init__(self, message: str, node: str, group_id: str | None = None) -> None:
        super().__init__(message)
        self.node = node
        self.group_id = group_id


class DatabaseTimeout(DatabaseUnavailable):
    """A statement ran or waited for a lock longer than its configured timeout."""


class SetupError(PgMemoryError):
    """The server lacks something pgmemory needs (version, extension, init)."""


class MigrationError(PgMemoryError):
    """A migration could not be applied, or an applied one was edited."""


class InvalidInput(PgMemoryError, ValueError):
    """Input rejected before anything was written."""


class NotFound(InvalidInput):
    """The id names nothing in that group (surfaces answer it as not found: REST 404); an
    InvalidInput, so callers catching that still catch it."""
