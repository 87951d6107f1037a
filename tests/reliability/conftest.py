"""Fixtures of the reliability tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.reliability.faulty_vfs import FaultyVFS


@pytest.fixture
def faulty_vfs() -> Iterator[FaultyVFS]:
    """A fault-injecting VFS, registered by name (``FaultyVFS.NAME``) for this
    test only; bundles opened with ``vfs=FaultyVFS.NAME`` use it."""
    vfs = FaultyVFS()
    try:
        yield vfs
    finally:
        vfs.unregister()
