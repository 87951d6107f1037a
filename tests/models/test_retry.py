"""The retry policy copies the openai SDK's: which failures, how long to wait."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentik._errors import ModelBackendError
from agentik.models import RetryPolicy

POLICY = RetryPolicy()
NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("status", "retry"),
    [
        (400, False),
        (401, False),
        (404, False),
        (408, True),
        (409, True),
        (422, False),
        (429, True),
        (500, True),
        (502, True),
        (503, True),
        (529, True),
    ],
)
def test_which_statuses_are_retried(status: int, retry: bool) -> None:
    """408, 409, 429 and 5xx are retried; other errors are not."""
    assert POLICY.should_retry(status, {}) is retry


def test_should_retry_header_wins() -> None:
    """A server's ``x-should-retry`` overrides the status."""
    assert POLICY.should_retry(400, {"x-should-retry": "true"}) is True
    assert POLICY.should_retry(503, {"x-should-retry": "false"}) is False
    assert POLICY.should_retry(503, {"x-should-retry": "maybe"}) is True


@pytest.mark.parametrize(
    ("headers", "delay"),
    [
        ({"retry-after": "3"}, 3.0),
        ({"retry-after": "0.5"}, 0.5),
        ({"retry-after-ms": "1500", "retry-after": "9"}, 1.5),
        ({"retry-after": format_datetime(NOW + timedelta(seconds=20), usegmt=True)}, 20.0),
        ({"retry-after": "120"}, 120.0),
    ],
)
def test_server_requested_delay(headers: dict[str, str], delay: float) -> None:
    """A readable Retry-After in (0, 120] s is waited exactly."""
    assert POLICY.delay(3, headers, jitter=0.9, now=NOW) == pytest.approx(delay)


@pytest.mark.parametrize(
    "headers",
    [
        {"retry-after": "121"},
        {"retry-after": "0"},
        {"retry-after": "-4"},
        {"retry-after": "soon"},
        {"retry-after": "nan"},
        {"retry-after-ms": "inf"},
        {"retry-after": format_datetime(NOW - timedelta(seconds=5), usegmt=True)},
    ],
)
def test_unusable_retry_after_falls_back_to_backoff(headers: dict[str, str]) -> None:
    """Out-of-range or unreadable delays are ignored in favour of backoff."""
    assert POLICY.delay(0, headers, jitter=0.0, now=NOW) == 0.5


@given(
    st.integers(min_value=0, max_value=40), st.floats(min_value=0, max_value=1, exclude_max=True)
)
def test_backoff_doubles_caps_and_jitters(retries_done: int, jitter: float) -> None:
    """0.5 s·2ⁿ capped at 8 s, minus up to 25 %."""
    base = min(0.5 * 2**retries_done, 8.0)
    delay = POLICY.delay(retries_done, {}, jitter=jitter)
    assert 0.75 * base <= delay <= base


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("max_retries", -1),
        ("initial_delay", -0.1),
        ("max_delay", float("inf")),
        ("max_retry_after", float("nan")),
    ],
)
def test_rejects_nonsense(field: str, value: float) -> None:
    """Negative or non-finite settings are refused, naming the field."""
    with pytest.raises(ModelBackendError, match=rf"^{field} must be "):
        RetryPolicy(**{field: value})
