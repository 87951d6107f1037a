"""Scripted models and tools shared by the agent tests."""

from __future__ import annotations

import json
from collections.abc import Callable

from agentik import ChatAgent, Message, ModelRequest, ModelResponse, Role, ToolCall
from agentik.agent._conversation import Conversation
from agentik.storage import StorageBundle
from agentik.testing import assert_valid_history as testing_assert_valid_history
from agentik.testing import history


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
    return await history(storage, conversation_id)


# The public one (agentik.testing), so every agent test exercises it.
assert_valid_history = testing_assert_valid_history


def live_conversation(agent: ChatAgent, conversation_id: str) -> Conversation:
    """The live ``Conversation`` of ``conversation_id``, for a test that looks
    inside it. The agent holds only its handle (``_handle``); the state is
    found where its task keeps it, the frame of the task's coroutine."""
    handle = agent._registry.handles.get(conversation_id)
    for task in agent._nursery.child_tasks:
        frame = task.coro.cr_frame
        if frame is None or frame.f_code.co_name != "run":
            continue
        conversation = frame.f_locals.get("self")
        if isinstance(conversation, Conversation) and conversation.handle is handle:
            return conversation
    raise LookupError(f"conversation {conversation_id!r} is not live")
