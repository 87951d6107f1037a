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
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack

from agentik._errors import AgentikError, ApprovalError
from agentik.agent import (
    ApprovalRequest,
    ChatAgent,
    TurnEvent,
    TurnFailed,
    TurnFinished,
    TurnResult,
)
from agentik.server._owners import Caller
from agentik.server._turns import outcome_of, to_http_error
from agentik.server.http import HttpError

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


_REFUSALS = frozenset({"not_waiting", "already_decided", "unsupported"})
"""``TurnFailed`` codes of a decision the agent did not take (``ApprovalError``)."""


async def open_decision_stream(
    agent: ChatAgent,
    transport: str,
    caller: Caller,
    conversation_id: str,
    call_id: str,
    *,
    approve: bool,
    reason: str,
    check: Callable[[], Awaitable[None]] | None = None,
) -> tuple[AsyncIterator[TurnEvent], AsyncExitStack]:
    """``agent.stream_decision`` in the caller's scope, logged when the stream
    ends; the caller closes the returned stack. A decision the agent does not
    take arrives as the stream's first event (``TurnFailed`` with an
    ``ApprovalError`` code): that event is read here, before any byte is
    sent, so it is the same HTTP refusal (404, 409) as an unstreamed decision."""
    began = time.perf_counter()
    stack = AsyncExitStack()
    try:
        if check is not None:
            await check()
        events = await stack.enter_async_context(
            agent.stream_decision(
                caller.internal(conversation_id), call_id, approve=approve, reason=reason
            )
        )
        stream = aiter(events)
        first = await anext(stream, None)
        if isinstance(first, TurnFailed) and first.code in _REFUSALS:
            raise ApprovalError(first.message, code=first.code)
    except HttpError as refusal:
        await stack.aclose()
        log_decision(transport, caller, conversation_id, f"refused:{refusal.code}", began)
        raise
    except (AgentikError, ValueError) as exc:
        await stack.aclose()
        error = to_http_error(exc, caller, conversation_id)
        log_decision(transport, caller, conversation_id, outcome_of(exc, error), began)
        raise error from exc

    async def logged() -> AsyncIterator[TurnEvent]:
        outcome = "disconnected"
        event = first
        try:
            while event is not None:
                if isinstance(event, TurnFinished):
                    outcome = event.result.status
                elif isinstance(event, TurnFailed):
                    outcome = f"failed:{event.code}"
                yield event
                event = await anext(stream, None)
        finally:
            log_decision(transport, caller, conversation_id, outcome, began)

    return logged(), stack


async def pending_calls(
    agent: ChatAgent, caller: Caller, conversation_id: str
) -> tuple[ApprovalRequest, ...]:
    """``agent.pending_approvals`` in the caller's scope (its first touch
    resumes a turn a crash interrupted, as any request for the conversation)."""
    try:
        return await agent.pending_approvals(caller.internal(conversation_id))
    except (AgentikError, ValueError) as exc:
        raise to_http_error(exc, caller, conversation_id) from exc
