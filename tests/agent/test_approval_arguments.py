"""A call is validated before a person is asked about it (issue: hardening, item 12).

A person must never be asked ``approve wire_money({"amount": "lots"})?`` only
to learn, after saying yes, that the arguments were invalid. The turn machine
decides: a call whose arguments do not match its tool's schema gets that
error as its one tool result, the model sees it and goes on, and it is never
in ``TurnResult.approvals`` nor ``pending_approvals``; a valid call is still
asked about. The transports all read those two, so they cannot ask either
(tests/server/test_approval_arguments.py shows each).

The property tests draw schemas and argument values at random and hold the
agent's verdict to jsonschema's, the oracle the validators are checked
against (tests/toolsets/test_validation_properties.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import referencing.exceptions
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from agentik import (
    Message,
    ModelRequest,
    ModelResponse,
    NamedTool,
    Role,
    ToolCall,
    ToolsetContribution,
    in_memory_storage,
    open_chat_agent,
    tool,
)
from agentik._json import JsonObject, JsonValue
from agentik.agent import ToolCallFinished, ToolCallStarted, TurnFinished
from agentik.models import ScriptedModel
from tests.agent.helpers import assert_valid_history, stored
from tests.reliability.helpers import BACKENDS, Backend
from tests.toolsets.schema_strategies import json_values, schemas

RUNS: list[str] = []


@tool(requires_approval=True)
async def wire_money(amount: int) -> str:
    """Send money."""
    RUNS.append(f"wire {amount}")
    return f"sent {amount}"


@pytest.fixture(autouse=True)
def _clear_runs() -> None:
    RUNS.clear()


def calling(*calls: ToolCall) -> ScriptedModel:
    """Makes ``calls`` on a turn's first model call; then answers with the
    tool results it saw, ``|``-joined (so a test reads what reached the model)."""

    def respond(request: ModelRequest) -> ModelResponse:
        messages = request.messages
        user_at = max(i for i, m in enumerate(messages) if m.role is Role.USER)
        turn = messages[user_at:]
        if len(turn) == 1:
            return ModelResponse(tool_calls=calls)
        return ModelResponse(text=" | ".join(m.content for m in turn if m.role is Role.TOOL))

    return ScriptedModel(respond)


def results_of(history: list[Message]) -> dict[str, list[str]]:
    """The tool results of each call id, in order."""
    found: dict[str, list[str]] = {}
    for message in history:
        if message.tool_call_id is not None:
            found.setdefault(message.tool_call_id, []).append(message.content)
    return found


@pytest.mark.parametrize("backend", BACKENDS)
async def test_the_reported_call_is_refused_and_nobody_is_asked(
    backend: str, tmp_path: Path
) -> None:
    """The testers' case: ``{"amount": "lots"}`` is answered with the schema's
    error at once; a valid call in the same answer still waits for a person."""
    bad = ToolCall("c1", "wire_money", '{"amount": "lots"}')
    good = ToolCall("c2", "wire_money", '{"amount": 5}')
    store = Backend(backend, tmp_path / "db")
    async with (
        store.open() as storage,
        open_chat_agent(model=calling(bad, good), storage=storage, tools=[wire_money]) as agent,
    ):
        paused = await agent.send("conv", "pay")
        assert paused.status == "awaiting_approval"
        assert [a.call for a in paused.approvals] == [good]
        assert [a.call for a in await agent.pending_approvals("conv")] == [good]
        done = await agent.decide("conv", "c2", approve=True)
        assert done.status == "finished"
        assert done.text == (
            "error: invalid arguments for tool 'wire_money': field 'amount' must be an"
            ' integer, got a string "lots" | sent 5'
        )
        assert RUNS == ["wire 5"]
        history = await stored(storage, "conv")
    assert_valid_history(history)
    assert results_of(history) == {
        "c1": [done.text.split(" | ")[0]],
        "c2": ["sent 5"],
    }


async def test_a_turn_whose_only_call_is_invalid_never_pauses() -> None:
    bad = ToolCall("c1", "wire_money", '{"amount": 5, "to": "me"}')
    storage = in_memory_storage()
    async with open_chat_agent(model=calling(bad), storage=storage, tools=[wire_money]) as agent:
        result = await agent.send("conv", "pay")
        assert (result.status, result.approvals) == ("finished", ())
        assert result.text.startswith("error: invalid arguments for tool 'wire_money': ")
        assert await agent.pending_approvals("conv") == ()
    assert RUNS == []


async def test_the_policy_sees_only_valid_calls() -> None:
    """An approval policy is asked about valid calls only: an invalid one is
    refused first, whatever the policy would have said (or raised)."""
    asked: list[str] = []

    def policy(conversation_id: str, call: ToolCall) -> bool:
        asked.append(call.id)
        return json.loads(call.arguments)["amount"] > 10  # raises on a bad call

    @tool
    async def pay(amount: int) -> str:
        """Pay."""
        RUNS.append(f"pay {amount}")
        return f"paid {amount}"

    model = calling(
        ToolCall("c1", "pay", '{"amount": 50}'),
        ToolCall("c2", "pay", '{"amount": "x"}'),
        ToolCall("c3", "pay", "not json"),
        ToolCall("c4", "pay", '{"amount": 5}'),
    )
    async with open_chat_agent(
        model=model, storage=in_memory_storage(), tools=[pay], approval_policy=policy
    ) as agent:
        paused = await agent.send("conv", "go")
        assert [a.call.id for a in paused.approvals] == ["c1"]
        assert asked == ["c1", "c4"]
        assert RUNS == ["pay 5"]


async def test_an_invalid_call_still_switches_its_toolset_on() -> None:
    """Activation depends on the name alone (DESIGN.md), also for a call of an
    inactive toolset's tool that needs approval and is refused."""

    @tool
    async def bank_wire(amount: int) -> str:
        """Wire."""
        RUNS.append("wire")
        return "sent"

    bank = ToolsetContribution(
        name="bank", description="Moves money.", tools=(bank_wire,), requires_approval=True
    )
    model = calling(ToolCall("c1", "bank_wire", '{"amount": []}'))
    async with open_chat_agent(model=model, storage=in_memory_storage(), toolsets=[bank]) as agent:
        result = await agent.send("conv", "go")
        assert result.status == "finished"
        assert [s.name for s in agent.toolset_status("conv") if s.active] == ["bank"]
    assert RUNS == []


async def test_a_stream_shows_the_refused_call_and_its_error() -> None:
    """A streaming reader sees the refused call start and end with its error,
    as any failed call; the stream finishes with nothing waiting."""
    bad = ToolCall("c1", "wire_money", '{"amount": "lots"}')
    async with open_chat_agent(
        model=calling(bad), storage=in_memory_storage(), tools=[wire_money]
    ) as agent:
        async with agent.stream("conv", "pay") as events:
            seen = [e async for e in events]
    assert isinstance(seen[-1], TurnFinished)
    assert seen[-1].result.approvals == ()
    started = [e.call for e in seen if isinstance(e, ToolCallStarted)]
    finished = [(e.call, e.is_error) for e in seen if isinstance(e, ToolCallFinished)]
    assert started == [bad]
    assert finished == [(bad, True)]


# --- the class: any schema, any arguments ------------------------------------------


def oracle_accepts(schema: JsonValue, raw: str) -> bool:
    """jsonschema's verdict on the raw argument text of a call (empty counts as
    ``{}``, as the agent reads it); a schema jsonschema refuses accepts nothing."""
    try:
        value = json.loads(raw, parse_constant=_no_constant) if raw.strip() else {}
    except ValueError:
        return False
    if not isinstance(value, dict):
        return False
    assert isinstance(schema, dict | bool)
    cls = jsonschema.validators.validator_for(schema)
    try:
        cls.check_schema(schema)
    except jsonschema.SchemaError:
        return False
    try:
        return bool(cls(schema).is_valid(value))
    except referencing.exceptions.Unresolvable:  # a reference that leads nowhere
        return False


def _no_constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON")  # NaN, Infinity: Python's json reads them


raw_arguments = st.one_of(
    json_values.map(json.dumps),
    st.dictionaries(st.sampled_from(["a", "b", "x-1", "c"]), json_values, max_size=4).map(
        json.dumps
    ),
    st.sampled_from(["", "{", "[]", "null", '{"a": NaN}', "not json", '{"a": 1}{'])
    | st.text(max_size=8),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    schema=schemas().filter(lambda s: isinstance(s, dict)),
    calls=st.lists(raw_arguments, min_size=1, max_size=3),
    via=st.sampled_from(["tool", "toolset", "policy"]),
)
async def test_no_invalid_call_is_ever_presented_for_approval(
    schema: JsonObject, calls: list[str], via: str
) -> None:
    """For random schemas and argument text: every call the oracle refuses gets
    exactly one result, an error, and is never asked about nor run; every
    call it accepts is asked about (and runs once approved)."""
    ran: list[JsonObject] = []

    async def handler(arguments: JsonObject) -> str:
        ran.append(arguments)
        return "ran"

    made = tuple(ToolCall(f"c{i}", "vault_open", raw) for i, raw in enumerate(calls))
    target = NamedTool(
        "vault_open", "Opens the vault.", schema, handler, requires_approval=via == "tool"
    )
    vault = ToolsetContribution(
        name="vault", description="The vault.", tools=(target,), requires_approval=via == "toolset"
    )
    valid = {c.id for c in made if oracle_accepts(schema, c.arguments)}
    event(f"valid calls: {len(valid)} of {len(made)}")
    async with open_chat_agent(
        model=calling(*made),
        storage=in_memory_storage(),
        toolsets=[vault],
        approval_policy=(lambda cid, call: True) if via == "policy" else None,
    ) as agent:
        result = await agent.send("conv", "open it")
        asked = [a.call.id for a in result.approvals]
        assert asked == [c.id for c in made if c.id in valid]
        assert [a.call.id for a in await agent.pending_approvals("conv")] == asked
        assert ran == [], "nothing runs before a person decides"
        assert result.status == ("awaiting_approval" if valid else "finished")
        for call_id in asked:
            result = await agent.decide("conv", call_id, approve=True)
        assert result.status == "finished"
        history = await stored(agent.storage, "conv")
    assert_valid_history(history)
    results = results_of(history)
    assert set(results) == {c.id for c in made}
    for c in made:
        [content] = results[c.id]
        if c.id in valid:
            assert content == "ran"
        else:
            assert content.startswith("error: "), content
    assert len(ran) == len(valid)
