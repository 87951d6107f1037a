"""A cancelled turn whose writes cannot commit within the agent's cleanup
time (``_CLEANUP_SECONDS``, 10 s): the writer is stuck (SQLite's write lock
held by another connection) while the turn settles, then catches up.

The clock is trio's MockClock, jumped by hand past the cleanup time while the
writer is stuck in real time; it also jumps by itself after 30 real seconds of
idleness, a guard against a hang only.
"""

from __future__ import annotations

from pathlib import Path

import apsw
import pytest
import trio
import trio.lowlevel
import trio.testing

from agentik import Role, TurnError
from agentik.storage import open_sqlite_storage
from tests.reliability.helpers import Gate, check_history, history, shape
from tests.reliability.test_cancellation import Script

CLEANUP_SECONDS = 10.0


async def test_cancelled_turn_whose_writes_outlast_the_cleanup(
    tmp_path: Path, mock_clock: trio.testing.MockClock
) -> None:
    """After the writer catches up, the next turns see exactly the store, and
    a keyed retry of the cancelled turn returns that turn, not another. The
    tool is idempotent, so it runs while its call's commit is still held
    (a tool that is not waits for it: tests/agent/test_write_ahead.py)."""
    mock_clock.autojump_threshold = 30.0
    path = tmp_path / "db"
    gate = Gate()
    script = Script(gate, idempotent=True)
    async with open_sqlite_storage(path, busy_timeout=60) as storage:
        async with script.agent(storage, reflection=False) as agent:
            await agent.send("c", "warmup")
            lock = apsw.Connection(str(path))
            lock.execute("BEGIN IMMEDIATE")
            try:
                gate.arm("tool")
                reported: list[float] = []
                async with trio.open_nursery() as nursery:

                    async def go() -> None:
                        with pytest.raises(TurnError) as info:
                            await agent.send("c", "go", idempotency_key="k-go")
                        assert info.value.code == "cancelled"
                        reported.append(trio.current_time())

                    nursery.start_soon(go)
                    await gate.reached.wait()
                    cancelled_at = trio.current_time()
                    assert await agent.cancel("c") == 1
                    await trio.testing.wait_all_tasks_blocked()
                    mock_clock.jump(CLEANUP_SECONDS + 1)  # the settle gives up
                # One bound for all of the clean-up, not one per step of it.
                assert reported[0] - cancelled_at <= CLEANUP_SECONDS + 1
                async with trio.open_nursery() as nursery:
                    started = agent.stats.turns_started
                    nursery.start_soon(agent.send, "c", "next")
                    while agent.stats.turns_started == started:
                        await trio.lowlevel.checkpoint()
                    # The next turn waits for the cancelled turn's queued writes
                    # before it reloads: it must not reach the model yet.
                    await trio.testing.wait_all_tasks_blocked()
                    assert not any(r.messages[-1].content == "next" for r in script.requests)
                    lock.execute("ROLLBACK")
            finally:
                if lock.in_transaction:
                    lock.execute("ROLLBACK")
                lock.close()
            stored = await history(storage, "c")
            check_history(stored, once=("warmup", "go", "next"))
            seen = [r for r in script.requests if r.messages[-1].content == "next"][0]
            # The cancelled turn did not finish and "next" followed it: a retry
            # is refused (docs/agent.md), never answered with another turn.
            with pytest.raises(TurnError, match="'k-go' did not finish"):
                await agent.send("c", "go", idempotency_key="k-go")
            assert [shape(m) for m in seen.messages[1:]] == [
                shape(m) for m in stored[: len(seen.messages) - 1]
            ]
            assert [m.role for m in seen.messages[1:]].count(Role.USER) == 3
