"""The tools the crash harness loads into ``agentik serve`` by entry point.

- ``--toolset tests.reliability.crash_tools:crash``: the ``crash`` toolset,
  ``crash_work`` (offered only while the toolset is active: activation lives
  in memory and every kill forgets it);
- ``--tool tests.reliability.crash_tools:core``: core tools, offered in every
  turn, so a model asked again after a restart can call them again:
  ``fetch_work`` (``idempotent=True``: a call a crash interrupted runs again),
  ``approve_work`` (``requires_approval=True``: runs only once a person
  approved it, at most once) and ``once_work`` (neither).

Each takes a few real milliseconds, so that a SIGKILL at a random moment
often lands while a tool call is running (its call recorded, its result not
yet), the state a restart has to resume.

Every run is also written to a side channel that survives the kill: with
``CRASH_RUNS_DIR`` set, a ``start`` line before the work and an ``end`` line
after it, each one ``os.write`` to ``<tool>.runs`` opened with ``O_APPEND``
(one write of a short line is one atomic append, and it reaches the kernel
before the process can die after it), naming the call's tag and the server's
process id. The harness counts runs from these files.
"""

from __future__ import annotations

import os

import trio

from agentik.toolsets import NamedTool, ToolsetContribution, tool

RUNS_DIR = "CRASH_RUNS_DIR"
"""The environment variable naming the folder of the ``<tool>.runs`` files."""


def record_run(name: str, phase: str, tag: str) -> None:
    """Append ``<phase> <tag> <pid>`` to ``<tool>.runs``: one write, O_APPEND."""
    folder = os.environ.get(RUNS_DIR)
    if not folder:
        return
    line = f"{phase} {tag} {os.getpid()}\n".encode()
    fd = os.open(os.path.join(folder, f"{name}.runs"), os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


async def _work(name: str, ms: int, tag: str) -> str:
    record_run(name, "start", tag)
    await trio.sleep(min(max(ms, 0), 200) / 1000)
    record_run(name, "end", tag)
    return f"worked {ms} ms on {tag}"


@tool
async def crash_work(ms: int, tag: str = "") -> str:
    """Work for ``ms`` milliseconds and say so.

    Args:
        ms: How long to work, in milliseconds (capped at 200).
        tag: Echoed in the answer.
    """
    return await _work("crash_work", ms, tag)


@tool(idempotent=True)
async def fetch_work(ms: int, tag: str = "") -> str:
    """Work for ``ms`` milliseconds; running a call twice is harmless.

    Args:
        ms: How long to work, in milliseconds (capped at 200).
        tag: Echoed in the answer.
    """
    return await _work("fetch_work", ms, tag)


@tool(requires_approval=True)
async def approve_work(ms: int, tag: str = "") -> str:
    """Work for ``ms`` milliseconds, once a person approved it.

    Args:
        ms: How long to work, in milliseconds (capped at 200).
        tag: Echoed in the answer.
    """
    return await _work("approve_work", ms, tag)


@tool
async def once_work(ms: int, tag: str = "") -> str:
    """Work for ``ms`` milliseconds; must never run twice for one call.

    Args:
        ms: How long to work, in milliseconds (capped at 200).
        tag: Echoed in the answer.
    """
    return await _work("once_work", ms, tag)


IDEMPOTENT = frozenset({"fetch_work"})
"""The tools whose calls may run again after a crash."""
TOOLS = ("crash_work", "fetch_work", "approve_work", "once_work")


def crash() -> ToolsetContribution:
    return ToolsetContribution(
        name="crash",
        description="Slow work for the crash harness.",
        tools=(crash_work,),
    )


def core() -> list[NamedTool]:
    return [fetch_work, approve_work, once_work]
