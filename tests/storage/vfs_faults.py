"""VFSs for storage faults the fault-injecting ``FaultyVFS`` does not make.

``DiskFullVFS``: ``FaultyVFS`` failing the write-ahead log's writes with
SQLITE_FULL, as a full disk does (``FaultyVFS`` fails them with an I/O error).

``ReadOnlyVFS`` opens every main database file read-only.

What SQLite's ``unix`` VFS does by itself when the file's permissions forbid
writing (it retries ``open`` with ``O_RDONLY`` and marks the file read-only),
without needing those permissions: the tests run as root in CI, where
``chmod`` does not stop a write. The ``-wal`` and ``-shm`` files stay
writable, as beside a read-only file in a writable directory.
``ReadOnlyVFS.NAME`` is registered by name only, for one test (the
``readonly_vfs`` fixture); ``open_sqlite_storage(path, vfs=ReadOnlyVFS.NAME)``
then sees a read-only database.
"""

from __future__ import annotations

from collections.abc import Iterator

import apsw
import pytest

from tests.reliability.faulty_vfs import FaultyFile, FaultyVFS

_FLAGS = apsw.mapping_open_flags
_MAIN_DB = _FLAGS["SQLITE_OPEN_MAIN_DB"]
_WRITE = _FLAGS["SQLITE_OPEN_READWRITE"] | _FLAGS["SQLITE_OPEN_CREATE"]
_READONLY = _FLAGS["SQLITE_OPEN_READONLY"]


class ReadOnlyVFS(apsw.VFS):  # type: ignore[misc]
    NAME = "agentik-readonly"

    def __init__(self) -> None:
        super().__init__(self.NAME, "unix", makedefault=False)

    def xOpen(self, name: object, flags: list[int]) -> apsw.VFSFile:
        if flags[0] & _MAIN_DB:
            flags[0] = (flags[0] & ~_WRITE) | _READONLY
            return ReadOnlyFile("unix", name, flags)
        return apsw.VFSFile("unix", name, flags)


class ReadOnlyFile(apsw.VFSFile):  # type: ignore[misc]
    def xLock(self, level: int) -> None:
        # A write lock on a read-only descriptor fails (EBADF). SQLite's C
        # code ignores that failure where it only tries (the checkpoint on
        # close), but apsw would re-raise the Python error from close();
        # reported as busy, SQLite skips the step, as it does for a real file.
        try:
            super().xLock(level)
        except apsw.IOError:
            raise apsw.BusyError("the file is read-only: no write lock") from None


@pytest.fixture
def readonly_vfs() -> Iterator[ReadOnlyVFS]:
    vfs = ReadOnlyVFS()
    try:
        yield vfs
    finally:
        vfs.unregister()


class DiskFullVFS(FaultyVFS):
    """``FaultyVFS``, failing the WAL's writes as a full disk does (SQLITE_FULL)."""

    NAME = "agentik-disk-full"

    def xOpen(self, name: object, flags: list[int]) -> FaultyFile:
        return DiskFullFile(self, name, flags)


class DiskFullFile(FaultyFile):
    def _check(self, operation: str) -> None:
        if self._wal and self._vfs.fail == operation:
            self._vfs.injected += 1
            raise apsw.FullError("database or disk is full")


@pytest.fixture
def disk_full_vfs() -> Iterator[DiskFullVFS]:
    vfs = DiskFullVFS()
    try:
        yield vfs
    finally:
        vfs.unregister()
