"""``assert_valid_history`` on a turn paused for a person's approval: valid when
``awaiting`` names the waiting calls, at every step of any order of decisions,
and still strict about everything else."""

from __future__ import annotations

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentik import Message, tool
from agentik.agent import open_chat_agent
from agentik.storage import in_memory_storage
from agentik.testing import Script, assert_valid_history, history


@tool
async def read(n: int) -> str:
    """Read (no approval needed)."""
    return f"read {n}"


@tool(requires_approval=True)
async def write(n: int) -> str:
    """Write (a person approves)."""
    return f"wrote {n}"


_CALLS = st.lists(st.booleans(), min_size=1, max_size=4).filter(any)
"""One model answer's calls: True needs approval (``write``), False does not (``read``)."""


@settings(max_examples=30, deadline=None)
@given(calls=_CALLS, data=st.data())
async def test_every_step_of_a_paused_turn_is_valid_with_awaiting(
    calls: list[bool], data: st.DataObject
) -> None:
    """After the pause and after each decision (in any order, either way) the
    history is valid with ``awaiting`` = the calls still waiting, and invalid
    without it until the last decision."""
    script = Script()
    script.when_user_says("go").calls(
        *[("write" if needs else "read", {"n": i}, f"c{i}") for i, needs in enumerate(calls)]
    ).answer("done")
    async with open_chat_agent(
        model=script.model(), storage=in_memory_storage(), tools=[read, write]
    ) as agent:
        result = await agent.send("c", "go")
        order = data.draw(st.permutations([a.call.id for a in result.approvals]))
        for call_id in order:
            assert result.status == "awaiting_approval"
            messages = await history(agent, "c")
            assert_valid_history(messages, awaiting=result.approvals)
            assert_valid_history(messages, awaiting=await agent.pending_approvals("c"))
            with pytest.raises(AssertionError, match=r"^calls without results: .* pass awaiting"):
                assert_valid_history(messages)
            approve = data.draw(st.booleans())
            result = await agent.decide("c", call_id, approve=approve)
        assert result.status == "finished"
        assert_valid_history(await history(agent, "c"))


async def paused(*, calls: int = 2) -> tuple[list[Message], tuple[str, ...]]:
    """A history whose turn waits for ``calls`` writes, and their ids."""
    script = Script()
    script.when_user_says("go").calls(*[("write", {"n": i}, f"w{i}") for i in range(calls)])
    async with open_chat_agent(
        model=script.model(), storage=in_memory_storage(), tools=[write]
    ) as agent:
        result = await agent.send("c", "go")
        return await history(agent, "c"), tuple(a.call.id for a in result.approvals)


async def test_awaiting_a_call_that_is_not_there_fails() -> None:
    messages, waiting = await paused()
    assert waiting == ("w0", "w1")
    with pytest.raises(AssertionError, match=r"^calls \['x'\] are said to wait .* not calls of"):
        assert_valid_history(messages, awaiting=["x"])


async def test_awaiting_names_only_some_calls_of_the_paused_answer() -> None:
    """An approved call waits for the others: the answer's other calls may be open."""
    messages, _ = await paused()
    assert_valid_history(messages, awaiting=["w1"])


async def test_awaiting_does_not_excuse_an_earlier_open_call() -> None:
    messages, _ = await paused(calls=1)
    # An earlier answer's call left without a result, before the paused one.
    earlier = attrs.evolve(
        messages[1], content="", tool_calls=(attrs.evolve(messages[1].tool_calls[0], id="old"),)
    )
    shifted = [messages[0], earlier] + [attrs.evolve(m, seq=m.seq + 1) for m in messages[1:]]
    with pytest.raises(AssertionError, match=r"^calls without results: \['old'\]$"):
        assert_valid_history(shifted, awaiting=["w0"])


async def test_a_waiting_call_with_a_result_fails() -> None:
    script = Script()
    script.when_user_says("go").call("write", {"n": 1}, id="w").answer("done")
    async with open_chat_agent(
        model=script.model(), storage=in_memory_storage(), tools=[write]
    ) as agent:
        result = await agent.send("c", "go")
        await agent.decide("c", result.approvals[0].call.id, approve=True)
        messages = await history(agent, "c")
    with pytest.raises(AssertionError, match=r"^calls \['w'\] are said to wait .* have results$"):
        assert_valid_history(messages, awaiting=result.approvals)


async def test_nothing_but_results_may_follow_the_paused_answer() -> None:
    messages, _ = await paused(calls=1)
    answer = attrs.evolve(messages[-1], seq=len(messages) + 1, tool_calls=(), content="hm")
    with pytest.raises(AssertionError, match=r"^messages \[3\] follow the answer"):
        assert_valid_history([*messages, answer], awaiting=["w0"])
