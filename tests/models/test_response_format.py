"""Typed turns over the Chat Completions wire: ``ModelRequest.output_schema``
becomes ``response_format`` ``json_schema`` (strict where the schema allows
it), checked by the scripted server against the openai package's request
types, and the agent reads the JSON text back as the typed output."""

from __future__ import annotations

import attrs
import pytest

from agentik import open_chat_agent
from agentik._json import JsonObject
from agentik._messages import Message, Role
from agentik.models import ModelRequest, OpenAICompatibleModel
from agentik.models._response_format import response_format, strict_allowed
from agentik.storage import in_memory_storage
from tests.models.chat_server import ChatServer, Json, completion

CLOSED: JsonObject = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "tags": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["name", "tags"],
    "additionalProperties": False,
}


@attrs.frozen(kw_only=True)
class Person:
    name: str
    age: int


async def test_output_schema_is_sent_as_strict_json_schema(chat_server: ChatServer) -> None:
    chat_server.script(Json(completion('{"name": "a", "tags": []}')))
    request = ModelRequest([Message(Role.USER, "q")], output_schema={"title": "Card", **CLOSED})
    async with OpenAICompatibleModel(
        chat_server.base_url, "m", params={"response_format": {"type": "text"}}
    ) as model:
        response = await model.complete(request)
    assert response.text == '{"name": "a", "tags": []}'
    [received] = chat_server.received
    assert received.body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "Card", "schema": {"title": "Card", **CLOSED}, "strict": True},
    }


async def test_a_typed_turn_through_the_real_wire(chat_server: ChatServer) -> None:
    """The agent asks with the class's schema (strict: every field required)
    and returns the validated value; an invalid answer is sent back."""
    chat_server.script(
        Json(completion('{"name": "Ada"}')), Json(completion('{"name": "Ada", "age": 36}'))
    )
    async with (
        OpenAICompatibleModel(chat_server.base_url, "m") as model,
        open_chat_agent(model=model, storage=in_memory_storage()) as agent,
    ):
        result = await agent.send("c", "who?", output=Person)
    assert result.output == Person(name="Ada", age=36)
    first, second = chat_server.received
    fmt = first.body["response_format"]
    assert isinstance(fmt, dict)
    assert fmt["json_schema"] == {
        "name": "Person",
        "schema": {
            "title": "Person",
            "type": "object",
            "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
            "required": ["name", "age"],
            "additionalProperties": False,
        },
        "strict": True,
    }
    messages = second.body["messages"]
    assert isinstance(messages, list)
    assert messages[-2] == {"role": "assistant", "content": '{"name": "Ada"}'}
    assert messages[-1]["role"] == "user"
    assert "age" in messages[-1]["content"]


@pytest.mark.parametrize(
    ("schema", "strict"),
    [
        (CLOSED, True),
        ({**CLOSED, "required": ["name"]}, False),  # an optional field
        ({**CLOSED, "additionalProperties": True}, False),
        ({k: v for k, v in CLOSED.items() if k != "additionalProperties"}, False),
        ({"type": "array", "items": {"type": "string"}}, False),  # the root must be an object
        ({**CLOSED, "if": {}}, False),  # a keyword strict mode does not take
        (
            {
                "type": "object",
                "properties": {
                    "inner": {"type": "object", "properties": {"a": {"type": "string"}}}
                },
                "required": ["inner"],
                "additionalProperties": False,
            },
            False,  # a nested open object
        ),
    ],
)
def test_strict_only_where_the_schema_allows_it(schema: JsonObject, strict: bool) -> None:
    assert strict_allowed(schema) is strict
    fmt = response_format(schema)
    assert fmt["json_schema"] == {"name": "answer", "schema": schema, "strict": strict}


async def test_tool_mode_offers_a_final_answer_tool_over_the_real_wire(
    chat_server: ChatServer,
) -> None:
    """``structured_output="tool"``: no ``response_format``; the schema is the
    parameters of a ``final_answer`` function the model must call
    (``tool_choice: required``); invalid arguments are answered as the call's
    result, and the next request is valid for the API (checked by the
    server against the openai package's types)."""
    chat_server.script(
        Json(completion(None, tool_calls=[("t1", "final_answer", '{"name": "Ada"}')])),
        Json(completion(None, tool_calls=[("t2", "final_answer", '{"name": "Ada", "age": 36}')])),
    )
    async with (
        OpenAICompatibleModel(chat_server.base_url, "m", structured_output="tool") as model,
        open_chat_agent(model=model, storage=in_memory_storage()) as agent,
    ):
        assert model.structured_output == "tool"
        result = await agent.send("c", "who?", output=Person)
    assert result.output == Person(name="Ada", age=36)
    first, second = chat_server.received
    assert "response_format" not in first.body
    assert first.body["tool_choice"] == "required"
    tools = first.body["tools"]
    assert isinstance(tools, list)
    [final] = [t for t in tools if t["function"]["name"] == "final_answer"]
    assert final["function"]["parameters"]["required"] == ["name", "age"]
    messages = second.body["messages"]
    assert isinstance(messages, list)
    assert messages[-2]["tool_calls"][0]["id"] == "t1"
    assert messages[-1]["role"] == "tool"
    assert messages[-1]["tool_call_id"] == "t1"
    assert "age" in messages[-1]["content"]


async def test_tool_choice_in_params_is_kept(chat_server: ChatServer) -> None:
    """A backend that refuses ``tool_choice: required`` is given its own."""
    chat_server.script(Json(completion(None, tool_calls=[("t1", "final_answer", '{"a": 1}')])))
    request = ModelRequest(
        [Message(Role.USER, "q")], output_schema={"type": "object"}, output_tool="final_answer"
    )
    async with OpenAICompatibleModel(
        chat_server.base_url, "m", params={"tool_choice": "auto"}, structured_output="tool"
    ) as model:
        await model.complete(request)
    [received] = chat_server.received
    assert received.body["tool_choice"] == "auto"
    assert "response_format" not in received.body


def test_structured_output_is_checked() -> None:
    from agentik import ModelBackendError

    with pytest.raises(ModelBackendError, match="structured_output must be"):
        OpenAICompatibleModel("http://127.0.0.1:1/v1", "m", structured_output="json")  # type: ignore[arg-type]
