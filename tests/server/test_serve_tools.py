"""Core tools for ``agentik serve`` by entry point (``[agent] tools``,
``AGENTIK_TOOLS``, ``--tool``): offered in every turn, unlike a toolset's."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentik import tool
from agentik.server import ConfigError, load_tools
from tests.server.approval_tools import RUNS, ledger_pay
from tests.server.conftest import Running, start_server


@tool
async def plain() -> str:
    """A tool."""
    return "plain"


NOT_A_TOOL = 42
SOME_TOOLS = [ledger_pay, plain]
MIXED = [plain, 42]


class TestLoadTools:
    def test_a_tool_a_list_or_a_callable(self) -> None:
        assert load_tools(["tests.server.test_serve_tools:plain"]) == [plain]
        assert load_tools(["tests.server.test_serve_tools:SOME_TOOLS"]) == SOME_TOOLS
        assert load_tools(["tests.server.approval_tools:ledger_tools"]) == [ledger_pay]

    @pytest.mark.parametrize(
        ("spec", "message"),
        [
            ("no_such_module_x:t", r"^\[agent\] tools entry 'no_such_module_x:t' cannot be loaded"),
            ("tests.server.test_serve_tools:nope", r"cannot be loaded: module .* has no attribute"),
            (
                "tests.server.test_serve_tools:NOT_A_TOOL",
                r"^\[agent\] tools entry '.*:NOT_A_TOOL' must give tools \(NamedTool\), got int$",
            ),
            (
                "tests.server.approval_tools:bank",
                r"^\[agent\] tools entry '.*:bank' must give tools \(NamedTool\), got Toolset",
            ),
            (
                "tests.server.test_serve_tools:MIXED",
                r"^\[agent\] tools entry '.*:MIXED' gave int, expected a NamedTool$",
            ),
        ],
    )
    def test_a_bad_entry_names_the_setting(self, spec: str, message: str) -> None:
        with pytest.raises(ConfigError, match=message):
            load_tools([spec])


async def test_a_core_tool_is_offered_and_can_require_approval(
    nursery: object, tmp_path: Path
) -> None:
    """The demo model calls a tool the text names only when it is offered: a
    core tool is, in the first turn; this one waits for approval."""
    RUNS.clear()
    async for server in start_server(
        nursery,  # type: ignore[arg-type]
        tmp_path,
        tools=("tests.server.approval_tools:ledger_tools",),
    ):
        await _pay(server)
    assert RUNS == ["pay 3"]


async def _pay(server: Running) -> None:
    paused = await server.client.post(
        "/agentik/conversations/c/turns", json={"text": 'call ledger_pay {"amount": 3}'}
    )
    assert paused.json()["status"] == "awaiting_approval", paused.text
    [call] = paused.json()["approvals"]
    assert (call["name"], call["arguments"]) == ("ledger_pay", '{"amount": 3}')
    assert RUNS == []
    done = await server.client.post(
        f"/agentik/conversations/c/approvals/{call['call_id']}", json={"approve": True}
    )
    assert done.json()["text"] == "ledger_pay returned: paid 3"
