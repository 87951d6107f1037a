"""enable_toolset / disable_toolset: the plan's English answers, and errors that help recover."""

from __future__ import annotations

import pytest
import trio

from agentik import ToolError
from agentik._json import JsonObject
from agentik.toolsets import (
    DISABLE_TOOLSET,
    ENABLE_TOOLSET,
    ENABLE_TOOLSET_PARAMETERS,
    TOOLSET_NAME_PARAMETERS,
    ToolsetActivation,
    ToolsetIndex,
    disable_answer,
    enable_answer,
    parse_arguments,
    toolset_control_tools,
)
from tests.toolsets.helpers import make_toolset, ping_toolset

INDEX = ToolsetIndex([ping_toolset(), make_toolset("files", "read")])


class TestEnable:
    async def test_activates_then_already_active(self) -> None:
        """First enable activates; a second says it already is."""
        activation = ToolsetActivation()
        assert enable_answer(INDEX, activation, {"name": "ping"}) == "Toolset 'ping' activated."
        assert activation.active_names() == {"ping"}
        assert enable_answer(INDEX, activation, {"name": "ping"}) == (
            "Toolset 'ping' is already active."
        )

    async def test_already_active_refreshes_use(self, autojump_clock: trio.abc.Clock) -> None:
        """'already active' counts as a use, restarting the expiry."""
        activation = ToolsetActivation(timeout=60)
        enable_answer(INDEX, activation, {"name": "ping"})
        await trio.sleep(50)
        enable_answer(INDEX, activation, {"name": "ping"})
        await trio.sleep(50)
        assert activation.active_names() == {"ping"}

    async def test_unknown_name_lists_the_available_toolsets(self) -> None:
        """An unknown name is an error result naming what exists; nothing is activated."""
        activation = ToolsetActivation()
        with pytest.raises(
            ToolError, match=r"^unknown toolset 'pong'; available toolsets: ping, files$"
        ):
            enable_answer(INDEX, activation, {"name": "pong"})
        assert activation.active_names() == frozenset()

    @pytest.mark.parametrize(
        ("arguments", "problem"),
        [({}, "is missing"), ({"name": ""}, "is empty"), ({"name": "  "}, "is empty")],
    )
    async def test_missing_or_empty_name(self, arguments: JsonObject, problem: str) -> None:
        """enable_toolset({}) is an error result that says what is missing and what to pass."""
        with pytest.raises(
            ToolError,
            match=rf'^toolset name {problem}; call enable_toolset\({{"name": X}}\) '
            r"with X one of: ping, files$",
        ):
            enable_answer(INDEX, ToolsetActivation(), arguments)

    async def test_name_of_the_wrong_type(self) -> None:
        """A non-string name is named in the error."""
        with pytest.raises(ToolError, match=r"^toolset name must be a string, got a number 3;"):
            enable_answer(INDEX, ToolsetActivation(), {"name": 3})


class TestDisable:
    async def test_deactivates_and_is_idempotent(self) -> None:
        """disable answers 'deactivated' whether or not the toolset was active."""
        activation = ToolsetActivation()
        activation.enable("ping")
        assert disable_answer(INDEX, activation, {"name": "ping"}) == "Toolset 'ping' deactivated."
        assert activation.active_names() == frozenset()
        assert disable_answer(INDEX, activation, {"name": "ping"}) == "Toolset 'ping' deactivated."

    async def test_unknown_and_missing(self) -> None:
        """disable gets the same helpful errors as enable."""
        with pytest.raises(ToolError, match=r"^unknown toolset 'x'; available toolsets: ping"):
            disable_answer(INDEX, ToolsetActivation(), {"name": "x"})
        with pytest.raises(ToolError, match=r"^toolset name is missing; call disable_toolset"):
            disable_answer(INDEX, ToolsetActivation(), {})


class TestTools:
    async def test_bound_to_one_conversation(self) -> None:
        """Each pair acts on its own activation only."""
        mine, theirs = ToolsetActivation(), ToolsetActivation()
        enable, disable = toolset_control_tools(INDEX, mine)
        assert (enable.name, disable.name) == (ENABLE_TOOLSET, DISABLE_TOOLSET)
        assert await enable.handler({"name": "files"}) == "Toolset 'files' activated."
        assert mine.active_names() == {"files"}
        assert theirs.active_names() == frozenset()
        assert await disable.handler({"name": "files"}) == "Toolset 'files' deactivated."
        assert mine.active_names() == frozenset()

    async def test_schema_is_a_string_name_and_nothing_else(self) -> None:
        """Both tools take {"name": string} (enable also some ``tools``); other
        fields and types are refused."""
        enable, disable = toolset_control_tools(INDEX, ToolsetActivation())
        assert disable.parameters == TOOLSET_NAME_PARAMETERS
        assert enable.parameters == ENABLE_TOOLSET_PARAMETERS
        assert set(enable.parameters["properties"]) == {"name", "tools"}  # type: ignore[arg-type]
        assert parse_arguments(enable, '{"name": "ping"}') == {"name": "ping"}
        with pytest.raises(ToolError, match=r"field 'toolset' is not an accepted field"):
            parse_arguments(enable, '{"toolset": "ping"}')
        with pytest.raises(ToolError, match=r"field 'name' must be a string, got a number 1"):
            parse_arguments(enable, '{"name": 1}')

    async def test_empty_arguments_get_the_helpful_error(self) -> None:
        """enable_toolset({}) passes validation, so the answer lists the toolsets."""
        enable, _ = toolset_control_tools(INDEX, ToolsetActivation())
        arguments = parse_arguments(enable, "{}")
        with pytest.raises(ToolError, match=r"^toolset name is missing; .* one of: ping, files$"):
            await enable.handler(arguments)

    async def test_errors_reach_the_caller_as_tool_errors(self) -> None:
        """The handler raises ToolError, which the agent turns into an error result."""
        enable, _ = toolset_control_tools(INDEX, ToolsetActivation())
        with pytest.raises(ToolError, match=r"^toolset name is missing"):
            await enable.handler({})
