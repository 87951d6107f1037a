"""A call of a tool that is not idempotent runs only once the call is committed.

Found by the crash harness (tests/reliability/test_crash.py, seed 1813825116):
a ``once_work`` call ran in a process killed before the assistant message
carrying the call was committed; the restart found the turn with no call,
resumed it by asking the model again, and the model called the tool again:
two runs of a call that must run at most once. The commit of the call is the
write-ahead record that lets a restart answer it ``interrupted`` instead.

Here the commit of the assistant message is held (``GatedMessageStore``'s
``commit`` gate, a slow commit) while the turn goes on: the tool must not run
until it is released. An idempotent tool need not wait (running it again
after a crash is allowed), so it does not.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
import trio.testing

from agentik import ModelRequest, ModelResponse, Role, ToolCall, open_chat_agent
from agentik.models import ScriptedModel
from tests.agent.helpers import assert_valid_history, stored
from tests.agent.test_resume import RUNS, lookup, send_mail, summarize
from tests.reliability.helpers import BACKENDS, Backend, Gate, GatedMessageStore, gated

CALLING = "calling the tool"


def call_then_summarize(tool: str):  # type: ignore[no-untyped-def]
    def respond(request: ModelRequest) -> ModelResponse:
        if request.messages[-1].role is Role.USER:
            return ModelResponse(text=CALLING, tool_calls=(ToolCall("c1", tool, "{}"),))
        return summarize(request)

    return respond


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("tool", "waits"), [("send_mail", True), ("lookup", False)])
async def test_a_call_runs_once_it_is_committed(
    backend: str, tool: str, waits: bool, tmp_path: Path, nursery: trio.Nursery
) -> None:
    RUNS.clear()
    store = Backend(backend, tmp_path / "db")
    gate = Gate()
    gate.arm("commit")
    async with store.open() as storage:
        held = GatedMessageStore(storage.message_store, gate, nursery, commit_content=CALLING)
        async with open_chat_agent(
            model=ScriptedModel(call_then_summarize(tool)),
            storage=gated(storage, held),
            tools=[lookup, send_mail],
            builtin_tools=False,
        ) as agent:
            async with trio.open_nursery() as turns:
                turns.start_soon(agent.send, "conv", "work")
                await gate.reached.wait()
                await trio.testing.wait_all_tasks_blocked()
                if waits:
                    assert RUNS == [], "the tool ran while its call was not committed"
                else:
                    assert RUNS[:] == [tool], "an idempotent tool need not wait"
                gate.release()
        assert RUNS[:] == [tool]
        history = await stored(storage, "conv")
    assert_valid_history(history)
    assert [m.role for m in history] == [Role.USER, Role.ASSISTANT, Role.TOOL, Role.ASSISTANT]
