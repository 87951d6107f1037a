"""Toolsets loaded by entry point (``tests.server.sample_toolsets:clock``) in server tests."""

from __future__ import annotations

import trio

from agentik.toolsets import ToolsetContribution, tool


@tool
async def clock_now(tz: str = "UTC") -> str:
    """The time now.

    Args:
        tz: The time zone.
    """
    return f"12:00 {tz}"


@tool
async def clock_fail() -> str:
    """A clock tool that always fails."""
    raise RuntimeError("the clock is broken")


@tool
async def clock_wait() -> str:
    """Waits until cancelled (to test cancellation of a running turn)."""
    await trio.sleep_forever()


@tool
async def clock_slow() -> str:
    """Answers after a short real pause (to disconnect a client mid-turn)."""
    await trio.sleep(0.3)
    return "tick"


def clock() -> ToolsetContribution:
    return ToolsetContribution(
        name="clock",
        description="Tells the time.",
        tools=(clock_now, clock_fail, clock_wait, clock_slow),
    )
