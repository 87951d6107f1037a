"""The PostgreSQL the tests run against, never a mock.

``AGENTIK_TEST_POSTGRES_DSN`` (set by ``.ci/run``, which starts a throwaway
cluster) names it; without it, the session starts its own throwaway cluster
(``tests.pgcluster``) on first use and stops it at the end. If neither works
the PostgreSQL tests skip, loudly (the reason is printed at the end of the
run), except under CI (``CI`` set), where they fail instead.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager

import pytest

from agentik.storage import StorageBundle, open_postgres_storage
from agentik.testing import MakeBundle
from tests import pgcluster
from tests.kits import missing_kit

ENV = "AGENTIK_TEST_POSTGRES_DSN"


@contextlib.contextmanager
def postgres_server() -> Iterator[str]:
    """The DSN of the tests' PostgreSQL, for the whole session."""
    configured = os.environ.get(ENV)
    if configured:
        yield configured
        return
    try:
        from tests import pgcluster

        cluster = pgcluster.cluster()
        dsn = cluster.__enter__()
    except Exception as error:  # any reason the cluster cannot start becomes a skip
        reason = (
            f"no PostgreSQL for the tests: {ENV} is unset and a throwaway cluster"
            f" failed to start ({type(error).__name__}: {error})"
        )
        missing_kit("PostgreSQL", reason)
    try:
        yield dsn
    finally:
        cluster.__exit__(None, None, None)


def fresh_schema() -> str:
    return f"t_{uuid.uuid4().hex[:16]}"


def bundles(dsn: str) -> MakeBundle:
    """A factory of fresh PostgreSQL bundles, each in a schema of its own."""

    @asynccontextmanager
    async def make() -> AsyncIterator[StorageBundle]:
        async with open_postgres_storage(dsn, schema=fresh_schema(), readers=2) as bundle:
            yield bundle

    def factory() -> AbstractAsyncContextManager[StorageBundle]:
        return make()

    return factory


def fresh_database(dsn: str) -> str:
    """A new, empty database on the tests' server; its URL (a copy of ``dsn``
    naming it). For what takes a URL and nothing else: ``agentik serve``."""
    import psycopg
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    name = fresh_schema()
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute(f"CREATE DATABASE {name}")
    info = conninfo_to_dict(dsn)
    host, port, user = info.get("host"), info.get("port", "5432"), info.get("user", "")
    url = f"postgresql://{user}@/{name}?host={host}&port={port}"
    assert make_conninfo(url)  # a valid URL
    return url


def own_cluster() -> Iterator[str]:
    """For a module's fixture: a throwaway cluster of the module's own (one its
    tests may freeze), its DSN; skips without PostgreSQL's binaries, unless
    under CI, where that fails."""
    try:
        with pgcluster.cluster() as dsn:
            yield dsn
    except (RuntimeError, subprocess.CalledProcessError) as error:
        if os.environ.get("CI"):
            raise
        pytest.skip(f"no throwaway PostgreSQL cluster: {error}")
