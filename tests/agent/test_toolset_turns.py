"""Toolsets through real turns: what the model is offered and told, auto-
activation by name, enable/disable as ordinary tool messages, expiry."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from agentik import Message, ModelRequest, ModelResponse, NamedTool, Role
from agentik.agent import ChatAgent, open_chat_agent
from agentik.models import ScriptedModel
from agentik.storage import in_memory_storage
from agentik.testing import (
    Script,
    assert_toolset_active,
    assert_toolset_inactive,
    assert_valid_history,
    history,
)
from agentik.toolsets import ToolsetContribution
from tests.agent.helpers import by_turn, call


async def _pong(arguments: dict[str, object]) -> str:
    return "pong"


PING = ToolsetContribution(
    "ping",
    "Network checks.",
    [NamedTool("ping", "Ping.", {"type": "object", "properties": {}}, _pong)],
)
WEATHER = ToolsetContribution(
    "weather",
    "Forecasts.",
    [
        NamedTool(
            "weather_today",
            "Today's weather.",
            {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
            _pong,
        )
    ],
)


class Recorder:
    """Wraps a responder and keeps every request (for raw scripts the plugin's
    ``Script`` does not write, such as malformed arguments)."""

    def __init__(self, script: dict[str, list[ModelResponse | str]]) -> None:
        self.requests: list[ModelRequest] = []
        self._respond = by_turn(script)

    def __call__(self, request: ModelRequest) -> ModelResponse:
        self.requests.append(request)
        return self._respond(request)

    def offered(self, i: int) -> set[str]:
        return {t.name for t in self.requests[i].tools}

    def system(self, i: int) -> str:
        message = self.requests[i].messages[0]
        assert message.role is Role.SYSTEM
        return message.content


@pytest.fixture
def agentik_agent_options() -> dict[str, object]:
    """The plugin's agent (agentik.testing) with both toolsets and no built-in tools."""
    return {"toolsets": [PING, WEATHER], "builtin_tools": False}


def offered(script: Script, i: int) -> set[str]:
    return {t.name for t in script.requests[i].tools}


def system(script: Script, i: int) -> str:
    message = script.requests[i].messages[0]
    assert message.role is Role.SYSTEM
    return message.content


@pytest.mark.parametrize("agentik_agent_options", [{"builtin_tools": False}])
async def test_no_toolsets_means_nothing_extra(
    agentik_agent: ChatAgent, agentik_script: Script
) -> None:
    """Without contributions: no enable/disable tools, no toolset section."""
    agentik_script.when_user_says("hi").answer("hello")
    await agentik_agent.send("c", "hi")
    assert offered(agentik_script, 0) == set()
    assert "## Toolsets" not in system(agentik_script, 0)


async def test_calling_an_inactive_tool_by_name_activates_its_toolset(
    agentik_agent: ChatAgent, agentik_script: Script
) -> None:
    """ping() with ping inactive: runs, returns its own result, and from the next
    request on the toolset is active in the prompt and its tools are offered."""
    agentik_script.when_user_says("go").call("ping").answer("done")
    result = await agentik_agent.send("c", "go")
    assert result.messages[2].content == "pong"
    assert "activat" not in result.messages[2].content.lower()
    assert_toolset_active(agentik_agent, "c", "ping")
    assert_toolset_inactive(agentik_agent, "c", "weather")
    assert offered(agentik_script, 0) == {"enable_toolset", "disable_toolset"}
    assert offered(agentik_script, 1) == {"enable_toolset", "disable_toolset", "ping"}
    assert "ACTIVE\n(none)" in system(agentik_script, 0)
    assert "ACTIVE\nping — Network checks." in system(agentik_script, 1)
    assert 'INACTIVE call enable_toolset({"name": X}) to add\nweather — Forecasts.' in system(
        agentik_script, 1
    )


async def test_enable_and_disable_are_ordinary_tool_messages(
    agentik_agent: ChatAgent, agentik_script: Script
) -> None:
    """The answers of DESIGN.md, recorded as tool-call / tool-result pairs."""
    agentik_script.when_user_says("go").call("enable_toolset", {"name": "weather"}).call(
        "enable_toolset", {"name": "weather"}
    ).call("disable_toolset", {"name": "weather"}).call(
        "disable_toolset", {"name": "weather"}
    ).call("enable_toolset", {"name": "nope"}).call("enable_toolset", {}).answer("ok")
    result = await agentik_agent.send("c", "go")
    results = [m.content for m in result.messages if m.role is Role.TOOL]
    assert results[:4] == [
        "Toolset 'weather' activated.",
        "Toolset 'weather' is already active.",
        "Toolset 'weather' deactivated.",
        "Toolset 'weather' deactivated.",
    ]
    assert results[4].startswith("error: ")
    assert "ping" in results[4]
    assert "weather" in results[4]
    assert results[5].startswith("error: ")
    assert "weather_today" in offered(agentik_script, 1)
    assert "weather_today" not in offered(agentik_script, 3)
    assert_valid_history(await history(agentik_agent, "c"))


async def test_unknown_name_with_known_prefix_is_an_error_not_an_activation(
    agentik_agent: ChatAgent, agentik_script: Script
) -> None:
    """weather_tomorrow is not in weather: an error, and weather stays inactive."""
    agentik_script.when_user_says("go").call("weather_tomorrow").answer("ok")
    result = await agentik_agent.send("c", "go")
    assert_toolset_inactive(agentik_agent, "c", "weather")
    assert_toolset_inactive(agentik_agent, "c", "ping")
    assert result.messages[2].content == "error: tool 'weather_tomorrow' not found"


async def test_malformed_call_still_activates() -> None:
    """Activation depends on the name alone: bad arguments still switch the
    toolset on (so its schema is offered) and get an error result."""
    rec = Recorder({"go": [call("weather_today", raw="{oops"), "ok"]})
    async with open_chat_agent(
        model=ScriptedModel(rec),
        storage=in_memory_storage(),
        toolsets=[PING, WEATHER],
        builtin_tools=False,
    ) as agent:
        result = await agent.send("c", "go")
    assert result.messages[2].content.startswith("error: ")
    assert "weather_today" in rec.offered(1)


@pytest.mark.parametrize(
    "agentik_agent_options", [{"toolsets": [PING], "builtin_tools": False, "idle_timeout": 5}]
)
async def test_activation_expires_after_ten_minutes(
    agentik_agent: ChatAgent, agentik_script: Script, autojump_clock: trio.testing.MockClock
) -> None:
    """Unused for 600 s, a toolset drops out of the prompt and the tools; the
    conversation task stays alive until then, so nothing is forgotten early."""
    agentik_script.when_user_says("a").call("ping").answer("ok")
    agentik_script.when_user_says("b").answer("ok")
    agentik_script.when_user_says("c").answer("ok")
    await agentik_agent.send("c", "a")
    await trio.sleep(599)
    assert agentik_agent.live_conversations == 1
    await agentik_agent.send("c", "b")  # ping still active (599 s < 600 s)
    await trio.sleep(601)
    assert_toolset_inactive(agentik_agent, "c", "ping")
    await agentik_agent.send("c", "c")
    assert "ping" in offered(agentik_script, 2)
    assert "ping" not in offered(agentik_script, 3)
    assert "ACTIVE\n(none)" in system(agentik_script, 3)


@pytest.mark.parametrize("agentik_agent_options", [{"toolsets": [PING], "builtin_tools": False}])
async def test_activation_is_per_conversation(
    agentik_agent: ChatAgent, agentik_script: Script
) -> None:
    """Activating in one conversation changes nothing in another."""
    agentik_script.when_user_says("a").call("ping").answer("ok")
    agentik_script.when_user_says("b").answer("ok")
    await agentik_agent.send("one", "a")
    await agentik_agent.send("two", "b")
    assert_toolset_active(agentik_agent, "one", "ping")
    assert_toolset_inactive(agentik_agent, "two", "ping")
    assert "ping" not in offered(agentik_script, 2)


@pytest.mark.parametrize(
    ("tools", "toolsets", "message"),
    [
        ([NamedTool("ping", "x", {}, _pong)], [PING], "'ping' of toolset 'ping' is also a core"),
        ([NamedTool("enable_toolset", "x", {}, _pong)], [PING], "appears twice"),
        ([NamedTool("a b", "x", {}, _pong)], [], "must match"),
        ([], [PING, PING], "contributed twice"),
    ],
)
async def test_conflicting_configuration_is_refused(
    tools: list[NamedTool], toolsets: list[ToolsetContribution], message: str
) -> None:
    """A name twice across core tools and toolsets (enable_toolset included) is refused."""
    with pytest.raises(ValueError, match=message):
        async with open_chat_agent(
            model=ScriptedModel(lambda r: ModelResponse(text="x")),
            storage=in_memory_storage(),
            tools=tools,
            toolsets=toolsets,
        ):
            pass


async def test_a_changing_source_shows_new_tools_next_request() -> None:
    """A ToolsetSource (e.g. an MCP server) may change its tools; the next model
    request sees the new contribution."""

    class Source:
        def __init__(self) -> None:
            self.contribution = PING

    source = Source()
    rec = Recorder({"a": [call("ping"), "ok"], "b": [call("ping_two"), "ok"]})
    async with open_chat_agent(
        model=ScriptedModel(rec),
        storage=in_memory_storage(),
        toolsets=[source],
        builtin_tools=False,
    ) as agent:
        await agent.send("c", "a")
        source.contribution = ToolsetContribution(
            "ping",
            "Network checks.",
            [*PING.tools, NamedTool("ping_two", "Ping twice.", {"type": "object"}, _pong)],
        )
        result = await agent.send("c", "b")
    assert result.messages[2].content == "pong"
    assert "ping_two" in rec.offered(2)


def _message_texts(request: ModelRequest) -> list[str]:
    return [m.content for m in request.messages if isinstance(m, Message)]
