"""What a failed attempt at a model call says: retryable or not, and why, in
words with no credential in them (the ``Redactor`` masks the body first)."""

from __future__ import annotations

import json

import httpx2

from agentik._errors import ModelBackendError
from agentik.models._redact import Redactor
from agentik.models._retry import RetryPolicy, _requested_delay
from agentik.models._wire import error_message


class RetryableFailure(ModelBackendError):
    """One failed attempt that another attempt might fix. Never leaves
    ``OpenAICompatibleModel`` but through the slot of the gate it was made in
    (an admission scheduler reads its status and headers there)."""


def refusal(
    response: httpx2.Response, url: str, redact: Redactor, retry: RetryPolicy
) -> ModelBackendError:
    """The error a non-2xx answer (read and closed) is: a ``RetryableFailure``
    when ``retry`` retries its status, carrying its status and headers."""
    problem = http_problem(response, redact)
    status = response.status_code
    message = f"model backend answered HTTP {status} for {url}: {problem}"
    headers = dict(response.headers.items())
    retry_after = _requested_delay(response.headers, None)
    if retry.should_retry(status, response.headers):
        return RetryableFailure(message, status=status, retry_after=retry_after, headers=headers)
    return ModelBackendError(message, status=status, retry_after=retry_after, headers=headers)


def describe(exc: httpx2.RequestError) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def http_problem(response: httpx2.Response, redact: Redactor) -> str:
    """What an error response says, from its JSON error body or its text (masked first)."""
    text = redact.text(response.text)
    try:
        reported = error_message(json.loads(text))
    except ValueError:
        reported = None
    if reported is not None:
        return reported
    text = text.strip()
    return repr(text[:200] + ("…" if len(text) > 200 else "")) if text else "(empty body)"
