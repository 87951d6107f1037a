"""The registry of running agent-tool calls (``_child_calls``), on random
trees of calls across several agents: what a conversation lists is exactly
what the child turns below it wait on, every waiting call is found for a
decision through the top, a change deep down wakes every watcher above, and
leaving a call leaves nothing behind."""

from __future__ import annotations

import contextlib

from hypothesis import given
from hypothesis import strategies as st

from agentik import ApprovalRequest, ToolCall
from agentik.agent._child_calls import ChildCall, ChildCalls

# A tree: each node is (agent index, waiting call ids or None while it runs, children).
trees = st.recursive(
    st.tuples(st.integers(0, 2), st.lists(st.integers(0, 5), min_size=1, max_size=2), st.just(())),
    lambda below: st.tuples(st.integers(0, 2), st.none(), st.lists(below, min_size=1, max_size=3)),
    max_leaves=8,
)


class _Agent:
    """Stands for the ChatAgent a decision would go to (never called here)."""


def _build(
    stack: contextlib.ExitStack,
    agents: list[ChildCalls],
    registry: ChildCalls,
    parent: str,
    node: tuple[int, list[int] | None, list[object]],
    counter: list[int],
    leaves: dict[str, tuple[ChildCall, str]],
) -> None:
    agent, waiting, children = node
    counter[0] += 1
    child = f"conv{counter[0]}"
    call = ChildCall(child, agents[agent], _Agent())  # type: ignore[arg-type]
    if waiting is not None:
        ids = [f"{child}/k{i}" for i in sorted(set(waiting))]
        call.approvals = tuple(ApprovalRequest(child, ToolCall(i, "pay", "{}")) for i in ids)
        for i in ids:
            leaves[i] = (call, child)
    stack.enter_context(registry.holding(parent, f"call{counter[0]}", call))
    for below in children:
        _build(stack, agents, agents[agent], child, below, counter, leaves)  # type: ignore[arg-type]


@given(st.lists(trees, min_size=1, max_size=3))
def test_the_top_lists_and_finds_what_every_descendant_waits_on(
    forest: list[tuple[int, list[int] | None, list[object]]],
) -> None:
    agents = [ChildCalls() for _ in range(3)]
    top = agents[0]
    leaves: dict[str, tuple[ChildCall, str]] = {}
    with contextlib.ExitStack() as stack:
        counter = [0]
        for node in forest:
            _build(stack, agents, top, "p", node, counter, leaves)
        listed = top.waiting("p")
        assert sorted(a.call.id for a in listed) == sorted(leaves)
        for call_id, (call, child) in leaves.items():
            assert top.holder("p", call_id) is call
            assert call.conversation_id == child
        assert top.holder("p", "nope") is None
        # A change at any waiting conversation wakes a watcher of the top.
        for _call_id, (_call, child) in leaves.items():
            watcher = top.watch("p")
            owner = next(a for a in agents if child in a.parents)
            owner.moved(child)
            assert watcher.is_set()
    for registry in agents:
        assert registry.running == {} and registry.parents == {}
