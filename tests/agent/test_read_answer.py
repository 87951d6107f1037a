"""``read_answer``: what the machine is told of a typed turn's answer, and the
value read from it, for any mix of text and calls, with and without the
final-answer tool (``structured_output="tool"``)."""

from __future__ import annotations

import json

import attrs
from hypothesis import given
from hypothesis import strategies as st

from agentik._messages import Message, Role, ToolCall
from agentik.agent._output import (
    FINAL_ANSWER,
    NOT_READ,
    final_answer_tool,
    output_spec,
    read_answer,
)
from agentik.agent._turn_events import CallPlan, ModelAnswered
from agentik.toolsets import NamedTool


@attrs.frozen
class Weather:
    city: str
    degrees: int


SPEC = output_spec(Weather)
TOOL = final_answer_tool(SPEC)
VALID = json.dumps({"city": "Oslo", "degrees": 3})

texts = st.sampled_from([VALID, '{"city": "Oslo"}', "not json", "", '{"city": 1, "degrees": "x"}'])
names = st.sampled_from([FINAL_ANSWER, "search", "weather_get"])
calls = st.lists(st.tuples(names, texts), max_size=4).map(
    lambda pairs: tuple(ToolCall(f"c{i}", name, args) for i, (name, args) in enumerate(pairs))
)


def planned(call: ToolCall) -> CallPlan:
    return CallPlan(call, needs_approval=True)  # marked: the shell's plan, not a bare one


def read(
    text: str, made: tuple[ToolCall, ...], tool: NamedTool | None
) -> tuple[Message, ModelAnswered, object]:
    """The answer of ``text`` and ``made`` calls, read with ``tool`` (or none)."""
    message = Message(Role.ASSISTANT, text, made)
    answered, value = read_answer(message, SPEC, tool, planned)
    return message, answered, value


def _valid(text: str) -> bool:
    try:
        SPEC.load(text)
    except ValueError:
        return False
    return True


@given(texts, calls)
def test_without_the_answer_tool_text_is_the_answer_and_calls_are_planned(
    text: str, made: tuple[ToolCall, ...]
) -> None:
    message, answered, value = read(text, made, None)
    assert answered.message is message
    assert answered.output_text is None
    if made:  # calls to run: every one planned by the shell, nothing read
        assert [p.call for p in answered.plans] == list(made)
        assert all(p.needs_approval for p in answered.plans)
        assert (value, answered.invalid_output) == (NOT_READ, None)
    elif _valid(text):
        assert value == SPEC.load(text) and answered.invalid_output is None
    else:  # refused with why, for the model to try again
        assert value is NOT_READ and answered.invalid_output


@given(texts, calls)
def test_with_the_answer_tool_a_lone_call_of_it_is_the_answer(
    text: str, made: tuple[ToolCall, ...]
) -> None:
    _, answered, value = read(text, made, TOOL)
    assert [p.call for p in answered.plans] == list(made)
    lone = len(made) == 1 and made[0].name == FINAL_ANSWER
    if lone and _valid(made[0].arguments):
        assert value == SPEC.load(made[0].arguments)
        assert answered.output_text == made[0].arguments
        assert answered.invalid_output is None
    else:
        assert value is NOT_READ and answered.output_text is None
        assert bool(answered.invalid_output) == lone  # an invalid lone answer says why
    # The final-answer tool's calls are never planned to run; the others are.
    for plan in answered.plans:
        assert plan.needs_approval == (plan.call.name != FINAL_ANSWER)
