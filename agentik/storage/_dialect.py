"""What SQLite and PostgreSQL do differently, for the SQL they share (``_sql_*``).

The shared SQL is written once, in SQLite's spelling: ``?`` and ``:name``
placeholders, and ``{created}``-style fields for what the two schemas name or
spell apart. A ``Dialect`` turns a template into its backend's statement once
(``sql``, cached) and carries the rest of the differences:

- placeholders: ``?`` / ``:name`` (apsw) or ``%s`` / ``%(name)s`` (psycopg);
- columns: times are integer microseconds in ``*_us`` columns on SQLite,
  ``timestamptz`` in ``*_at`` columns on PostgreSQL; strings are text on
  SQLite, UTF-8 ``bytea`` on PostgreSQL (which text cannot hold a NUL);
  flags are 0/1 on SQLite, booleans on PostgreSQL;
- fragments: a list of ids bound at once (SQLite's ``json_each``,
  PostgreSQL's arrays), a key's suffix match, ``FOR UPDATE``;
- the driver: how rows come back, how many a statement changed, a read
  snapshot, a nested savepoint around an insert that may break a unique key.

What differs in more than a phrase (SeqCache, the multi-row and ``unnest``
inserts of the writer's appends, SQLite's one-statement snapshots) stays in
each backend's ``_queries``, kept where ``python -m bench.storage`` and
``bench.turns`` show it matters.

Nothing here touches trio; every method runs in a worker thread.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeAlias, TypeVar

if TYPE_CHECKING:
    from agentik._messages import Message
    from agentik.storage._rows import MessageRow

C = TypeVar("C")
C_co = TypeVar("C_co", covariant=True)

Params: TypeAlias = Sequence[object] | dict[str, object]
Row: TypeAlias = tuple[Any, ...]
"""A row as the driver returns it: its values are the dialect's to decode."""

_NAMED = re.compile(r"(?<![:\w]):([a-z_]+)")


class SeqFence(Protocol):
    """What shared writes ask of a backend's seq cache."""

    def fence(self, conversation_id: str) -> None:
        """Refuse a write to a conversation this node does not own (a no-op
        where one node writes everything)."""
        ...

    def forget(self, conversation_id: str) -> None:
        """The conversation's rows were deleted or replaced: read its last seq again."""
        ...


class SqlSession(Protocol[C_co]):
    """What a shared write runs with: the writer's connection inside the open
    transaction (and the request's savepoint), the batch's time."""

    @property
    def connection(self) -> C_co: ...
    @property
    def seqs(self) -> SeqFence: ...
    @property
    def now(self) -> datetime:
        """The batch's timestamp: every write of one batch shares it."""
        ...

    @property
    def stamp(self) -> object:
        """``now`` as the dialect binds a time (``Dialect.time``), computed once."""
        ...

    def insert_message(self, row: MessageRow) -> Message: ...


class Dialect(ABC, Generic[C]):
    """One backend's differences (see the module docstring); subclassed once per
    backend, its instance shared by every query."""

    names: dict[str, str]
    """Template fields: ``created``, ``updated``, ``decided`` (column names),
    ``active`` / ``archived`` (a note's flag as a condition), ``set_archived``,
    ``ids_in`` (``id`` among the ids bound by ``ids``), ``key_ends_with``
    (``idempotency_key`` ends with ``:suffix``), ``for_update``."""

    unique_violation: type[Exception]
    """What the driver raises for a broken unique key."""

    foreign_key_violation: type[Exception]
    """What the driver raises for a broken foreign key."""

    def __init__(self) -> None:
        self._statements: dict[str, str] = {}

    def sql(self, template: str) -> str:
        """The backend's statement for ``template``, built on first use."""
        statement = self._statements.get(template)
        if statement is None:
            statement = self._translate(template.format_map(self.names))
            self._statements[template] = statement
        return statement

    def _translate(self, statement: str) -> str:
        return statement

    # --- the driver ---

    @abstractmethod
    def rows(self, connection: C, sql: str, params: Params = ()) -> list[Row]: ...

    @abstractmethod
    def row(self, connection: C, sql: str, params: Params = ()) -> Row | None:
        """The first row (of a statement that returns at most one)."""

    @abstractmethod
    def changed(self, connection: C, sql: str, params: Params = ()) -> int:
        """Run a write; how many rows it inserted, updated or deleted."""

    @abstractmethod
    def many(self, connection: C, sql: str, rows: Sequence[Sequence[object]]) -> None: ...

    @abstractmethod
    def snapshot(self, connection: C) -> AbstractContextManager[object]:
        """A read transaction: the statements inside see one snapshot."""

    @abstractmethod
    def guard(self, connection: C) -> AbstractContextManager[object]:
        """Around one insert whose unique-key failure is turned into a
        ``StoreError``: what keeps the transaction usable after it."""

    # --- values ---

    @abstractmethod
    def text(self, value: str) -> object:
        """A string as bound."""

    @abstractmethod
    def text_of(self, value: Any) -> str:
        """A string column as read."""

    @abstractmethod
    def time(self, value: datetime) -> object:
        """An aware datetime as bound."""

    @abstractmethod
    def time_of(self, value: Any) -> datetime:
        """A time column as read (an aware UTC datetime)."""

    @abstractmethod
    def ids(self, values: Sequence[int]) -> object:
        """The ids ``{ids_in}`` reads, as one binding."""


def psycopg_placeholders(statement: str) -> str:
    """SQLite's placeholders as psycopg's: ``%`` escaped, ``?`` as ``%s``,
    ``:name`` as ``%(name)s`` (a ``::type`` cast is left alone)."""
    statement = statement.replace("%", "%%").replace("?", "%s")
    return _NAMED.sub(r"%(\1)s", statement)
