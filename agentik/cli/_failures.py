"""Failures a user can act on, reported as one line on stderr, never a traceback.

A database that cannot be opened, a port in use, a server that cannot be
reached or refuses the token: each is one line, ``agentik COMMAND: what
failed: why``, and exit code 1. trio wraps an error that leaves a nursery in
an exception group, nested as deep as the nurseries it crossed, so the error
is matched with ``except*`` and the first leaf of a reportable type is
reported. Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Awaitable, Callable
from typing import TypeVarTuple, Unpack

import trio

from agentik._errors import StoreError
from agentik._groups import leaves
from agentik._probe import ServerCheckError

Args = TypeVarTuple("Args")


class CommandError(Exception):
    """A failure already worded for the user (``cannot reach …``)."""


REPORTED: tuple[type[Exception], ...] = (CommandError, ServerCheckError, StoreError, OSError)
"""What a user can fix: the wording of these errors names the file, the
address or the server, and what went wrong."""


def first_reportable(
    error: BaseException, kinds: tuple[type[BaseException], ...]
) -> BaseException | None:
    """The first leaf of ``error`` (depth first through nested exception
    groups) that is one of ``kinds``; None if there is none."""
    return next((leaf for leaf in leaves(error) if isinstance(leaf, kinds)), None)


def report(command: str, message: str, code: int = 1) -> int:
    """Print ``agentik COMMAND: message`` as one line on stderr; return ``code``
    (the exit code: 1 a failure, 2 a usage or configuration error)."""
    print(f"agentik {command}: {' '.join(message.split())}", file=sys.stderr)
    return code


def stdout_gone() -> int:
    """The reader of stdout went away (``agentik conversations | head -1``):
    stop quietly, exit 1. The Python docs' recipe for SIGPIPE: point stdout at
    devnull, so that the flush at exit cannot fail a second time and print
    ``Exception ignored … BrokenPipeError``."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return 1


def run_command(command: str, main: Callable[[Unpack[Args]], Awaitable[int]], *args: *Args) -> int:
    """``trio.run(main, *args)``; a reportable failure becomes one line and exit
    1; a broken stdout pipe ends quietly (``stdout_gone``)."""
    failure: BaseException | None = None
    try:
        return trio.run(main, *args)
    except* BrokenPipeError:  # before REPORTED: it is an OSError, but not a failure to report
        failure = None
    except* REPORTED as group:
        failure = first_reportable(group, REPORTED)
    if failure is None:
        return stdout_gone()
    return report(command, str(failure))
