"""Every COMMIT of the sweep's script (``tests/reliability/sweep.py``), failed
in turn on SQLite: for k = 1, 2, …, the k-th COMMIT the script makes fails
(its write-ahead log's write, or its sync: ``FaultyVFS.fail_after``), and
``check_commit_fails`` checks what the caller and the store see after.

A failed sync leaves the outcome unknown (the log written, not synced); a
failed write leaves nothing of the batch written.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agentik.storage import open_sqlite_storage
from tests.reliability.faulty_vfs import FAULTS, FaultyVFS
from tests.reliability.sweep import (
    COMMITS,
    check_commit_fails,
    check_the_script_commits_the_same_way,
)


async def test_the_script_commits_the_same_way(faulty_vfs: FaultyVFS, tmp_path: Path) -> None:
    """Without a fault, every step answers as scripted, each call runs once,
    and the script makes ``COMMITS`` COMMITs (the same every run)."""
    await check_the_script_commits_the_same_way(
        lambda: open_sqlite_storage(tmp_path / "db", vfs=FaultyVFS.NAME), faulty_vfs
    )


@pytest.mark.parametrize("k", range(1, COMMITS + 1))
@pytest.mark.parametrize("fault", FAULTS)
async def test_commit_fails(fault: str, k: int, faulty_vfs: FaultyVFS, tmp_path: Path) -> None:
    path = tmp_path / "db"
    told = "outcome is unknown" if fault == "sync" else "nothing of the batch was written"
    await check_commit_fails(
        k,
        fault,
        told,
        lambda: open_sqlite_storage(path, vfs=FaultyVFS.NAME),
        lambda: open_sqlite_storage(path),
        faulty_vfs,
    )
