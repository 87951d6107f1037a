"""Deciding a tool call that waits for a person's approval, for any transport.

The agent's errors become HTTP refusals through ``_turns.to_http_error``
(``not_waiting`` 404, ``already_decided`` 409; a turn that fails once it runs
on, by its code, as any turn), and every decision is logged as one line in the
turn log's vocabulary::

    decision transport=native conversation=demo outcome=finished ms=3.1

``outcome`` is ``finished`` or ``awaiting_approval`` (the turn ran on, or other
calls still wait), ``failed:<code>`` (it ran on and failed) or
``refused:<code>`` (nothing was decided). As for turns, the line names no body
text: neither the decision's reason nor the call's arguments.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable

from agentik._errors import AgentikError
from agentik.agent import ApprovalRequest, ChatAgent, TurnResult
from agentik.server._errors import HttpError
from agentik.server._owners import Caller
from agentik.server._turns import outcome_of, to_http_error

log = logging.getLogger("agentik.server")


def log_decision(
    transport: str, caller: Caller, conversation_id: str, outcome: str, began: float
) -> None:
    log.info(
        "decision transport=%s conversation=%s outcome=%s ms=%.1f",
        transport,
        caller.describe(conversation_id),
        outcome,
        (time.perf_counter() - began) * 1000,
    )


async def decide_call(
    agent: ChatAgent,
    transport: str,
    caller: Caller,
    conversation_id: str,
    call_id: str,
    *,
    approve: bool,
    reason: str,
    check: Callable[[], Awaitable[None]] | None = None,
) -> TurnResult:
    """``agent.decide`` in the caller's scope, logged; ``check`` runs first (a
    transport's own refusal, such as an unknown conversation, is logged too)."""
    began = time.perf_counter()
    try:
        if check is not None:
            await check()
        result = await agent.decide(
            caller.internal(conversation_id), call_id, approve=approve, reason=reason
        )
    except HttpError as refusal:
        log_decision(transport, caller, conversation_id, f"refused:{refusal.code}", began)
        raise
    except (AgentikError, ValueError) as exc:
        error = to_http_error(exc, caller, conversation_id)
        log_decision(transport, caller, conversation_id, outcome_of(exc, error), began)
        raise error from exc
    log_decision(transport, caller, conversation_id, result.status, began)
    return result


async def pending_calls(
    agent: ChatAgent, caller: Caller, conversation_id: str
) -> tuple[ApprovalRequest, ...]:
    """``agent.pending_approvals`` in the caller's scope (its first touch
    resumes a turn a crash interrupted, as any request for the conversation)."""
    try:
        return await agent.pending_approvals(caller.internal(conversation_id))
    except (AgentikError, ValueError) as exc:
        raise to_http_error(exc, caller, conversation_id) from exc
