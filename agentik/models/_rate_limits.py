"""What a rate-limited provider says in its answer, read from its headers. Pure.

A provider past its budget answers 429 (an overloaded one 503) and says how
long to wait (``Retry-After`` in seconds or as an HTTP date,
``retry-after-ms``) and how much of each budget is left (OpenAI's
``x-ratelimit-remaining-requests`` / ``-tokens``, with
``x-ratelimit-reset-requests`` / ``-tokens`` as Go durations such as
``1s``, ``6m0s``, ``20ms``: the time until that budget is *full* again, not
until the next request may pass). ``read_rate_limit`` turns that into a
``RateLimitAnswer`` (``provider_word`` reads it from a ``ModelBackendError``,
falling back on its ``status`` and ``retry_after``); the model-limits
scheduler acts on it for every waiting call at once, and
``OpenAICompatibleModel`` then leaves the waiting to it.

What counts as the provider's word: any 429 (with or without headers), and a
503 that carries ``Retry-After`` or an ``x-ratelimit-*`` header. A bare 503 is
a server error, retried per call.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from datetime import datetime
from typing import final

import attrs

from agentik._errors import ModelBackendError
from agentik.models._retry import _number, _requested_delay

DEFAULT_PAUSE = 1.0
"""Seconds every call waits after a 429 that does not say how long (the
openai SDK's first backoff is about as long)."""
MAX_PAUSE = 120.0
"""A longer ``Retry-After`` pauses calls this long at most (``RetryPolicy``
ignores longer ones too): a proxy answering ``Retry-After: 86400`` must not
stop an agent for a day. New turns are refused meanwhile (``max_queue_wait``)."""

_DURATION = re.compile(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(h|ms|us|µs|ns|m|s)")
_UNIT = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}


def parse_duration(text: str) -> float | None:
    """Seconds in a Go duration (``1h2m3.5s``, ``6m0s``, ``20ms``) or a plain
    number of seconds; None if ``text`` is neither (or not finite)."""
    text = text.strip()
    plain = _number(text)
    if plain is not None:
        return plain if plain >= 0 else None
    if not text:
        return None
    total, at = 0.0, 0
    for match in _DURATION.finditer(text):
        if match.start() != at:
            return None
        total += float(match.group(1)) * _UNIT[match.group(2)]
        at = match.end()
    return total if at == len(text) and math.isfinite(total) else None


@final
@attrs.frozen(kw_only=True)
class RateLimitAnswer:
    """A provider's answer that it is rate limited (or overloaded), as read
    from its status and headers."""

    status: int
    retry_after: float | None = None
    """Seconds ``Retry-After`` / ``retry-after-ms`` asked for, if readable."""
    remaining_requests: float | None = None
    remaining_tokens: float | None = None
    reset_requests: float | None = None
    """Seconds until the request budget is full again."""
    reset_tokens: float | None = None
    """Seconds until the token budget is full again."""

    @property
    def pause(self) -> float:
        """Seconds every call should wait before the next is sent: what
        ``Retry-After`` asked (at most ``MAX_PAUSE``), else ``DEFAULT_PAUSE``."""
        asked = self.retry_after
        if asked is not None and asked > 0:
            return min(asked, MAX_PAUSE)
        return DEFAULT_PAUSE


def read_rate_limit(
    status: int | None, headers: Mapping[str, str], *, now: datetime | None = None
) -> RateLimitAnswer | None:
    """The provider's word in an answer with ``status`` and ``headers``
    (lowercase names), or None when the answer says nothing of rate limits."""
    if status not in (429, 503):
        return None
    retry_after = _requested_delay(headers, now)
    if retry_after is not None and not retry_after >= 0:
        retry_after = None  # a date in the past, or a negative number: no wait asked

    def header(name: str) -> float | None:
        text = headers.get(name)
        return None if text is None else parse_duration(text)

    answer = RateLimitAnswer(
        status=status,
        retry_after=retry_after,
        remaining_requests=header("x-ratelimit-remaining-requests"),
        remaining_tokens=header("x-ratelimit-remaining-tokens"),
        reset_requests=header("x-ratelimit-reset-requests"),
        reset_tokens=header("x-ratelimit-reset-tokens"),
    )
    if status == 503 and retry_after is None and not _says_budget(answer):
        return None  # a server error, not a rate limit: retried per call
    return answer


def _says_budget(answer: RateLimitAnswer) -> bool:
    return any(
        value is not None
        for value in (
            answer.remaining_requests,
            answer.remaining_tokens,
            answer.reset_requests,
            answer.reset_tokens,
        )
    )


def provider_word(exc: ModelBackendError) -> RateLimitAnswer | None:
    """What the provider said in the answer ``exc`` reports (its headers, or,
    from a backend that gives none, its ``status`` and ``retry_after``)."""
    answer = read_rate_limit(exc.status, exc.headers)
    if exc.status in (429, 503) and exc.retry_after is not None:
        if answer is None:
            return RateLimitAnswer(status=exc.status, retry_after=exc.retry_after)
        if answer.retry_after is None:
            return attrs.evolve(answer, retry_after=exc.retry_after)
    return answer
