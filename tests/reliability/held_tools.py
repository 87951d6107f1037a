"""Tools the tests hold, loaded into ``agentik serve`` with ``--tool
tests.reliability.held_tools:pay_once`` (or ``:held_work``).

``pay_once`` needs a person's approval and is not idempotent (a payment);
``held_work`` needs none and is not idempotent either. Once one runs it
records a ``start`` line (``crash_tools.record_run``: one ``O_APPEND`` write
that survives a SIGKILL) in ``<tool>.runs``, then waits until the test
creates the file ``release`` in ``CRASH_RUNS_DIR``, so a test can kill the
server exactly while the call runs.
"""

from __future__ import annotations

import os

import trio

from agentik.toolsets import tool
from tests.reliability.crash_tools import RUNS_DIR, record_run

RELEASE = "release"


@tool(requires_approval=True)
async def pay_once(amount: int, tag: str = "") -> str:
    """Pay an amount, once a person approved it.

    Args:
        amount: How much to pay.
        tag: Which payment.
    """
    record_run("pay_once", "start", tag)
    release = trio.Path(os.environ.get(RUNS_DIR, "."), RELEASE)
    while not await release.exists():  # noqa: ASYNC110 (another process creates it)
        await trio.sleep(0.01)
    record_run("pay_once", "end", tag)
    return f"paid {amount}"


@tool
async def held_work(tag: str = "") -> str:
    """Do work that must not be done twice (no approval needed).

    Args:
        tag: Which work.
    """
    record_run("held_work", "start", tag)
    release = trio.Path(os.environ.get(RUNS_DIR, "."), RELEASE)
    while not await release.exists():  # noqa: ASYNC110 (another process creates it)
        await trio.sleep(0.01)
    record_run("held_work", "end", tag)
    return f"worked on {tag}"
