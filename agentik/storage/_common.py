"""Helpers every backend shares: the clock, timestamp encoding, argument checks.

Timestamps are aware UTC datetimes with microsecond precision; SQLite keeps
them as integer microseconds since the Unix epoch, which round-trips exactly.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)

Clock = Callable[[], datetime]
"""Returns the current time as an aware UTC datetime; injectable for tests."""


def utc_now() -> datetime:
    return datetime.now(UTC)


def check_aware(value: datetime) -> None:
    """Refuse a naive datetime before it reaches a backend."""
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"datetime {value!r} must be timezone-aware")


def to_micros(value: datetime) -> int:
    """Microseconds since the epoch of an aware datetime."""
    check_aware(value)
    return (value - EPOCH) // _MICROSECOND


def from_micros(micros: int) -> datetime:
    return EPOCH + timedelta(microseconds=micros)


def check_at_least(name: str, value: int, minimum: int) -> None:
    """Refuse a bad size or limit before it reaches a backend."""
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value!r}")
