"""Whether a server is using a database: what ``agentik delete`` and
``agentik import`` ask before they change it beside the agent.

A server keeps its conversations in memory (history, the turn under way),
so a conversation deleted or imported beside it is not one it sees: after a
delete it went on at the old seq with the deleted turn still in the model's
prompt. So those commands refuse, with one line naming the server, while one
holds the database; over HTTP the server itself deletes
(``DELETE /agentik/conversations/{id}``, ``agentik delete --url``).

- **SQLite**: ``agentik serve`` holds an exclusive ``flock`` on a file beside
  the database, ``<database>.lock``, from before it opens the database until
  it has closed it, and writes into it who holds it (``{"pid", "command",
  "url"}``). A command takes the same lock (non-blocking) for as long as it
  runs, so it refuses while a server holds it, and a server starting
  meanwhile refuses to start. The kernel releases a ``flock`` when its
  process ends, however it ends (a SIGKILL too), so a lock is never stale;
  the file stays (removing a lock file races a process opening it).
- **PostgreSQL**: the node leases say which servers are live
  (``postgres/_leases.py``): a command refuses while any node's lease is
  unexpired (a clean stop removes it; a killed server's runs out after its
  ``lease_seconds``), and holds ``agentik_node`` in SHARE mode meanwhile, so
  a node cannot register (or renew) until the command is done.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import IO, final

import trio

from agentik.storage._in_use_error import DatabaseInUseError, through_server
from agentik.storage._location import describe_location, is_postgres_url


def lock_path(database: str | os.PathLike[str]) -> Path:
    """The lock file of a SQLite database: beside it, whatever path names it."""
    real = Path(os.path.realpath(database))
    return real.with_name(real.name + ".lock")


@final
class DatabaseLock:
    """A held ``<database>.lock`` (``hold_sqlite_database``)."""

    def __init__(self, file: IO[str] | None, command: str) -> None:
        self._file = file
        self._command = command

    def announce(self, url: str) -> None:
        """Say where the holder serves, for the message a command refuses with."""
        self._write(url)

    def _write(self, url: str | None) -> None:
        if self._file is None or not self._file.writable():
            return
        holder = {"pid": os.getpid(), "command": self._command, "url": url}
        self._file.seek(0)
        self._file.truncate()
        self._file.write(json.dumps(holder) + "\n")
        self._file.flush()


def _describe_holder(file: IO[str], database: str, asking: str) -> str:
    try:
        file.seek(0)
        holder = json.loads(file.read(4096) or "{}")
    except (OSError, ValueError):
        holder = {}
    command = holder.get("command") if isinstance(holder, dict) else None
    pid = holder.get("pid") if isinstance(holder, dict) else None
    url = holder.get("url") if isinstance(holder, dict) else None
    who = "another agentik process"
    if command == "serve":
        who = "the agentik server" + (f" at {url}" if isinstance(url, str) and url else "")
    elif isinstance(command, str):
        who = f"agentik {command}"
    if isinstance(pid, int):
        who += f" (pid {pid})"
    message = f"database {database!r} is in use by {who}"
    if command == "serve":
        message += f": stop the server first{through_server(asking, url)}"
    return message


def _open_lock_file(path: Path) -> IO[str] | None:
    """The lock file, created if missing; read-only where it cannot be written
    (``flock`` needs no write access); None if it neither exists nor can be
    created (a read-only directory: no agentik process can hold it there
    either; a missing one: opening the database says so, in SQLite's words)."""
    try:
        return path.open("a+", encoding="utf-8")
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as error:
        if error.errno not in (errno.EACCES, errno.EROFS, errno.EPERM):
            raise
    try:
        return path.open("r", encoding="utf-8")
    except FileNotFoundError:
        return None


@contextmanager
def hold_sqlite_database(database: str | os.PathLike[str], command: str) -> Iterator[DatabaseLock]:
    """Hold the SQLite database's lock for ``command`` (``serve``, ``delete``,
    ``import``), or raise ``DatabaseInUseError`` naming who holds it."""
    path = lock_path(database)
    file = _open_lock_file(path)
    if file is None:
        yield DatabaseLock(None, command)
        return
    with file:
        try:
            fcntl.flock(file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise DatabaseInUseError(_describe_holder(file, str(database), command)) from None
        lock = DatabaseLock(file, command)
        try:
            lock._write(None)
            yield lock
        finally:
            if file.writable():  # a clean release leaves no holder named
                file.seek(0)
                file.truncate()
            fcntl.flock(file.fileno(), fcntl.LOCK_UN)


@asynccontextmanager
async def exclusive_use(location: str, command: str) -> AsyncIterator[None]:
    """For a command that changes the database beside the agent: refuse with
    ``DatabaseInUseError`` while a server uses ``location`` (a SQLite path or
    a PostgreSQL URL), and keep one from starting until the block ends."""
    if not is_postgres_url(location):
        with hold_sqlite_database(location, command):
            yield
        return
    from agentik.storage.postgres._in_use import hold_against_nodes, release

    connection = await trio.to_thread.run_sync(
        hold_against_nodes, location, describe_location(location), command
    )
    try:
        yield
    finally:
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(release, connection)
