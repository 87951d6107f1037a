"""A per-minute budget (requests, or tokens): a continuous token bucket that
paces, and a 60 s window that bounds. Pure: the time is passed in.

- The **bucket** holds at most one second's worth (``capacity = max(L/60,
  unit)``) and refills at ``L/60`` a second, continuously: calls go out at the
  rate the provider refills its own budget, never in a burst of a whole
  minute's worth (providers that enforce per second, as OpenAI may, would
  refuse that). Its level may go below zero: a call larger than the capacity
  waits for a full bucket and borrows the rest from the refills to come, and
  a correction (the backend reported more than was charged) is a debt too.
- The **window** remembers what was let through in the last 60 s and lets
  nothing through that would make it more than ``L``: whether the provider
  counts in fixed minutes, a sliding window or a bucket of a minute's
  capacity, no minute of it sees more than the limit (with a bucket alone,
  one that refills at ``L/60`` lets ``capacity + L`` through in some minute).
  A call larger than the whole limit goes alone, once the window is empty.

A refund (an attempt the provider refused, a grant never used, a usage below
the charge) goes back to both; it never fills the bucket past its capacity.
"""

from __future__ import annotations

import math
from collections import deque
from typing import final

import attrs

WINDOW = 60.0
"""Seconds in the window: the minute of a per-minute limit."""
MARGIN = 2e-6
"""Seconds past a grant's minute before its amount leaves the window, so a
call let through then is never within 60 s of it, whatever the float rounding."""


@final
@attrs.define
class TokenBucket:
    """The pacing part: refilled at ``rate`` a second up to ``capacity``."""

    rate: float
    capacity: float
    level: float
    at: float = -math.inf
    """When ``level`` was last brought up to date; -inf: never (full)."""

    @classmethod
    def per_minute(cls, limit: float, unit: float = 1.0) -> TokenBucket:
        capacity = max(limit / 60.0, unit)
        return cls(rate=limit / 60.0, capacity=capacity, level=capacity)

    def _refill(self, now: float) -> None:
        if now > self.at:
            if self.at > -math.inf:
                self.level = min(self.capacity, self.level + (now - self.at) * self.rate)
            self.at = now

    def ready_in(self, amount: float, now: float) -> float:
        """Seconds until ``amount`` may be taken (a full bucket, for more than it
        holds); 0 if now."""
        self._refill(now)
        need = min(amount, self.capacity)
        return 0.0 if self.level >= need else (need - self.level) / self.rate

    def time_for(self, amount: float, now: float) -> float:
        """Seconds until ``amount`` in all has been let through, from now."""
        self._refill(now)
        return max(0.0, amount - self.level) / self.rate

    def take(self, amount: float, now: float) -> None:
        self._refill(now)
        self.level -= amount

    def give(self, amount: float, now: float) -> None:
        self._refill(now)
        self.level = min(self.capacity, self.level + amount)

    def drain_to(self, level: float, now: float) -> None:
        self._refill(now)
        self.level = min(self.level, level)


@final
class Grant:
    """What one grant put in a budget's window (corrected in place)."""

    __slots__ = ("amount", "at")

    def __init__(self, at: float, amount: float) -> None:
        self.at = at
        self.amount = amount


@final
class Budget:
    """``limit`` per minute (this node's share): a bucket and a window."""

    __slots__ = ("_grants", "_in_window", "bucket", "limit", "unit")

    def __init__(self, limit: float, unit: float = 1.0) -> None:
        self.limit = float(limit)
        self.unit = unit
        self.bucket = TokenBucket.per_minute(limit, unit)
        self._grants: deque[Grant] = deque()
        self._in_window = 0.0

    @property
    def in_window(self) -> float:
        """What was let through in the last minute (as corrected since)."""
        return self._in_window

    def resize(self, limit: float, now: float) -> None:
        """Keep ``limit`` per minute from now on (a node joined or left)."""
        self.bucket._refill(now)
        bucket = TokenBucket.per_minute(limit, self.unit)
        bucket.level = min(self.bucket.level, bucket.capacity)
        bucket.at = self.bucket.at
        self.bucket = bucket
        self.limit = float(limit)

    def _expire(self, now: float) -> None:
        grants = self._grants
        horizon = now - WINDOW - MARGIN
        while grants and grants[0].at <= horizon:
            self._in_window -= grants.popleft().amount
        if not grants:
            self._in_window = 0.0  # no float dust left behind

    def ready_in(self, amount: float, now: float) -> float:
        """Seconds until ``amount`` may go: the later of the bucket's and the window's."""
        wait = self.bucket.ready_in(amount, now)
        self._expire(now)
        excess = self._in_window + amount - self.limit
        if excess <= 1e-9 * self.limit or not self._grants:
            return wait
        freed = 0.0
        last = self._grants[-1].at
        for grant in self._grants:
            freed += grant.amount
            if freed >= excess:
                last = grant.at
                break
        return max(wait, last + WINDOW + MARGIN - now)

    def time_for(self, amount: float, now: float) -> float:
        """Seconds until ``amount`` in all may have gone, at the bucket's rate."""
        return self.bucket.time_for(amount, now)

    def take(self, amount: float, now: float) -> Grant:
        self.bucket.take(amount, now)
        self._expire(now)
        grant = Grant(now, amount)
        self._grants.append(grant)
        self._in_window += amount
        return grant

    def correct(self, grant: Grant, amount: float, now: float) -> None:
        """``grant`` really took ``amount`` (0: nothing, a refund whole)."""
        delta = amount - grant.amount
        if delta > 0:
            self.bucket.take(delta, now)
        elif delta < 0:
            self.bucket.give(-delta, now)
        self._expire(now)
        if grant.at > now - WINDOW - MARGIN:  # still in the window
            self._in_window += delta
        grant.amount = amount

    def drain_to(self, level: float, now: float) -> None:
        """Hold at most ``level`` (the provider says that is what is left)."""
        self.bucket.drain_to(level, now)
