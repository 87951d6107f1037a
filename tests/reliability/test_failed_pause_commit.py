"""A turn that pauses for approval and cannot commit its pause: its caller is
told ``store_error``, and in this process the turn is over, as a turn whose
answer could not be committed is (``test_failed_turn_reload``): the next
request does not resume it behind its caller. A decision whose commit fails
is different: the turn stays paused, as stored, and the decision can be sent
again.

The pause's batch holds the model's answer with its calls and their
"waiting" record; the turn's user message committed before it (the model
waits for it here, as a slow model lets the writer get to it). So the store
holds the user message alone, which a reload would take for a turn the
process stopped in while the model was asked.
"""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest

from agentik import ModelRequest, ModelResponse, NamedTool, Role, ToolCall, TurnError
from agentik.agent import open_chat_agent
from agentik.models import ScriptedModel
from agentik.storage import StorageBundle, open_sqlite_storage
from tests.reliability.faulty_vfs import FAULTS, FaultyVFS
from tests.reliability.helpers import check_history, go_fails_then_next, history


@attrs.define
class PausingModel:
    """Answers "go" with calls of ``calls`` tools that need approval, then
    "done"; anything else with an echo. With ``fail_pause``, it waits until
    the turn's user message is committed, then arms ``fault``: the batch of
    its answer fails."""

    faulty_vfs: FaultyVFS
    fault: str
    calls: int
    fail_pause: bool
    bundles: list[StorageBundle] = attrs.Factory(list)
    asked: list[str] = attrs.Factory(list)

    async def respond(self, request: ModelRequest) -> ModelResponse:
        messages = request.messages
        self.asked.append(messages[-1].content)
        user_at = max(i for i, m in enumerate(messages) if m.role is Role.USER)
        text = messages[user_at].content
        if text != "go":
            return ModelResponse(text=f"answer to {text}")
        if messages[-1].role is not Role.USER:
            return ModelResponse(text="done")
        if self.fail_pause:
            self.fail_pause = False
            # Writes commit in order: once this one is back, so is "go".
            await self.bundles[0].working_memory_store.append("barrier", "barrier")
            self.faulty_vfs.fail = self.fault
        calls = tuple(ToolCall(f"call-{i}", "probe", "{}") for i in range(self.calls))
        return ModelResponse(tool_calls=calls)


async def _probe(arguments: dict[str, object]) -> str:
    return "probed"


PROBE = NamedTool("probe", "Probe.", {"type": "object"}, _probe, requires_approval=True)


def _agent(model: PausingModel, bundle: StorageBundle):  # type: ignore[no-untyped-def]
    model.bundles.append(bundle)
    return open_chat_agent(
        model=ScriptedModel(model.respond), storage=bundle, tools=[PROBE], builtin_tools=False
    )


@pytest.mark.parametrize("fault", FAULTS)
async def test_a_pause_that_fails_to_commit_is_not_resumed(
    fault: str, faulty_vfs: FaultyVFS, tmp_path: Path
) -> None:
    """store_error; the next request asks the model about it alone, nothing
    waits for approval, and no call of the failed turn is stored."""
    model = PausingModel(faulty_vfs, fault, calls=2, fail_pause=True)
    async with open_sqlite_storage(tmp_path / "db", vfs=FaultyVFS.NAME) as bundle:
        async with _agent(model, bundle) as chat:
            await go_fails_then_next(chat, faulty_vfs.disarm, lambda: model.asked)
            assert await chat.pending_approvals("c") == ()
        final = await history(bundle, "c")
    check_history(final, once=("warmup", "next"))
    assert [(m.role, m.content) for m in final[2:]] == [
        (Role.USER, "go"),
        (Role.USER, "next"),
        (Role.ASSISTANT, "answer to next"),
    ]


@pytest.mark.parametrize("fault", FAULTS)
async def test_a_decision_that_fails_to_commit_leaves_the_turn_paused(
    fault: str, faulty_vfs: FaultyVFS, tmp_path: Path
) -> None:
    """The turn's pause is stored; the first of two decisions fails to commit:
    store_error, both calls still wait, and the decisions sent again finish
    the turn (each call run once)."""
    model = PausingModel(faulty_vfs, fault, calls=2, fail_pause=False)
    async with open_sqlite_storage(tmp_path / "db", vfs=FaultyVFS.NAME) as bundle:
        async with _agent(model, bundle) as chat:
            paused = await chat.send("c", "go")
            assert paused.status == "awaiting_approval"
            faulty_vfs.fail = fault
            with pytest.raises(TurnError) as info:
                await chat.decide("c", "call-0", approve=True)
            assert info.value.code == "store_error"
            faulty_vfs.fail = None
            waiting = await chat.pending_approvals("c")
            assert [a.call.id for a in waiting] == ["call-0", "call-1"]
            await chat.decide("c", "call-0", approve=True)
            done = await chat.decide("c", "call-1", approve=True)
            assert done.text == "done"
        final = await history(bundle, "c")
    check_history(final, once=("go",))
    assert [m.content for m in final if m.role is Role.TOOL] == ["probed", "probed"]
