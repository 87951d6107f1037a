"""Fixtures of the reliability tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

# The sweep's checks live outside test modules: show their failing values too.
pytest.register_assert_rewrite("tests.reliability.sweep")

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
