"""Schema migrations: numbered ``migrations/NNNN_name.sql`` files on a
version ladder kept in the table ``agentik_schema_version`` of the bundle's
schema.

Each missing step runs in its own transaction together with its version row,
so a crash leaves the database at a whole version (PostgreSQL's DDL is
transactional). Several nodes may start at once: each step takes a
transaction-scoped advisory lock first and checks the version again under
it, so exactly one applies it. A database stamped newer than the newest file
here is refused.
"""

from __future__ import annotations

from importlib import resources

import psycopg
from psycopg import sql

from agentik._errors import SchemaVersionError, StoreError

MIGRATION_LOCK = 0x6167656E74696B  # "agentik": the advisory lock migrations take


def migrations() -> list[tuple[int, str]]:
    """``(version, sql)`` for every migration file, in order; versions are 1, 2, 3 …"""
    folder = resources.files("agentik.storage.postgres") / "migrations"
    steps = sorted(
        (int(entry.name.split("_", 1)[0]), entry.read_text(encoding="utf-8"))
        for entry in folder.iterdir()
        if entry.name.endswith(".sql")
    )
    versions = [version for version, _ in steps]
    if versions != list(range(1, len(steps) + 1)):
        raise RuntimeError(f"migration files must be numbered 1, 2, 3 …, found {versions}")
    return steps


def schema_version(connection: psycopg.Connection) -> int:
    row = connection.execute(
        "SELECT coalesce(max(version), 0) FROM agentik_schema_version"
    ).fetchone()
    assert row is not None
    version: int = row[0]
    return version


def migrate(connection: psycopg.Connection, schema: str) -> list[int]:
    """Create ``schema`` if needed and bring it up to date; return the versions
    applied (empty if none). ``connection`` is in autocommit mode with its
    ``search_path`` set to ``schema``."""
    steps = migrations()
    latest = len(steps)
    with connection.transaction():
        connection.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
        connection.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
        connection.execute(
            "CREATE TABLE IF NOT EXISTS agentik_schema_version ("
            " version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
        )
        current = schema_version(connection)
    if current > latest:
        raise SchemaVersionError(
            f"database schema version {current} is newer than this agentik supports"
            f" ({latest}); upgrade agentik to open it"
        )
    applied = []
    for version, text in steps[current:]:
        with connection.transaction():
            connection.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
            if schema_version(connection) < version:  # else another node migrated meanwhile
                connection.execute(text.encode())
                connection.execute(
                    "INSERT INTO agentik_schema_version (version) VALUES (%s)", (version,)
                )
                applied.append(version)
    return applied


def fix_shards(connection: psycopg.Connection, shards: int, shown: str) -> None:
    """Split the database into ``shards`` at its first open, and refuse a node
    configured with another number later (a conversation would change shard,
    and two nodes could own it at once). Under the migration lock, so nodes
    starting together agree. ``StoreError`` on a mismatch."""
    with connection.transaction():
        connection.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
        connection.execute(
            "INSERT INTO agentik_setting (name, value) VALUES ('shards', %s)"
            " ON CONFLICT (name) DO NOTHING",
            (str(shards),),
        )
        row = connection.execute(
            "SELECT value FROM agentik_setting WHERE name = 'shards'"
        ).fetchone()
        assert row is not None
        fixed = int(row[0])
        if fixed != shards:
            raise StoreError(
                f"shards is {shards}, but the database at {shown} is split into {fixed}"
                f" shards; the number is fixed once set: set [storage] shards = {fixed}"
            )
        connection.execute(
            "INSERT INTO agentik_shard (shard) SELECT generate_series(0, %s - 1)"
            " ON CONFLICT (shard) DO NOTHING",
            (shards,),
        )
