"""Fixtures of the reliability tests."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

# The sweep's checks live outside test modules: show their failing values too.
pytest.register_assert_rewrite("tests.reliability.sweep")

from tests.reliability.commit_trigger import (  # noqa: E402
    SCHEMA,
    CommitTrigger,
    triggered_database,
)
from tests.reliability.faulty_vfs import FaultyVFS  # noqa: E402


@pytest.fixture
def faulty_vfs() -> Iterator[FaultyVFS]:
    """A fault-injecting VFS, registered by name (``FaultyVFS.NAME``) for this
    test only; bundles opened with ``vfs=FaultyVFS.NAME`` use it."""
    vfs = FaultyVFS()
    try:
        yield vfs
    finally:
        vfs.unregister()


@pytest.fixture(scope="module")
def database(postgres_dsn: str) -> Iterator[str]:
    """A database of the test module's own, migrated, with the COMMIT trigger
    installed (``commit_trigger``: it would fail anyone's k-th COMMIT);
    dropped after."""
    url = triggered_database(postgres_dsn, SCHEMA)
    try:
        yield url
    finally:
        name = conninfo_to_dict(url)["dbname"]
        with psycopg.connect(postgres_dsn, autocommit=True) as connection:
            connection.execute(f"DROP DATABASE {name} WITH (FORCE)")


@pytest.fixture
def trigger(database: str) -> Iterator[CommitTrigger]:
    """The trigger, disarmed, over agentik's tables emptied: each test starts
    from a store just opened (emptying them is quicker than copying a
    database: 10 ms against 20 to 400)."""
    armed = CommitTrigger(database)
    try:
        armed.reset(SCHEMA)
        yield armed
    finally:
        armed.close()
