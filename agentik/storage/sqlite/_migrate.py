"""Schema migrations: numbered ``migrations/NNNN_name.sql`` files on a ``user_version`` ladder.

Each missing step runs in its own IMMEDIATE transaction together with the
``PRAGMA user_version`` bump, so a crash leaves the database at a whole
version. A database stamped newer than the newest file here is refused.
"""

from __future__ import annotations

from importlib import resources

import apsw

from agentik._errors import SchemaVersionError


def migrations() -> list[tuple[int, str]]:
    """``(version, sql)`` for every migration file, in order; versions are 1, 2, 3 …"""
    folder = resources.files("agentik.storage.sqlite") / "migrations"
    steps = sorted(
        (int(entry.name.split("_", 1)[0]), entry.read_text(encoding="utf-8"))
        for entry in folder.iterdir()
        if entry.name.endswith(".sql")
    )
    versions = [version for version, _ in steps]
    if versions != list(range(1, len(steps) + 1)):
        raise RuntimeError(f"migration files must be numbered 1, 2, 3 …, found {versions}")
    return steps


def migrate(connection: apsw.Connection) -> list[int]:
    """Bring the schema up to date; return the versions applied (empty if none)."""
    steps = migrations()
    latest = len(steps)
    current = schema_version(connection)
    if current > latest:
        raise SchemaVersionError(
            f"database schema version {current} is newer than this agentik supports"
            f" ({latest}); upgrade agentik to open it"
        )
    applied = []
    for version, sql in steps[current:]:
        # An explicit BEGIN, not ``with connection:``, which holds the GIL while
        # it waits for the lock (see _writer.py).
        connection.execute("BEGIN IMMEDIATE")
        done = False
        try:
            if schema_version(connection) < version:  # else another process migrated
                connection.execute(sql)
                connection.pragma("user_version", version)
                applied.append(version)
            connection.execute("COMMIT")
            done = True
        finally:
            if not done and connection.in_transaction:
                connection.execute("ROLLBACK")
    return applied


def schema_version(connection: apsw.Connection) -> int:
    version = connection.pragma("user_version")
    assert isinstance(version, int)
    return version
