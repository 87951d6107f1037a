"""Scripted models and tools shared by the agent tests."""

from __future__ import annotations

import json
from collections.abc import Callable

from agentik import Message, ModelRequest, ModelResponse, Role, ToolCall
from agentik.storage import StorageBundle


def call(
    name: str, arguments: object = None, *, id: str = "c1", raw: str | None = None
) -> ModelResponse:
    """A model response with one tool call."""
    text = raw if raw is not None else json.dumps(arguments if arguments is not None else {})
    return ModelResponse(tool_calls=(ToolCall(id, name, text),))


def last(request: ModelRequest) -> Message:
    return request.messages[-1]


def by_turn(
    script: dict[str, list[ModelResponse | str]],
) -> Callable[[ModelRequest], ModelResponse]:
    """A responder: for the user text of the current turn, answer with the
    scripted responses in order, one per model call of that turn."""

    def respond(request: ModelRequest) -> ModelResponse:
        messages = request.messages
        user_at = max(i for i, m in enumerate(messages) if m.role is Role.USER)
        step = sum(1 for m in messages[user_at:] if m.role is Role.ASSISTANT)
        answers = script[messages[user_at].content]
        answer = answers[min(step, len(answers) - 1)]
        return answer if isinstance(answer, ModelResponse) else ModelResponse(text=answer)

    return respond


async def stored(storage: StorageBundle, conversation_id: str) -> list[Message]:
    return [m async for m in storage.message_store.get_messages(conversation_id)]


def assert_valid_history(messages: list[Message]) -> None:
    """Seqs are 1..n and every assistant tool call has exactly one result."""
    assert [m.seq for m in messages] == list(range(1, len(messages) + 1))
    open_calls: set[str] = set()
    answered: set[str] = set()
    for m in messages:
        if m.role is Role.USER:
            assert not open_calls, f"user message while calls {open_calls} are open"
        for c in m.tool_calls:
            open_calls.add(c.id)
        if m.role is Role.TOOL:
            assert m.tool_call_id in open_calls, f"result for unknown call {m.tool_call_id}"
            assert m.tool_call_id not in answered
            open_calls.discard(m.tool_call_id)
            answered.add(m.tool_call_id)
    assert not open_calls, f"calls without results: {open_calls}"
