"""Fixtures of the reliability tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.reliability.faulty_vfs import FaultyVFS


@pytest.fixture
def faulty_vfs() -> Iterator[FaultyVFS]:
    """A fault-injecting VFS, SQLite's default for this test only."""
    vfs = FaultyVFS()
    try:
        yield vfs
    finally:
        vfs.unregister()
