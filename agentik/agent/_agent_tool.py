"""``agent_tool``: an agent offered to a model as a tool.

A call runs one turn of the agent in a child conversation and answers with
its final text. Why it is safe to run through crashes:

- the child conversation's id derives from the parent conversation, the seq
  of the message that made the call and the call's id
  (``agent_conversation_id``), and the child turn's idempotency key is the
  call's id; a parent turn resumed after a crash runs the call again (the
  tool is ``idempotent``), and the keyed ``send`` then returns the child
  turn's stored answer, or resumes that same child turn where it stopped:
  the child turn runs once;
- a child turn that pauses for approval holds the call open (the parent turn
  waits in it, its timeout stopped) and its waiting calls are the parent's
  to decide (``_child_calls``);
- the depth of a conversation (how many agent calls led to it) is written in
  its id, and a call from a conversation already ``max_agent_depth`` deep is
  refused with a tool error: an agent that calls itself, or two that call
  each other, stop there. Fan-out is bounded per turn by
  ``max_parallel_tools``, so a top-level turn has at most
  ``max_parallel_tools ** max_agent_depth`` child turns running.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Callable

import trio

from agentik._errors import AgentikError, ToolError
from agentik._json import JsonObject
from agentik._scope import scope_of
from agentik.agent._chat_agent import ChatAgent
from agentik.agent._child_calls import ChildCall, ChildCalls, current_children
from agentik.agent._elicitation import ToolCallContext, current_tool_call
from agentik.agent._failures import message_of
from agentik.toolsets import NamedTool

DEFAULT_MAX_AGENT_DEPTH = 3
RECHECK_SECONDS = 30.0
"""How long a call waiting for a person goes without looking at its child turn
again: a decision taken through the child's agent wakes it at once, but the
child's own ``approval_timeout`` denies without telling it."""

_TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
_DIGEST = 32
_CHILD = re.compile(rf"[A-Za-z0-9_-]{{1,64}}~([1-9][0-9]{{0,8}})~[0-9a-f]{{{_DIGEST}}}")

PARAMETERS: JsonObject = {
    "type": "object",
    "properties": {
        "text": {
            "type": "string",
            "minLength": 1,
            "description": "The message to the agent: what to do, with all it needs to know.",
        }
    },
    "required": ["text"],
    "additionalProperties": False,
}


def agent_conversation_id(parent_id: str, name: str, call_seq: int, call_id: str) -> str:
    """The child conversation of call ``call_id`` of agent tool ``name``, made
    by the message at ``call_seq`` of conversation ``parent_id``.

    ``<name>~<depth>~<digest>``, after the parent's owner scope (the child
    belongs to the same owner): printable, at most 150 characters past the
    scope, and one of 2**128 for each (parent, seq, call id)."""
    digest = hashlib.sha256(
        json.dumps([parent_id, name, call_seq, call_id]).encode("utf-8", "surrogatepass")
    ).hexdigest()[:_DIGEST]
    return f"{scope_of(parent_id)}{name}~{agent_depth(parent_id) + 1}~{digest}"


def agent_depth(conversation_id: str) -> int:
    """How many agent-tool calls led to ``conversation_id`` (0: none, a
    conversation a person or a program started)."""
    _, _, local = conversation_id.rpartition("\x1f")
    found = _CHILD.fullmatch(local)
    return 0 if found is None else int(found.group(1))


def agent_tool(
    agent: ChatAgent | Callable[[], ChatAgent],
    *,
    name: str,
    description: str,
    max_agent_depth: int = DEFAULT_MAX_AGENT_DEPTH,
) -> NamedTool:
    """A tool that hands its ``text`` to ``agent`` as one turn of a child
    conversation and answers with the turn's final text.

    ``agent``: a ``ChatAgent`` of the same process, or a callable returning
    one when the call runs (an agent that calls itself: the tool is made
    before the agent opens). A call from a conversation ``max_agent_depth``
    agent calls deep is refused with a tool error. See the module docstring
    and docs/agent.md ("Agents as tools")."""
    if not isinstance(name, str) or _TOOL_NAME.fullmatch(name) is None:
        raise ValueError(f"name must be 1-64 letters, digits, '_' or '-', got {name!r}")
    if not isinstance(description, str) or not description.strip():
        raise ValueError(f"description must be a non-empty string, got {description!r}")
    if isinstance(max_agent_depth, bool) or not (
        isinstance(max_agent_depth, int) and 1 <= max_agent_depth <= 999
    ):
        raise ValueError(f"max_agent_depth must be an integer 1..999, got {max_agent_depth!r}")
    if not isinstance(agent, ChatAgent) and not callable(agent):
        raise TypeError(f"agent must be a ChatAgent or a callable returning one, got {agent!r}")

    async def handler(arguments: JsonObject) -> str:
        context = current_tool_call.get()
        children = current_children.get()
        if context is None or children is None:
            raise ToolError(f"agent tool {name!r} runs only as a tool call of an agent's turn")
        depth = agent_depth(context.conversation_id)
        if depth >= max_agent_depth:
            raise ToolError(
                f"agent tool {name!r} refused: conversation {context.conversation_id!r} is"
                f" {depth} agent calls deep (max_agent_depth={max_agent_depth})"
            )
        target = agent if isinstance(agent, ChatAgent) else agent()
        if not isinstance(target, ChatAgent):
            raise ToolError(f"agent tool {name!r}: its agent callable returned {target!r}")
        text = arguments.get("text")
        if not isinstance(text, str) or not text:
            raise ToolError(f"agent tool {name!r} needs 'text', a non-empty string")
        try:
            return await _run_child(target, name, text, context, children)
        except AgentikError as exc:  # the child turn failed, or was refused
            raise ToolError(f"agent {name!r} failed: {message_of(exc)}") from exc

    return NamedTool(name, description.strip(), PARAMETERS, handler, idempotent=True)


async def _run_child(
    target: ChatAgent, name: str, text: str, context: ToolCallContext, children: ChildCalls
) -> str:
    """Run the child turn to its end, waiting for a person while it waits."""
    parent_id, call_id = context.conversation_id, context.call_id or name
    child_id = agent_conversation_id(parent_id, name, context.call_seq, call_id)
    runtime = target._runtime  # the child agent's: its registry and approval timeout
    registry = runtime.children
    recheck = RECHECK_SECONDS
    if runtime.settings.approval_timeout is not None:
        recheck = min(recheck, runtime.settings.approval_timeout)
    held = ChildCall(child_id, registry, target)
    with children.holding(parent_id, call_id, held):
        while True:
            # Watched before asking: a decision taken while the answer comes
            # back wakes the wait below instead of being missed.
            moved = registry.watch(child_id)
            try:
                result = await target.send(child_id, text, idempotency_key=call_id)
                if result.status == "finished":
                    return result.text
                held.approvals = result.approvals
                children.moved(parent_id)  # the parent's ``pending_approvals`` sees them
                await _wait_for_person(context.scope, moved, recheck)
                held.approvals = ()
            finally:
                registry.unwatch(child_id, moved)


async def _wait_for_person(scope: trio.CancelScope, moved: trio.Event, recheck: float) -> None:
    """Wait for a decision (or ``recheck`` seconds). A person's pause is not
    the tool's slowness: the call's timeout is pushed back by the wait."""
    deadline = scope.deadline
    began = trio.current_time()
    scope.deadline = math.inf
    try:
        with trio.move_on_after(recheck):
            await moved.wait()
    finally:
        scope.deadline = deadline + (trio.current_time() - began)
