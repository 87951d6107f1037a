"""The toolset the crash harness loads into ``agentik serve`` by entry point
(``--toolset tests.reliability.crash_tools:crash``).

``crash_work`` takes a few real milliseconds, so that a SIGKILL at a random
moment often lands while a tool call is running (its call recorded, its
result not yet), which is the state crash repair has to answer.
"""

from __future__ import annotations

import trio

from agentik.toolsets import ToolsetContribution, tool


@tool
async def crash_work(ms: int, tag: str = "") -> str:
    """Work for ``ms`` milliseconds and say so.

    Args:
        ms: How long to work, in milliseconds (capped at 200).
        tag: Echoed in the answer.
    """
    await trio.sleep(min(max(ms, 0), 200) / 1000)
    return f"worked {ms} ms on {tag}"


def crash() -> ToolsetContribution:
    return ToolsetContribution(
        name="crash",
        description="Slow work for the crash harness.",
        tools=(crash_work,),
    )
