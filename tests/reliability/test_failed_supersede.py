"""A new message while a turn waits for approval supersedes it (its waiting
calls denied, then the new turn runs); what holds when the new turn's writes
fail, and what the new turn is without a fault.

- The new turn starts at its own user message, after the denials: its result
  holds its messages only, and its idempotency key names its user message.
- Its answer fails to commit: store_error, and the next request does not
  resume it (its failure is remembered under its user message's seq).
- Its user message fails to commit: store_error, and the next request does
  not resume the superseded turn either, which its denials leave looking
  interrupted (calls answered, no answer): the person moved on from it.
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
    """Answers "wait" with a call that needs approval; anything else with an
    echo; records the user text of each request. Before it answers "skip",
    the user message's COMMIT is over (a barrier write commits after it)."""

    bundle: StorageBundle
    asked: list[str] = attrs.Factory(list)

    async def respond(self, request: ModelRequest) -> ModelResponse:
        messages = request.messages
        user_at = max(i for i, m in enumerate(messages) if m.role is Role.USER)
        text = messages[user_at].content
        self.asked.append(text)
        if text == "skip":
            await trio.testing.wait_all_tasks_blocked()  # the writer has the user message
            await self.bundle.working_memory_store.append("barrier", "barrier")
        if text == "wait" and messages[-1].role is Role.USER:
            return ModelResponse(tool_calls=(ToolCall("pay-1", "pay", "{}"),))
        return ModelResponse(text=f"answer to {text}")


async def _pay(arguments: dict[str, object]) -> str:
    return "paid"


PAY = NamedTool("pay", "Pay.", {"type": "object"}, _pay, requires_approval=True)


def _agent(model: Model, bundle: StorageBundle):  # type: ignore[no-untyped-def]
    return open_chat_agent(
        model=ScriptedModel(model.respond), storage=bundle, tools=[PAY], builtin_tools=False
    )


async def test_the_new_turn_starts_after_the_denials(tmp_path: Path) -> None:
    """Its result holds its own messages; a retry with its key replays it."""
    async with open_sqlite_storage(tmp_path / "db") as bundle:
        model = Model(bundle)
        async with _agent(model, bundle) as chat:
            await _retried(chat, model)


async def _retried(chat, model: Model) -> None:  # type: ignore[no-untyped-def]
    assert (await chat.send("c", "wait")).status == "awaiting_approval"
    result = await chat.send("c", "skip", idempotency_key="k")
    assert [(m.role, m.content) for m in result.messages] == [
        (Role.USER, "skip"),
        (Role.ASSISTANT, "answer to skip"),
    ]
    asked = len(model.asked)
    again = await chat.send("c", "skip", idempotency_key="k")
    assert again.messages == result.messages
    assert model.asked[asked:] == []


@pytest.mark.parametrize("fault", FAULTS)
@pytest.mark.parametrize("failing", ["user message", "answer"])
async def test_a_superseding_turn_that_fails_to_commit_resumes_nothing(
    failing: str, fault: str, faulty_vfs: FaultyVFS, tmp_path: Path
) -> None:
    """The denials commit, then the new turn's user message (or its answer)
    fails: store_error; the next request asks about itself alone, and the
    history stays valid."""
    async with open_sqlite_storage(tmp_path / "db", vfs=FaultyVFS.NAME) as bundle:
        model = Model(bundle)
        async with _agent(model, bundle) as chat:
            assert (await chat.send("c", "wait")).status == "awaiting_approval"
            # The COMMITs of "skip": the denial, its user message, the barrier, its answer.
            faulty_vfs.fail_after(1 if failing == "user message" else 3, fault)
            with pytest.raises(TurnError) as info:
                await chat.send("c", "skip")
            assert info.value.code == "store_error"
            assert faulty_vfs.injected == 1
            asked = len(model.asked)
            assert (await chat.send("c", "next")).text == "answer to next"
            assert model.asked[asked:] == ["next"]
            assert await chat.pending_approvals("c") == ()
        final = await history(bundle, "c")
    check_history(final, once=("wait", "next"))
    assert "answer to wait" not in [m.content for m in final]
