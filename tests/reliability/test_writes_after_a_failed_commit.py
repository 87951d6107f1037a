"""A turn stops writing once one of its writes failed to commit: what it
would record next depends on what failed, and a store that took it would
hold a turn with a hole (an answer without its call's result, a call without
its user message, taken by the next reload for the previous turn's, which
it then resumes).

Here the failure is known before the turn records its next message: the
model answers after the failed batch was resolved (a write that follows it
has committed: writes commit in order). What is queued behind a failed batch
before anyone knows is the writer's part (``test_storage_faults``).
"""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest
import trio.testing

from agentik import ModelRequest, ModelResponse, NamedTool, Role, ToolCall, TurnError
from agentik.agent import open_chat_agent
from agentik.models import ScriptedModel
from agentik.storage import StorageBundle, open_sqlite_storage
from tests.reliability.faulty_vfs import FAULTS, FaultyVFS
from tests.reliability.helpers import check_history, history


@attrs.define
class Model:
    """Answers "go" with a call of ``probe``, then "done"; anything else with
    an echo. Before each answer to "go" it waits until every write before is
    resolved (a barrier write in a batch of its own: batches commit in order)."""

    bundle: StorageBundle
    asked: list[str] = attrs.Factory(list)

    async def respond(self, request: ModelRequest) -> ModelResponse:
        messages = request.messages
        user_at = max(i for i, m in enumerate(messages) if m.role is Role.USER)
        text = messages[user_at].content
        self.asked.append(text)
        if text != "go":
            return ModelResponse(text=f"answer to {text}")
        await trio.testing.wait_all_tasks_blocked()  # the writer has the turn's writes
        await self.bundle.working_memory_store.append("barrier", "barrier")
        if messages[-1].role is Role.USER:
            return ModelResponse(tool_calls=(ToolCall("call-1", "probe", "{}"),))
        return ModelResponse(text="done")


@pytest.mark.parametrize("fault", FAULTS)
@pytest.mark.parametrize("failing", ["user message", "tool result"])
async def test_nothing_is_stored_after_a_write_that_failed(
    failing: str, fault: str, faulty_vfs: FaultyVFS, tmp_path: Path
) -> None:
    """The turn's user message (or its call's result) fails to commit and the
    model answers after: store_error, nothing after the failed write stored,
    and the next request asks about itself alone; the history stays valid."""
    runs = 0

    async def run_probe(arguments: dict[str, object]) -> str:
        nonlocal runs
        runs += 1
        if failing == "tool result":
            faulty_vfs.fail_after(0, fault)  # the next COMMIT: this result's
        return "probed"

    probe = NamedTool("probe", "Probe.", {"type": "object"}, run_probe)
    async with open_sqlite_storage(tmp_path / "db", vfs=FaultyVFS.NAME) as bundle:
        model = Model(bundle)
        async with open_chat_agent(
            model=ScriptedModel(model.respond), storage=bundle, tools=[probe], builtin_tools=False
        ) as chat:
            await chat.send("c", "warmup")
            if failing == "user message":
                faulty_vfs.fail_after(0, fault)
            with pytest.raises(TurnError) as info:
                await chat.send("c", "go")
            assert info.value.code == "store_error"
            assert faulty_vfs.injected == 1
            asked = len(model.asked)
            assert (await chat.send("c", "next")).text == "answer to next"
            assert model.asked[asked:] == ["next"]
        final = await history(bundle, "c")
    check_history(final, once=("warmup", "next"))
    assert runs == (1 if failing == "tool result" else 0)
    contents = [m.content for m in final]
    assert "done" not in contents
    assert contents[-2:] == ["next", "answer to next"]


async def test_the_caller_hears_the_first_write_that_failed(
    faulty_vfs: FaultyVFS, tmp_path: Path
) -> None:
    """An idempotent call runs while its COMMIT is under way; that COMMIT's
    sync fails, with the call's result and the answer queued behind it (they
    fail unrun): the caller is told the call's write is in doubt (it may be
    found after a restart), not that the last write was not written."""
    async with open_sqlite_storage(tmp_path / "db", vfs=FaultyVFS.NAME) as bundle:
        answering = trio.Event()

        async def respond(request: ModelRequest) -> ModelResponse:
            if request.messages[-1].role is Role.USER:
                await trio.testing.wait_all_tasks_blocked()
                await bundle.working_memory_store.append("barrier", "barrier")
                faulty_vfs.hold()  # the next COMMIT: this answer's, with its call
                faulty_vfs.fail_after(0, "sync")
                return ModelResponse(tool_calls=(ToolCall("call-1", "look", "{}"),))
            answering.set()
            return ModelResponse(text="done")

        async def look(arguments: dict[str, object]) -> str:
            await trio.testing.wait_all_tasks_blocked()  # its call's COMMIT is held
            return "looked"

        async def release() -> None:
            await answering.wait()
            await trio.testing.wait_all_tasks_blocked()  # the result and answer queued
            faulty_vfs.release()

        tool = NamedTool("look", "Look.", {"type": "object"}, look, idempotent=True)
        async with (
            trio.open_nursery() as nursery,
            open_chat_agent(
                model=ScriptedModel(respond), storage=bundle, tools=[tool], builtin_tools=False
            ) as chat,
        ):
            nursery.start_soon(release)
            with pytest.raises(TurnError) as info:
                await chat.send("c", "go")
    assert info.value.code == "store_error"
    assert "the write's outcome is unknown" in str(info.value)


@pytest.mark.parametrize("fault", FAULTS)
async def test_a_turn_whose_user_message_was_lost_leaves_its_seq_to_the_next(
    fault: str, faulty_vfs: FaultyVFS, tmp_path: Path
) -> None:
    """The turn stopped with store_error before its user message was stored:
    the next turn takes its seq. That turn pauses for approval; its first
    decision fails to commit, so the conversation is read again: the paused
    turn still waits (it is not taken for the failed one, whose failure the
    process remembers), and goes on when decided."""

    async def run_probe(arguments: dict[str, object]) -> str:
        return "probed"

    probe = NamedTool("probe", "Probe.", {"type": "object"}, run_probe)
    pay = NamedTool("pay", "Pay.", {"type": "object"}, run_probe, requires_approval=True)

    async with open_sqlite_storage(tmp_path / "db", vfs=FaultyVFS.NAME) as bundle:
        model = Model(bundle)

        async def respond(request: ModelRequest) -> ModelResponse:
            messages = request.messages
            if messages[-1].content == "pay":
                calls = tuple(ToolCall(f"pay-{i}", "pay", "{}") for i in (1, 2))
                return ModelResponse(tool_calls=calls)
            if messages[-1].role is Role.TOOL and messages[-1].tool_call_id == "pay-2":
                return ModelResponse(text="paid")
            return await model.respond(request)

        async with open_chat_agent(
            model=ScriptedModel(respond), storage=bundle, tools=[probe, pay], builtin_tools=False
        ) as chat:
            await chat.send("c", "warmup")
            faulty_vfs.fail_after(0, fault)  # the user message "go"
            with pytest.raises(TurnError):
                await chat.send("c", "go")
            paused = await chat.send("c", "pay")
            assert paused.status == "awaiting_approval"
            faulty_vfs.fail_after(0, fault)  # the first decision
            with pytest.raises(TurnError) as info:
                await chat.decide("c", "pay-1", approve=True)
            assert info.value.code == "store_error"
            waiting = await chat.pending_approvals("c")
            assert [a.call.id for a in waiting] == ["pay-1", "pay-2"]
            await chat.decide("c", "pay-1", approve=True)
            assert (await chat.decide("c", "pay-2", approve=True)).text == "paid"
        final = await history(bundle, "c")
    check_history(final, once=("warmup", "pay"))
    assert "go" not in [m.content for m in final]
