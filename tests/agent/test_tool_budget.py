"""Tool schemas inside the context budget, through real turns (issue 35)."""

from __future__ import annotations

import pytest

from agentik import ContextPolicy, ModelBackendError, ModelRequest, ModelResponse, NamedTool, Role
from agentik.agent import open_chat_agent
from agentik.agent._context import estimate_tokens, message_tokens
from agentik.models import ScriptedModel
from agentik.storage import in_memory_storage
from agentik.toolsets import ToolCosts, ToolsetContribution
from tests.agent.helpers import call


async def _ok(arguments: object) -> str:
    return "ok"


def _toolset(name: str, verbs: int, size: int) -> ToolsetContribution:
    return ToolsetContribution(
        name,
        f"the {name} toolset",
        [
            NamedTool(f"{name}_v{i}", "d" * size, {"type": "object", "properties": {}}, _ok)
            for i in range(verbs)
        ],
    )


def _request_tokens(request: ModelRequest) -> int:
    return sum(message_tokens(m, estimate_tokens) for m in request.messages)


def _users(request: ModelRequest) -> int:
    return sum(1 for m in request.messages if m.role is Role.USER)


def _toolset_tools_cost(request: ModelRequest) -> int:
    costs = ToolCosts()
    return costs.total(t for t in request.tools if "_v" in t.name)


async def test_active_toolsets_take_their_share_of_the_window() -> None:
    """Messages and the active toolsets' schemas together fit ``max_tokens``:
    once a big toolset is on, the window carries fewer old turns."""
    big = _toolset("big", 2, 600)
    requests: list[ModelRequest] = []

    def respond(request: ModelRequest) -> ModelResponse:
        if request.purpose == "summary":  # no summary: the window must drop old turns
            raise ModelBackendError("no summaries in this test")
        requests.append(request)
        user = [m for m in request.messages if m.role is Role.USER][-1]
        done = request.messages[-1].role is Role.TOOL
        if user.content.startswith("use") and not done:
            return call("big_v0")
        return ModelResponse(text="fine")

    policy = ContextPolicy(max_tokens=2_000, tools_budget=500)
    async with open_chat_agent(
        model=ScriptedModel(respond),
        storage=in_memory_storage(),
        toolsets=[big],
        builtin_tools=False,
        context=policy,
    ) as agent:
        for turn in range(25):
            await agent.send("c", f"{turn}:" + "u" * 300)
        before = _users(requests[-1])
        await agent.send("c", "use it")
        await agent.send("c", "26:" + "u" * 300)
    assert _toolset_tools_cost(requests[-1]) > 400
    for request in requests:
        assert _request_tokens(request) + _toolset_tools_cost(request) <= 2_000
    assert _users(requests[-1]) < before


def test_the_tools_budget_is_a_quarter_of_the_window_unless_given() -> None:
    assert ContextPolicy(max_tokens=10_001).tools_budget_tokens == 2_500
    assert ContextPolicy(max_tokens=10_000, tools_budget=300).tools_budget_tokens == 300


def test_a_tools_budget_that_leaves_no_window_is_refused() -> None:
    for bad, message in [
        (0, "tools_budget must be a positive integer, got 0"),
        (True, "tools_budget must be a positive integer, got True"),
        (1_000, "tools_budget must be less than max_tokens (1000), got 1000"),
    ]:
        with pytest.raises(ValueError) as caught:
            ContextPolicy(max_tokens=1_000, tools_budget=bad)
        assert str(caught.value) == message
