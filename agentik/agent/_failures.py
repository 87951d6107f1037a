"""Failures of code the agent does not own: model backends, tools, prompt
contributors, toolset sources.

Such code may raise anything. Where the agent calls it, an ``Exception`` (never
a ``BaseException``: a cancellation is not a failure) becomes a ``TurnError``
with a code, so it fails one turn or one step, never the conversation task,
the agent or another conversation. These helpers word that error; they never
raise, even for an exception whose ``str()`` does.
"""

from __future__ import annotations

import math

from agentik._errors import AgentikError, ModelBackendError, TurnError
from agentik.models import DEFAULT_RETRY

_GROUP_MEMBERS_SHOWN = 3


def message_of(exc: BaseException) -> str:
    """``str(exc)``, or a placeholder if that raises."""
    try:
        return str(exc)
    except Exception:
        return "<str() failed>"


def describe(exc: BaseException) -> str:
    """``TypeName: message``; a group names its first few members too."""
    name = type(exc).__name__
    if isinstance(exc, BaseExceptionGroup):
        members = exc.exceptions
        shown = ", ".join(describe(e) for e in members[:_GROUP_MEMBERS_SHOWN])
        if len(members) > _GROUP_MEMBERS_SHOWN:
            shown += f", and {len(members) - _GROUP_MEMBERS_SHOWN} more"
        return f"{name}: {exc.message} ({shown})"
    text = message_of(exc)
    return f"{name}: {text}" if text else name


def component_error(what: str, exc: Exception) -> TurnError:
    """The ``TurnError`` for ``what`` (say "the model") having raised ``exc``:
    a bug there, so code ``internal_error``. Raise it ``from exc``."""
    return TurnError(f"{what} raised {describe(exc)}", code="internal_error")


UNAVAILABLE_STATUSES = (429, 503)
"""A backend answering these is rate limited or overloaded: it may work later."""


def model_failure(exc: AgentikError) -> TurnError:
    """The ``TurnError`` for the model backend having failed with ``exc``:
    ``model_unavailable`` (with the backend's ``retry_after``) when it last
    answered 429 or 503, past its retries; else ``model_error``. Raise it
    ``from exc``."""
    if isinstance(exc, ModelBackendError) and exc.status in UNAVAILABLE_STATUSES:
        return TurnError(
            f"the model is unavailable: {message_of(exc)}",
            code="model_unavailable",
            retry_after=passed_on(exc.retry_after),
        )
    return TurnError(f"the model failed: {message_of(exc)}", code="model_error")


MAX_RETRY_AFTER = DEFAULT_RETRY.max_retry_after
"""Seconds: the longest wait a failed turn passes on. The model ignores a longer
``Retry-After`` (it backs off and tries again within seconds), so a client
told ``Retry-After: 86400`` by a proxy, or a date years ahead, would wait for
nothing; some HTTP clients (urllib3's ``Retry``) sleep for whatever they get."""


def passed_on(seconds: float | None) -> float | None:
    """The backend's ``retry_after`` as a turn passes it on: within
    0..``MAX_RETRY_AFTER`` (a model of the caller's own may give any float);
    None if it asked nothing readable."""
    if seconds is None or math.isnan(seconds):
        return None
    return min(max(seconds, 0.0), MAX_RETRY_AFTER)
