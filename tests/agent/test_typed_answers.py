"""Typed answers: ``send(..., output=T)`` asks for a schema, validates the
answer, sends an invalid one back with its error, and stores the valid one
(its JSON is the turn's text) so a keyed retry returns the same value."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import TypedDict

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentik import (
    Message,
    ModelRequest,
    ModelResponse,
    Role,
    ScriptedModel,
    ToolCall,
    TurnError,
    in_memory_storage,
    open_chat_agent,
)
from agentik.agent import TurnFinished
from agentik.storage import StorageBundle, open_postgres_storage, open_sqlite_storage
from tests.agent.helpers import assert_valid_history, call, stored
from tests.postgres import fresh_schema


@attrs.frozen(kw_only=True)
class City:
    name: str
    population: int


@dataclasses.dataclass(frozen=True)
class Point:
    x: float
    y: float
    label: str = ""


class Weather(TypedDict):
    city: str
    celsius: float


def answers(*texts: str) -> tuple[ScriptedModel, list[ModelRequest]]:
    """A model answering ``texts`` in order (the last one again after that),
    and the requests it got."""
    seen: list[ModelRequest] = []

    def respond(request: ModelRequest) -> ModelResponse:
        seen.append(request)
        return ModelResponse(text=texts[min(len(seen), len(texts)) - 1])

    return ScriptedModel(respond), seen


async def test_bad_json_twice_then_good_succeeds_after_three_requests() -> None:
    """Two invalid answers are sent back with their errors; the third is the
    output, and only it is stored."""
    model, seen = answers("not json", '{"name": "Oslo"}', '{"name": "Oslo", "population": 709000}')
    storage = in_memory_storage()
    async with open_chat_agent(model=model, storage=storage) as agent:
        result = await agent.send("c", "biggest city in Norway?", output=City)
    assert result.output == City(name="Oslo", population=709000)
    assert len(seen) == 3
    assert all(r.output_schema is not None for r in seen)
    schema = seen[0].output_schema
    assert schema is not None
    assert schema["title"] == "City"
    assert schema["required"] == ["name", "population"]
    # The second request shows the first answer and why it was refused.
    second = seen[1].messages
    assert second[-2] == Message(Role.ASSISTANT, "not json")
    assert second[-1].role is Role.USER
    assert "is not JSON" in second[-1].content
    third = seen[2].messages
    assert third[-2].content == '{"name": "Oslo"}'
    assert "population" in third[-1].content
    assert "required" in third[-1].content
    history = await stored(storage, "c")
    assert [(m.role, m.content) for m in history] == [
        (Role.USER, "biggest city in Norway?"),
        (Role.ASSISTANT, '{"name": "Oslo", "population": 709000}'),
    ]
    assert result.text == '{"name": "Oslo", "population": 709000}'


async def test_always_bad_fails_invalid_output_with_history_valid() -> None:
    """Past ``output_retries`` the turn fails with ``invalid_output``; nothing
    of the bad answers is stored, and the next turn runs normally."""
    model, seen = answers('{"name": 3}')
    storage = in_memory_storage()
    async with open_chat_agent(model=model, storage=storage, output_retries=1) as agent:
        with pytest.raises(TurnError) as raised:
            await agent.send("c", "q", output=City)
        assert raised.value.code == "invalid_output"
        assert "after 2 tries" in str(raised.value)
        assert "expected a string" in str(raised.value)
        assert len(seen) == 2
        history = await stored(storage, "c")
        assert [(m.role, m.content) for m in history] == [(Role.USER, "q")]
        assert_valid_history(history)
        # The conversation goes on: a plain turn after the failed one.
        after = await agent.send("c", "plain")
        assert after.output is None
    assert_valid_history(await stored(storage, "c"))


async def test_no_retries_fails_at_the_first_bad_answer() -> None:
    model, seen = answers("[]")
    async with open_chat_agent(model=model, storage=in_memory_storage(), output_retries=0) as agent:
        with pytest.raises(TurnError, match="after 1 try") as raised:
            await agent.send("c", "q", output={"type": "object"})
    assert raised.value.code == "invalid_output"
    assert len(seen) == 1


async def test_tool_calls_come_before_the_typed_answer() -> None:
    """Only the final answer (no calls) is validated; tool rounds run as usual."""
    from agentik import tool

    @tool
    async def lookup(city: str) -> str:
        """Look a city up."""
        return "12 C"

    script = [
        call("lookup", {"city": "Oslo"}),
        ModelResponse(text='{"city": "Oslo", "celsius": 12}'),
    ]
    seen: list[ModelRequest] = []

    def respond(request: ModelRequest) -> ModelResponse:
        seen.append(request)
        return script[len(seen) - 1]

    storage = in_memory_storage()
    async with open_chat_agent(
        model=ScriptedModel(respond), storage=storage, tools=[lookup]
    ) as agent:
        result = await agent.send("c", "weather?", output=Weather)
    assert result.output == {"city": "Oslo", "celsius": 12.0}
    assert_valid_history(await stored(storage, "c"))


async def test_dataclass_and_schema_dict_outputs() -> None:
    model, _ = answers('{"x": 1, "y": 2.5}')
    async with open_chat_agent(model=model, storage=in_memory_storage()) as agent:
        point = await agent.send("c", "a point", output=Point)
        assert point.output == Point(1.0, 2.5)
        raw = await agent.send("d", "a point", output={"type": "object", "required": ["x"]})
        assert raw.output == {"x": 1, "y": 2.5}


async def test_stream_finishes_with_the_output() -> None:
    model, _ = answers("nope", '{"name": "Rome", "population": 2800000}')
    async with (
        open_chat_agent(model=model, storage=in_memory_storage()) as agent,
        agent.stream("c", "q", output=City) as events,
    ):
        finals = [e async for e in events if isinstance(e, TurnFinished)]
    assert finals[0].result.output == City(name="Rome", population=2800000)


@pytest.mark.parametrize(
    "output",
    [int, list[int], {"type": "nonsense"}, 3, City(name="a", population=1)],
)
async def test_unusable_output_is_refused_before_anything_runs(output: object) -> None:
    model, seen = answers("{}")
    storage = in_memory_storage()
    async with open_chat_agent(model=model, storage=storage) as agent:
        with pytest.raises(ValueError, match=r"^output"):
            await agent.send("c", "q", output=output)  # type: ignore[arg-type]
    assert seen == []
    assert await stored(storage, "c") == []


async def test_output_retries_is_checked() -> None:
    for bad in (-1, True, 1.5):
        with pytest.raises(ValueError, match="output_retries must be an integer >= 0"):
            async with open_chat_agent(
                model=answers("{}")[0],
                storage=in_memory_storage(),
                output_retries=bad,  # type: ignore[arg-type]
            ):
                pass


# --- keyed retries on every backend ------------------------------------------


def _memory() -> Callable[[], AbstractAsyncContextManager[StorageBundle]]:
    storage = in_memory_storage()

    @asynccontextmanager
    async def same() -> AsyncIterator[StorageBundle]:
        yield storage

    return same


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def reopen(
    request: pytest.FixtureRequest, tmp_path: object
) -> Callable[[], AbstractAsyncContextManager[StorageBundle]]:
    """Opens the same storage again each call (a restart between opens)."""
    if request.param == "memory":
        return _memory()
    if request.param == "sqlite":
        path = f"{tmp_path}/typed.db"
        return lambda: open_sqlite_storage(path)
    dsn: str = request.getfixturevalue("postgres_dsn")
    schema = fresh_schema()
    return lambda: open_postgres_storage(dsn, schema=schema, readers=1)


async def test_keyed_retry_returns_the_stored_output(
    reopen: Callable[[], AbstractAsyncContextManager[StorageBundle]],
) -> None:
    """The same key after a restart returns an equal output without a model
    call: it is read from the stored answer."""
    model, seen = answers("bad", '{"name": "Lima", "population": 10000000}')
    async with reopen() as storage, open_chat_agent(model=model, storage=storage) as agent:
        first = await agent.send("c", "q", idempotency_key="k", output=City)
        again = await agent.send("c", "q", idempotency_key="k", output=City)
    async with reopen() as storage, open_chat_agent(model=model, storage=storage) as agent:
        after_restart = await agent.send("c", "q", idempotency_key="k", output=City)
        as_dict = await agent.send("c", "q", idempotency_key="k", output={"type": "object"})
        history = await stored(storage, "c")
    assert first.output == City(name="Lima", population=10000000)
    assert again.output == first.output
    assert after_restart.output == first.output
    assert as_dict.output == {"name": "Lima", "population": 10000000}
    assert len(seen) == 2
    assert len(history) == 2
    assert json.loads(history[-1].content) == {"name": "Lima", "population": 10000000}


async def test_keyed_retry_after_invalid_output_asks_again(
    reopen: Callable[[], AbstractAsyncContextManager[StorageBundle]],
) -> None:
    """A keyed turn that failed ``invalid_output`` stored only its user
    message; its retry resumes it, validated, with no second user message."""
    texts = ["x", "y", '{"name": "Kyiv", "population": 3000000}']
    model, seen = answers(*texts)
    async with (
        reopen() as storage,
        open_chat_agent(model=model, storage=storage, output_retries=1) as agent,
    ):
        with pytest.raises(TurnError):
            await agent.send("c", "q", idempotency_key="k", output=City)
        retried = await agent.send("c", "q", idempotency_key="k", output=City)
        history = await stored(storage, "c")
    assert retried.output == City(name="Kyiv", population=3000000)
    assert [m.role for m in history] == [Role.USER, Role.ASSISTANT]
    assert len(seen) == 3


# --- a property over random schemas -------------------------------------------

_LEAVES = {
    "string": st.text(max_size=5),
    "integer": st.integers(-1000, 1000),
    "number": st.floats(allow_nan=False, allow_infinity=False, width=32),
    "boolean": st.booleans(),
    "null": st.none(),
}


def _leaf() -> st.SearchStrategy[dict[str, object]]:
    return st.sampled_from(sorted(_LEAVES)).map(lambda t: {"type": t})


def _extend(inner: st.SearchStrategy[dict[str, object]]) -> st.SearchStrategy[dict[str, object]]:
    arrays = inner.map(lambda items: {"type": "array", "items": items})
    objects = st.dictionaries(st.text("abcxyz", min_size=1, max_size=4), inner, max_size=4).map(
        lambda props: {
            "type": "object",
            "properties": props,
            "required": sorted(props),
            "additionalProperties": False,
        }
    )
    return arrays | objects


SCHEMAS = st.recursive(_leaf(), _extend, max_leaves=8)


def valid_value(schema: dict[str, object]) -> st.SearchStrategy[object]:
    kind = schema["type"]
    if kind == "array":
        items = schema["items"]
        assert isinstance(items, dict)
        return st.lists(valid_value(items), max_size=3)
    if kind == "object":
        props = schema["properties"]
        assert isinstance(props, dict)
        return st.fixed_dictionaries({k: valid_value(v) for k, v in props.items()})
    return _LEAVES[str(kind)]


def invalid_value(schema: dict[str, object]) -> st.SearchStrategy[object]:
    """A value the schema refuses: another JSON type at the root, or (for an
    object with fields) one field missing."""
    kind = schema["type"]
    others = [t for t in ("string", "boolean", "array", "object") if t != kind]
    if kind in ("integer", "number"):
        others = ["string", "boolean", "null"]
    wrong = st.sampled_from(others).flatmap(
        lambda t: (
            st.just([]) if t == "array" else st.just({"?": 1}) if t == "object" else _LEAVES[t]
        )
    )
    props = schema.get("properties")
    if kind == "object" and isinstance(props, dict) and props:
        missing = valid_value(schema).flatmap(
            lambda v: st.sampled_from(sorted(v)).map(
                lambda k: {x: y for x, y in v.items() if x != k}
            )
        )
        return wrong | missing
    return wrong


@given(data=st.data(), schema=SCHEMAS, bad_count=st.integers(0, 3))
@settings(max_examples=40, deadline=None)
async def test_random_schemas_valid_pass_invalid_retried(
    data: st.DataObject, schema: dict[str, object], bad_count: int
) -> None:
    """For a random schema, ``bad_count`` invalid answers then a valid one:
    within ``output_retries`` the turn returns the valid value and stores it
    (the stored answer reads back equal); past it, ``invalid_output`` and
    nothing but the user message is stored."""
    bad = [data.draw(invalid_value(schema)) for _ in range(bad_count)]
    good = data.draw(valid_value(schema))
    model, seen = answers(*[json.dumps(v) for v in [*bad, good]])
    storage = in_memory_storage()
    async with open_chat_agent(model=model, storage=storage, output_retries=2) as agent:
        if bad_count <= 2:
            result = await agent.send("c", "q", output=schema, idempotency_key="k")
            assert result.output == good
            again = await agent.send("c", "q", output=schema, idempotency_key="k")
            assert again.output == result.output
            history = await stored(storage, "c")
            assert json.loads(history[-1].content) == result.output
            assert len(seen) == bad_count + 1
            assert len(history) == 2
        else:
            with pytest.raises(TurnError) as raised:
                await agent.send("c", "q", output=schema)
            assert raised.value.code == "invalid_output"
            assert len(seen) == 3
            assert [m.role for m in await stored(storage, "c")] == [Role.USER]


async def test_typed_turn_under_a_context_policy() -> None:
    """With a context window the retry messages still follow the window."""
    from agentik.agent import ContextPolicy

    model, seen = answers("fine", "{", '{"name": "Bern", "population": 140000}')
    async with open_chat_agent(
        model=model, storage=in_memory_storage(), context=ContextPolicy(max_tokens=4000)
    ) as agent:
        await agent.send("c", "an earlier turn")
        result = await agent.send("c", "q", output=City)
    assert result.output == City(name="Bern", population=140000)
    assert len(seen) == 3
    retry = seen[-1].messages
    assert [m.role for m in retry[-3:]] == [Role.USER, Role.ASSISTANT, Role.USER]
    assert retry[-3].content == "q"
    assert retry[-2].content == "{"


async def test_keyed_stream_retry_finishes_with_the_stored_output() -> None:
    model, seen = answers('{"name": "Quito", "population": 2800000}')
    async with open_chat_agent(model=model, storage=in_memory_storage()) as agent:
        await agent.send("c", "q", idempotency_key="k", output=City)
        async with agent.stream("c", "q", idempotency_key="k", output=City) as events:
            finals = [e async for e in events if isinstance(e, TurnFinished)]
    assert finals[0].result.output == City(name="Quito", population=2800000)
    assert len(seen) == 1


# --- the final-answer tool (a backend without response_format) -------------------


def tool_answers(*arguments: str) -> tuple[ScriptedModel, list[ModelRequest]]:
    """A model in ``structured_output="tool"`` mode that calls the offered
    final-answer tool with ``arguments`` in order (the last one again after)."""
    seen: list[ModelRequest] = []

    def respond(request: ModelRequest) -> ModelResponse:
        seen.append(request)
        assert request.output_tool is not None
        args = arguments[min(len(seen), len(arguments)) - 1]
        return ModelResponse(tool_calls=(ToolCall(f"f{len(seen)}", request.output_tool, args),))

    return ScriptedModel(respond, structured_output="tool"), seen


async def test_tool_mode_offers_the_schema_as_a_tool_and_retries_its_arguments() -> None:
    """The schema is a tool's parameters; invalid arguments are answered with
    the error as the call's result (not stored) and asked again; the valid
    call, its result and the answer's JSON as the final text are stored."""
    model, seen = tool_answers('{"name": 1}', '{"name": "Oslo", "population": 709000}')
    storage = in_memory_storage()
    async with open_chat_agent(model=model, storage=storage) as agent:
        result = await agent.send("c", "q", output=City)
        again = await agent.send("c", "q2", output=City)
    assert result.output == City(name="Oslo", population=709000)
    assert again.output == result.output
    first = seen[0]
    assert first.output_tool == "final_answer"
    assert first.output_schema is not None
    (tool,) = [t for t in first.tools if t.name == "final_answer"]
    assert tool.parameters == first.output_schema
    second = seen[1].messages
    assert second[-2].tool_calls[0].arguments == '{"name": 1}'
    assert second[-1].role is Role.TOOL and second[-1].tool_call_id == "f1"
    assert "expected a string" in second[-1].content
    history = await stored(storage, "c")
    assert_valid_history(history)
    assert [m.role for m in history[:4]] == [Role.USER, Role.ASSISTANT, Role.TOOL, Role.ASSISTANT]
    assert history[1].tool_calls[0].id == "f2"
    assert json.loads(history[3].content) == {"name": "Oslo", "population": 709000}
    assert result.text == history[3].content


async def test_tool_mode_text_without_the_call_is_asked_again_then_fails() -> None:
    model = ScriptedModel(
        lambda request: ModelResponse(text='{"name": "x", "population": 1}'),
        structured_output="tool",
    )
    storage = in_memory_storage()
    async with open_chat_agent(model=model, storage=storage, output_retries=1) as agent:
        with pytest.raises(TurnError, match="final_answer") as raised:
            await agent.send("c", "q", output=City)
    assert raised.value.code == "invalid_output"
    assert [m.role for m in await stored(storage, "c")] == [Role.USER]


async def test_tool_mode_final_answer_beside_other_calls_is_refused_then_answered() -> None:
    """Called together with another tool, the final-answer call is refused
    (every call answered, history valid) and the other runs; the next answer
    gives the output."""
    from agentik import tool

    ran: list[str] = []

    @tool
    async def lookup(city: str) -> str:
        """Look a city up."""
        ran.append(city)
        return "709000"

    def respond(request: ModelRequest) -> ModelResponse:
        assert request.output_tool is not None
        if request.messages[-1].role is Role.USER:
            return ModelResponse(
                tool_calls=(
                    ToolCall("a", "lookup", '{"city": "Oslo"}'),
                    ToolCall("b", request.output_tool, '{"name": "Oslo", "population": 1}'),
                )
            )
        return ModelResponse(
            tool_calls=(
                ToolCall("c", request.output_tool, '{"name": "Oslo", "population": 709000}'),
            )
        )

    storage = in_memory_storage()
    model = ScriptedModel(respond, structured_output="tool")
    async with open_chat_agent(model=model, storage=storage, tools=[lookup]) as agent:
        result = await agent.send("c", "q", output=City)
    assert result.output == City(name="Oslo", population=709000)
    assert ran == ["Oslo"]
    history = await stored(storage, "c")
    assert_valid_history(history)
    refused = [m for m in history if m.role is Role.TOOL and m.tool_call_id == "b"]
    assert len(refused) == 1 and "alone" in refused[0].content


@pytest.mark.parametrize("mode", ["response_format", "tool"])
async def test_structured_output_is_checked(mode: str) -> None:
    assert ScriptedModel(lambda r: ModelResponse(text=""), structured_output=mode)
    with pytest.raises(ValueError, match="structured_output"):
        ScriptedModel(lambda r: ModelResponse(text=""), structured_output="json")  # type: ignore[arg-type]


async def test_tool_mode_keyed_retry_after_restart_returns_the_stored_output(
    reopen: Callable[[], AbstractAsyncContextManager[StorageBundle]],
) -> None:
    model, seen = tool_answers("{}", '{"name": "Lima", "population": 10000000}')
    async with reopen() as storage, open_chat_agent(model=model, storage=storage) as agent:
        first = await agent.send("c", "q", idempotency_key="k", output=City)
    async with reopen() as storage, open_chat_agent(model=model, storage=storage) as agent:
        after_restart = await agent.send("c", "q", idempotency_key="k", output=City)
        history = await stored(storage, "c")
    assert first.output == City(name="Lima", population=10000000)
    assert after_restart.output == first.output
    assert len(seen) == 2
    assert_valid_history(history)


@given(data=st.data(), schema=SCHEMAS, bad_count=st.integers(0, 3))
@settings(max_examples=40, deadline=None)
async def test_random_schemas_through_the_final_answer_tool(
    data: st.DataObject, schema: dict[str, object], bad_count: int
) -> None:
    """As above, the answers given as the final-answer tool's arguments (a
    schema that is not an object is wrapped as the property ``answer``)."""
    bad = [data.draw(invalid_value(schema)) for _ in range(bad_count)]
    good = data.draw(valid_value(schema))
    wrapped = schema.get("type") != "object"

    def args(value: object) -> str:
        return json.dumps({"answer": value} if wrapped else value)

    model, seen = tool_answers(*[args(v) for v in [*bad, good]])
    storage = in_memory_storage()
    async with open_chat_agent(model=model, storage=storage, output_retries=2) as agent:
        if bad_count <= 2:
            result = await agent.send("c", "q", output=schema, idempotency_key="k")
            assert result.output == good
            again = await agent.send("c", "q", output=schema, idempotency_key="k")
            assert again.output == result.output
            history = await stored(storage, "c")
            assert_valid_history(history)
            assert json.loads(history[-1].content) == result.output
            assert len(seen) == bad_count + 1
            assert len(history) == 4
        else:
            with pytest.raises(TurnError) as raised:
                await agent.send("c", "q", output=schema)
            assert raised.value.code == "invalid_output"
            assert len(seen) == 3
            assert [m.role for m in await stored(storage, "c")] == [Role.USER]


async def test_tool_mode_stream_finishes_with_the_output() -> None:
    """Streamed, the final-answer call is no tool run (no ToolCallStarted);
    the turn finishes with the output."""
    from agentik.agent import ToolCallStarted

    model, _ = tool_answers("[]", '{"name": "Rome", "population": 2800000}')
    async with (
        open_chat_agent(model=model, storage=in_memory_storage()) as agent,
        agent.stream("c", "q", output=City) as events,
    ):
        seen = [e async for e in events]
    finals = [e for e in seen if isinstance(e, TurnFinished)]
    assert finals[0].result.output == City(name="Rome", population=2800000)
    assert not [e for e in seen if isinstance(e, ToolCallStarted)]


async def test_a_scheduled_model_keeps_its_structured_output() -> None:
    """Behind the agent's model scheduler (``model_limits``) the model's mode
    still decides how a typed turn asks."""
    from agentik.models import ModelLimits

    model, seen = tool_answers('{"name": "Rome", "population": 2800000}')
    limits = ModelLimits(max_concurrent=2)
    async with open_chat_agent(
        model=model, storage=in_memory_storage(), model_limits=limits
    ) as agent:
        result = await agent.send("c", "q", output=City)
    assert result.output == City(name="Rome", population=2800000)
    assert seen[0].output_tool == "final_answer"
