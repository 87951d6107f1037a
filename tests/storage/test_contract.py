"""The store contract (agentik.testing) run against every backend."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

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
