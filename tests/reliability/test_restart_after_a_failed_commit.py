"""A restart right after a COMMIT failed, with no later COMMIT: each COMMIT of
the sweep's script, failed at its sync (in doubt) or at its first write
(nothing written), the process killed right then.

SQLite wrote the batch's frames to the write-ahead log and the sync that ends
the COMMIT failed (``SQLITE_IOERR_FSYNC``): the caller is told the write's
outcome is unknown. In the same process the batch stays invisible and the
next COMMIT writes its own frames where those were (SQLite moves the log's
end only once a COMMIT is synced: ``test_commit_fault_sweep``); here the
process is killed right then instead: the files are copied inside the failing sync, as a crash
at that moment leaves them (a killed process's writes are in the OS's cache,
which the next open reads), and the copy is opened by a fresh agent. An open
that finds the log recovers its frames up to the last COMMIT whole, so the
batch in doubt is there, whole. (A COMMIT failed at its first write left
nothing: the copy is the store as the COMMIT before left it, a crash between
two COMMITs.)

What holds, whichever COMMIT of the sweep's script fails so:
1. the copy holds every message the steps before the failure acknowledged,
   and the batch in doubt whole (the caller was told neither way);
2. the fresh agent resumes what the copy shows interrupted and goes on: the
   history is valid (every call answered once), the next turn answers;
3. no call runs twice, across both processes, but an idempotent one a crash
   cut short (the sweep's "idem-1", which runs while its call's COMMIT is
   under way: in doubt, the call is there and its result is not).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from agentik import StoreError, TurnError
from agentik.storage import open_sqlite_storage
from tests.reliability.faulty_vfs import FAULTS, FaultyVFS
from tests.reliability.helpers import check_history, history
from tests.reliability.sweep import (
    COMMITS,
    FAILING_STEP,
    agent,
    check_ran_once,
    run_script,
    shapes,
)


def crash_copy(path: Path, into: Path) -> None:
    """The database's files as they are now, copied to ``into``."""
    into.mkdir()
    for suffix in ("", "-wal", "-shm"):
        source = Path(f"{path}{suffix}")
        if source.exists():
            shutil.copyfile(source, into / f"db{suffix}")


@pytest.mark.parametrize("k", range(1, COMMITS + 1))
@pytest.mark.parametrize("fault", FAULTS)
async def test_restart_right_after_a_commit_failed(
    fault: str, k: int, faulty_vfs: FaultyVFS, tmp_path: Path
) -> None:
    path, crashed = tmp_path / "db", tmp_path / "crashed"
    faulty_vfs.on_inject = lambda: crash_copy(path, crashed)
    asked: list[str] = []
    ran: list[str] = []
    async with open_sqlite_storage(path, vfs=FaultyVFS.NAME) as bundle:
        async with agent(bundle, faulty_vfs, asked, ran) as chat:
            faulty_vfs.fail_after(k - 1, fault)
            acknowledged, failed, error = await run_script(chat)
            faulty_vfs.release()  # a hold the failed step armed and did not reach
            assert faulty_vfs.injected == 1
            assert failed == FAILING_STEP[k - 1], error
            assert isinstance(error, (StoreError, TurnError)), error
            told = "outcome is unknown" if fault == "sync" else "nothing of the batch was written"
            assert told in str(error)
    ran_before = len(ran)
    async with open_sqlite_storage(crashed / "db") as bundle:
        copied = await history(bundle, "c")
        # 1. what was acknowledged is there (the batch in doubt is checked below).
        kept = set(shapes(copied))
        assert [m for m in shapes(acknowledged) if m not in kept] == []
        # 2. a fresh agent resumes what is interrupted and goes on.
        async with agent(bundle, faulty_vfs, asked, ran) as chat:
            assert (await chat.send("c", "after")).text == "answer to after"
        final = await history(bundle, "c")
    check_history(final, once=("after",))
    assert shapes(final[: len(copied)]) == shapes(copied)
    # 3. no call ran twice, but an idempotent one the crash cut short.
    check_ran_once(ran, ran_before)
