"""Every COMMIT of the sweep's script, met by a cancel: for k = 1, 2, …, the
k-th COMMIT waits in the writer's thread (``FaultyVFS.pause``), the
conversation's turn is cancelled (``ChatAgent.cancel``) while it does, then
the COMMIT goes on. The script is ``test_commit_fault_sweep``'s: a plain
turn, a call committed before it runs, two calls at once, an idempotent
call, two calls waiting for approval and their decisions, a typed answer, a
keyed turn, a paused turn superseded.

What holds, whichever COMMIT the cancel meets:
1. ``cancel`` stops the step waiting for that COMMIT, which fails with
   ``cancelled`` and alone (the steps before it answered as scripted), or,
   when it stops nothing (returns 0), the script runs on to its end;
2. in the same process the next request asks the model about the new
   message only (a cancelled turn is not resumed) and no tool runs again;
3. the history is valid and holds every message the steps acknowledged, in
   the same process and read from the file reopened;
4. reopened, a fresh agent goes on, without resuming the cancelled turn;
   no call ever runs twice.
"""

from __future__ import annotations

import collections
from pathlib import Path

import pytest
import trio

from agentik import TurnError
from agentik.storage import open_sqlite_storage
from tests.reliability.faulty_vfs import FaultyVFS
from tests.reliability.helpers import check_history, history
from tests.reliability.test_commit_fault_sweep import (
    COMMITS,
    FAILING_STEP,
    agent,
    run_script,
    shapes,
)


@pytest.mark.parametrize("k", range(1, COMMITS + 1))
async def test_cancel_while_a_commit_waits(k: int, faulty_vfs: FaultyVFS, tmp_path: Path) -> None:
    path = tmp_path / "db"
    asked: list[str] = []
    ran: list[str] = []
    async with open_sqlite_storage(path, vfs=FaultyVFS.NAME) as bundle:
        async with agent(bundle, faulty_vfs, asked, ran) as chat:
            faulty_vfs.pause(k - 1)
            stopped: list[int] = []

            async def cancel_when_paused() -> None:
                await trio.to_thread.run_sync(faulty_vfs.paused.wait)
                stopped.append(await chat.cancel("c"))
                faulty_vfs.resume()
                faulty_vfs.release()  # a COMMIT the script held itself ("idem")

            async with trio.open_nursery() as nursery:
                nursery.start_soon(cancel_when_paused)
                acknowledged, failed, error = await run_script(chat)
            # 1. the step waiting for the COMMIT was cancelled, and it alone.
            if stopped == [0]:
                assert failed is None, error
            else:
                assert stopped == [1]
                assert failed == FAILING_STEP[k - 1], error
                assert isinstance(error, TurnError) and error.code == "cancelled", error
            # 2. the next request is about itself alone; no tool runs again.
            asking, running = len(asked), len(ran)
            assert (await chat.send("c", "next")).text == "answer to next"
            assert asked[asking:] == ["next"]
            assert ran[running:] == []
            here = await history(bundle, "c")
    # 3. valid, and holding what was acknowledged, here and reopened.
    check_history(here, once=("next",))
    kept = set(shapes(here))
    assert [m for m in shapes(acknowledged) if m not in kept] == []
    async with open_sqlite_storage(path) as bundle:
        assert shapes(await history(bundle, "c")) == shapes(here)
        # 4. a fresh agent goes on, resuming nothing.
        async with agent(bundle, faulty_vfs, asked, ran) as chat:
            asking = len(asked)
            assert (await chat.send("c", "after")).text == "answer to after"
            assert asked[asking:] == ["after"]
        final = await history(bundle, "c")
    check_history(final, once=("next", "after"))
    assert shapes(final[: len(here)]) == shapes(here)
    assert ran[running:] == []
    assert [i for i, n in collections.Counter(ran).items() if n > 1] == []
