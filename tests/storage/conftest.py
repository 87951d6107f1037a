"""Bundle factories for the storage tests: every backend, fresh per call.

SQLite bundles live in real files under pytest's ``tmp_path``.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path

import pytest

from agentik.storage import StorageBundle, in_memory_storage, open_sqlite_storage
from agentik.testing import MakeBundle


@asynccontextmanager
async def memory_bundle() -> AsyncIterator[StorageBundle]:
    yield in_memory_storage()


@pytest.fixture
def sqlite_bundles(tmp_path: Path) -> MakeBundle:
    """A factory of fresh SQLite bundles, each in its own file under ``tmp_path``."""
    counter = itertools.count()

    def make() -> AbstractAsyncContextManager[StorageBundle]:
        return open_sqlite_storage(tmp_path / f"store-{next(counter)}.db")

    return make
