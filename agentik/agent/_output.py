"""Typed answers: what ``send(..., output=T)`` asks the model for and how its
answer is read.

``output_spec(T)`` turns ``T`` (an attrs class, a dataclass, a ``TypedDict``,
or a JSON Schema dict) into an ``OutputSpec``: the JSON Schema the model is
asked to answer in (``ModelRequest.output_schema``, titled with the class's
name), and ``load``, which reads the answer's text into the value or raises
``InvalidOutput`` with the words the model is shown.
Classes are read by the one cattrs converter (``agentik._serde``, strict: no
coercion, no unknown keys); a schema dict is checked by jsonschema
(``agentik.toolsets.compile_schema``: its dialect, no remote ``$ref``).

A backend that cannot take ``response_format`` (``structured_output="tool"``)
is offered ``final_answer_tool``: its parameters are the schema (wrapped as
the property ``answer`` when the schema is not an object: tool parameters
are an object), and ``tool_answer`` reads a call's arguments into the value
and the answer's JSON text, which the turn stores as its final text as in
the other mode.

The answer's text (the JSON) is what the turn stores, so ``load`` of the
stored text gives the value back: that is how a keyed retry returns the same
output. Pure: no I/O.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Final, TypeAlias, cast

import attrs

from agentik._errors import TurnError
from agentik._json import JsonObject, JsonValue
from agentik._messages import Message, ToolCall
from agentik._serde import converter, structure_error
from agentik.agent._events import TurnResult
from agentik.agent._turn_events import CallPlan, ModelAnswered
from agentik.toolsets import NamedTool, compile_schema, schema_for_type

OutputType: TypeAlias = type | Mapping[str, JsonValue]
"""What ``send(..., output=...)`` takes: an attrs class, a dataclass, a
``TypedDict``, or a JSON Schema."""


class InvalidOutput(ValueError):
    """The model's answer does not match the output schema; the message says
    how, in words the model can act on."""


@attrs.frozen(kw_only=True)
class OutputSpec:
    """What a typed turn asks of the model's final answer."""

    schema: JsonObject
    """Its ``title`` names it on the wire (a class's name)."""
    load: Callable[[str], object] = attrs.field(eq=False)
    """The answer's text -> the value; raises ``InvalidOutput``."""


_NAME: Final = re.compile(r"[A-Za-z0-9_-]{1,64}")
_MAX_SHOWN: Final = 200


def output_spec(output: object) -> OutputSpec:
    """The spec of ``output``: a class (attrs, dataclass, ``TypedDict``) or a
    JSON Schema dict. Raises ``ValueError`` for anything else, or a schema
    that is not valid JSON Schema."""
    if isinstance(output, Mapping):
        return _schema_spec(cast("JsonObject", dict(output)))
    if not isinstance(output, type):
        raise ValueError(
            f"output must be a class (attrs, dataclass, TypedDict) or a JSON Schema dict,"
            f" got {type(output).__name__}"
        )
    try:
        schema = schema_for_type(output)
    except TypeError as error:
        raise ValueError(f"output {output.__qualname__} cannot be described: {error}") from None
    if schema.get("type") != "object":
        raise ValueError(f"output {output.__qualname__} must be a class with fields")
    cls = output

    def load(text: str) -> object:
        data = _parse(text)
        try:
            return converter.structure(data, cls)
        except Exception as error:  # cattrs reports every bad field in one group
            raise InvalidOutput(structure_error(error)) from None

    if _NAME.fullmatch(output.__name__):
        schema = {"title": output.__name__, **schema}
    return OutputSpec(schema=schema, load=load)


def _schema_spec(schema: JsonObject) -> OutputSpec:
    try:
        check = compile_schema(schema)
    except ValueError as error:
        raise ValueError(f"output_schema is not usable: {error}") from None

    def load(text: str) -> object:
        data = _parse(text)
        try:
            failure = check(data)
        except RecursionError:
            raise InvalidOutput("the answer is nested too deeply") from None
        if failure is not None:
            field = failure.field()
            subject = f"field {field!r}" if field else "the answer"
            raise InvalidOutput(f"{subject} {failure.message}")
        return data

    return OutputSpec(schema=schema, load=load)


def _parse(text: str) -> JsonValue:
    try:
        value: JsonValue = json.loads(text)
    except ValueError as error:
        shown = text if len(text) <= _MAX_SHOWN else text[:_MAX_SHOWN] + "…"
        raise InvalidOutput(f"the answer is not JSON ({error}): {shown!r}") from None
    return value


FINAL_ANSWER: Final = "final_answer"
"""The final-answer tool's name (``structured_output="tool"``)."""

_WRAPPED: Final = "answer"


def final_answer_tool(spec: OutputSpec) -> NamedTool:
    """The tool a ``structured_output="tool"`` model calls to answer. It never
    runs: the turn reads the call's arguments (``tool_answer``)."""
    schema = spec.schema
    if schema.get("type") != "object":
        schema = {"type": "object", "properties": {_WRAPPED: schema}, "required": [_WRAPPED]}
    return NamedTool(
        FINAL_ANSWER,
        "Give your final answer to the user's request by calling this tool, alone,"
        " once you have everything you need; its arguments are the answer.",
        schema,
        _never_runs,
    )


async def _never_runs(arguments: JsonObject) -> str:
    raise AssertionError("the final-answer tool is read by the turn, never run")


def tool_answer(spec: OutputSpec, arguments: str) -> tuple[object, str]:
    """The value a final-answer call gives and its JSON text (what the turn
    stores, and ``spec.load`` reads back); raises ``InvalidOutput``."""
    if spec.schema.get("type") == "object":
        return spec.load(arguments), arguments
    data = _parse(arguments)
    if not isinstance(data, dict) or set(data) != {_WRAPPED}:
        raise InvalidOutput(f"the arguments must be an object with the one property {_WRAPPED!r}")
    text = json.dumps(data[_WRAPPED], ensure_ascii=False)
    return spec.load(text), text


class _NotRead:
    """``read_answer``'s value when the answer gave none (its type, for mypy)."""


NOT_READ: Final = _NotRead()
"""The value of an answer that gave none: calls to run, or an invalid one."""


def read_answer(
    message: Message,
    spec: OutputSpec | None,
    answer_tool: NamedTool | None,
    plan: Callable[[ToolCall], CallPlan],
) -> tuple[ModelAnswered, object]:
    """What the machine is told of the model's answer ``message`` (the
    assistant message to record; ``plan`` plans a call to run), and the value
    it gives (``NOT_READ`` if none). Calls are planned; a text answer of a
    typed turn (``spec``) without a final-answer tool is the value, read
    (``spec.load``) or refused with why; with one (``structured_output="tool"``),
    a lone call of it is the answer, read from its arguments, and one beside
    other calls is planned as it is, for the machine to refuse."""
    calls = message.tool_calls
    if answer_tool is None:
        if calls:
            return ModelAnswered(message, tuple([plan(call) for call in calls])), NOT_READ
        if spec is None:  # an untyped turn's answer
            return ModelAnswered(message), NOT_READ
        try:
            return ModelAnswered(message), spec.load(message.content)
        except InvalidOutput as error:
            return ModelAnswered(message, (), str(error)), NOT_READ
    assert spec is not None  # a final-answer tool is a typed turn's
    if not calls:
        return ModelAnswered(message), NOT_READ
    if len(calls) == 1 and calls[0].name == FINAL_ANSWER:
        lone = CallPlan(calls[0])
        try:
            value, text = tool_answer(spec, calls[0].arguments)
        except InvalidOutput as error:
            return ModelAnswered(message, (lone,), str(error)), NOT_READ
        return ModelAnswered(message, (lone,), output_text=text), value
    plans = [CallPlan(c) if c.name == FINAL_ANSWER else plan(c) for c in calls]
    return ModelAnswered(message, tuple(plans)), NOT_READ


def stored_output(result: TurnResult, spec: OutputSpec) -> TurnResult:
    """A keyed retry's result with its output read from the stored answer (the
    turn's final text, the JSON it was validated from): the same value."""
    if result.status != "finished" or result.output is not None:
        return result
    try:
        value = spec.load(result.text)
    except InvalidOutput as error:
        raise TurnError(
            f"the stored answer of this turn does not match output: {error}",
            code="invalid_output",
        ) from None
    return attrs.evolve(result, output=value)
