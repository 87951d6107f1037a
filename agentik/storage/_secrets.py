"""``SecretStore`` for each backend: a table of its own (``secret``) in SQLite and
PostgreSQL, a dict in memory.

Secrets are keyed by name, never by a conversation id, and no conversation
operation (history, notes, export, delete, retention) reads that table: the
only way to a secret is this store, which no HTTP route is given. Names and
values are checked here, before a write is queued, so a misuse fails in the
caller's task and changes nothing.
"""

from __future__ import annotations

from functools import partial
from typing import Generic, Protocol, TypeVar, final

import trio

from agentik.storage._readers import ReaderPool
from agentik.storage._writer import MessageSession, Writer

C = TypeVar("C")
S = TypeVar("S", bound=MessageSession)
C_contra = TypeVar("C_contra", contravariant=True)
S_contra = TypeVar("S_contra", contravariant=True)

MAX_NAME = 512
"""Names are identifiers (``mcp-oauth:<server>``), not data."""


def check_secret(name: str, value: str | None = None) -> None:
    """Refuse a name or value that is not text, or an empty or overlong name."""
    if not isinstance(name, str) or not name or len(name) > MAX_NAME:
        raise ValueError(f"a secret name must be 1..{MAX_NAME} characters, got {name!r:.60}")
    if value is not None and not isinstance(value, str):
        raise ValueError(f"the value of secret {name!r} must be a str, got {type(value).__name__}")


class SecretQueries(Protocol[C_contra, S_contra]):
    """The SQL of the ``secret`` table (``SqlQueries``, over the backend's dialect)."""

    def get_secret(self, connection: C_contra, name: str) -> str | None: ...
    def put_secret(self, session: S_contra, name: str, value: str) -> None: ...
    def delete_secret(self, session: S_contra, name: str) -> bool: ...


@final
class SqlSecretStore(Generic[C, S]):
    """Secrets in the backend's ``secret`` table, written through the bundle's writer
    (durable once acknowledged, like every write) and read on its reader pool."""

    def __init__(
        self, writer: Writer[S], readers: ReaderPool[C], queries: SecretQueries[C, S]
    ) -> None:
        self._writer = writer
        self._readers = readers
        self._q = queries

    async def get_secret(self, name: str) -> str | None:
        check_secret(name)
        return await self._readers.read(partial(self._q.get_secret, name=name))

    async def put_secret(self, name: str, value: str) -> None:
        check_secret(name, value)
        await self._writer.write(partial(self._q.put_secret, name=name, value=value))

    async def delete_secret(self, name: str) -> bool:
        check_secret(name)
        return await self._writer.write(partial(self._q.delete_secret, name=name))


@final
class InMemorySecretStore:
    """Secrets in a dict; nothing survives the process. Each method checkpoints,
    then applies its change without awaiting (atomic for other trio tasks)."""

    def __init__(self) -> None:
        self._values: dict[str, str] = {}

    async def get_secret(self, name: str) -> str | None:
        check_secret(name)
        await trio.lowlevel.checkpoint()
        return self._values.get(name)

    async def put_secret(self, name: str, value: str) -> None:
        check_secret(name, value)
        await trio.lowlevel.checkpoint()
        self._values[name] = value

    async def delete_secret(self, name: str) -> bool:
        check_secret(name)
        await trio.lowlevel.checkpoint()
        return self._values.pop(name, None) is not None
