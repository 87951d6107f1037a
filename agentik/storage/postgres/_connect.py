"""Opening PostgreSQL connections: one shape for the writer and the readers.

Every connection is synchronous psycopg 3 (its async API runs only on
asyncio; agentik is on trio), used only from worker threads, in autocommit
mode (the writer opens its transactions itself; a reader's statement is its
own transaction), with the session's time zone UTC and ``search_path`` set
to the bundle's schema. ``application_name`` names the role, so an operator
sees agentik's writer and readers in ``pg_stat_activity``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar, final

import psycopg
from psycopg import sql

from agentik._errors import StoreError
from agentik.storage.postgres._migrate import migrate

T = TypeVar("T")


def describe(dsn: str) -> str:
    """The DSN without its password, for error messages."""
    try:
        info = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return "(an invalid DSN)"
    if "password" in info:
        info["password"] = "***"
    return psycopg.conninfo.make_conninfo("", **info)


def connect(dsn: str, *, schema: str, role: str, timeout: float) -> psycopg.Connection:
    """A connection for ``role`` (``writer`` or ``reader``); ``StoreError`` if
    the server cannot be reached or refuses us."""
    try:
        connection = psycopg.connect(
            dsn,
            autocommit=True,
            application_name=f"agentik-{role}",
            connect_timeout=max(1, round(timeout)),
        )
    except psycopg.Error as error:
        raise StoreError(f"cannot connect to PostgreSQL at {describe(dsn)}: {error}") from error
    try:
        connection.execute("SET TIME ZONE 'UTC'")
        connection.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
    except psycopg.Error as error:
        connection.close()
        raise StoreError(f"cannot prepare a PostgreSQL session: {error}") from error
    return connection


def open_writer(
    make: Callable[[], psycopg.Connection], schema: str, dsn: str
) -> psycopg.Connection:
    connection = make()
    try:
        migrate(connection, schema)
    except psycopg.Error as error:
        connection.close()
        raise StoreError(f"cannot prepare the database at {describe(dsn)}: {error}") from error
    except BaseException:
        connection.close()
        raise
    return connection


@final
class Reconnecting:
    """The reader pool's runner: a connection found broken is replaced, and a
    read that failed because its connection died while idle (a server restart)
    runs once more on a new one; reads change nothing, so that is safe."""

    def __init__(self, make: Callable[[], psycopg.Connection]) -> None:
        self._make = make

    def __call__(
        self, query: Callable[[psycopg.Connection], T], connection: psycopg.Connection
    ) -> tuple[T, psycopg.Connection]:
        if connection.closed or connection.broken:
            connection.close()
            connection = self._make()
        try:
            return query(connection), connection
        except psycopg.OperationalError:
            if not (connection.closed or connection.broken):
                raise
        connection.close()
        connection = self._make()
        return query(connection), connection
