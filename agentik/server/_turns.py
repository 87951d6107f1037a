"""Running a turn for any transport: error mapping and the turn log line.

Errors the agent raises become HTTP refusals here and nowhere else:
``OverloadedError`` is 429 with ``Retry-After`` (a queue is full, or the
model's limits would keep the turn waiting past ``max_queue_wait``), a closed
agent (shutting down) 503, bad input 422, a failed turn a status by its code
(a storage failure, ``store_error``, or a shutdown, ``interrupted`` and
``unavailable``: 503 with ``Retry-After``; a rate-limited or overloaded model
backend, ``model_unavailable``: 503 with the ``Retry-After`` it asked for; a
turn that does not fit
the context window, ``context_exhausted``, 413), and a decision
the agent cannot take (``ApprovalError``) 404 when the call does not wait,
409 when it was decided the other way. A streamed
turn is entered *before* the response starts, so a refusal is still a plain
HTTP status; once streaming, a client that leaves only stops the reading:
the turn completes and is committed by the agent.

Transports pass the caller and the conversation id the client sent; the
owner-scoped id the agent uses is made here, and any error message that names
it is rewritten to name the client's id again.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack

from agentik._errors import (
    AgentikError,
    ApprovalError,
    NotOwnedError,
    OverloadedError,
    TurnError,
)
from agentik._json import JsonObject
from agentik._parts import Part
from agentik.agent import (
    ChatAgent,
    ElicitationError,
    TurnEvent,
    TurnFailed,
    TurnFinished,
    TurnResult,
)
from agentik.server._content import turn_content
from agentik.server._owners import SEPARATOR, Caller
from agentik.server.http import HttpError, NotHere, Redirect
from agentik.storage import LeaseLapsedError

log = logging.getLogger("agentik.server")

_TURN_STATUS = {
    "model_error": 502,
    # The model backend is rate limited or overloaded (429/503 past its
    # retries): retry after what it asked for.
    "model_unavailable": 503,
    "cancelled": 409,
    # A turn sent again with its idempotency key that did not finish and has
    # later turns after it: the request conflicts with the conversation.
    "not_resumable": 409,
    "step_limit": 500,
    # The model's answer did not match the turn's output schema, also when
    # asked again (output_retries): the upstream model's failure.
    "invalid_output": 502,
    "turn_failed": 500,
    # The storage failed or did not answer in time (a database that is down,
    # frozen, full): the server cannot serve turns now, as /health says; retry.
    "store_error": 503,
    # The turn does not fit the context window: the request is too large for
    # this deployment, and sending it again cannot help (never a 5xx).
    "context_exhausted": 413,
    # An image or a file for a model that takes none (its accepts_parts).
    "unsupported_content": 415,
    # The server is shutting down: the turn was interrupted past the grace (it
    # resumes when the server starts again) or never started; retry there.
    "interrupted": 503,
    "unavailable": 503,
}
_APPROVAL_STATUS = {"not_waiting": 404, "already_decided": 409, "unsupported": 501}
_ELICITATION_STATUS = {"not_waiting": 404, "invalid": 400}


def to_http_error(exc: Exception, caller: Caller, conversation_id: str) -> HttpError:
    """The HTTP refusal for an error the agent raised about ``conversation_id``."""
    message = str(exc)
    if SEPARATOR not in conversation_id:
        stored = caller.internal(conversation_id)
        message = message.replace(repr(stored), repr(conversation_id))
        message = message.replace(stored, conversation_id)
    if isinstance(exc, OverloadedError):
        headers = {"Retry-After": _retry_after(exc.retry_after)}
        return HttpError(429, message, code="overloaded", headers=headers)
    if isinstance(exc, TurnError):
        code = getattr(exc, "code", "turn_failed")
        status = _TURN_STATUS.get(code, 500)
        headers = {"Retry-After": _retry_after(exc.retry_after)} if status == 503 else {}
        return HttpError(status, message, code=code, headers=headers)
    if isinstance(exc, ApprovalError):
        return HttpError(_APPROVAL_STATUS.get(exc.code, 409), message, code=exc.code)
    if isinstance(exc, ElicitationError):
        return HttpError(_ELICITATION_STATUS.get(exc.code, 400), message, code=exc.code)
    if isinstance(exc, ValueError):
        return HttpError(422, message, code="invalid_field")
    if isinstance(exc, NotOwnedError) and exc.owner_url:
        return Redirect(message, base_url=exc.owner_url)
    if isinstance(exc, NotOwnedError | LeaseLapsedError):  # nothing ran; another node takes it
        return NotHere(f"the agent is not accepting turns: {message}")
    return HttpError(
        503,
        f"the agent is not accepting turns: {message}",
        code="unavailable",
        headers={"Retry-After": "1"},
    )


async def claim_here(agent: ChatAgent, caller: Caller, conversation_id: str) -> None:
    """Own ``conversation_id`` here before acting on its running turns, as the
    agent does before it routes a turn: with several nodes on one database, a
    request that would find nothing running here while its turn runs on
    another node (a cancel) is refused with ``Redirect`` to that node instead,
    which the app forwards there (docs/scale-out.md)."""
    ownership = agent.storage.ownership
    stored = caller.internal(conversation_id)
    if ownership is None or ownership.owns(stored):
        return
    try:
        await ownership.claim(stored)
    except AgentikError as exc:  # NotOwnedError: the owner's URL; StoreError: 503
        raise to_http_error(exc, caller, conversation_id) from exc


def _retry_after(seconds: float | None) -> str:
    """A ``Retry-After`` value: whole seconds, at least 1 (1 when unknown)."""
    if seconds is None or not math.isfinite(seconds):
        return "1"
    return str(max(1, math.ceil(seconds)))


def outcome_of(exc: Exception, error: HttpError) -> str:
    """The turn log's outcome for a turn that ended in ``exc`` (the client got
    ``error``): ``failed:<code>`` if the turn ran and failed (``TurnError``),
    ``refused:<code>`` if it never ran; ``<code>`` is the code the client saw.
    With ``finished``, ``awaiting_approval`` (the turn paused for a person's
    decision) and ``disconnected`` that is the whole vocabulary, the same for
    every transport, streamed or not."""
    return f"{'failed' if isinstance(exc, TurnError) else 'refused'}:{error.code}"


def refuse(
    transport: str, caller: Caller, conversation_id: str, exc: Exception, began: float
) -> HttpError:
    """Log the turn that ended in ``exc`` and return its HTTP error, to raise."""
    error = to_http_error(exc, caller, conversation_id)
    log_turn(transport, caller, conversation_id, outcome_of(exc, error), began)
    return error


def log_turn(
    transport: str, caller: Caller, conversation_id: str, outcome: str, began: float
) -> None:
    log.info(
        "turn transport=%s conversation=%s outcome=%s ms=%.1f",
        transport,
        caller.describe(conversation_id),
        outcome,
        (time.perf_counter() - began) * 1000,
    )


async def send_turn(
    agent: ChatAgent,
    transport: str,
    caller: Caller,
    conversation_id: str,
    text: str,
    key: str | None,
    *,
    output: JsonObject | None = None,
    parts: Sequence[Part] = (),
) -> TurnResult:
    began = time.perf_counter()
    turn_text, content = turn_content(text, parts)
    try:
        result = await agent.send(
            caller.internal(conversation_id),
            turn_text,
            content=content,
            idempotency_key=key,
            output=output,
        )
    except (AgentikError, ValueError) as exc:
        raise refuse(transport, caller, conversation_id, exc, began) from exc
    log_turn(transport, caller, conversation_id, result.status, began)
    return result


async def open_stream(
    agent: ChatAgent,
    transport: str,
    caller: Caller,
    conversation_id: str,
    text: str,
    key: str | None,
    *,
    output: JsonObject | None = None,
    parts: Sequence[Part] = (),
) -> tuple[AsyncIterator[TurnEvent], AsyncExitStack]:
    """Enter ``agent.stream``; refusals raise ``HttpError`` before any byte is sent.
    The caller closes the returned stack when done (``EventStream`` does)."""
    began = time.perf_counter()
    stack = AsyncExitStack()
    turn_text, content = turn_content(text, parts)
    try:
        events = await stack.enter_async_context(
            agent.stream(
                caller.internal(conversation_id),
                turn_text,
                content=content,
                idempotency_key=key,
                output=output,
            )
        )
    except (AgentikError, ValueError) as exc:
        raise refuse(transport, caller, conversation_id, exc, began) from exc

    async def logged() -> AsyncIterator[TurnEvent]:
        outcome = "disconnected"
        try:
            async for event in events:
                if isinstance(event, TurnFinished):
                    outcome = event.result.status
                elif isinstance(event, TurnFailed):
                    outcome = f"failed:{event.code}"
                yield event
        finally:
            log_turn(transport, caller, conversation_id, outcome, began)

    return logged(), stack
