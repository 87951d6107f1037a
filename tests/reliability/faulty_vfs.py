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

Two ways to arm it: ``fail`` fails every such operation until it is set back
to None; ``fail_after(n, operation)`` lets ``n`` COMMITs through and fails
the next one, once, at its first write or at its sync. A COMMIT is counted by
the sync that ends it: with ``synchronous=FULL`` (the bundle's default)
SQLite syncs the log once per COMMIT, and once more, before the frames, when
it writes a fresh log's header (that sync is not counted).

``hold()`` makes the next COMMIT wait at its first write, in the writer's thread,
until ``release()``: what is submitted meanwhile queues up behind it and
commits in the next batch, whatever the threads' timing. ``pause(after=n)``
and ``resume()`` do the same for the COMMIT after ``n`` more, independently
of ``hold`` (a test pauses a COMMIT of a script that holds its own), and
set ``paused`` once it waits.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import apsw

FAULTS = ["sync", "write"]

_CODES = {"sync": apsw.SQLITE_IOERR_FSYNC, "write": apsw.SQLITE_IOERR_WRITE}

_HEADER = 32
"""Bytes of a write-ahead log's header, written alone at offset 0."""

_HOLD_SECONDS = 30.0
"""A COMMIT held longer than this is a test's bug: it fails rather than hang."""


class FaultyVFS(apsw.VFS):  # type: ignore[misc]
    NAME = "agentik-faulty"

    def __init__(self) -> None:
        self.fail: str | None = None
        """"sync" or "write" to fail that operation on -wal files; None to pass."""
        self.injected = 0
        """How many operations failed on purpose."""
        self.commits = 0
        """COMMITs that reached the log, synced or failed (on purpose)."""
        self._countdown: tuple[int, str] | None = None
        """(the count of ``commits`` whose COMMIT fails, at which operation)."""
        self._header = False
        """The last write to a log was its header (the next sync is the header's)."""
        self._hold = False
        """The next COMMIT waits for ``_released`` at its first write."""
        self._released = threading.Event()
        self._pause_at: int | None = None
        """The count of ``commits`` whose COMMIT waits for ``_resumed`` at its first write."""
        self._resumed = threading.Event()
        self.paused = threading.Event()
        """Set once the COMMIT ``pause`` named waits."""
        self.on_inject: Callable[[], None] | None = None
        """Called in the failing operation, before it raises (in the writer's
        thread): a test copies the files there as a crash right then leaves them."""
        super().__init__(self.NAME, "unix", makedefault=False)

    def fail_after(self, commits: int, operation: str) -> None:
        """Let ``commits`` COMMITs through, then fail the next one at its first
        ``operation`` ("write" or "sync") on the log; once, then pass again."""
        if operation not in _CODES:
            raise ValueError(f"operation must be one of {sorted(_CODES)}, got {operation!r}")
        if commits < 0:
            raise ValueError(f"commits must be >= 0, got {commits}")
        self._countdown = (self.commits + commits, operation)

    def hold(self) -> None:
        """Make the next COMMIT wait at its first write until ``release()``."""
        self._released.clear()
        self._hold = True

    def release(self) -> None:
        """Let the held COMMIT go on (or the next one not wait, if none is held yet)."""
        self._released.set()

    def pause(self, after: int) -> None:
        """Make the COMMIT after ``after`` more wait at its first write until ``resume()``."""
        if after < 0:
            raise ValueError(f"after must be >= 0, got {after}")
        self._resumed.clear()
        self.paused.clear()
        self._pause_at = self.commits + after

    def resume(self) -> None:
        """Let the paused COMMIT go on (or the one ``pause`` named not wait)."""
        self._resumed.set()

    @property
    def armed(self) -> bool:
        """Whether a ``fail_after`` fault is still to come."""
        return self._countdown is not None

    def disarm(self) -> None:
        """Let every operation pass again (``fail``, ``fail_after``), and a
        held or paused COMMIT go on."""
        self.fail = None
        self._countdown = None
        self.release()
        self.resume()

    def xOpen(self, name: object, flags: list[int]) -> FaultyFile:
        return FaultyFile(self, name, flags)

    def check(self, operation: str, *, header: bool = False) -> None:
        """Raise the fault if ``operation`` on a log is to fail; count COMMITs
        (a failure injected ends its COMMIT too)."""
        if operation == "write":
            self._header = header
            if self._pause_at == self.commits:
                self._pause_at = None
                self.paused.set()
                resumed = self._resumed.wait(_HOLD_SECONDS)
                assert resumed, f"a COMMIT paused for {_HOLD_SECONDS} s was never resumed"
            if self._hold:
                self._hold = False
                released = self._released.wait(_HOLD_SECONDS)
                assert released, f"a COMMIT held for {_HOLD_SECONDS} s was never released"
        header_sync = operation == "sync" and self._header
        due = self._countdown == (self.commits, operation) and not header_sync
        if due or self.fail == operation:
            if due:
                self._countdown = None
            self.commits += 1
            self._inject(operation)
        if operation == "sync" and not header_sync:
            self.commits += 1

    def _inject(self, operation: str) -> None:
        self.injected += 1
        if self.on_inject is not None:
            self.on_inject()
        error = apsw.exception_for(_CODES[operation])
        error.args = (f"injected {operation} failure",)
        raise error


class FaultyFile(apsw.VFSFile):  # type: ignore[misc]
    def __init__(self, vfs: FaultyVFS, name: object, flags: list[int]) -> None:
        self._vfs = vfs
        filename = name.filename() if isinstance(name, apsw.URIFilename) else str(name)
        self._wal = filename.endswith("-wal")
        self._header = False
        """The write under way is the log's header."""
        super().__init__("unix", name, flags)

    def _check(self, operation: str) -> None:
        """Where a subclass injects its own fault (``DiskFullVFS``)."""
        if self._wal:
            self._vfs.check(operation, header=operation == "write" and self._header)

    def xWrite(self, data: bytes, offset: int) -> None:
        self._header = offset == 0 and len(data) == _HEADER
        self._check("write")
        super().xWrite(data, offset)

    def xSync(self, flags: int) -> None:
        self._check("sync")
        super().xSync(flags)
