"""Opening connections: the SQLite version gate and the per-connection pragmas.

Settings follow ``apsw.bestpractice`` (WAL, busy timeout, foreign keys,
double-quoted string literals off), applied per connection rather than through
``bestpractice.apply``, which would change every connection in the process.
The one write connection begins transactions IMMEDIATE; readers are opened
read-only, so a bug cannot write behind the writer's back.
"""

from __future__ import annotations

import os
from typing import Literal

import apsw
import apsw.bestpractice

from agentik._errors import SchemaVersionError

Synchronous = Literal["OFF", "NORMAL", "FULL", "EXTRA"]
SYNCHRONOUS_LEVELS: tuple[Synchronous, ...] = ("OFF", "NORMAL", "FULL", "EXTRA")

MINIMUM_SQLITE = (3, 51, 3)
"""Older versions carry the WAL-reset bug, which can corrupt a WAL database
written and checkpointed by several connections at once."""


def check_sqlite_version(version: str) -> None:
    """Refuse an SQLite older than ``MINIMUM_SQLITE``."""
    parts = tuple(int(p) for p in version.split(".")[:3])
    if parts < MINIMUM_SQLITE:
        wanted = ".".join(map(str, MINIMUM_SQLITE))
        raise SchemaVersionError(
            f"sqlite {version} is too old: agentik needs {wanted} or newer"
            " (older versions have the WAL-reset bug that can corrupt the database)"
        )


def check_synchronous(synchronous: str) -> None:
    if synchronous not in SYNCHRONOUS_LEVELS:
        raise ValueError(
            f"synchronous must be one of {', '.join(SYNCHRONOUS_LEVELS)}, got {synchronous!r}"
        )


def _common(connection: apsw.Connection, busy_timeout: float) -> None:
    connection.set_busy_timeout(round(busy_timeout * 1000))
    apsw.bestpractice.connection_enable_foreign_keys(connection)
    apsw.bestpractice.connection_dqs(connection)


def open_write_connection(
    path: str | os.PathLike[str],
    synchronous: Synchronous,
    busy_timeout: float,
    vfs: str | None = None,
) -> apsw.Connection:
    """The writer's connection: WAL, the chosen durability, IMMEDIATE transactions.
    ``vfs`` names a registered SQLite VFS; None is the process default."""
    check_sqlite_version(apsw.sqlite_lib_version())
    check_synchronous(synchronous)
    connection = apsw.Connection(os.fspath(path), vfs=vfs)
    _common(connection, busy_timeout)
    apsw.bestpractice.connection_wal(connection)
    connection.pragma("synchronous", synchronous)
    connection.transaction_mode = "IMMEDIATE"
    return connection


def open_read_connection(
    path: str | os.PathLike[str], busy_timeout: float, vfs: str | None = None
) -> apsw.Connection:
    """A read-only connection; WAL lets it read while the writer commits."""
    connection = apsw.Connection(os.fspath(path), flags=apsw.SQLITE_OPEN_READONLY, vfs=vfs)
    _common(connection, busy_timeout)
    return connection
