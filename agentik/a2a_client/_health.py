"""What ``/health`` shows of one remote A2A agent: whether its card was read, and why not."""

from __future__ import annotations

import enum
from typing import final

import attrs


class A2AState(enum.Enum):
    STARTING = "starting"
    READY = "ready"
    UNREACHABLE = "unreachable"
    """The last attempt to read the card, or a call, got no answer."""
    STOPPED = "stopped"


@final
@attrs.frozen(kw_only=True)
class A2AHealth:
    """A snapshot of one remote agent for ``/health``."""

    name: str
    url: str
    state: A2AState
    last_error: str | None
    streaming: bool | None
    """What the card says (None before it was read)."""
    skills: int
    calls: int
    """Calls running now."""
