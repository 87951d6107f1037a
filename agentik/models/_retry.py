"""When to retry a model call, and how long to wait first. Pure: no I/O, no clock.

The policy copies the openai SDK's, so agentik behaves like the client
operators already know: retry 408, 409, 429, 5xx and connection failures (a
server's ``x-should-retry`` header overrides the status), at most
``max_retries`` times; wait what ``retry-after-ms`` or ``retry-after``
(seconds or an HTTP date) asks when that is in (0, ``max_retry_after``],
otherwise ``initial_delay``·2ⁿ capped at ``max_delay``, minus 0–25 % jitter.

Both headers are read as RFC 9110 §10.2.3 writes them: ASCII digits (and, as
the openai SDK and OpenAI's ``retry-after-ms`` do, a fraction), with no sign,
exponent, ``_`` or other script's digits (``float()`` reads ``'١٢'`` as 12
and ``'1_0'`` as 10); a repeated header (``5, 5``) is unreadable; an HTTP
date in the past asks for no wait (0).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import final

import attrs

from agentik._errors import ModelBackendError


def _seconds(instance: object, attribute: attrs.Attribute[float], value: float) -> None:
    if not 0 <= value < math.inf:
        raise ModelBackendError(f"{attribute.name} must be a finite number >= 0, got {value!r}")


def _count(instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if value < 0:
        raise ModelBackendError(f"{attribute.name} must be >= 0, got {value!r}")


@final
@attrs.frozen(kw_only=True)
class RetryPolicy:
    """How often and how patiently a model backend is retried."""

    max_retries: int = attrs.field(default=2, validator=_count)
    """Retries after the first attempt; 0 disables retrying."""
    initial_delay: float = attrs.field(default=0.5, validator=_seconds)
    """Backoff before the first retry, in seconds; doubles with each retry."""
    max_delay: float = attrs.field(default=8.0, validator=_seconds)
    """Cap on the computed backoff, in seconds."""
    max_retry_after: float = attrs.field(default=120.0, validator=_seconds)
    """A server-requested delay longer than this is ignored (backoff is used)."""

    def should_retry(self, status: int, headers: Mapping[str, str]) -> bool:
        """Whether an HTTP error status is worth another attempt."""
        verdict = headers.get("x-should-retry", "").strip().lower()
        if verdict in ("true", "false"):
            return verdict == "true"
        return status in (408, 409, 429) or status >= 500

    def delay(
        self,
        retries_done: int,
        headers: Mapping[str, str],
        *,
        jitter: float,
        now: datetime | None = None,
    ) -> float:
        """Seconds to wait before retry number ``retries_done + 1``.

        ``jitter`` is a number in [0, 1) (``random.random()``); ``now`` is the
        wall-clock time used to read an HTTP-date ``retry-after``.
        """
        requested = _requested_delay(headers, now)
        if requested is not None and 0 < requested <= self.max_retry_after:
            return requested
        backoff = min(self.initial_delay * 2.0**retries_done, self.max_delay)
        return backoff * (1 - 0.25 * jitter)


def _requested_delay(headers: Mapping[str, str], now: datetime | None) -> float | None:
    """The delay the server asked for, in seconds, if it asked readably."""
    millis = _number(headers.get("retry-after-ms"))
    if millis is not None:
        return millis / 1000
    text = headers.get("retry-after")
    if text is None:
        return None
    seconds = _number(text)
    if seconds is not None:
        return seconds
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


_DELAY = re.compile(r"[0-9]+(?:\.[0-9]+)?")
"""delay-seconds (``1*DIGIT``, ASCII only), with an optional fraction."""
_MAX_DELAY_CHARS = 32


def _number(text: str | None) -> float | None:
    """A non-negative finite number of ``_DELAY``'s form, around optional
    spaces and tabs (a field value's OWS); None for anything else."""
    if text is None:
        return None
    text = text.strip(" \t")
    if len(text) > _MAX_DELAY_CHARS or not _DELAY.fullmatch(text):
        return None
    value = float(text)
    return value if math.isfinite(value) else None
