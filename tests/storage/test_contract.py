"""The store contract (agentik.testing) run against every backend."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import attrs
import pytest

from agentik import SkillSummary, StoreError
from agentik.storage import SkillStore, StorageBundle, in_memory_storage, open_sqlite_storage
from agentik.testing import (
    MakeBundle,
    check_message_store,
    check_reflection_store,
    check_skill_store,
    check_working_memory_store,
)
from tests.storage.conftest import memory_bundle

CHECKS = [
    check_message_store,
    check_working_memory_store,
    check_reflection_store,
    check_skill_store,
]


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
async def test_in_memory_backend(check: Callable[[MakeBundle], Awaitable[None]]) -> None:
    """The in-memory backend keeps the whole contract."""
    await check(memory_bundle)


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
async def test_sqlite_backend(
    check: Callable[[MakeBundle], Awaitable[None]], sqlite_bundles: MakeBundle
) -> None:
    """The SQLite backend keeps the whole contract, each case in a fresh file."""
    await check(sqlite_bundles)


class _UnsortedSkillStore:
    """A skill store that forgets to sort its catalog: the contract must notice."""

    def __init__(self, inner: SkillStore) -> None:
        self._inner = inner

    async def catalog(self) -> list[SkillSummary]:
        return list(reversed(await self._inner.catalog()))

    def __getattr__(self, name: str) -> object:
        return getattr(self._inner, name)


async def test_the_contract_catches_a_broken_backend() -> None:
    """check_skill_store fails, naming the case, for a catalog out of order."""

    @asynccontextmanager
    async def broken() -> AsyncIterator[StorageBundle]:
        bundle = in_memory_storage()
        yield attrs.evolve(bundle, skill_store=_UnsortedSkillStore(bundle.skill_store))

    with pytest.raises(AssertionError, match=r"^store contract case _skills_upsert_and_read: "):
        await check_skill_store(broken)


async def test_sqlite_open_errors_are_store_errors(tmp_path: Path) -> None:
    """A path that cannot be opened gives a StoreError naming it."""
    with pytest.raises(StoreError, match=r"^cannot open the database '.*missing/db': "):
        async with open_sqlite_storage(tmp_path / "missing" / "db"):
            pass
