"""Bundle factories for the storage tests: every backend, fresh per call.

SQLite bundles live in real files under pytest's ``tmp_path``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from agentik.storage import StorageBundle, in_memory_storage


@asynccontextmanager
async def memory_bundle() -> AsyncIterator[StorageBundle]:
    yield in_memory_storage()
