"""Tool schemas inside the context budget, through real turns (issue 35)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentik import ContextPolicy, ModelBackendError, ModelRequest, ModelResponse, NamedTool, Role
from agentik.agent import open_chat_agent
from agentik.agent._context import estimate_tokens, message_tokens
from agentik.models import ScriptedModel
from agentik.storage import in_memory_storage, open_sqlite_storage
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


async def test_enabling_past_the_budget_switches_off_the_least_recently_used() -> None:
    """Through real turns: the enable result names what was switched off, the
    tools array is the core tools then the toolsets in activation order, the
    active toolsets' schemas never pass the tools budget, and making room
    goes down to a quarter of it."""
    a, b, c = _toolset("a", 1, 300), _toolset("b", 1, 300), _toolset("c", 1, 300)
    one = ToolCosts().of(a.tools[0])
    requests: list[ModelRequest] = []
    script = {
        "go": [
            call("enable_toolset", {"name": "b"}),
            call("enable_toolset", {"name": "a"}),
            call("b_v0"),  # a use of b: a is now the least recently used
            call("c_v0"),  # auto-activation makes room too: a, then b
            call("enable_toolset", {"name": "a"}),
            call("enable_toolset", {"name": "b"}),
            "done",
        ]
    }

    def respond(request: ModelRequest) -> ModelResponse:
        requests.append(request)
        step = sum(1 for m in request.messages if m.role is Role.ASSISTANT)
        answer = script["go"][step]
        return answer if isinstance(answer, ModelResponse) else ModelResponse(text=answer)

    policy = ContextPolicy(max_tokens=20_000, tools_budget=2 * one + 1, find_tools=False)
    async with open_chat_agent(
        model=ScriptedModel(respond),
        storage=in_memory_storage(),
        toolsets=[a, b, c],
        builtin_tools=False,
        context=policy,
    ) as agent:
        result = await agent.send("conv", "go")
    results = [m.content for m in result.messages if m.role is Role.TOOL]
    assert results == [
        "Toolset 'b' activated.",
        "Toolset 'a' activated.",
        "ok",
        "ok",
        "Toolset 'a' activated.",
        "Toolset 'b' activated; 'c' and 'a' were switched off to make room.",
    ]
    names = [[t.name for t in r.tools] for r in requests]
    core = ["enable_toolset", "disable_toolset"]
    assert names == [
        core,
        [*core, "b_v0"],
        [*core, "b_v0", "a_v0"],
        [*core, "b_v0", "a_v0"],
        [*core, "c_v0"],
        [*core, "c_v0", "a_v0"],
        [*core, "b_v0"],
    ]
    assert all(_toolset_tools_cost(r) <= policy.tools_budget_tokens for r in requests)


async def test_tools_added_to_a_toolset_go_to_the_end_of_the_array() -> None:
    """Through real turns: extending a toolset enabled in part (by enable or
    by a call by name) appends its new tools after everything else, so each
    request's tools array starts with the one before; enabling fewer of its
    tools adds nothing and removes nothing; a switch-off removes them all."""
    a, b = _toolset("a", 3, 50), _toolset("b", 1, 50)
    requests: list[ModelRequest] = []
    script = [
        call("enable_toolset", {"name": "a", "tools": ["a_v0"]}),
        call("enable_toolset", {"name": "b"}),
        call("enable_toolset", {"name": "a", "tools": ["a_v0", "a_v1"]}),
        call("a_v2"),  # auto-activation adds it
        call("enable_toolset", {"name": "a", "tools": ["a_v2"]}),  # already offered
        call("disable_toolset", {"name": "a"}),
        call("enable_toolset", {"name": "a", "tools": ["a_v2"]}),
        "done",
    ]

    def respond(request: ModelRequest) -> ModelResponse:
        requests.append(request)
        answer = script[sum(1 for m in request.messages if m.role is Role.ASSISTANT)]
        return answer if isinstance(answer, ModelResponse) else ModelResponse(text=answer)

    async with open_chat_agent(
        model=ScriptedModel(respond),
        storage=in_memory_storage(),
        toolsets=[a, b],
        builtin_tools=False,
        context=ContextPolicy(max_tokens=20_000, find_tools=False),
    ) as agent:
        await agent.send("conv", "go")
    core = ["enable_toolset", "disable_toolset"]
    assert [_tool_names(r) for r in requests] == [
        core,
        [*core, "a_v0"],
        [*core, "a_v0", "b_v0"],
        [*core, "a_v0", "b_v0", "a_v1"],
        [*core, "a_v0", "b_v0", "a_v1", "a_v2"],
        [*core, "a_v0", "b_v0", "a_v1", "a_v2"],
        [*core, "b_v0"],
        [*core, "b_v0", "a_v2"],
    ]
    answers = [m.content for m in requests[-1].messages if m.role is Role.TOOL]
    assert answers[-3:] == [
        "Toolset 'a' is already active.",
        "Toolset 'a' deactivated.",
        "Toolset 'a' activated (1 of its 3 tools).",
    ]


def _tool_names(request: ModelRequest) -> list[str]:
    return [t.name for t in request.tools]


async def _first_request_tools(toolsets: list[ToolsetContribution], **options: object) -> list[str]:
    requests: list[ModelRequest] = []

    def respond(request: ModelRequest) -> ModelResponse:
        requests.append(request)
        return ModelResponse(text="hi")

    async with open_chat_agent(
        model=ScriptedModel(respond),
        storage=in_memory_storage(),
        toolsets=toolsets,
        builtin_tools=False,
        **options,  # type: ignore[arg-type]
    ) as agent:
        await agent.send("c", "hello")
    return _tool_names(requests[0])


async def test_find_tools_is_offered_when_the_catalog_passes_the_budget() -> None:
    """Offered (after the switches, before any toolset's tools) only when all
    the toolsets' schemas would not fit the tools budget, or when asked."""
    sets = [_toolset(n, 1, 300) for n in ("a", "b", "c")]
    total = ToolCosts().total(t for s in sets for t in s.tools)
    switches = ["enable_toolset", "disable_toolset"]
    assert await _first_request_tools(sets) == switches  # no policy, no budget
    for budget, find, offered in [
        (total - 1, None, True),
        (total, None, False),
        (total, True, True),
        (total - 1, False, False),
    ]:
        policy = ContextPolicy(max_tokens=50_000, tools_budget=budget, find_tools=find)
        tools = await _first_request_tools(sets, context=policy)
        assert tools == ([*switches, "find_tools"] if offered else switches), (budget, find)
    assert await _first_request_tools([], context=ContextPolicy(max_tokens=500)) == []


async def test_find_then_enable_only_the_tools_needed() -> None:
    """A well-behaved model: find_tools, enable the one tool it needs, call it;
    then call another tool of the toolset by name (auto-activation adds it)."""

    def tool(name: str, description: str) -> NamedTool:
        return NamedTool(name, description, {"type": "object", "properties": {}}, _ok)

    github = ToolsetContribution(
        "github",
        "Issues and pull requests",
        [
            tool("github_create_issue", "Create a new issue in a repository." + " " * 900),
            tool("github_list_pulls", "List the pull requests of a repository." + " " * 900),
            tool("github_merge_pull", "Merge a pull request." + " " * 900),
        ],
    )
    one = ToolCosts().of(github.tools[0])
    script = [
        call("find_tools", {"query": "open an issue", "limit": 1}),
        call("enable_toolset", {"name": "github", "tools": ["github_create_issue"]}),
        call("github_create_issue"),
        call("github_merge_pull"),
        "done",
    ]
    requests: list[ModelRequest] = []

    def respond(request: ModelRequest) -> ModelResponse:
        requests.append(request)
        answer = script[sum(1 for m in request.messages if m.role is Role.ASSISTANT)]
        return answer if isinstance(answer, ModelResponse) else ModelResponse(text=answer)

    policy = ContextPolicy(max_tokens=50_000, tools_budget=2 * one + 10)
    async with open_chat_agent(
        model=ScriptedModel(respond),
        storage=in_memory_storage(),
        toolsets=[github],
        builtin_tools=False,
        context=policy,
    ) as agent:
        result = await agent.send("c", "go")
    results = [m.content for m in result.messages if m.role is Role.TOOL]
    assert results[0].split("\n")[1].startswith("github_create_issue (toolset github, ~")
    assert results[1:] == ["Toolset 'github' activated (1 of its 3 tools).", "ok", "ok"]
    base = ["enable_toolset", "disable_toolset", "find_tools"]
    assert [_tool_names(r) for r in requests] == [
        base,
        base,
        [*base, "github_create_issue"],
        [*base, "github_create_issue"],
        [*base, "github_create_issue", "github_merge_pull"],
    ]


async def test_a_restarted_agent_starts_with_every_toolset_off_and_rebuilds_the_same_order(
    tmp_path: Path,
) -> None:
    """Activation is not stored (in memory only, docs/toolsets.md): on a real
    SQLite file, an agent opened again on the same conversation offers the
    core tools alone, and the same switches give the same tools array."""
    a, b = _toolset("a", 3, 50), _toolset("b", 1, 50)
    script = [
        call("enable_toolset", {"name": "a", "tools": ["a_v1"]}),
        call("enable_toolset", {"name": "b"}),
        call("enable_toolset", {"name": "a", "tools": ["a_v0"]}),
        "done",
    ]

    async def run_once() -> list[list[str]]:
        requests: list[ModelRequest] = []

        def respond(request: ModelRequest) -> ModelResponse:
            requests.append(request)
            turn = request.messages[
                max(i for i, m in enumerate(request.messages) if m.role is Role.USER) :
            ]
            answer = script[sum(1 for m in turn if m.role is Role.ASSISTANT)]
            return answer if isinstance(answer, ModelResponse) else ModelResponse(text=answer)

        async with (
            open_sqlite_storage(tmp_path / "db") as storage,
            open_chat_agent(
                model=ScriptedModel(respond),
                storage=storage,
                toolsets=[a, b],
                builtin_tools=False,
                context=ContextPolicy(max_tokens=20_000, find_tools=False),
            ) as agent,
        ):
            await agent.send("conv", "go")
        return [_tool_names(r) for r in requests]

    core = ["enable_toolset", "disable_toolset"]
    expected = [
        core,
        [*core, "a_v1"],
        [*core, "a_v1", "b_v0"],
        [*core, "a_v1", "b_v0", "a_v0"],
    ]
    assert await run_once() == expected
    assert await run_once() == expected  # after the restart: from nothing again
