"""The scripted model and tools the agent-tool tests share (test_agent_tool,
test_agent_tool_crash and the process it kills, ``agent_tool_child``).

A parent turn (any user text but the child's) asks the agent tool ``helper``
to do ``CHILD_TEXT`` (call id ``c1`` in the turn ``ask``, ``c-<text>`` else),
then answers ``parent got: <result>``. The child turn (user text
``CHILD_TEXT``) calls ``CHILD_TOOL``, then answers ``child answer (saw:
<result>)``. Every model call is counted by the user text of the
turn it serves, so a test can tell how often each turn asked the model.
"""

from __future__ import annotations

import json
from collections import Counter

import trio

from agentik import ApprovalRequest, ChatAgent, ModelRequest, ModelResponse, Role, ToolCall

CHILD_TEXT = "do the sub task"
CHILD_TOOL = "step"
TOOL_NAME = "helper"


def turn_of(request: ModelRequest) -> tuple[str, list[str]]:
    """The user text of the turn being served, and the tool results it holds."""
    messages = request.messages
    user_at = max(i for i, m in enumerate(messages) if m.role is Role.USER)
    results = [m.content for m in messages[user_at:] if m.role is Role.TOOL]
    return messages[user_at].content, results


class Script:
    """The responder, counting model calls per turn text."""

    def __init__(self, child_tool: str = CHILD_TOOL, child_arguments: object = None) -> None:
        self.calls: Counter[str] = Counter()
        self.child_tool = child_tool
        self.child_arguments = {} if child_arguments is None else child_arguments

    def __call__(self, request: ModelRequest) -> ModelResponse:
        text, results = turn_of(request)
        self.calls[text] += 1
        if text == CHILD_TEXT:
            if not results:
                arguments = json.dumps(self.child_arguments)
                return ModelResponse(tool_calls=(ToolCall("k1", self.child_tool, arguments),))
            return ModelResponse(text=f"child answer (saw: {results[-1]})")
        if not results:
            arguments = json.dumps({"text": CHILD_TEXT})
            call_id = "c1" if text == "ask" else f"c-{text.replace(' ', '-')}"
            return ModelResponse(tool_calls=(ToolCall(call_id, TOOL_NAME, arguments),))
        return ModelResponse(text=f"parent got: {results[-1]}")


async def approvals_of(agent: ChatAgent, conversation_id: str) -> tuple[ApprovalRequest, ...]:
    """The conversation's pending approvals, once there are some (a query
    sent before its turn began has none: asked again)."""
    with trio.fail_after(30):
        while True:
            waiting = await agent.pending_approvals(conversation_id)
            if waiting:
                return waiting
            await trio.sleep(0.01)
