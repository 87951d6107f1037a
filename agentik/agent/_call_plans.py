"""The facts about a model's tool call that the turn machine decides on.

When the model makes a call, the shell looks it up once: which tool it names
(``dispatch``, by name alone), whether its arguments match that tool's schema
(checked here, once: what runs is what was checked), the tool's flags, its
toolset's, and what the agent's ``approval_policy`` says. These go to the
machine as a ``CallPlan``; the machine decides (refuse it, ask a person, run
it, when, beside what). The policy is asked only about a call that could run
as it stands, and never about one its tool or toolset already makes wait.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, TypeAlias

from agentik._errors import ToolError
from agentik._json import JsonObject
from agentik._messages import ToolCall
from agentik.agent._failures import describe, message_of
from agentik.agent._request import NONE_ACTIVE
from agentik.agent._turn_events import CallPlan, PolicyAnswer
from agentik.toolsets import Error, NamedTool, ToolsetIndex, parse_arguments

if TYPE_CHECKING:
    from agentik.agent._runtime import AgentRuntime, ApprovalPolicy

log = logging.getLogger("agentik.turn")

Ready: TypeAlias = tuple[NamedTool, JsonObject]
"""What a valid call runs: its tool and its checked arguments."""


def plan_call(
    runtime: AgentRuntime,
    conversation_id: str,
    call: ToolCall,
    index: ToolsetIndex,
    *,
    read_back: bool = False,
) -> tuple[CallPlan, Ready | None]:
    """``call``'s plan, and what it runs when it is valid. ``read_back`` for a
    call read back from storage: whether it waits is stored, not asked again,
    and one whose tool is gone now may have run (it is not refused)."""
    decision = index.dispatch(NONE_ACTIVE, call, runtime.core_tools)
    if isinstance(decision, Error):
        if read_back:
            return CallPlan(call), None
        return CallPlan(call, invalid=f"error: {decision.message}"), None
    tool, toolset = decision.tool, decision.toolset
    try:
        arguments = parse_arguments(tool, call.arguments)
    except ToolError as exc:
        return CallPlan(call, invalid=f"error: {message_of(exc)}", toolset=toolset), None
    needs, policy = False, PolicyAnswer.NONE
    if not read_back and runtime.approvals_possible:
        needs = tool.requires_approval or _toolset_requires_approval(toolset, index)
        if not needs and runtime.approval_policy is not None:
            policy = _ask(runtime.approval_policy, conversation_id, call)
    plan = CallPlan(
        call,
        needs,
        tool.idempotent,
        policy=policy,
        sequential=tool.sequential,
        toolset=toolset,
    )
    return plan, (tool, arguments)


def _toolset_requires_approval(toolset: str | None, index: ToolsetIndex) -> bool:
    contribution = None if toolset is None else index.get(toolset)
    return contribution is not None and contribution.requires_approval


def _ask(policy: ApprovalPolicy, conversation_id: str, call: ToolCall) -> PolicyAnswer:
    try:
        return PolicyAnswer.ASK if policy(conversation_id, call) else PolicyAnswer.RUN
    except Exception as exc:  # the user's code: its failure is an answer, logged
        log.error(
            "conversation %r: the approval policy raised %s; the call waits for approval",
            conversation_id,
            describe(exc),
            exc_info=exc,
        )
        return PolicyAnswer.RAISED
