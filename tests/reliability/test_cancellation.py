"""The cancellation matrix: a turn cancelled at each checkpoint of the turn
loop, three ways, on both backends.

The turn under test ("go", idempotency key "k-go") loads the history, calls
the model (a tool call), runs the tool, records its result, calls the model
again, records the answer, waits for the commit and (with reflection on)
reflects. A ``Gate`` holds it at one point, driven by events only (no clock):

- ``cancel``: ``agent.cancel(conversation_id)`` while it is held;
- ``caller``: the scope of the task calling ``send`` is cancelled (the turn
  itself goes on; the client retries with its key);
- ``shutdown``: the ``open_chat_agent`` block exits with an exception while a
  caller outside it waits.

Afterwards: the caller heard ``TurnError(code="cancelled")`` (or the result,
when the turn had finished), a retry with the same key finishes the turn
without storing anything twice, the next turn works and the model sees exactly
the stored history, and the store (reopened from its file for SQLite) holds a
valid history.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import apsw
import pytest
import trio
import trio.testing

from agentik import ModelRequest, ModelResponse, NamedTool, Role, ToolCall, TurnError
from agentik.agent import ChatAgent, open_chat_agent
from agentik.agent._optional_work import REFLECT
from agentik.models import ScriptedModel
from agentik.storage import StorageBundle, open_sqlite_storage, writer_stats
from tests.reliability.helpers import (
    BACKENDS,
    Backend,
    Gate,
    GatedMessageStore,
    check_history,
    gated,
    history,
    shape,
)

CHECKPOINTS = ["load", "model1", "tool", "submit", "model2", "commit", "reflect"]
MODES = ["cancel", "caller", "shutdown"]
TOOL_RESULT = "probe-result"
ANSWER = "done"
GUARD_SECONDS = 60  # a hang guard only: every wait below is on an event


class Boom(Exception):
    pass


class Script:
    """The model and the tool of the matrix, holding at the gate's points."""

    def __init__(self, gate: Gate, *, idempotent: bool = False) -> None:
        self.gate = gate
        self.idempotent = idempotent
        self.ids = itertools.count()
        self.requests: list[ModelRequest] = []
        self.tool_runs = 0

    async def respond(self, request: ModelRequest) -> ModelResponse:
        self.requests.append(request)
        messages = request.messages
        user_at = max(i for i, m in enumerate(messages) if m.role is Role.USER)
        text = messages[user_at].content
        if text == REFLECT:
            await self.gate.hit("reflect")
            return ModelResponse(text="a lesson")
        if text != "go":
            return ModelResponse(text=f"answer to {text}")
        step = sum(1 for m in messages[user_at:] if m.role is Role.ASSISTANT)
        if step == 0:
            await self.gate.hit("model1")
            call = ToolCall(f"call-{next(self.ids)}", "probe", "{}")
            return ModelResponse(tool_calls=(call,))
        await self.gate.hit("model2")
        return ModelResponse(text=ANSWER)

    async def probe(self, arguments: dict[str, object]) -> str:
        self.tool_runs += 1
        await self.gate.hit("tool")
        return TOOL_RESULT

    def agent(self, storage: StorageBundle, *, reflection: bool):  # type: ignore[no-untyped-def]
        return open_chat_agent(
            model=ScriptedModel(self.respond),
            storage=storage,
            tools=[
                NamedTool(
                    "probe", "Probe.", {"type": "object"}, self.probe, idempotent=self.idempotent
                )
            ],
            reflection=reflection,
            builtin_tools=False,
        )


async def release_when_settled(gate: Gate) -> None:
    """Release the gate once every task is blocked again: the cancellation has
    been delivered and handled, so what follows does not race it."""
    await trio.testing.wait_all_tasks_blocked()
    gate.release()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("point", CHECKPOINTS)
async def test_cancel_at_checkpoint(backend: str, mode: str, point: str, tmp_path: Path) -> None:
    """A turn cancelled at ``point`` leaves a valid history with nothing stored
    twice; the caller hears ``cancelled`` (or the result if the turn had
    finished); a keyed retry and the next turn work."""
    store = Backend(backend, tmp_path / "db")
    gate = Gate()
    script = Script(gate)
    reflection = point == "reflect"
    outcomes: list[object] = []
    with trio.fail_after(GUARD_SECONDS):
        async with store.open() as real:
            async with script.agent(real, reflection=reflection) as agent:
                await agent.send("c", "warmup")
            async with trio.open_nursery() as helpers:
                messages = GatedMessageStore(real.message_store, gate, helpers, TOOL_RESULT, ANSWER)
                storage = gated(real, messages)
                gate.arm(point)

                async def caller(scope: trio.CancelScope) -> None:
                    with scope:
                        try:
                            outcomes.append(await agent.send("c", "go", idempotency_key="k-go"))
                        except TurnError as exc:
                            outcomes.append(exc)

                caller_scope = trio.CancelScope()
                if mode == "shutdown":
                    with pytest.RaisesGroup(Boom, allow_unwrapped=True):
                        async with script.agent(storage, reflection=reflection) as agent:
                            helpers.start_soon(caller, caller_scope)
                            await gate.reached.wait()
                            helpers.start_soon(release_when_settled, gate)
                            raise Boom
                    async with script.agent(storage, reflection=reflection) as agent:
                        await after_cancel(agent, script, mode, point, outcomes)
                else:
                    async with script.agent(storage, reflection=reflection) as agent:
                        helpers.start_soon(caller, caller_scope)
                        await gate.reached.wait()
                        if mode == "cancel":
                            # During reflection the turn has finished: nothing to cancel.
                            assert await agent.cancel("c") == (point != "reflect")
                        else:
                            caller_scope.cancel()
                        await release_when_settled(gate)
                        await after_cancel(agent, script, mode, point, outcomes)
                helpers.cancel_scope.cancel()  # a forwarder may still wait on its gate
        async with store.open() as reopened:
            final = await history(reopened, "c")
    check_history(final, once=("warmup", "go", "next"))
    answers = [m for m in final if m.role is Role.ASSISTANT and m.content == ANSWER]
    assert len(answers) == 1
    assert [m.content for m in final if m.role is Role.TOOL and m.content == TOOL_RESULT] in (
        [],
        [TOOL_RESULT],
    )


async def after_cancel(
    agent: ChatAgent, script: Script, mode: str, point: str, outcomes: list[object]
) -> None:
    finished_before_cancel = point == "reflect"
    # Wait until the conversation has served the cancelled turn (its caller,
    # if it still listens, has heard back): a keyed retry queues behind it.
    retry = await agent.send("c", "go", idempotency_key="k-go")
    if mode == "caller":
        assert outcomes == [] or finished_before_cancel
    elif finished_before_cancel:
        assert len(outcomes) == 1
        assert getattr(outcomes[0], "text", None) == ANSWER
    else:
        assert len(outcomes) == 1
        assert isinstance(outcomes[0], TurnError), outcomes
        assert outcomes[0].code == "cancelled"
    assert retry.text == ANSWER
    assert [m.role for m in retry.messages][0] is Role.USER
    assert retry.messages[0].content == "go"
    before = await history(agent.storage, "c")
    check_history(before, once=("warmup", "go"))
    # The next turn works, and the model sees exactly what is stored.
    result = await agent.send("c", "next")
    assert result.text == "answer to next"
    stored = await history(agent.storage, "c")
    check_history(stored, once=("warmup", "go", "next"))
    assert len(stored) == len(before) + 2
    # the model's view of the conversation is the cache; it must be the store
    seen = [r for r in script.requests if r.messages[-1].content == "next"]
    assert len(seen) == 1
    assert [shape(m) for m in seen[0].messages[1:]] == [shape(m) for m in stored[:-1]]


class WriteLock:
    """SQLite's write lock, held by a second connection: the writer's thread
    then waits in its busy handler with the batch it took."""

    def __init__(self, path: Path) -> None:
        self._connection: apsw.Connection | None = apsw.Connection(str(path))
        self._connection.execute("BEGIN IMMEDIATE")

    def release(self) -> None:
        if self._connection is not None:
            self._connection.execute("ROLLBACK")
            self._connection.close()
            self._connection = None


async def test_cancel_while_the_writer_channel_is_full(tmp_path: Path) -> None:
    """SQLite, no gate: the writer is stuck on the lock with the user message
    and its channel (size 0) is full, so recording the model's tool call waits.
    Cancelled there, the tool call is never stored (it was not accepted), the
    user message commits, and the conversation goes on."""
    path = tmp_path / "db"
    script = Script(Gate())
    with trio.fail_after(GUARD_SECONDS):
        async with open_sqlite_storage(path, queue_size=0, busy_timeout=GUARD_SECONDS) as bundle:
            async with script.agent(bundle, reflection=False) as agent:
                await agent.send("c", "warmup")
                lock = WriteLock(path)
                failures: list[TurnError] = []

                async def caller() -> None:
                    with pytest.raises(TurnError) as info:
                        await agent.send("c", "go", idempotency_key="k-go")
                    failures.append(info.value)

                try:
                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(caller)
                        await trio.testing.wait_all_tasks_blocked()
                        stats = writer_stats(bundle)
                        assert stats is not None and stats.queue_depth == 1  # the call, waiting
                        assert script.tool_runs == 0
                        assert await agent.cancel("c") == 1
                        await trio.testing.wait_all_tasks_blocked()
                        lock.release()
                finally:
                    lock.release()
                assert failures[0].code == "cancelled"
                stored = await history(bundle, "c")
                assert [m.role for m in stored[2:]] == [Role.USER]
                assert (await agent.send("c", "go", idempotency_key="k-go")).text == ANSWER
                assert (await agent.send("c", "next")).text == "answer to next"
        async with open_sqlite_storage(path) as reopened:
            check_history(await history(reopened, "c"), once=("warmup", "go", "next"))


async def cancel_behind_a_stuck_writer(
    agent: ChatAgent, path: Path, script: Script, runs: int
) -> None:
    """Send the keyed turn "go" while another connection holds the write lock,
    check the tool ran ``runs`` times by then, cancel the turn, release the
    lock: the caller is told ``cancelled``."""
    lock = WriteLock(path)
    failures: list[TurnError] = []

    async def caller() -> None:
        with pytest.raises(TurnError) as info:
            await agent.send("c", "go", idempotency_key="k-go")
        failures.append(info.value)

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(caller)
            await trio.testing.wait_all_tasks_blocked()
            assert script.tool_runs == runs
            assert await agent.cancel("c") == 1
            await trio.testing.wait_all_tasks_blocked()
            lock.release()
    finally:
        lock.release()
    assert failures[0].code == "cancelled"


async def test_cancel_while_waiting_for_a_real_commit(tmp_path: Path) -> None:
    """SQLite, no gate: every message of the turn is queued behind a stuck
    writer and the turn waits for the commit. Cancelled there, the turn
    reports ``cancelled`` only after its writes settled; they all commit, so a
    keyed retry replays the finished turn and adds nothing. The tool is
    idempotent, so it runs without waiting for its call's commit (a tool that
    is not waits: ``test_cancel_while_a_call_waits_for_its_commit``)."""
    path = tmp_path / "db"
    script = Script(Gate(), idempotent=True)
    with trio.fail_after(GUARD_SECONDS):
        async with open_sqlite_storage(path, busy_timeout=GUARD_SECONDS) as bundle:
            async with script.agent(bundle, reflection=False) as agent:
                await agent.send("c", "warmup")
                await cancel_behind_a_stuck_writer(agent, path, script, runs=1)
                count = len(await history(bundle, "c"))
                retry = await agent.send("c", "go", idempotency_key="k-go")
                assert retry.text == ANSWER
                assert agent.stats.turns_replayed == 1
                assert len(await history(bundle, "c")) == count
        async with open_sqlite_storage(path) as reopened:
            final = await history(reopened, "c")
    check_history(final, once=("warmup", "go"))
    assert [m.role for m in final[2:]] == [Role.USER, Role.ASSISTANT, Role.TOOL, Role.ASSISTANT]


async def test_cancel_while_a_call_waits_for_its_commit(tmp_path: Path) -> None:
    """SQLite, no gate, a tool that is not idempotent: its call must be
    committed before it runs (write-ahead), so behind a stuck writer the tool
    has not run when the turn is cancelled. It never runs: the turn settles
    its writes, answers the open call as cancelled, and a keyed retry replays
    that turn instead of running the tool late."""
    path = tmp_path / "db"
    script = Script(Gate())
    with trio.fail_after(GUARD_SECONDS):
        async with open_sqlite_storage(path, busy_timeout=GUARD_SECONDS) as bundle:
            async with script.agent(bundle, reflection=False) as agent:
                await agent.send("c", "warmup")
                await cancel_behind_a_stuck_writer(agent, path, script, runs=0)
                stored = await history(bundle, "c")
                assert [m.role for m in stored[2:]] == [Role.USER, Role.ASSISTANT, Role.TOOL]
                assert stored[-1].content.startswith("error: the turn was stopped")
                retry = await agent.send("c", "go", idempotency_key="k-go")
                assert retry.text == ANSWER  # the retry finishes the turn...
                assert script.tool_runs == 0  # ...without running the call late
        async with open_sqlite_storage(path) as reopened:
            final = await history(reopened, "c")
    check_history(final, once=("warmup", "go"))
    assert [m.role for m in final[2:]] == [Role.USER, Role.ASSISTANT, Role.TOOL, Role.ASSISTANT]
