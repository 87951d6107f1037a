"""A conversation task keeps one cancel scope for many turns
(``Conversation._serve_in_scope``): a cancel stops the turn running then and
nothing else, however it falls against the turns around it."""

from __future__ import annotations

import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from agentik import NamedTool, TurnError
from agentik.agent import open_chat_agent
from agentik.models import ModelRequest, ModelResponse, ScriptedModel
from agentik.storage import in_memory_storage
from tests.agent.helpers import assert_valid_history, call, live_conversation


def _model(request: ModelRequest) -> ModelResponse:
    """A call of ``wait`` for a user message, then a text answer."""
    last = request.messages[-1]
    if last.role.value == "user":
        return call("wait", {"seconds": int(last.content)}, id=f"w{len(request.messages)}")
    return ModelResponse(text="done " + last.content)


async def _wait(arguments: dict[str, object]) -> str:
    seconds = arguments["seconds"]
    assert isinstance(seconds, int)
    await trio.sleep(seconds)
    return str(seconds)


_WAIT = NamedTool(
    "wait",
    "Wait.",
    {"type": "object", "properties": {"seconds": {"type": "integer"}}, "required": ["seconds"]},
    _wait,
)


@settings(max_examples=40, deadline=None)
@given(
    turns=st.lists(st.integers(0, 3), min_size=1, max_size=8),
    cancels=st.lists(st.tuples(st.integers(0, 30), st.booleans()), max_size=6),
)
def test_a_cancel_stops_only_the_turn_running_then(
    turns: list[int], cancels: list[tuple[int, bool]]
) -> None:
    """Turns sent one after another (each waits 0-3 s in its tool); cancels
    at random instants. Every turn is answered once: finished, or cancelled
    only if a cancel fell while it ran; every turn after a cancel runs whole;
    the history stays valid."""

    async def main() -> None:
        storage = in_memory_storage()
        outcomes: list[str] = []
        spans: list[tuple[float, float]] = []
        cancelled_at: list[float] = []
        async with open_chat_agent(
            model=ScriptedModel(_model), storage=storage, tools=[_WAIT], builtin_tools=False
        ) as agent:

            async def sender() -> None:
                for seconds in turns:
                    start = trio.current_time()
                    try:
                        result = await agent.send("c", str(seconds))
                        outcomes.append(result.text)
                    except TurnError as error:
                        outcomes.append(error.code)
                    spans.append((start, trio.current_time()))

            async def canceller() -> None:
                for at, _ in sorted(cancels):
                    await trio.sleep_until(at + 0.5)
                    now = trio.current_time()
                    if await agent.cancel("c"):
                        cancelled_at.append(now)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(sender)
                nursery.start_soon(canceller)
            history = [m async for m in storage.message_store.get_messages("c")]
        assert len(outcomes) == len(turns)
        for seconds, result, (start, end) in zip(turns, outcomes, spans, strict=True):
            hit = any(start <= at <= end for at in cancelled_at)
            if result == "cancelled":
                assert hit
            else:
                assert result == f"done {seconds}"
        assert_valid_history(history)

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


async def test_a_cancel_as_a_turn_ends_leaves_the_next_turn_alone() -> None:
    """The cancel comes after the turn's last checkpoint: the turn is answered
    as finished, and the pending cancel does not reach the next turn."""
    async with open_chat_agent(
        model=ScriptedModel(_model), storage=in_memory_storage(), tools=[_WAIT]
    ) as agent:
        first = await agent.send("c", "0")
        assert first.text == "done 0"
        conversation = live_conversation(agent, "c")
        # A cancel requested now (nothing runs) changes nothing...
        assert await agent.cancel("c") == 0
        # ...and one requested on the scope directly, as a turn ends without a
        # checkpoint, fires at the next receive: the next turn still runs whole.
        conversation.scope.cancel()
        second = await agent.send("c", "1")
        assert second.text == "done 1"
        assert not conversation.scope.cancel_called


async def test_send_is_a_checkpoint_and_a_cancelled_send_sends_nothing() -> None:
    """``send`` hands its request over without a schedule point of its own
    (waiting for the reply is one); a caller cancelled before it sends nothing."""
    storage = in_memory_storage()
    async with open_chat_agent(
        model=ScriptedModel(_model), storage=storage, tools=[_WAIT], builtin_tools=False
    ) as agent:
        with trio.CancelScope() as scope:
            scope.cancel()
            await agent.send("c", "0")
        assert scope.cancelled_caught
        await trio.testing.wait_all_tasks_blocked()
        assert agent.stats.turns_started == 0
        with trio.testing.assert_checkpoints():
            result = await agent.send("c", "0")
        assert result.text == "done 0"
        assert [m.content for m in result.messages][0] == "0"
