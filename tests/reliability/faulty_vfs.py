"""An apsw VFS that fails the write-ahead log's writes or syncs on demand.

``FaultyVFS`` registers itself under its own name (``FaultyVFS.NAME``), not as
SQLite's default, for the duration of one test (the ``faulty_vfs`` fixture
unregisters it); a test opens its bundle with ``open_sqlite_storage(path,
vfs=FaultyVFS.NAME)`` and only that bundle's connections go through it, while
every other connection in the process keeps the default VFS. It inherits
everything from the ``unix`` VFS and only
raises ``apsw.IOError`` from ``xWrite`` or ``xSync`` of a ``-wal`` file while
armed, with the extended code the ``unix`` VFS gives (SQLITE_IOERR_WRITE,
SQLITE_IOERR_FSYNC), which is what a failing device looks like to SQLite in
the middle of a COMMIT.
"""

from __future__ import annotations

import apsw

FAULTS = ["sync", "write"]

_CODES = {"sync": apsw.SQLITE_IOERR_FSYNC, "write": apsw.SQLITE_IOERR_WRITE}


class FaultyVFS(apsw.VFS):  # type: ignore[misc]
    NAME = "agentik-faulty"

    def __init__(self) -> None:
        self.fail: str | None = None
        """"sync" or "write" to fail that operation on -wal files; None to pass."""
        self.injected = 0
        """How many operations failed on purpose."""
        super().__init__(self.NAME, "unix", makedefault=False)

    def disarm(self) -> None:
        """Let every operation pass again."""
        self.fail = None

    def xOpen(self, name: object, flags: list[int]) -> FaultyFile:
        return FaultyFile(self, name, flags)


class FaultyFile(apsw.VFSFile):  # type: ignore[misc]
    def __init__(self, vfs: FaultyVFS, name: object, flags: list[int]) -> None:
        self._vfs = vfs
        filename = name.filename() if isinstance(name, apsw.URIFilename) else str(name)
        self._wal = filename.endswith("-wal")
        super().__init__("unix", name, flags)

    def _check(self, operation: str) -> None:
        if self._wal and self._vfs.fail == operation:
            self._vfs.injected += 1
            error = apsw.exception_for(_CODES[operation])
            error.args = (f"injected {operation} failure",)
            raise error

    def xWrite(self, data: bytes, offset: int) -> None:
        self._check("write")
        super().xWrite(data, offset)

    def xSync(self, flags: int) -> None:
        self._check("sync")
        super().xSync(flags)
